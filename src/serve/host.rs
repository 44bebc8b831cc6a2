//! Which `Host` the console answers: the address it serves, and `--public-url`.
//!
//! A page on `evil.example` whose name the attacker re-points at 127.0.0.1 (DNS
//! rebinding) reaches a loopback console from the victim's own browser, with the
//! attacker's page as its origin; the `Host` header is the one thing it cannot change
//! (it names the attacker's domain). So every request whose `Host` is not one of ours
//! is refused before any route runs, the login page included. An IP literal cannot be
//! rebound, so a console listening on every address (`0.0.0.0`) accepts any IP with its
//! port; a name is accepted only when it is `localhost` (for a console on loopback or
//! every address) or the host of the public URL.

use std::net::{IpAddr, SocketAddr};

/// The hosts a console accepts.
#[derive(Debug, Clone)]
pub struct Hosts {
    bound: SocketAddr,
    /// The public URL's host (lowercase), its port, and its scheme's default port
    /// (what a `Host` without a port means).
    public: Option<(String, u16, u16)>,
}

impl Hosts {
    /// For a console listening on `bound`, reached also at `public_url` if given.
    pub fn new(bound: SocketAddr, public_url: Option<&str>) -> Result<Hosts, String> {
        let public = match public_url {
            None => None,
            Some(u) => {
                let url = reqwest::Url::parse(u).map_err(|e| format!("`{u}`: {e}"))?;
                let host = url
                    .host_str()
                    .ok_or_else(|| format!("`{u}` names no host"))?;
                let port = url
                    .port_or_known_default()
                    .ok_or_else(|| format!("`{u}` is not an http(s) address"))?;
                let default = if url.scheme() == "https" { 443 } else { 80 };
                Some((host.to_ascii_lowercase(), port, default))
            }
        };
        Ok(Hosts { bound, public })
    }

    /// Whether a request with this `Host` header value is for us.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split(host) else {
            return false;
        };
        if let Some((h, p, default)) = &self.public
            && *h == name
            && port.unwrap_or(*default) == *p
        {
            return true;
        }
        if port != Some(self.bound.port()) {
            return false;
        }
        let ip = self.bound.ip();
        match name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(given) => ip.is_unspecified() || given == ip,
            Err(_) => name == "localhost" && (ip.is_loopback() || ip.is_unspecified()),
        }
    }
}

/// `host[:port]` (an IPv6 literal in brackets), lowercased; `None` when malformed.
fn split(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim().to_ascii_lowercase();
    let (name, port) = match host.rfind(':') {
        Some(at) if !host[at..].contains(']') => {
            let port = host[at + 1..].parse::<u16>().ok()?;
            (host[..at].to_string(), Some(port))
        }
        _ => (host.clone(), None),
    };
    (!name.is_empty()).then_some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(bound: &str, public: Option<&str>) -> Hosts {
        Hosts::new(bound.parse().expect("addr"), public).expect("hosts")
    }

    #[test]
    fn a_loopback_console_answers_its_own_address_and_localhost_only() {
        let h = hosts("127.0.0.1:8080", None);
        for ok in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080"] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "evil.example",
            "127.0.0.1:8081",
            "127.0.0.2:8080",
            "localhost",
            "localhost.evil.example:8080",
            "",
            ":8080",
            "127.0.0.1:x",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
    }

    #[test]
    fn the_public_url_s_host_is_accepted_with_or_without_its_default_port() {
        let h = hosts("127.0.0.1:8080", Some("https://Console.Example.com/"));
        assert!(h.allows("console.example.com"));
        assert!(h.allows("console.example.com:443"));
        assert!(!h.allows("console.example.com:8443"));
        assert!(!h.allows("example.com"));
        let h = hosts("127.0.0.1:8080", Some("http://review.internal:9000"));
        assert!(h.allows("review.internal:9000"));
        assert!(!h.allows("review.internal"), "port 80 is not 9000");
        assert!(Hosts::new("127.0.0.1:1".parse().unwrap(), Some("not a url")).is_err());
    }

    #[test]
    fn on_every_address_any_ip_literal_with_the_port_and_no_other_name() {
        let h = hosts("0.0.0.0:8080", None);
        assert!(h.allows("10.1.2.3:8080"));
        assert!(h.allows("[::1]:8080"));
        assert!(h.allows("localhost:8080"));
        assert!(!h.allows("10.1.2.3:9999"));
        assert!(!h.allows("intranet.example:8080"));
        let h = hosts("[::1]:8080", None);
        assert!(h.allows("[::1]:8080"));
        assert!(!h.allows("127.0.0.1:8080"));
    }
}
