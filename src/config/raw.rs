//! Stage one of tools.toml: the file as written, before defaults and validation.
//!
//! Every field is an `Option` so that "absent" and "set" stay distinguishable for
//! inheritance, and every struct denies unknown keys. We parse the document with spans
//! and read each section (`[defaults]`, `[policy]`, each `[tools.NAME]`) on its own, so
//! one bad section never hides the problems of another. Within a section, unknown keys
//! are all listed up front and a key with the wrong type is dropped and the section read
//! again, so a single run reports every problem, each with its line and column.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue, ValueDeserializer};

use super::Sink;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    pub timeout: Option<String>,
    pub attempts: Option<i64>,
    pub backoff: Option<String>,
    pub max_backoff: Option<String>,
    pub max_retry_after: Option<String>,
    /// Variable names every command tool receives (issue 12: an allow-list).
    pub env: Option<Vec<String>>,
    /// `"all"`: command tools inherit the whole environment minus secrets.
    pub inherit: Option<String>,
    /// The sandbox of every command tool and stdio MCP server (issue 22).
    pub sandbox: Option<String>,
    pub writable: Option<Vec<String>>,
    pub network: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub breaker_threshold: Option<i64>,
    pub disable_after: Option<i64>,
    pub stuck_repeats: Option<i64>,
    pub approval_patterns: Option<Vec<String>>,
    pub max_parallel_calls: Option<i64>,
    pub max_depth: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub method: Option<String>,
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFallback {
    pub tool: String,
    pub map: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    pub description: Option<String>,
    /// Kept as JSON: it is handed to providers and the schema validator as is.
    pub input_schema: Option<serde_json::Value>,
    pub command: Option<Vec<String>>,
    pub http: Option<RawHttp>,
    pub env: Option<Vec<String>>,
    /// Variables set for a command tool: `{ NAME = "value" }`.
    pub set: Option<BTreeMap<String, String>>,
    pub inherit: Option<String>,
    pub sandbox: Option<String>,
    pub writable: Option<Vec<String>>,
    pub network: Option<bool>,
    pub timeout: Option<String>,
    pub attempts: Option<i64>,
    pub backoff: Option<String>,
    pub max_backoff: Option<String>,
    pub max_retry_after: Option<String>,
    pub idempotent: Option<bool>,
    pub fallback: Option<Vec<RawFallback>>,
    pub stale: Option<bool>,
    pub approval: Option<String>,
    pub on_unknown: Option<String>,
    pub output_cap: Option<i64>,
    /// Calls per period shared by every run on the database: `"10/s"`, `"60/min"`.
    pub rate: Option<String>,
    /// Calls in flight at once, across every run on the database.
    pub max_concurrent: Option<i64>,
}

/// `[mcp.NAME]`: an MCP server whose tools are discovered at `start` (issue 16).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcp {
    /// stdio: the server's argv.
    pub command: Option<Vec<String>>,
    /// Streamable HTTP: the server's endpoint.
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    /// stdio: environment, as for a command tool.
    pub env: Option<Vec<String>>,
    pub set: Option<BTreeMap<String, String>>,
    pub inherit: Option<String>,
    /// stdio: the sandbox, as for a command tool.
    pub sandbox: Option<String>,
    pub writable: Option<Vec<String>>,
    pub network: Option<bool>,
    /// The subset of the server's tools to offer; default all it lists.
    pub tools: Option<Vec<String>>,
    pub timeout: Option<String>,
    pub attempts: Option<i64>,
    pub backoff: Option<String>,
    pub max_backoff: Option<String>,
    /// Tools (by the server's name for them) that may be retried and re-run.
    pub idempotent: Option<Vec<String>>,
    /// Tool -> "always" | "never" | "auto".
    pub approval: Option<BTreeMap<String, String>>,
    /// Tool -> its fallback chain.
    pub fallback: Option<BTreeMap<String, Vec<RawFallback>>>,
    pub on_unknown: Option<String>,
    pub output_cap: Option<i64>,
    /// Calls per period shared by every run on the database: `"10/s"`, `"60/min"`.
    pub rate: Option<String>,
    /// Calls in flight at once, across every run on the database.
    pub max_concurrent: Option<i64>,
}

