//! Variables a command tool's script reads that are set here but never reach it.
//!
//! A command tool starts with an allow-list of agentrun's environment (the core set,
//! its `env` names, its `set`), so `SLOW_SECS=2 agentrun resume …` silently does
//! nothing when the tool's script reads `SLOW_SECS` but tools.toml does not pass it.
//! The list is right for secrets; the silence is not. `tools check` and `start` read
//! each tool's script for the variables it names and say, once per tool, which of them
//! are set in this environment and dropped — with the line that passes them.

use crate::config::types::CommandSpec;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

/// Scripts longer than this are not read (a program, not a tool script).
const MAX_SCRIPT: u64 = 256 * 1024;

/// Languages whose scripts are read: an argument ending so is the script (after an
/// interpreter), or argv[0] itself is one.
const SCRIPT_EXTENSIONS: &[&str] = &[".py", ".sh", ".bash", ".js", ".mjs", ".rb", ".pl"];

/// "tool `slow`: its script reads SLOW_SECS, which is set here but not passed to it …",
/// or `None` when every variable it reads and this environment sets reaches it.
pub fn warning(
    tool: &str,
    spec: &CommandSpec,
    var: &dyn Fn(&str) -> Option<OsString>,
) -> Option<String> {
    if spec.inherit_all {
        return None;
    }
    let script = script_of(spec)?;
    let text = read_small(&script)?;
    let dropped: Vec<String> = names_read(&text)
        .into_iter()
        .filter(|n| !super::env::passes_by_default(n))
        .filter(|n| !spec.env.iter().any(|e| e == n) && !spec.set.contains_key(n))
        .filter(|n| var(n).is_some())
        .collect();
    if dropped.is_empty() {
        return None;
    }
    let quoted: Vec<String> = dropped.iter().map(|n| format!("\"{n}\"")).collect();
    Some(format!(
        "agentrun: tool `{tool}`: its script reads {}, set here but not passed to it (tools \
         get an allow-list of the environment); to pass {}, add `env = [{}]` to the tool \
         in tools.toml",
        dropped.join(", "),
        if dropped.len() == 1 { "it" } else { "them" },
        quoted.join(", ")
    ))
}

/// The script a command runs: argv[0] or the first argument, when it names a file of a
/// scripting language, resolved against the tool's folder.
fn script_of(spec: &CommandSpec) -> Option<std::path::PathBuf> {
    let is_script = |a: &&String| SCRIPT_EXTENSIONS.iter().any(|e| a.ends_with(e));
    let arg = spec.argv.iter().take(2).find(is_script)?;
    Some(spec.cwd.join(arg))
}

fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_SCRIPT {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// Environment variable names a script reads, in the usual spellings of sh, Python,
/// Node.js, Ruby and Perl: `$NAME`, `${NAME…}`, `environ["NAME"]`, `environ.get("NAME"`,
/// `getenv("NAME"`, `process.env.NAME`, `ENV["NAME"]`, `$ENV{NAME}`.
fn names_read(text: &str) -> BTreeSet<String> {
    static PATTERN: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        regex::Regex::new(
            r#"\$ENV\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{?([A-Z_][A-Z0-9_]*)|environ(?:\.get\(|\[)\s*["']([A-Za-z_][A-Za-z0-9_]*)["']|getenv\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']|process\.env\.([A-Za-z_][A-Za-z0-9_]*)|ENV(?:\[|\.fetch\()\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"#,
        )
        .expect("a valid pattern")
    });
    pattern
        .captures_iter(text)
        .filter_map(|c| c.iter().skip(1).flatten().next())
        .map(|m| m.as_str().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path, script: &str, env: &[&str]) -> CommandSpec {
        std::fs::write(dir.join("tool.py"), script).expect("script");
        CommandSpec {
            argv: vec!["python3".into(), "tool.py".into()],
            program: None,
            env: env.iter().map(|s| s.to_string()).collect(),
            set: Default::default(),
            inherit_all: false,
            cwd: dir.to_path_buf(),
            output_cap: 1024,
            sandbox: Default::default(),
        }
    }

    #[test]
    fn every_spelling_of_reading_a_variable_is_found() {
        let text = r#"
            time.sleep(float(os.environ.get("SLOW_SECS", 0)))
            os.environ['KB_URL']; os.getenv("REGION")
            echo "$COUNT ${LIMIT:-3}" process.env.NODE_MODE ENV["RUBY_X"] $ENV{PERL_Y}
        "#;
        let names: Vec<String> = names_read(text).into_iter().collect();
        assert_eq!(
            names,
            [
                "COUNT",
                "KB_URL",
                "LIMIT",
                "NODE_MODE",
                "PERL_Y",
                "REGION",
                "RUBY_X",
                "SLOW_SECS"
            ]
        );
    }

    #[test]
    fn a_variable_set_here_and_dropped_is_named_with_the_fix() {
        let dir = tempfile::tempdir().expect("dir");
        let script = "import os\nos.environ.get('SLOW_SECS')\nos.environ.get('HOME')\nos.environ.get('UNSET_ONE')\n";
        let set = |n: &str| (n == "SLOW_SECS" || n == "HOME").then(|| OsString::from("2"));
        let w = warning("slow", &spec(dir.path(), script, &[]), &set).expect("a warning");
        assert_eq!(
            w,
            "agentrun: tool `slow`: its script reads SLOW_SECS, set here but not passed to it \
             (tools get an allow-list of the environment); to pass it, add \
             `env = [\"SLOW_SECS\"]` to the tool in tools.toml"
        );
        // Listed, it reaches the tool: nothing to say.
        assert_eq!(
            warning("slow", &spec(dir.path(), script, &["SLOW_SECS"]), &set),
            None
        );
    }
}
