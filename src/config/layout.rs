//! What a sandbox may not hold, whatever the kernel (docs/ARCHITECTURE.md §8,
//! Sandbox): a folder a sandboxed child may write never holds a credential store, nor
//! is it the folder of agentrun's database. The sandbox hides both from the child
//! with mounts, but a mount covers only what exists and what can be covered: a tool
//! writing `$HOME` could make `~/.ssh/authorized_keys` where there was none, and one
//! writing the database's own folder could plant a `-journal` for SQLite to roll in.
//! So such a configuration is refused by `tools check` and `start`, naming the path
//! and the fix.

use super::{Sandbox, SandboxMode};
use std::path::{Path, PathBuf};

/// Folders and files under `$HOME` a sandboxed child may not read or change.
pub const CREDENTIALS: [&str; 14] = [
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".config/gcloud",
    ".config/gh",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".config/agentrun",
];

/// `path` absolute, through its links where it exists.
pub fn real(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    std::fs::canonicalize(&abs).unwrap_or(abs)
}

/// The folders a child of `sandbox` working in `cwd` may write, each with how the
/// config names it.
pub fn write_grants(sandbox: &Sandbox, cwd: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if sandbox.mode == SandboxMode::Workspace {
        out.push((real(cwd), "the tool's folder (where its tools.toml is)"));
    }
    out.extend(sandbox.writable.iter().map(|w| (real(w), "`writable`")));
    out
}

/// Why `sandbox` cannot be set up safely here, one message per problem.
pub fn problems(
    sandbox: &Sandbox,
    cwd: &Path,
    home: Option<&Path>,
    db: Option<&Path>,
) -> Vec<String> {
    if sandbox.mode == SandboxMode::Off {
        return Vec::new();
    }
    let grants = write_grants(sandbox, cwd);
    let mut out = Vec::new();
    let home = home.map(real);
    for (grant, named) in &grants {
        let held = home
            .iter()
            .flat_map(|h| CREDENTIALS.iter().map(move |c| h.join(c)));
        if let Some(cred) = held.into_iter().find(|c| c.starts_with(grant)) {
            out.push(format!(
                "sandbox: {named} `{}` holds the credential store `{}`: a sandboxed tool \
                 could read or change it; keep tools.toml in a project folder of its own \
                 and no such folder in `writable`, or set `sandbox = \"off\"` for this tool",
                grant.display(),
                cred.display()
            ));
        }
    }
    let db_dir = db.and_then(Path::parent).map(real);
    if let (Some(db), Some(dir)) = (db, db_dir) {
        let writable = grants.iter().any(|(g, _)| dir.starts_with(g));
        let holds_needed = dir == real(cwd) || grants.iter().any(|(g, _)| g.starts_with(&dir));
        if writable && holds_needed {
            out.push(format!(
                "sandbox: the database `{}` is in `{}`, a folder the tool may write: a \
                 sandboxed tool could replace it; keep the database in a folder of its own \
                 (the default `.agentrun/agentrun.db`, or `--db` elsewhere), or set \
                 `sandbox = \"off\"` for this tool",
                db.display(),
                dir.display()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> Sandbox {
        Sandbox {
            mode: SandboxMode::Workspace,
            writable: Vec::new(),
            network: true,
        }
    }

    #[test]
    fn a_workspace_above_a_credential_store_is_refused_naming_it() {
        let home = tempfile::tempdir().unwrap();
        let h = real(home.path());
        let found = problems(&workspace(), &h, Some(&h), None);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains(&format!("{}/.ssh", h.display())),
            "{found:?}"
        );
        // Read-only, the same folder holds nothing it could change: the mounts hide it.
        let ro = Sandbox {
            mode: SandboxMode::ReadOnly,
            ..workspace()
        };
        assert_eq!(problems(&ro, &h, Some(&h), None), Vec::<String>::new());
        // A project folder below HOME is fine.
        let project = h.join("proj");
        assert_eq!(
            problems(&workspace(), &project, Some(&h), None),
            Vec::<String>::new()
        );
        // `writable` above a store is refused the same way.
        let wide = Sandbox {
            writable: vec![h.clone()],
            ..workspace()
        };
        assert_eq!(problems(&wide, &project, Some(&h), None).len(), 1);
    }

    #[test]
    fn the_database_beside_tools_toml_is_refused_but_below_it_is_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let p = real(dir.path());
        let beside = problems(&workspace(), &p, None, Some(&p.join("runs.db")));
        assert_eq!(beside.len(), 1, "{beside:?}");
        assert!(beside[0].contains("runs.db"), "{beside:?}");
        let init = p.join(".agentrun/agentrun.db");
        assert_eq!(
            problems(&workspace(), &p, None, Some(&init)),
            Vec::<String>::new()
        );
        // Above the workspace, not writable: its files are hidden one by one.
        let above = problems(&workspace(), &p.join("proj"), None, Some(&p.join("r.db")));
        assert_eq!(above, Vec::<String>::new());
    }
}
