//! Pure checks on single tools.toml values: names, counts, URL templates, schemas and
//! the fallback graph. Each returns a one-line message (without the key; the caller
//! adds it), so they are easy to test and reuse.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// Tool names go to model providers, which accept only this shape.
pub fn check_tool_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 64 || !name.chars().all(ok_char) {
        return Err("name must match ^[A-Za-z0-9_-]{1,64}$ (model providers require it)".into());
    }
    if name == "ask_user" {
        return Err("name `ask_user` is reserved for the built-in tool".into());
    }
    Ok(())
}

/// A count within `min..=max` (`max` None: only the lower bound).
pub fn check_count(value: i64, min: i64, max: Option<i64>) -> Result<u32, String> {
    let max = max.unwrap_or(i64::from(u32::MAX));
    if (min..=max).contains(&value) {
        return u32::try_from(value).map_err(|e| e.to_string());
    }
    if max == i64::from(u32::MAX) {
        Err(format!("must be at least {min}, not {value}"))
    } else {
        Err(format!("must be between {min} and {max}, not {value}"))
    }
}

/// Environment variable names a command tool may keep (see docs/ARCHITECTURE.md §3.1).
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid environment variable name"))
    }
}

/// Header values may hold `${VAR}` references; an unclosed one is a typo.
pub fn check_header_template(value: &str) -> Result<(), String> {
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err("unclosed `${`".into());
        };
        check_env_name(&after[..end])?;
        rest = &after[end + 1..];
    }
    Ok(())
}

/// One `{name}` in a URL template and where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct Placeholder {
    pub name: String,
    pub span: Range<usize>,
}

/// The `{name}` placeholders of a URL template, in order.
pub fn url_placeholders(url: &str) -> Result<Vec<Placeholder>, String> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (i, c) in url.char_indices() {
        match (c, open) {
            ('{', Some(_)) => return Err("nested `{` in a placeholder".into()),
            ('{', None) if url[..i].ends_with('$') => {
                return Err("`${VAR}` is only read in headers, not in the url".into());
            }
            ('{', None) => open = Some(i),
            ('}', None) => return Err("`}` without a matching `{`".into()),
            ('}', Some(start)) => {
                let name = &url[start + 1..i];
                let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
                if name.is_empty() || !name.chars().all(ok) {
                    return Err(format!("bad placeholder `{{{name}}}`"));
                }
                out.push(Placeholder {
                    name: name.to_string(),
                    span: start..i + 1,
                });
                open = None;
            }
            _ => {}
        }
    }
    match open {
        Some(_) => Err("unclosed `{` in a placeholder".into()),
        None => Ok(out),
    }
}

/// Checks an HTTP tool's URL template: http(s) only, and `{placeholders}` only in the
/// path or query, so the model can never choose where a request goes
/// (docs/ARCHITECTURE.md §3.2).
pub fn check_url_template(url: &str) -> Result<(), String> {
    let holes = url_placeholders(url)?;
    let Some(sep) = url.find("://") else {
        return Err(format!("{url:?} must start with http:// or https://"));
    };
    let authority_start = sep + 3;
    // The authority ends at the first of `/ ? #`; a URL parser may end it earlier
    // (at `\`), so this span is never smaller than the real one: safe to reject in.
    let authority_end = url[authority_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority_start + i);
    let fragment_start = url.find('#').unwrap_or(url.len());
    for hole in &holes {
        let part = if hole.span.start < sep {
            "scheme"
        } else if hole.span.start < authority_end {
            authority_part(
                &url[authority_start..authority_end],
                hole.span.start - authority_start,
            )
        } else if hole.span.start > fragment_start {
            "fragment"
        } else {
            continue;
        };
        return Err(format!(
            "placeholder `{{{}}}` is in the {part}; placeholders are only allowed in the path or query",
            hole.name
        ));
    }
    let scheme = url[..sep].to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("{url:?} must start with http:// or https://"));
    }
    check_url_shape(url, &holes, authority_start..authority_end)
}

