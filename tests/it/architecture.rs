//! Every reference to the architecture resolves (the page the code cites): a
//! `docs/ARCHITECTURE.md §N` (or `§N.M`, or a list `§5, §6`) names a numbered heading
//! that exists, and a `docs/ARCHITECTURE.md` followed by a comma and a title names a
//! heading or a bold lead term of the page. A reference that does not resolve sends a contributor with a
//! fresh clone nowhere, so it fails here with the file and line.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap()
}

/// The page's section numbers (`9`, `3.3`) and titles (lower-cased), headings and bold
/// lead terms alike.
fn sections(page: &str) -> (BTreeSet<String>, Vec<String>) {
    let heading = Regex::new(r"(?m)^#{2,4} (\d+(?:\.\d+)?)\.? (.+)$").unwrap();
    let bold = Regex::new(r"\*\*([^*]+?)\.?\*\*").unwrap();
    let numbers = heading
        .captures_iter(page)
        .map(|c| c[1].to_string())
        .collect();
    let mut titles: Vec<String> = heading
        .captures_iter(page)
        .map(|c| c[2].to_lowercase())
        .collect();
    titles.extend(bold.captures_iter(page).map(|c| c[1].to_lowercase()));
    (numbers, titles)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x == "rs" || x == "md" || x == "toml" || x == "sh" || x == "py")
        {
            out.push(p);
        }
    }
}

fn sources() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    for d in [
        "src", "tests", "benches", "docs", "examples", ".ci", "scripts",
    ] {
        files(&root().join(d), &mut out);
    }
    out
}

/// What does not resolve, one line each (`file:line: reference: why`).
fn unresolved(
    path: &Path,
    text: &str,
    numbers: &BTreeSet<String>,
    titles: &[String],
) -> Vec<String> {
    let by_number =
        Regex::new(r"ARCHITECTURE\.md\s*((?:§\d+(?:\.\d+)?(?:\s*(?:,|and)\s*)?)+)").unwrap();
    let by_title = Regex::new(
        r"ARCHITECTURE\.md,\s*[`\x22]?([A-Z][A-Za-z'-]*(?: [A-Za-z'-]+)*?)(?:[,.;:)`\x22]|$)",
    )
    .unwrap();
    let one = Regex::new(r"§(\d+(?:\.\d+)?)").unwrap();
    let rel = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut out = Vec::new();
    // Comments wrap: join each line with the next so a reference split over two lines
    // is read whole.
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let next = lines
            .get(i + 1)
            .map(|l| l.trim_start_matches([' ', '/', '!', '#', '*']))
            .unwrap_or("");
        let joined = format!("{line} {next}");
        for c in by_number.captures_iter(&joined) {
            if c.get(0).unwrap().start() >= line.len() {
                continue;
            }
            for n in one.captures_iter(&c[1]) {
                if !numbers.contains(&n[1]) {
                    out.push(format!(
                        "{rel}:{}: §{} is no section of docs/ARCHITECTURE.md",
                        i + 1,
                        &n[1]
                    ));
                }
            }
        }
        for c in by_title.captures_iter(line) {
            let want = c[1].to_lowercase();
            if !titles
                .iter()
                .any(|t| t.contains(&want) || want.contains(t.as_str()))
            {
                out.push(format!(
                    "{rel}:{}: \"{}\" is no heading of docs/ARCHITECTURE.md",
                    i + 1,
                    &c[1]
                ));
            }
        }
    }
    out
}

#[test]
fn every_reference_to_the_architecture_names_a_section_that_exists() {
    let page = page();
    let (numbers, titles) = sections(&page);
    let mut problems = Vec::new();
    let mut found = 0;
    for path in sources() {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        found += text.matches("ARCHITECTURE.md").count();
        problems.extend(unresolved(&path, &text, &numbers, &titles));
        // The design the code once cited is not in the repository: every citation
        // goes to this page.
        let (old_cite, old_file) = (["DESIGN", " §"].concat(), ["DESIGN", ".md"].concat());
        for (i, line) in text.lines().enumerate() {
            if line.contains(&old_cite) || line.contains(&old_file) {
                problems.push(format!(
                    "{}:{}: cites a design outside the repository",
                    path.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(
        found > 60,
        "only {found} references found: is the reader broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_reference_to_a_missing_section_or_title_is_reported() {
    let (numbers, titles) = sections("## 3. tools.toml\n### 3.3 Retries\n- **Leases.** a holder\n");
    let text = "// see docs/ARCHITECTURE.md §3.3 and docs/ARCHITECTURE.md §3, §9\n\
                // docs/ARCHITECTURE.md, Leases; docs/ARCHITECTURE.md, Sandbox\n\
                // wrapped over lines: docs/ARCHITECTURE.md\n// §4\n";
    let got = unresolved(Path::new("x.rs"), text, &numbers, &titles);
    assert_eq!(
        got,
        [
            "x.rs:1: §9 is no section of docs/ARCHITECTURE.md",
            "x.rs:2: \"Sandbox\" is no heading of docs/ARCHITECTURE.md",
            "x.rs:3: §4 is no section of docs/ARCHITECTURE.md",
        ]
    );
}
