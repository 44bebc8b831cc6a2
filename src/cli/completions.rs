//! `agentrun completions SHELL` and `agentrun man`: generated from the clap
//! definitions, so they never drift from `--help`.

use super::{Cli, Exit};
use anyhow::Context;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Print a shell completion script.
///
/// Examples:
///   agentrun completions bash > ~/.local/share/bash-completion/completions/agentrun
///   agentrun completions zsh > "${fpath[1]}/_agentrun"
///   agentrun completions fish > ~/.config/fish/completions/agentrun.fish
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn completions(args: &CompletionsArgs) -> anyhow::Result<Exit> {
    // Into a buffer first: clap_complete panics when its writer fails (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "agentrun", &mut script);
    print_bytes(&script)
}

/// Print the man page (roff) on stdout.
///
/// Example:
///   agentrun man > /usr/local/share/man/man1/agentrun.1
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {}

pub fn man() -> anyhow::Result<Exit> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .context("cannot render the man page")?;
    print_bytes(title_first(&String::from_utf8_lossy(&page)).as_bytes())
}

/// roff's renderer starts with two lines defining an apostrophe string; tools that
/// index man pages (`whatis`, `lexgrog`) look for `.TH` first, and the string works
/// just as well defined after it.
fn title_first(page: &str) -> String {
    let Some(at) = page.find("\n.TH ").map(|i| i + 1) else {
        return page.to_string();
    };
    let (preamble, rest) = page.split_at(at);
    let (title, body) = rest.split_once('\n').unwrap_or((rest, ""));
    format!("{title}\n{preamble}{body}")
}

/// Writes to stdout; a reader that stopped early (`| head`) is not an error.
fn print_bytes(bytes: &[u8]) -> anyhow::Result<Exit> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(Exit::Completed),
    }
}
