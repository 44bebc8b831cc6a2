//! `agentrun completions SHELL` and `agentrun man`: generated from the clap
//! definitions, so they never drift from `--help`.

use super::{BadInput, Exit};
use anyhow::Context;
use clap::Args;
use clap_complete::Shell;
use std::path::PathBuf;

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
    clap_complete::generate(args.shell, &mut super::command(), "agentrun", &mut script);
    // Run ids are data, not part of the CLI definition: the shells ask agentrun for
    // them (`runs list --json`) when a command takes one.
    match args.shell {
        Shell::Bash => script.extend_from_slice(BASH_RUN_IDS.as_bytes()),
        Shell::Fish => script.extend_from_slice(FISH_RUN_IDS.as_bytes()),
        Shell::Zsh => script = zsh_with_run_ids(&String::from_utf8_lossy(&script)).into_bytes(),
        _ => {}
    }
    print_bytes(&script)
}

/// clap's zsh script with every run-id argument (`resume`, `runs show|export|rm|cancel|fork|send`)
/// completed by [`ZSH_RUN_IDS`] instead of `_default`: zsh's `_arguments` names the
/// completer of each argument in its spec, so the spec is where it goes.
fn zsh_with_run_ids(script: &str) -> String {
    let mut out = String::with_capacity(script.len() + ZSH_RUN_IDS.len());
    for line in script.split_inclusive('\n') {
        let is_run_id = line.starts_with("':run_id -- ") || line.starts_with("'*::run_ids -- ");
        match line.rfind(":_default'") {
            Some(at) if is_run_id => {
                out.push_str(&line[..at]);
                out.push_str(":_agentrun_run_ids'");
                out.push_str(&line[at + ":_default'".len()..]);
            }
            _ => {
                // The helper must exist before the script's last lines call `_agentrun`.
                if line.starts_with("if [ \"$funcstack[1]\" = \"_agentrun\" ]") {
                    out.push_str(ZSH_RUN_IDS);
                }
                out.push_str(line);
            }
        }
    }
    out
}

const ZSH_RUN_IDS: &str = r#"# Run ids for `resume`, `runs show|export|rm|cancel|fork|send` (added by agentrun).
(( $+functions[_agentrun_run_ids] )) ||
_agentrun_run_ids() {
    local -a ids
    ids=(${(f)"$(agentrun runs list --json 2>/dev/null | grep -o '"id":"[0-9a-f]*"' | cut -d'"' -f4)"})
    _describe -t run-ids 'run id' ids "$@"
}

"#;

const BASH_RUN_IDS: &str = r#"
# Run ids for `resume`, `runs show|export|rm|cancel|fork|send` (added by agentrun).
_agentrun_run_ids() {
    agentrun runs list --json 2>/dev/null | grep -o '"id":"[0-9a-f]*"' | cut -d'"' -f4
}
_agentrun_with_run_ids() {
    local cur="${COMP_WORDS[COMP_CWORD]}" sub="${COMP_WORDS[1]}" subsub="${COMP_WORDS[2]}"
    if [[ "$cur" != -* ]]; then
        if { [[ "$sub" == resume ]] && (( COMP_CWORD == 2 )); } ||
           { [[ "$sub" == runs ]] && [[ "$subsub" =~ ^(show|export|rm|cancel)$ ]] && (( COMP_CWORD >= 3 )); } ||
           { [[ "$sub" == runs ]] && [[ "$subsub" =~ ^(fork|send)$ ]] && (( COMP_CWORD == 3 )); }; then
            COMPREPLY=( $(compgen -W "$(_agentrun_run_ids)" -- "$cur") )
            return 0
        fi
    fi
    _agentrun "$@"
}
complete -F _agentrun_with_run_ids -o nosort -o bashdefault -o default agentrun
"#;

const FISH_RUN_IDS: &str = r#"
# Run ids for `resume`, `runs show|export|rm|cancel|fork|send` (added by agentrun).
function __agentrun_run_ids
    agentrun runs list --json 2>/dev/null | string match -r -a -g '"id":"([0-9a-f]+)"'
end
complete -c agentrun -n "__fish_seen_subcommand_from resume" -f -a "(__agentrun_run_ids)"
complete -c agentrun -n "__fish_seen_subcommand_from runs; and __fish_seen_subcommand_from show export rm cancel fork send" -f -a "(__agentrun_run_ids)"
"#;

/// Print a man page (roff) on stdout, or write them all into a folder.
///
/// Examples:
///   agentrun man > /usr/local/share/man/man1/agentrun.1
///   agentrun man runs list | man -l -
///   agentrun man --dir /usr/local/share/man/man1     # agentrun.1, agentrun-start.1, …
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {
    /// The command whose page to print, such as `start` or `runs list`.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write every page into this folder instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

pub fn man(args: &ManArgs) -> anyhow::Result<Exit> {
    let mut root = super::command().disable_help_subcommand(true);
    root.build();
    if let Some(dir) = &args.dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut written = 0;
        for cmd in all_commands(&root) {
            let man = clap_mangen::Man::new(cmd.clone());
            let path = dir.join(man.get_filename());
            write_page(&path, page(&cmd)?.as_bytes())?;
            written += 1;
        }
        crate::errln!("agentrun: wrote {written} man pages into {}", dir.display());
        return Ok(Exit::Completed);
    }
    let mut cmd = &root;
    for name in &args.command {
        cmd = cmd.find_subcommand(name).ok_or_else(|| {
            let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
            BadInput(format!(
                "man: no command `{}`; the commands are: {}",
                args.command.join(" "),
                names.join(", ")
            ))
        })?;
    }
    print_bytes(page(cmd)?.as_bytes())
}

/// Writes one page, never through a symlink (issue 22: a link planted in a shared man
/// folder, `agentrun.1 -> ~/.bashrc`, made `man --dir` overwrite its target).
fn write_page(path: &std::path::Path, text: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => BadInput(format!(
                "man: {} is a symbolic link; not writing through it (remove it first)",
                path.display()
            ))
            .into(),
            _ => anyhow::Error::new(e).context(format!("cannot write {}", path.display())),
        })?;
    file.write_all(text)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The command and every subcommand below it, depth first.
fn all_commands(cmd: &clap::Command) -> Vec<clap::Command> {
    let mut out = vec![cmd.clone()];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.extend(all_commands(sub));
    }
    out
}