/// Which part of `user:pw@host:port` the byte at `offset` is in.
fn authority_part(authority: &str, offset: usize) -> &'static str {
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    if offset < host_start {
        return "userinfo";
    }
    let hostport = &authority[host_start..];
    // Skip an IPv6 literal so its colons are not taken for the port separator.
    let search_from = hostport.find(']').unwrap_or(0);
    match hostport[search_from..].rfind(':') {
        Some(colon) if offset >= host_start + search_from + colon => "port",
        _ => "host",
    }
}

/// With placeholders filled, the template must be a URL with a host.
fn check_url_shape(
    url: &str,
    holes: &[Placeholder],
    authority: Range<usize>,
) -> Result<(), String> {
    if url[authority].trim().is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    let mut filled = url.to_string();
    for hole in holes.iter().rev() {
        filled.replace_range(hole.span.clone(), "x");
    }
    match reqwest::Url::parse(&filled) {
        Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
        Ok(_) => Err(format!("{url:?} has no host")),
        Err(e) => Err(format!("{url:?} is not a valid URL: {e}")),
    }
}

/// Checks an input schema and returns its top-level property names.
///
/// Providers take only object schemas for tool parameters, and a schema that does not
/// compile would fail every call at run time, so both are caught here.
pub fn check_input_schema(schema: &Value) -> Result<BTreeSet<String>, String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("must be an object schema (type = \"object\")".into());
    }
    if let Err(e) = jsonschema::validator_for(schema) {
        let path = e.instance_path().to_string();
        let at = if path.is_empty() {
            String::new()
        } else {
            format!(" at {path}")
        };
        return Err(format!(
            "not a valid JSON Schema{at}: {}",
            super::raw::one_line(&e.to_string())
        ));
    }
    let props = schema.get("properties").and_then(Value::as_object);
    Ok(props
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default())
}

/// Cycles in the fallback graph (tool -> its fallbacks), each once, as a path that
/// starts and ends at its alphabetically first tool: `a -> b -> a`. A depth-first walk
/// finds at least one cycle in every loop, which is enough to point at the mistake.
pub fn find_cycles(graph: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut stack = Vec::new();
        walk(graph, start, &mut stack, &mut done, &mut found);
    }
    found.into_iter().collect()
}

/// Depth-first walk; `stack` is the current path, a back edge into it is a cycle.
fn walk<'g>(
    graph: &'g BTreeMap<String, Vec<String>>,
    node: &'g String,
    stack: &mut Vec<&'g String>,
    done: &mut BTreeSet<&'g String>,
    found: &mut BTreeSet<Vec<String>>,
) {
    if let Some(i) = stack.iter().position(|n| *n == node) {
        found.insert(normalise_cycle(&stack[i..]));
        return;
    }
    if done.contains(node) {
        return;
    }
    stack.push(node);
    for next in graph.get(node).into_iter().flatten() {
        walk(graph, next, stack, done, found);
    }
    stack.pop();
    done.insert(node);
}