/// `[notify]` (issue 24): where to announce escalations and run ends.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNotify {
    pub webhook: Option<String>,
    pub command: Option<Vec<String>>,
    pub events: Option<Vec<String>>,
    pub public_url: Option<String>,
    pub timeout: Option<String>,
    pub attempts: Option<i64>,
}

/// One section read as far as it could be.
#[derive(Debug, Default)]
pub struct Section<T> {
    pub value: T,
    /// Keys that were present but unreadable (already reported), so later checks do
    /// not also call them "missing".
    pub broken: BTreeSet<String>,
}

/// The whole file, section by section. Tools are keyed by their name as written.
#[derive(Debug, Default)]
pub struct RawFile {
    pub defaults: Section<RawDefaults>,
    pub policy: Section<RawPolicy>,
    pub tools: BTreeMap<String, Section<RawTool>>,
    pub mcp: BTreeMap<String, Section<RawMcp>>,
    pub hooks: Section<RawHooks>,
    pub notify: Option<Section<RawNotify>>,
    pub agents: BTreeMap<String, Section<RawAgent>>,
    /// `[models."SPEC"]`: rate limits of a model endpoint (docs/rate-limits.md).
    pub models: BTreeMap<String, Section<RawModel>>,
}

const TOP_KEYS: &[&str] = &[
    "defaults", "policy", "tools", "mcp", "hooks", "notify", "agents", "models",
];

/// Where a problem is: a top-level section or a tool.
#[derive(Debug, Clone, Copy)]
pub enum Where<'a> {
    Section(&'a str),
    Tool(&'a str),
}

/// Reads the parsed document into raw sections, reporting what does not fit.
pub fn read_file(doc: DeTable<'_>, text: &str, sink: &mut Sink) -> RawFile {
    let mut file = RawFile::default();
    for (key, value) in in_file_order(doc) {
        match key.get_ref().as_ref() {
            "defaults" => {
                file.defaults = read_section(value, text, Where::Section("defaults"), sink)
            }
            "policy" => file.policy = read_section(value, text, Where::Section("policy"), sink),
            "tools" => read_tools(value, text, &mut file.tools, sink),
            "mcp" => read_mcp(value, text, &mut file.mcp, sink),
            "agents" => read_named(value, text, "agents", &mut file.agents, sink),
            "models" => read_named(value, text, "models", &mut file.models, sink),
            "hooks" => file.hooks = read_section(value, text, Where::Section("hooks"), sink),
            "notify" => {
                file.notify = Some(read_section(value, text, Where::Section("notify"), sink))
            }
            other => {
                let at = location(text, key.span().start);
                let hint = hint(other, TOP_KEYS);
                sink.top(format!("unknown key `{other}` at top level ({at}); {hint}"));
            }
        }
    }
    file
}

/// Entries as they appear in the file (the map itself is sorted by key), so problems
/// are reported top to bottom.
fn in_file_order<'i>(table: DeTable<'i>) -> Vec<(Spanned<DeString<'i>>, Spanned<DeValue<'i>>)> {
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    entries
}

/// `tools` must be a table of tables, one per tool.
fn read_tools(
    value: Spanned<DeValue<'_>>,
    text: &str,
    tools: &mut BTreeMap<String, Section<RawTool>>,
    sink: &mut Sink,
) {
    let at = location(text, value.span().start);
    let DeValue::Table(table) = value.into_inner() else {
        sink.top(format!(
            "tools: must be a table of [tools.NAME] tables ({at})"
        ));
        return;
    };
    for (name, tool) in in_file_order(table) {
        let name = name.into_inner().into_owned();
        let section = read_section(tool, text, Where::Tool(&name), sink);
        tools.insert(name, section);
    }
}