/// One page: clap's sections, then EXIT STATUS, ENVIRONMENT and FILES, which every
/// command shares.
fn page(cmd: &clap::Command) -> anyhow::Result<String> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    let mut render = || -> std::io::Result<()> {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut out)?;
        }
        if cmd.has_subcommands() {
            man.render_subcommands_section(&mut out)?;
        }
        if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
            man.render_extra_section(&mut out)?;
        }
        out.extend_from_slice(SHARED_SECTIONS.as_bytes());
        if cmd.get_version().is_some() {
            man.render_version_section(&mut out)?;
        }
        Ok(())
    };
    render().context("cannot render the man page")?;
    // Each section clap renders repeats the apostrophe definition; once is enough.
    let text = String::from_utf8_lossy(&out);
    let (head, tail) = text.split_at(text.find(APOSTROPHE).map_or(0, |i| i + APOSTROPHE.len()));
    Ok(title_first(&format!(
        "{head}{}",
        tail.replace(APOSTROPHE, "")
    )))
}

const APOSTROPHE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// roff for the sections clap does not generate.
const SHARED_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
completed
.TP
\fB1\fR
the run failed (e.g. the model API kept failing), or an internal error
.TP
\fB2\fR
bad usage, bad config or bad input; nothing was written
.TP
\fB3\fR
waiting for a human (escalated, or awaiting approval)
.TP
\fB4\fR
stopped by a guard: the step or token budget is spent
.TP
\fB130\fR
interrupted (Ctrl\-C or SIGTERM); the run is checkpointed and resumable
.SH ENVIRONMENT
.TP
\fBAGENTRUN_DB\fR
the database, as \-\-db
.TP
\fBAGENTRUN_MODEL\fR
the model for tasks whose front matter names none
.TP
\fBAGENTRUN_TOOLS\fR
the tools.toml, as \-\-tools
.TP
\fBAGENTRUN_CONFIG\fR
the config file (default: .agentrun/config.toml beside the database)
.TP
\fBOPENAI_API_KEY\fR, \fBOPENAI_BASE_URL\fR
the openai: provider (any Chat Completions server: vLLM, Ollama, llama.cpp, LiteLLM)
.TP
\fBANTHROPIC_API_KEY\fR, \fBANTHROPIC_BASE_URL\fR
the anthropic: provider
.TP
\fBNO_COLOR\fR
no colour, even on a terminal
.TP
\fBCOLUMNS\fR
the width of tables such as runs list
.TP
\fBUSER\fR
who resolved an escalation, unless \-\-by says
.SH FILES
.TP
\fB.agentrun/agentrun.db\fR
the runs, found in the current folder or the nearest one above it that has .agentrun/
.TP
\fB.agentrun/config.toml\fR
defaults: model, database, tools
.TP
\fBtools.toml\fR
the tools, found beside the task file or in a folder above it, else in the current folder
"#;

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
    let mut out = crate::out::stdout();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::Error::new(e).context("cannot write to stdout"))?;
    Ok(Exit::Completed)
}
