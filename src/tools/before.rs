//! What must be done in a child before it execs its program (issue 22), as the spawn
//! asks for it and the trampoline, the sandbox and the supervisor read it: a module of
//! its own below all three, so none of them imports another for it (issue 25).

use std::path::Path;

/// What must hold in the child before it execs its program (issue 22). Anything here
/// sends the spawn through the trampoline.
#[derive(Debug, Clone, Copy, Default)]
pub struct Before<'a> {
    /// The per-call temp dir of a sandboxed child (its `TMPDIR`, writable to it).
    pub tmp: Option<&'a Path>,
    /// Kill the child when agentrun dies (`PR_SET_PDEATHSIG`): MCP servers, which
    /// outlive any one call.
    pub die_with_parent: bool,
    /// Start it under a supervisor that kills everything it started, `setsid` escapees
    /// included, when it is stopped or agentrun dies ([`super::supervise`]).
    pub supervise: bool,
}

/// Exit status when the policy cannot be applied: `EX_SOFTWARE`, a `tool_bug`, with
/// the reason on stderr (the tool never ran).
pub(super) const SETUP_FAILED: i32 = 70;
