//! A tiny HTTP/1.1 server on loopback for the HTTP-tool rows: every request gets
//! `200` with the body `1`, keep-alive, and a CLOCK_MONOTONIC timestamp recorded when
//! its head has been read (the same role as the command tool's stamp file).
//!
//! std::net and a thread per connection: agentrun's client pools one connection, so
//! there is one connection per run, and nothing here competes with agentrun for CPU
//! while it waits.

use super::procs::monotonic_ns;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n1";

pub struct Server {
    pub port: u16,
    stamps: Arc<Mutex<Vec<u64>>>,
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        let stamps = Arc::new(Mutex::new(Vec::new()));
        let shared = stamps.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let stamps = shared.clone();
                std::thread::spawn(move || serve(stream, &stamps));
            }
        });
        Server { port, stamps }
    }

    /// Timestamps of the requests since the last call, in arrival order.
    pub fn take_stamps(&self) -> Vec<u64> {
        std::mem::take(&mut *self.stamps.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Median round trip of a keep-alive GET on one connection: the HTTP tool's own
    /// cost, the analogue of the command tool's spawn time.
    pub fn round_trip(&self, reps: usize) -> Duration {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut writer = stream.try_clone().expect("clone stream");
        let mut reader = BufReader::new(stream);
        let mut times: Vec<Duration> = (0..reps)
            .map(|i| {
                let start = Instant::now();
                write!(
                    writer,
                    "GET /t?i={i} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: */*\r\n\r\n"
                )
                .expect("send request");
                let length = read_head(&mut reader).expect("response head");
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("response body");
                start.elapsed()
            })
            .collect();
        self.take_stamps();
        times.sort();
        times[times.len() / 2]
    }
}

fn serve(stream: TcpStream, stamps: &Mutex<Vec<u64>>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    // Ends when the client closes the connection (or sends something unreadable).
    while let Some(length) = read_head(&mut reader) {
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        stamps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(monotonic_ns());
        if writer.write_all(RESPONSE).is_err() {
            return;
        }
    }
}

/// Reads a request or response head; returns its Content-Length (0 when absent), or
/// `None` at end of stream.
fn read_head(reader: &mut impl BufRead) -> Option<usize> {
    let mut length = 0;
    let mut first = true;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" && !first {
            return Some(length);
        }
        first = false;
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
}
