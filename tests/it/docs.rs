//! The README and docs/ as a CommonMark renderer (GitHub's included) shows them, read
//! with a real CommonMark parser (issue 27: text after a closing code fence turned the
//! README's Contents, the "Quick start" heading and its commands into one code block).

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use std::path::{Path, PathBuf};

/// What one Markdown file renders to, as far as these tests look.
struct Doc {
    path: PathBuf,
    /// (level, text) of every heading, in order.
    headings: Vec<(HeadingLevel, String)>,
    /// Every code block's text.
    code_blocks: Vec<String>,
    /// Every link's destination.
    links: Vec<String>,
    /// Destinations of the links in the list right after the "Contents" heading.
    contents: Vec<String>,
}

fn parse(path: &Path) -> Doc {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc = Doc {
        path: path.to_path_buf(),
        headings: Vec::new(),
        code_blocks: Vec::new(),
        links: Vec::new(),
        contents: Vec::new(),
    };
    let mut heading: Option<(HeadingLevel, String)> = None;
    let mut code: Option<String> = None;
    // 0: before the Contents heading; 1: after it; 2: in its list; 3: past it.
    let mut in_contents = 0;
    for event in Parser::new(&text) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => heading = Some((level, String::new())),
            Event::End(TagEnd::Heading(_)) => {
                let h = heading.take().expect("heading open");
                in_contents = match (in_contents, h.1.as_str()) {
                    (0, "Contents") => 1,
                    (0, _) => 0,
                    _ => 3,
                };
                doc.headings.push(h);
            }
            Event::Start(Tag::CodeBlock(_)) => code = Some(String::new()),
            Event::End(TagEnd::CodeBlock) => doc.code_blocks.extend(code.take()),
            Event::Start(Tag::List(_)) if in_contents == 1 => in_contents = 2,
            Event::End(TagEnd::List(_)) if in_contents == 2 => in_contents = 3,
            Event::Start(Tag::Link { dest_url, .. }) => {
                if in_contents == 2 {
                    doc.contents.push(dest_url.to_string());
                }
                doc.links.push(dest_url.to_string());
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, h)) = heading.as_mut() {
                    h.push_str(&t);
                } else if let Some(c) = code.as_mut() {
                    c.push_str(&t);
                }
            }
            _ => {}
        }
    }
    doc
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn docs() -> Vec<Doc> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec![root.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    paths.extend(more);
    paths.iter().map(|p| parse(p)).collect()
}

/// The README's Contents list leads to its own sections and to the reference in docs/.
#[test]
fn every_entry_of_the_readme_contents_is_a_real_heading_or_page() {
    let readme = &docs()[0];
    let anchors: Vec<String> = readme.headings.iter().map(|(_, h)| anchor(h)).collect();
    assert!(
        readme.contents.len() >= 10,
        "the Contents list was not found as a list of links: {:?}",
        readme.contents
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for link in &readme.contents {
        match link.strip_prefix('#') {
            Some(target) => assert!(
                anchors.iter().any(|a| a == target),
                "README Contents links to {link}, which is no heading; headings: {anchors:?}"
            ),
            None => assert!(root.join(link).is_file(), "README Contents links to {link}"),
        }
    }
    assert!(
        readme
            .headings
            .iter()
            .any(|(l, h)| *l == HeadingLevel::H2 && h == "Quick start"),
        "`## Quick start` does not render as a heading"
    );
}

/// The README is a guide that reads in minutes; the reference lives in docs/.
#[test]
fn the_readme_is_a_short_guide() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines < 300,
        "README.md has {lines} lines; move reference text to docs/"
    );
}

/// User documents speak to users: no internal issue numbers, no names of work passes.
#[test]
fn no_user_document_names_an_issue_or_a_work_pass() {
    let pattern = regex::Regex::new(
        r"(?i)\bissues? #?\d+|\b(first|second|third|fourth|fifth) (pass|session)\b",
    )
    .expect("pattern");
    for doc in docs() {
        let text = std::fs::read_to_string(&doc.path).expect("doc");
        for (n, line) in text.lines().enumerate() {
            assert!(
                !pattern.is_match(line),
                "{}:{}: {line}",
                doc.path.display(),
                n + 1
            );
        }
    }
}

/// A line that would be a heading outside a code block, found inside one, means a
/// fence did not close where its writer thought (the README's line 21, issue 27).
#[test]
fn no_heading_and_no_fence_is_swallowed_by_a_code_block() {
    for doc in docs() {
        for block in &doc.code_blocks {
            for line in block.lines() {
                let t = line.trim_start();
                assert!(
                    !(t.starts_with("## ") || t.starts_with("```")),
                    "{}: a code block holds `{line}`, so a fence before it did not close:\n{block}",
                    doc.path.display()
                );
            }
        }
    }
}

#[test]
fn every_link_to_a_heading_or_a_file_of_the_repository_resolves() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for doc in docs() {
        let anchors: Vec<String> = doc.headings.iter().map(|(_, h)| anchor(h)).collect();
        let dir = doc.path.parent().expect("doc folder");
        for link in &doc.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            if file.is_empty() {
                assert!(
                    anchors.iter().any(|a| a == fragment),
                    "{}: link {link} names no heading of this file",
                    doc.path.display()
                );
            } else {
                let target = dir.join(file);
                assert!(
                    target.exists(),
                    "{}: link {link} points to {}, which does not exist",
                    doc.path.display(),
                    target.strip_prefix(&root).unwrap_or(&target).display()
                );
                if !fragment.is_empty() && file.ends_with(".md") {
                    let there = parse(&target);
                    assert!(
                        there.headings.iter().any(|(_, h)| anchor(h) == fragment),
                        "{}: link {link} names no heading of {file}",
                        doc.path.display()
                    );
                }
            }
        }
    }
}

#[test]
fn github_anchors_are_computed_as_github_does() {
    assert_eq!(anchor("tools.toml"), "toolstoml");
    assert_eq!(
        anchor("Security: what is guaranteed and what is not"),
        "security-what-is-guaranteed-and-what-is-not"
    );
    assert_eq!(anchor("Your own tool and model"), "your-own-tool-and-model");
}

/// Every command `agentrun --help` knows is in the reference's list (`db check` was
/// missing from it), so a newcomer reading docs/commands.md sees all there is.
#[test]
fn every_command_is_in_the_reference_list() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = parse(&root.join("docs/commands.md"));
    let list = page.code_blocks.first().expect("the command list");
    let top = agentrun::cli::command();
    // Hidden commands are agentrun's own plumbing, not for people.
    let shown = |c: &&clap::Command| c.get_name() != "help" && !c.is_hide_set();
    for cmd in top.get_subcommands().filter(shown) {
        let mut names: Vec<String> = cmd
            .get_subcommands()
            .filter(shown)
            .map(|c| format!("agentrun {} {}", cmd.get_name(), c.get_name()))
            .collect();
        if names.is_empty() {
            names.push(format!("agentrun {}", cmd.get_name()));
        }
        for name in names {
            assert!(
                list.lines()
                    .any(|l| l == name || l.starts_with(&format!("{name} "))),
                "docs/commands.md does not list `{name}`"
            );
        }
    }
}