/// `[models."SPEC"]` as written: the limits of one model endpoint, shared by every
/// run and process on the database (docs/rate-limits.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub rpm: Option<i64>,
    pub tpm: Option<i64>,
    pub max_concurrent: Option<i64>,
    /// Models that share one budget name the same key.
    pub limit_key: Option<String>,
    /// The period `rpm` and `tpm` count over (a minute unless set).
    pub window: Option<String>,
}

/// `[agents.NAME]` as written (issue 26).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    /// The agent's task file, relative to tools.toml's folder.
    pub task: Option<String>,
    pub description: Option<String>,
    pub input_schema: Option<serde_json::Value>,
}

/// `agents` (issue 26) must be a table of tables, one per agent.
fn read_named<T: DeserializeOwned + Default>(
    value: Spanned<DeValue<'_>>,
    text: &str,
    key: &str,
    out: &mut BTreeMap<String, Section<T>>,
    sink: &mut Sink,
) {
    let at = location(text, value.span().start);
    let DeValue::Table(table) = value.into_inner() else {
        sink.top(format!(
            "{key}: must be a table of [{key}.NAME] tables ({at})"
        ));
        return;
    };
    for (name, entry) in in_file_order(table) {
        let name = name.into_inner().into_owned();
        let place = format!("{key}.{name}");
        let section = read_section(entry, text, Where::Section(&place), sink);
        out.insert(name, section);
    }
}

/// `mcp` must be a table of tables, one per server.
fn read_mcp(
    value: Spanned<DeValue<'_>>,
    text: &str,
    servers: &mut BTreeMap<String, Section<RawMcp>>,
    sink: &mut Sink,
) {
    let at = location(text, value.span().start);
    let DeValue::Table(table) = value.into_inner() else {
        sink.top(format!("mcp: must be a table of [mcp.NAME] tables ({at})"));
        return;
    };
    for (name, server) in in_file_order(table) {
        let name = name.into_inner().into_owned();
        let place = format!("mcp.{name}");
        let section = read_section(server, text, Where::Section(&place), sink);
        servers.insert(name, section);
    }
}

/// Reads one section into `T`, reporting every unknown key and every key of the wrong
/// type (each one is dropped and the rest read again, so all are found).
pub fn read_section<T: DeserializeOwned + Default>(
    value: Spanned<DeValue<'_>>,
    text: &str,
    place: Where<'_>,
    sink: &mut Sink,
) -> Section<T> {
    let span = value.span();
    let DeValue::Table(mut table) = value.into_inner() else {
        let at = location(text, span.start);
        sink.at(place, format!("must be a table ({at})"));
        return unreadable();
    };
    drop_unknown_keys::<T>(&mut table, text, place, sink);
    let mut broken = BTreeSet::new();
    loop {
        let whole = Spanned::new(span.clone(), DeValue::Table(table.clone()));
        let err = match T::deserialize(ValueDeserializer::from(whole)) {
            Ok(value) => return Section { value, broken },
            Err(err) => err,
        };
        let at = err.span().map(|s| location(text, s.start));
        let at = at.map(|a| format!(" ({a})")).unwrap_or_default();
        let message = plain_types(&one_line(err.message()));
        match err.span().and_then(|s| key_at(&table, &s)) {
            Some(key) => {
                sink.key(place, &key, format!("{message}{at}"));
                table.remove(key.as_str());
                broken.insert(key);
            }
            // Cannot pin it on a key: report it and give up on this section.
            None => {
                sink.at(place, format!("{message}{at}"));
                return unreadable();
            }
        }
    }
}

/// A section that could not be read: every key counts as already reported.
fn unreadable<T: DeserializeOwned + Default>() -> Section<T> {
    let broken = field_names::<T>().iter().map(|f| f.to_string()).collect();
    Section {
        value: T::default(),
        broken,
    }
}

