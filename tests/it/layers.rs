//! Imports run one way (docs/ARCHITECTURE.md §9): a module imports only
//! modules on its own floor or below, and no files import each other in a circle —
//! inside a folder too. The crate is one Cargo package, so nothing else keeps the
//! direction; this test reads `src/` and fails with the table and every offending
//! import, so the mend is plain.
//!
//! What counts as an import: a `use` path (also one through a child module), an inline
//! `crate::`/`super::`/`self::` path, and a `crate::name!` macro, each resolved to the
//! file that defines the name (a folder's `mod.rs` that re-exports a name passes it on;
//! its `pub use` is not an import of its own). Not counted: an inline call through a
//! child module without a `use` (`start::run(…)` in `cli/mod.rs`), the way a folder's
//! `mod.rs` dispatches to its files. Test code (`#[cfg(test)]` items, `tests.rs`,
//! `*_tests.rs`) is left out: tests may reach anywhere.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The floors, from the ground up. A module may import its own floor and the floors
/// below it. An entry is a top-level module or, where one module's files stand on
/// different floors, a file's module path (`telemetry::run`); the longest entry that
/// holds a file decides its floor. Keep docs/ARCHITECTURE.md §9 in step with this table.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "ground: leaves every layer may use",
        &[
            "clock",
            "timefmt",
            "redact",
            "net",
            "taxonomy",
            "fault",
            "text",
            "out",
            "money",
            "backoff",
            "trace",
            "schema",
            "telemetry",
        ],
    ),
    (
        "model: providers, requests, the model retry; telemetry's content",
        &["model", "telemetry::content"],
    ),
    ("config: tools.toml and the task file", &["task", "config"]),
    ("tools: executing one attempt", &["tools"]),
    (
        "records and recovery: the core's types, the tool-call chain",
        &["prompts", "digest", "records", "recovery"],
    ),
    ("store: SQLite and PostgreSQL", &["store"]),
    (
        "machine: the pure loop; telemetry's events",
        &["machine", "telemetry::events"],
    ),
    (
        "around a run: hooks, set-up, notifications, a run's telemetry, shared rate limits",
        &["hooks", "setup", "notify", "telemetry::run", "govern"],
    ),
    ("runner: driving a run", &["runner"]),
    (
        "decisions, views, recorded runs as tests",
        &["decide", "render", "evals"],
    ),
    ("console", &["serve"]),
    ("command line", &["cli"]),
];

/// Upward imports that are known and owned: (from file, to file, why). Each must
/// still exist (a stale exception fails the test too), so the list only shrinks. An
/// excused import is left out of the circle check as well.
const KNOWN_UPWARD: &[(&str, &str, &str)] = &[
    (
        "serve/drive.rs",
        "cli/progress.rs",
        "a quiet Progress as the observer; becomes runner::observe::Unobserved when the run session moves to runner/",
    ),
    (
        "model/types.rs",
        "govern/gate.rs",
        "a model request carries its shared rate-limit gate, which reads the store; the gate's own floor is being settled",
    ),
    (
        "model/mod.rs",
        "govern/model.rs",
        "the shared 429 pause wraps the model call from inside model/; to move into the runner's call site",
    ),
    (
        "tools/mod.rs",
        "govern/gate.rs",
        "a tool call carries its shared rate-limit gate (as the model request does)",
    ),
    (
        "config/types.rs",
        "govern/mod.rs",
        "tools.toml's [limits] resolve into govern's types; those types belong under config/",
    ),
    ("config/limits.rs", "govern/mod.rs", "as config/types.rs"),
    (
        "config/limits.rs",
        "govern/schedule.rs",
        "as config/types.rs",
    ),
    (
        "evals/eval.rs",
        "cli/mod.rs",
        "reads the exit code of an interrupted run from cli::Exit; the exit codes belong on the ground floor",
    ),
];

struct Source {
    /// Path under `src/`, e.g. `store/sqlite/conn.rs`.
    file: String,
    /// Module path, e.g. `["store", "sqlite", "conn"]`.
    module: Vec<String>,
    defs: BTreeSet<String>,
    /// Names passed on by `pub use`, with the path they come from.
    reexports: BTreeMap<String, String>,
    globs: Vec<String>,
    /// Paths used (not re-exported).
    uses: Vec<String>,
}

fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn is_test_file(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Source with comments, string and char literals blanked, and `#[cfg(test)]` items
/// removed.
fn code_of(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&out) {
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), else a lifetime.
            let close = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(j) => {
                    out.push_str("' '");
                    i = j + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    without_test_items(&out)
}

fn ident_before(out: &str) -> bool {
    out.chars()
        .last()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// `code` without each item marked `#[cfg(test)]` (up to its `;` or its block's end).
fn without_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let (prefix, inner) = (
        &tree[..open],
        &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())],
    );
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// A `use` path without its `as` alias, and the name it brings in.
fn alias(path: &str) -> (String, String) {
    let path: String = path.split_whitespace().collect::<Vec<_>>().join(" ");
    match path.split_once(" as ") {
        Some((p, name)) => (p.replace(' ', ""), name.trim().to_string()),
        None => {
            let p = path.replace(' ', "");
            let name = p.rsplit("::").next().unwrap_or(&p).to_string();
            (p, name)
        }
    }
}

