//! The Landlock ruleset of a sandboxed child: reads beneath `read`, everything beneath
//! `write` (truncation included, ABI 3), no device ioctl but on the granted devices
//! (ABI 5), and no signal nor abstract Unix socket out of the sandbox (ABI 6 scopes:
//! a tool cannot kill agentrun or an MCP server's supervisor, nor reach a session
//! bus by its abstract name). What this kernel lacks of it is refused before the run
//! starts ([`crate::config::preflight`]), so the rights asked for here are the kernel's.

use super::FsPolicy;
use landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetError, RulesetStatus, Scope,
};
use std::path::PathBuf;

/// Restricts the calling process; `abi` is the kernel's, as agentrun found it.
pub fn restrict(fs: Option<&FsPolicy>, abi: i32) -> Result<(), String> {
    let scoped = abi >= 6;
    if fs.is_none() && !scoped {
        return Ok(());
    }
    let abi = ABI::from(abi);
    let (read, all) = (AccessFs::from_read(abi), AccessFs::from_all(abi));
    let mut grants: Vec<(PathBuf, _)> = Vec::new();
    if let Some(fs) = fs {
        grants.extend(fs.read.iter().map(|p| (p.clone(), read)));
        grants.extend(fs.write.iter().map(|p| (p.clone(), all)));
    }
    // A path that vanished since it was listed is simply not granted.
    let rules = grants.into_iter().filter_map(|(path, rights)| {
        let rights = if path.is_dir() {
            rights
        } else {
            rights & AccessFs::from_file(abi)
        };
        let fd = PathFd::new(&path).ok()?;
        Some(Ok::<_, RulesetError>(PathBeneath::new(fd, rights)))
    });
    let err = |e: RulesetError| format!("cannot set up the sandbox: {e}");
    let mut ruleset = Ruleset::default();
    if fs.is_some() {
        ruleset = ruleset.handle_access(all).map_err(err)?;
    }
    if scoped {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(err)?;
    }
    let status = ruleset
        .create()
        .map_err(err)?
        .add_rules(rules)
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("cannot set up the sandbox: Landlock is not enforced by this kernel".into());
    }
    Ok(())
}
