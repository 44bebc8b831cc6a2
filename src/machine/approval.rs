//! Matching approval patterns against a call's arguments (docs/ARCHITECTURE.md §3,
//! `approval_patterns`).
//!
//! A plain pattern matches a normalised text (case and whitespace runs ignored) as a
//! substring. Issue 22 found the common ways around that: `rm -fr`, `rm -r -f`,
//! `rm --recursive --force`, `'rm' -rf`, `rm${IFS}-rf` and `DROP/**/TABLE`. So each
//! text is also read as shell-like words, with
//! - quotes and backslashes removed, `$IFS`/`${IFS}` read as a space, and an array of
//!   strings also read as one command line;
//! - SQL comments (`/* … */`, and in a second reading `--` to the end of the line)
//!   read as a space;
//! - consecutive short options merged into one set of letters (`-r -f` = `-fr` =
//!   `-rf`), and rm's `--recursive`/`--force` read as `-r`/`-f`;
//!
//! and a pattern's words must appear in a row: an option set in the pattern matches
//! one in the text holding at least its letters (`-rf` matches `-rfv`), the first word
//! may end a longer word (`/bin/rm`) and the last may begin one (`tables`).
//!
//! Limits (a safety net, not a guarantee): a command built at run time (`$(echo rm)`,
//! variables, `eval`, base64), other programs' long options, aliases and scripts
//! written to a file and run later are not seen. A tool whose arguments can be any
//! command should say `approval = "always"`.

use serde_json::Value;

/// One word of a normalised text: a plain word, or a set of short options.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Word {
    Plain(String),
    /// The letters of consecutive short options, sorted and without repeats.
    Options(Vec<char>),
}

/// The readings of `text` to match against (see the module doc).
pub fn readings(text: &str) -> Vec<String> {
    let lower = text
        .to_lowercase()
        .replace("${ifs}", " ")
        .replace("$ifs", " ");
    let no_block = strip_block_comments(&lower);
    let unquoted: String = no_block
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\' | '`'))
        .collect();
    let no_line: String = unquoted
        .lines()
        .map(|l| l.split_once("--").map_or(l, |(before, _)| before))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = vec![unquoted];
    if no_line != out[0] {
        out.push(no_line);
    }
    out
}

fn strip_block_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        out.push(' ');
        rest = match rest[start + 2..].find("*/") {
            Some(end) => &rest[start + 2 + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

fn words(reading: &str) -> Vec<Word> {
    let mut out: Vec<Word> = Vec::new();
    for raw in reading.split_whitespace() {
        let letters: Option<Vec<char>> = match raw {
            "--recursive" => Some(vec!['r']),
            "--force" => Some(vec!['f']),
            _ if raw.len() > 1
                && raw.starts_with('-')
                && !raw.starts_with("--")
                && raw[1..].chars().all(|c| c.is_ascii_alphanumeric()) =>
            {
                Some(raw[1..].chars().collect())
            }
            _ => None,
        };
        match (letters, out.last_mut()) {
            (Some(mut l), Some(Word::Options(prev))) => {
                prev.append(&mut l);
                prev.sort_unstable();
                prev.dedup();
            }
            (Some(mut l), _) => {
                l.sort_unstable();
                l.dedup();
                out.push(Word::Options(l));
            }
            (None, _) => out.push(Word::Plain(raw.to_string())),
        }
    }
    out
}

/// Whether the (normalised) plain pattern `pattern` appears in `text` read as words.
pub fn matches_words(pattern: &str, text: &str) -> bool {
    let Some(pat) = readings(pattern).first().map(|r| words(r)) else {
        return false;
    };
    if pat.is_empty() {
        return false;
    }
    readings(text).iter().any(|r| {
        let text = words(r);
        text.windows(pat.len()).any(|w| {
            w.iter()
                .zip(&pat)
                .enumerate()
                .all(|(j, (t, p))| fits(p, t, j, pat.len()))
        })
    })
}

fn fits(p: &Word, t: &Word, j: usize, n: usize) -> bool {
    match (p, t) {
        (Word::Options(want), Word::Options(have)) => want.iter().all(|c| have.contains(c)),
        (Word::Plain(p), Word::Plain(t)) if n == 1 => t.contains(p.as_str()),
        (Word::Plain(p), Word::Plain(t)) if j == 0 => t.ends_with(p.as_str()),
        (Word::Plain(p), Word::Plain(t)) if j == n - 1 => t.starts_with(p.as_str()),
        (Word::Plain(p), Word::Plain(t)) => p == t,
        _ => false,
    }
}

/// Every string in `args` (keys too) and the serialised whole, for matching.
pub fn texts(args: &Value) -> Vec<String> {
    let mut out = vec![args.to_string()];
    collect(args, &mut out);
    out
}

fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => {
            // An argv (`["rm", "-r", "-f", "/"]`) is also read as one command line.
            let words: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            if let Some(words) = words.filter(|w| w.len() > 1) {
                out.push(words.join(" "));
            }
            items.iter().for_each(|i| collect(i, out));
        }
        Value::Object(map) => {
            for (k, i) in map {
                out.push(k.clone());
                collect(i, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_forms_of_rm_rf_match_and_others_do_not() {
        for cmd in [
            "rm -rf /",
            "rm -fr /",
            "rm -r -f /",
            "rm -f -r /",
            "rm -rfv /tmp/x",
            "RM -Rf /",
            "/bin/rm -rf /",
            "'rm' \"-rf\" /",
            "rm${IFS}-rf /",
            "rm --recursive --force /",
            "cd /; rm -r -i -f x",
        ] {
            assert!(matches_words("rm -rf", cmd), "{cmd}");
        }
        for cmd in [
            "rm -r x",
            "rm -f x",
            "rm x -v",
            "firmware -rf",
            "echo rm; ls -rf",
        ] {
            assert!(!matches_words("rm -rf", cmd), "{cmd}");
        }
    }

    #[test]
    fn sql_comments_do_not_hide_drop_table() {
        for sql in [
            "DROP/**/TABLE users",
            "drop /* x */ table users",
            "DROP--x\nTABLE users",
            "drop tables",
            "x;drop table users",
        ] {
            assert!(matches_words("drop table", sql), "{sql}");
        }
        assert!(!matches_words("drop table", "drop the table"));
    }
}
