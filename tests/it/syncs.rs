//! What a step costs in fsyncs (issue 14), counted under SQLite's file layer.
//!
//! A shim VFS (`counting`) wraps the platform's default one: every file it opens gets
//! the default's methods except `xSync`, which counts the call against the file's
//! name and then does the real sync (against the file, not the calling thread: the
//! loop's writes are committed by the file's committer thread, `store/sqlite/group.rs`). `Store::open_with_vfs` opens the database through it,
//! and each test drives the store's calls in the order the loop makes them for one
//! step (`src/store/journal.rs`, module doc), so the count is what SQLite really asked
//! the OS to sync — not what the code meant to. The whole binary's count is measured
//! with `strace` by the bench (`docs/bench.md`, "Commits").

use crate::common::{Project, wait};
use agentrun::model::{Message, ModelResponse, Part, Role, StopReason, Usage};
use agentrun::store::{CallRecord, CallStatus, Lease, NewRun, RunId, RunStatus, StepCommit, Store};
use rusqlite::ffi;
use serde_json::json;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_int};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};

const VFS: &str = "agentrun-counting";

/// The name each open file was opened with (by its `sqlite3_file` address), and the
/// syncs asked for each name: each test has a folder of its own.
#[derive(Default)]
struct Counts {
    names: HashMap<usize, String>,
    syncs: HashMap<String, u64>,
}

fn counts() -> MutexGuard<'static, Counts> {
    static COUNTS: OnceLock<Mutex<Counts>> = OnceLock::new();
    COUNTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The default VFS's `sqlite3_vfs` and the method tables seen so far:
/// (original table, our copy with `xSync` replaced).
struct Shim {
    real: usize,
    tables: Mutex<Vec<(usize, usize)>>,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

unsafe extern "C" fn counting_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let shim = SHIM.get().expect("registered");
    let real = shim.real as *mut ffi::sqlite3_vfs;
    // SAFETY: `real` is the default VFS, alive for the process; `file` has room for its
    // files (our szOsFile is its szOsFile).
    let rc = unsafe { ((*real).xOpen.expect("xOpen"))(real, name, file, flags, out_flags) };
    if rc == ffi::SQLITE_OK && !name.is_null() {
        // SAFETY: SQLite passes a NUL-terminated name that outlives the file.
        let shown = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        counts().names.insert(file as usize, shown);
    }
    // SAFETY: on success the default VFS has filled in `file`, including pMethods.
    let methods = unsafe { (*file).pMethods };
    if rc == ffi::SQLITE_OK && !methods.is_null() {
        let mut tables = shim.tables.lock().unwrap_or_else(|e| e.into_inner());
        let copy = match tables.iter().find(|(orig, _)| *orig == methods as usize) {
            Some(&(_, copy)) => copy,
            None => {
                // SAFETY: `methods` points to one of the default VFS's static tables.
                let mut copy = unsafe { *methods };
                copy.xSync = Some(counting_sync);
                let copy = Box::into_raw(Box::new(copy)) as usize;
                tables.push((methods as usize, copy));
                copy
            }
        };
        // SAFETY: the copy differs from the original only in xSync, which forwards.
        unsafe { (*file).pMethods = copy as *const ffi::sqlite3_io_methods };
    }
    rc
}

unsafe extern "C" fn counting_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let mut counts = counts();
    if let Some(name) = counts.names.get(&(file as usize)).cloned() {
        *counts.syncs.entry(name).or_default() += 1;
    }
    drop(counts);
    let shim = SHIM.get().expect("registered");
    // SAFETY: `file` was opened by `counting_open`, so its pMethods is one of our copies.
    let ours = unsafe { (*file).pMethods } as usize;
    let orig = shim
        .tables
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(_, copy)| *copy == ours)
        .map(|&(orig, _)| orig)
        .expect("a table we made");
    let orig = orig as *const ffi::sqlite3_io_methods;
    // SAFETY: the original table's xSync, on the file it was made for.
    unsafe { ((*orig).xSync.expect("xSync"))(file, flags) }
}

fn register() {
    SHIM.get_or_init(|| {
        // SAFETY: registering a copy of the default VFS whose only change is xOpen;
        // every other method (and pAppData) is the default's own, and both structures
        // live for the rest of the process.
        unsafe {
            let real = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!real.is_null(), "a default VFS");
            let mut ours = *real;
            let name = CString::new(VFS).expect("name");
            ours.zName = name.into_raw();
            ours.pNext = std::ptr::null_mut();
            ours.xOpen = Some(counting_open);
            let rc = ffi::sqlite3_vfs_register(Box::into_raw(Box::new(ours)), 0);
            assert_eq!(rc, ffi::SQLITE_OK, "register the counting VFS");
            Shim {
                real: real as usize,
                tables: Mutex::new(Vec::new()),
            }
        }
    });
}