/// Reports and removes keys `T` does not know, so each is named with a suggestion.
fn drop_unknown_keys<T: DeserializeOwned>(
    table: &mut DeTable<'_>,
    text: &str,
    place: Where<'_>,
    sink: &mut Sink,
) {
    let known = field_names::<T>();
    let mut unknown: Vec<(String, usize)> = table
        .keys()
        .filter(|k| !known.contains(&k.get_ref().as_ref()))
        .map(|k| (k.get_ref().to_string(), k.span().start))
        .collect();
    unknown.sort_by_key(|(_, offset)| *offset);
    for (name, offset) in unknown {
        let at = location(text, offset);
        sink.at(
            place,
            format!("unknown key `{name}` ({at}); {}", hint(&name, known)),
        );
        table.remove(name.as_str());
    }
}

/// The key of `table` a problem at `span` belongs to.
fn key_at(table: &DeTable<'_>, span: &Range<usize>) -> Option<String> {
    let covers = |r: Range<usize>| r.start <= span.start && span.start < r.end.max(r.start + 1);
    let direct = table
        .iter()
        .find(|(k, v)| covers(k.span()) || covers(v.span()));
    // A `[tools.x.http]` or `[[tools.x.fallback]]` table's span is only its header;
    // its body follows, so take the nearest such header before the problem.
    let nested = || {
        table
            .iter()
            .filter(|(_, v)| matches!(v.get_ref(), DeValue::Table(_) | DeValue::Array(_)))
            .filter(|(_, v)| v.span().start <= span.start)
            .max_by_key(|(_, v)| v.span().start)
    };
    direct.or_else(nested).map(|(k, _)| k.get_ref().to_string())
}

/// "did you mean" for a near miss, else the full list of keys.
pub(crate) fn hint(name: &str, known: &[&str]) -> String {
    let close = known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min();
    match close {
        Some((_, k)) => format!("did you mean `{k}`?"),
        None => format!("expected one of: {}", known.join(", ")),
    }
}

/// Levenshtein distance, for typo suggestions on a handful of short keys.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `line L, column C` (both from 1, columns in characters) for a byte offset.
pub fn location(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    format!("line {line}, column {column}")
}

/// Serde speaks of Rust ("expected i64", "field"); users wrote TOML.
fn plain_types(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("unknown field", "unknown key")
}

/// Error texts from libraries may span lines; ours are one line each.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The field names a derived `Deserialize` struct accepts.
///
/// Serde hands them to `deserialize_struct`; a deserializer that only records them
/// keeps the unknown-key check in step with the struct without a second list.
pub fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The probe always fails once it has the names; the error carries nothing.
    let _ = T::deserialize(FieldProbe(&mut fields));
    fields
}

struct FieldProbe<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldProbe<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("field probe"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("field probe"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHooks {
    pub before_tool: Option<Vec<RawHook>>,
    pub after_tool: Option<Vec<RawHook>>,
    pub before_model: Option<Vec<RawHook>>,
    pub run_end: Option<Vec<RawHook>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    pub command: Vec<String>,
    pub tools: Option<Vec<String>>,
    pub timeout: Option<String>,
    pub on_error: Option<String>,
    /// The hook only decides (reads its input, writes nothing): run it again when its
    /// decision was lost in a crash.
    pub idempotent: Option<bool>,
    pub env: Option<Vec<String>>,
    pub set: Option<BTreeMap<String, String>>,
    pub inherit: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_come_from_the_struct() {
        assert_eq!(
            field_names::<RawDefaults>(),
            [
                "timeout",
                "attempts",
                "backoff",
                "max_backoff",
                "max_retry_after",
                "env",
                "inherit",
                "sandbox",
                "writable",
                "network",
            ]
        );
        assert_eq!(field_names::<RawHttp>(), ["method", "url", "headers"]);
    }

    #[test]
    fn locations_count_lines_and_characters_from_one() {
        let text = "ab\nµx\n";
        assert_eq!(location(text, 0), "line 1, column 1");
        assert_eq!(location(text, 5), "line 2, column 2");
        assert_eq!(location(text, 99), "line 3, column 1");
    }

    #[test]
    fn hints_suggest_near_misses_only() {
        assert_eq!(
            hint("timout", &["timeout", "attempts"]),
            "did you mean `timeout`?"
        );
        assert_eq!(
            hint("zzz", &["timeout", "attempts"]),
            "expected one of: timeout, attempts"
        );
    }
}
