//! The sandbox's cost (issue 22), apart from the runs that pay it: the spawn alone
//! through agentrun's trampoline under each policy, and the two pieces of work a
//! sandboxed call adds besides the extra exec — building the policy in agentrun
//! (`Policy::new`: canonicalising the tool's folder, its temp dir and the credential
//! stores) and, in the trampoline, walking from `/` to each credential store to grant
//! everything else (`readable_roots`).

use super::report::{median, ms};
use super::tool;
use agentrun::config::{Sandbox, SandboxMode};
use agentrun::tools::sandbox::{Places, Policy, readable_roots};
use agentrun::tools::spawn::Before;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The policies measured, in report order.
pub const KINDS: [&str; 3] = [
    "death signal only (no confinement)",
    "`sandbox = \"workspace\"`",
    "`sandbox = \"workspace\"`, `network = false`",
];

/// Where a sandboxed tool of the bench works: its folder and a per-call temp dir, as
/// `tools::command` makes them.
pub struct Setup {
    cwd: PathBuf,
    tmp: PathBuf,
    db: PathBuf,
    home: Option<PathBuf>,
}

impl Setup {
    pub fn new(root: &Path) -> Setup {
        let cwd = root.join("spawn-sandboxed");
        let tmp = cwd.join("tmp");
        let db = cwd.join(".agentrun/agentrun.db");
        std::fs::create_dir_all(&tmp).expect("create the sandboxed spawn's folders");
        Setup {
            cwd,
            tmp,
            db,
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    fn policy(&self, kind: usize) -> Policy {
        let sandbox = Sandbox {
            mode: if kind == 0 {
                SandboxMode::Off
            } else {
                SandboxMode::Workspace
            },
            writable: Vec::new(),
            network: kind != 2,
        };
        let places = Places {
            cwd: &self.cwd,
            tmp: Some(&self.tmp),
            // The database in its own folder inside the project, as `agentrun init`
            // lays it out.
            db: Some(&self.db),
            files: &[],
            home: self.home.as_deref(),
        };
        // A sandboxed command tool always dies with agentrun (tools::command).
        let before = Before {
            die_with_parent: true,
            ..Before::default()
        };
        Policy::new(&sandbox, &places, before).expect("a policy that does something")
    }

    /// One median (ms) of `reps` spawns of the helper through the trampoline, per kind.
    pub fn spawns(&self, agentrun: &Path, reps: usize) -> [f64; 3] {
        let stamps = self.cwd.join("stamps");
        std::array::from_fn(|kind| {
            let policy = serde_json::to_string(&self.policy(kind)).expect("policy as JSON");
            ms(tool::trampoline_cost(agentrun, &policy, &stamps, reps))
        })
    }

    /// Median (ms) of building the workspace policy, as agentrun does per call.
    pub fn policy_ms(&self, reps: usize) -> f64 {
        median_of(reps, || {
            std::hint::black_box(self.policy(1));
        })
    }

    /// Median (ms) of the walk that grants reads everywhere but `/dev`.
    pub fn walk_ms(&self, reps: usize) -> f64 {
        let deny = [PathBuf::from("/dev")];
        median_of(reps, || {
            std::hint::black_box(readable_roots(&deny));
        })
    }
}

fn median_of(reps: usize, mut f: impl FnMut()) -> f64 {
    let times: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            ms(start.elapsed())
        })
        .collect();
    median(&times)
}