/// Syncs of the files under `dir` (whichever thread asks) while running `f`.
fn syncs_in(dir: &Path, f: impl FnOnce()) -> u64 {
    let count = || -> u64 {
        let dir = dir.to_string_lossy();
        let counts = counts();
        counts
            .syncs
            .iter()
            .filter(|(name, _)| name.starts_with(dir.as_ref()))
            .map(|(_, n)| n)
            .sum()
    };
    let before = count();
    f();
    count() - before
}

fn open(p: &Project) -> (Store, Lease) {
    register();
    let store = Store::open_with_vfs(&p.db(), true, VFS).expect("open through the shim");
    let opening = [
        Message::text(Role::System, "sys"),
        Message::text(Role::User, "task"),
    ];
    let lease = store
        .create_run(&NewRun {
            id: RunId::generate(),
            task: "task",
            task_path: "task.md",
            snapshot: "{}",
            scripts: &Default::default(),
            max_steps: 100,
            max_tokens: 100_000,
            messages: &opening,
            state: "{}",
        })
        .expect("create run");
    (store, lease)
}

fn calling(step: u32) -> ModelResponse {
    ModelResponse {
        message: Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall {
                id: format!("call_{step}"),
                name: "t".into(),
                args: json!({"i": step}),
            }],
        },
        usage: Usage {
            input: 10,
            output: 2,
            cached: 0,
            cache_write: 0,
            ..Default::default()
        },
        stop: StopReason::ToolUse,
        model: "script:x".into(),
    }
}

fn outcome(step: u32) -> CallRecord {
    CallRecord {
        call_id: format!("call_{step}"),
        status: CallStatus::Ok,
        attempts: 1,
        result: json!(1),
        is_error: false,
        via: None,
    }
}

/// One tool step as the loop writes it; `idempotent: false` adds the started mark
/// before the call and journals the outcome on its own.
fn tool_step(store: &Store, lease: &Lease, step: u32, idempotent: bool) {
    let response = calling(step);
    wait(store.record_model_turn(lease, step, &response, &[])).expect("journal the response");
    let record = outcome(step);
    if !idempotent {
        wait(store.mark_started(lease, step, &record.call_id)).expect("started mark");
        wait(store.record_outcome(lease, step, &record, &[])).expect("outcome");
    }
    let messages = [
        response.message.clone(),
        Message::tool_result(&record.call_id, record.result.clone(), false),
    ];
    wait(store.commit_step(
        lease,
        &StepCommit {
            step,
            messages: &messages,
            state: "{}",
            input_tokens: 10 * u64::from(step),
            output_tokens: 2 * u64::from(step),
            cost_usd: 0.0,
            status: RunStatus::Running,
            answer: None,
            error: None,
            outcome: idempotent.then_some(&record),
            events: &[],
            escalation: None,
        },
    ))
    .expect("step commit");
}

#[test]
fn an_idempotent_step_costs_one_fsync() {
    let p = Project::new();
    let (store, lease) = open(&p);
    // The first step creates the WAL (and syncs its folder); count the ones after.
    tool_step(&store, &lease, 1, true);
    let n = syncs_in(p.path(), || {
        for step in 2..=11 {
            tool_step(&store, &lease, step, true);
        }
    });
    assert_eq!(n, 10, "10 idempotent steps");
    // Each commit is still durable on its own: the transcript is all there.
    assert_eq!(store.messages(&lease.run).unwrap().len(), 2 + 2 * 11);
}

#[test]
fn a_non_idempotent_step_costs_two_fsyncs() {
    let p = Project::new();
    let (store, lease) = open(&p);
    tool_step(&store, &lease, 1, false);
    let n = syncs_in(p.path(), || {
        for step in 2..=11 {
            tool_step(&store, &lease, step, false);
        }
    });
    assert_eq!(
        n, 20,
        "10 non-idempotent steps: the started mark and the commit"
    );
}

#[test]
fn the_started_mark_is_fsynced_before_it_returns() {
    let p = Project::new();
    let (store, lease) = open(&p);
    tool_step(&store, &lease, 1, true);
    let response = calling(2);
    let journal = syncs_in(p.path(), || {
        wait(store.record_model_turn(&lease, 2, &response, &[])).expect("journal");
    });
    let mark = syncs_in(p.path(), || {
        wait(store.mark_started(&lease, 2, "call_2")).expect("mark")
    });
    let outcome = syncs_in(p.path(), || {
        wait(store.record_outcome(&lease, 2, &outcome(2), &[])).expect("outcome")
    });
    assert_eq!((journal, mark, outcome), (0, 1, 0));
    // A killed process (not a power cut) loses none of them: another connection, as
    // the next process would be, reads what the unsynced writes committed.
    let other = Store::open(&p.db(), false).expect("second handle");
    assert_eq!(other.model_turn(&lease.run, 2).unwrap(), Some(response));
    let entry = &other.journal_for_step(&lease.run, 2).unwrap()[0];
    assert!(entry.started && entry.status == CallStatus::Ok, "{entry:?}");
}