/// Rotates a cycle to start at its smallest name and closes it: `[b, a]` -> `a b a`.
fn normalise_cycle(cycle: &[&String]) -> Vec<String> {
    let first = (0..cycle.len()).min_by_key(|i| cycle[*i]).unwrap_or(0);
    let mut path: Vec<String> = cycle[first..]
        .iter()
        .chain(&cycle[..first])
        .map(|s| s.to_string())
        .collect();
    if let Some(head) = path.first().cloned() {
        path.push(head);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(url: &str) -> String {
        match check_url_template(url) {
            Ok(()) => panic!("{url} was accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn url_placeholders_in_path_and_query_are_allowed() {
        for url in [
            "http://127.0.0.1:8080/search?q={q}",
            "https://api.example.com/v1/items/{id}/notes?limit={limit}&q={q}",
            "https://example.com/{a}{b}",
            "HTTPS://example.com/x",
            "http://[::1]:8080/{id}",
            "http://user:pw@example.com/{id}",
            "https://example.com",
        ] {
            assert_eq!(check_url_template(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn url_placeholders_outside_path_and_query_are_rejected_by_part() {
        let tail = "; placeholders are only allowed in the path or query";
        let cases = [
            ("{scheme}://example.com/", "scheme"),
            ("https://{host}/x", "host"),
            ("https://api.{host}.com/x", "host"),
            ("https://example.com{host}/x", "host"),
            ("https://example.com:{port}/x", "port"),
            ("http://[::1]:{port}/x", "port"),
            ("https://{user}@example.com/x", "userinfo"),
            ("https://u:{pw}@example.com/x", "userinfo"),
            ("https://example.com?q=1#{frag}", "fragment"),
        ];
        for (url, part) in cases {
            let hole = url_placeholders(url).unwrap()[0].name.clone();
            assert_eq!(
                rejected(url),
                format!("placeholder `{{{hole}}}` is in the {part}{tail}"),
                "{url}"
            );
        }
    }

    #[test]
    fn malformed_url_templates_are_rejected() {
        assert_eq!(
            rejected("ftp://example.com/{q}"),
            "\"ftp://example.com/{q}\" must start with http:// or https://"
        );
        assert_eq!(
            rejected("example.com/{q}"),
            "\"example.com/{q}\" must start with http:// or https://"
        );
        assert_eq!(rejected("http:///path"), "\"http:///path\" has no host");
        assert_eq!(
            rejected("https://example.com/{q"),
            "unclosed `{` in a placeholder"
        );
        assert_eq!(
            rejected("https://example.com/q}"),
            "`}` without a matching `{`"
        );
        assert_eq!(
            rejected("https://example.com/{{q}}"),
            "nested `{` in a placeholder"
        );
        assert_eq!(rejected("https://example.com/{}"), "bad placeholder `{}`");
        assert_eq!(
            rejected("https://example.com/{a b}"),
            "bad placeholder `{a b}`"
        );
        assert_eq!(
            rejected("https://example.com/${TOKEN}"),
            "`${VAR}` is only read in headers, not in the url"
        );
        assert!(
            rejected("https://exa mple.com/")
                .starts_with("\"https://exa mple.com/\" is not a valid URL: ")
        );
    }

    #[test]
    fn placeholders_are_listed_in_order() {
        let names: Vec<String> = url_placeholders("http://h/{a}/x?b={b}")
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn cycles_are_found_once_each_and_chains_are_not_cycles() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &[])]);
        assert!(find_cycles(&g).is_empty());
        let g = graph(&[
            ("b", &["a"]),
            ("a", &["b", "c"]),
            ("c", &["d"]),
            ("d", &["c"]),
        ]);
        assert_eq!(find_cycles(&g), [vec!["a", "b", "a"], vec!["c", "d", "c"]]);
    }

    #[test]
    fn counts_name_their_bounds() {
        assert_eq!(check_count(3, 1, Some(20)), Ok(3));
        assert_eq!(
            check_count(-1, 1, None),
            Err("must be at least 1, not -1".into())
        );
        assert_eq!(
            check_count(i64::MAX, 1, None),
            Err(format!("must be at least 1, not {}", i64::MAX))
        );
    }

    #[test]
    fn tool_names_follow_provider_rules() {
        assert_eq!(check_tool_name("search_kb-2"), Ok(()));
        assert!(check_tool_name(&"a".repeat(65)).is_err());
        assert!(check_tool_name("").is_err());
        assert!(check_tool_name("dot.name").is_err());
    }

    #[test]
    fn header_templates_name_variables() {
        assert_eq!(check_header_template("Bearer ${KB_TOKEN} x ${B}"), Ok(()));
        assert_eq!(
            check_header_template("${}"),
            Err("\"\" is not a valid environment variable name".into())
        );
    }
}