fn read_sources(root: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    collect(&root.join("src"), &root.join("src"), &mut files);
    let def =
        Regex::new(r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(\w+)").unwrap();
    let mac = Regex::new(r"macro_rules!\s*(\w+)").unwrap();
    let use_item = Regex::new(r"(?:^|[;{}\s])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
    let inline = Regex::new(r"(\$?)\b((?:crate|super|self)(?:::\w+)+)(!?)").unwrap();
    let mut sources = Vec::new();
    for (file, text) in files {
        if file == "main.rs" || is_test_file(&file) {
            continue;
        }
        let code = code_of(&text);
        let mut s = Source {
            module: module_of(&file),
            file,
            defs: BTreeSet::new(),
            reexports: BTreeMap::new(),
            globs: Vec::new(),
            uses: Vec::new(),
        };
        s.defs
            .extend(def.captures_iter(&code).map(|c| c[1].to_string()));
        s.defs
            .extend(mac.captures_iter(&code).map(|c| c[1].to_string()));
        for c in use_item.captures_iter(&code) {
            for path in expand(&c[2]) {
                let (path, name) = alias(&path);
                if c.get(1).is_none() {
                    s.uses.push(path);
                } else if let Some(glob) = path.strip_suffix("::*") {
                    s.globs.push(glob.to_string());
                } else {
                    s.reexports.insert(name, path);
                }
            }
        }
        let without_uses = use_item.replace_all(&code, ";");
        for c in inline.captures_iter(&without_uses) {
            s.uses.push(c[2].to_string());
        }
        sources.push(s);
    }
    sources
}

fn collect(dir: &Path, src: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            collect(&path, src, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

struct Crate {
    sources: Vec<Source>,
    by_module: BTreeMap<Vec<String>, usize>,
    macros: BTreeMap<String, usize>,
}

impl Crate {
    fn new(root: &Path) -> Crate {
        let sources = read_sources(root);
        let by_module = sources
            .iter()
            .enumerate()
            .map(|(i, s)| (s.module.clone(), i))
            .collect();
        let mut macros = BTreeMap::new();
        let exported = Regex::new(r"#\[macro_export\]\s*macro_rules!\s*(\w+)").unwrap();
        for (i, s) in sources.iter().enumerate() {
            let text = std::fs::read_to_string(root.join("src").join(&s.file)).unwrap();
            for c in exported.captures_iter(&text) {
                macros.insert(c[1].to_string(), i);
            }
        }
        Crate {
            sources,
            by_module,
            macros,
        }
    }

    /// The file that defines what `path`, used in file `from`, names.
    fn resolve(&self, from: usize, path: &str, hops: u32) -> Option<usize> {
        if hops > 8 {
            return Some(from);
        }
        let me = &self.sources[from].module;
        let (mut segs, mut base): (Vec<&str>, Vec<String>) =
            (path.split("::").collect(), Vec::new());
        match segs[0] {
            "crate" | "$crate" => {
                segs.remove(0);
                if segs.len() == 1
                    && let Some(&m) = self.macros.get(segs[0])
                {
                    return Some(m);
                }
            }
            "super" | "self" => {
                base = me.clone();
                while let Some(&s) = segs.first().filter(|s| **s == "super" || **s == "self") {
                    if s == "super" {
                        base.pop();
                    }
                    segs.remove(0);
                }
            }
            child => {
                let mut m = me.clone();
                m.push(child.to_string());
                if !self.by_module.contains_key(&m) {
                    return None;
                }
                base = me.clone();
            }
        }
        while let Some(&s) = segs.first() {
            let mut next = base.clone();
            next.push(s.to_string());
            if !self.by_module.contains_key(&next) {
                break;
            }
            base = next;
            segs.remove(0);
        }
        let file = *self.by_module.get(&base)?;
        let Some(&name) = segs.first().filter(|n| **n != "self" && **n != "*") else {
            return Some(file);
        };
        let f = &self.sources[file];
        if f.defs.contains(name) {
            return Some(file);
        }
        if let Some(p) = f.reexports.get(name) {
            return self.resolve(file, p, hops + 1);
        }
        for g in &f.globs {
            if let Some(t) = self.resolve(file, &format!("{g}::{name}"), hops + 1)
                && t != file
            {
                return Some(t);
            }
        }
        Some(file)
    }

    fn edges(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (i, s) in self.sources.iter().enumerate() {
            for path in &s.uses {
                if let Some(t) = self.resolve(i, path, 0)
                    && t != i
                {
                    edges.entry(i).or_default().insert(t);
                }
            }
        }
        edges
    }
}

fn floor_of(module: &[String]) -> Option<usize> {
    if module.is_empty() {
        return LAYERS.len().checked_sub(1);
    }
    (1..=module.len()).rev().find_map(|n| {
        let path = module[..n].join("::");
        LAYERS
            .iter()
            .position(|(_, entries)| entries.contains(&path.as_str()))
    })
}

fn layer_table() -> String {
    let mut t =
        String::from("floors, from the ground up (a module imports its own floor or below):\n");
    for (i, (what, modules)) in LAYERS.iter().enumerate() {
        t += &format!("  {:>2}  {:<62} {}\n", i + 1, what, modules.join(", "));
    }
    t
}

/// Strongly connected groups of more than one file (Tarjan).
fn circles(n: usize, edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges.get(&v).into_iter().flatten() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                group.push(w);
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn imports_run_down_the_floors_and_no_files_import_each_other_in_a_circle() {
    let krate = Crate::new(Path::new(env!("CARGO_MANIFEST_DIR")));
    let edges = krate.edges();
    let name = |i: usize| krate.sources[i].file.as_str();
    let mut problems = Vec::new();
    let mut known_seen = BTreeSet::new();
    for s in &krate.sources {
        if floor_of(&s.module).is_none() {
            problems.push(format!(
                "src/{}: module `{}` is on no floor: add it to LAYERS",
                s.file, s.module[0]
            ));
        }
    }
    for (&from, tos) in &edges {
        let Some(f) = floor_of(&krate.sources[from].module) else {
            continue;
        };
        for &to in tos {
            let Some(t) = floor_of(&krate.sources[to].module) else {
                continue;
            };
            if t <= f {
                continue;
            }
            if let Some(k) = KNOWN_UPWARD
                .iter()
                .find(|k| k.0 == name(from) && k.1 == name(to))
            {
                known_seen.insert(k.0);
                continue;
            }
            problems.push(format!(
                "upward: src/{} (floor {}) imports src/{} (floor {})",
                name(from),
                f + 1,
                name(to),
                t + 1
            ));
        }
    }
    for k in KNOWN_UPWARD {
        if !known_seen.contains(k.0) {
            problems.push(format!(
                "stale exception: src/{} no longer imports src/{}: remove it from KNOWN_UPWARD",
                k.0, k.1
            ));
        }
    }
    let mut unexcused = edges.clone();
    for (&from, tos) in unexcused.iter_mut() {
        tos.retain(|&to| {
            !KNOWN_UPWARD
                .iter()
                .any(|k| k.0 == name(from) && k.1 == name(to))
        });
    }
    for group in circles(krate.sources.len(), &unexcused) {
        let mut ties = Vec::new();
        for &a in &group {
            for &b in unexcused.get(&a).into_iter().flatten() {
                if group.contains(&b) {
                    ties.push(format!("src/{} -> src/{}", name(a), name(b)));
                }
            }
        }
        problems.push(format!("circle: {}", ties.join(", ")));
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        layer_table()
    );
}

/// The reader itself: what it must see, so a pass above means something.
#[test]
fn the_import_reader_sees_uses_inline_paths_macros_and_re_exports() {
    assert_eq!(
        expand("crate::a::{b, c::{d, e as f}}"),
        ["crate::a::b", "crate::a::c::d", "crate::a::c::e as f"]
    );
    assert_eq!(
        alias("crate::a::e as f"),
        ("crate::a::e".into(), "f".into())
    );
    let code = code_of(
        "use crate::x; // crate::y\nfn f<'a>() { let s = \"crate::z\"; let c = '\"'; crate::w::g(); }\n#[cfg(test)]\nmod tests { use crate::t; }\n",
    );
    assert!(
        code.contains("crate::x") && code.contains("crate::w::g"),
        "{code}"
    );
    assert!(
        !code.contains("crate::y") && !code.contains("crate::z") && !code.contains("crate::t"),
        "{code}"
    );
    let krate = Crate::new(Path::new(env!("CARGO_MANIFEST_DIR")));
    let edges = krate.edges();
    let file = |f: &str| krate.sources.iter().position(|s| s.file == f).unwrap();
    let has = |a: &str, b: &str| edges.get(&file(a)).is_some_and(|t| t.contains(&file(b)));
    // A `use` through a folder's re-export lands on the defining file.
    assert!(has("store/sqlite/conn.rs", "store/sqlite/sql.rs"));
    // An exported macro lands on the file that defines it.
    assert!(has("fault.rs", "out.rs"));
    // The known exception is seen, so the check above is live.
    assert!(has("serve/drive.rs", "cli/progress.rs"));
}
