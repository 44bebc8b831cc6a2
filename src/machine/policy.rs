//! The loop's recovery policies as pure functions over [`LoopState`]: the circuit
//! breaker, tool withdrawal, stuck detection and approval rules. No IO, so every rule
//! is tested directly.

use crate::config::{Approval, Policy, REGEX_PREFIX, ToolDef, normalise_text, pattern_regex};
use crate::machine::state::LoopState;
use crate::tools::outcome::{ErrorClass, ErrorKind};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// JSON with object keys sorted at every level, so `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` are the same call.
pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::with_capacity(64);
    write_canonical(&mut out, v);
    // Only serde_json's output and ASCII punctuation went in.
    String::from_utf8(out).expect("canonical JSON is UTF-8")
}

/// [`canonical_json`] into one buffer (issue 14: it was a `String` per field and
/// per level; a few digests are taken per call). Keys and scalars are written by
/// serde_json, exactly as `Value`'s `Display` writes them.
fn write_canonical(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            // serde_json's map is a BTreeMap (sorted) unless `preserve_order` is on.
            if !keys.is_sorted() {
                keys.sort();
            }
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, k);
                out.push(b':');
                write_canonical(out, &map[k]);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        other => write_json(out, other),
    }
}

/// A key or a scalar, as serde_json writes it (into a `Vec`, which cannot fail).
fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(out, v).expect("a JSON key or scalar serialises");
}

/// SHA-256 of the canonical JSON of a call's arguments, hex.
pub fn args_digest(args: &Value) -> String {
    let mut canonical = Vec::with_capacity(64);
    write_canonical(&mut canonical, args);
    let hash = Sha256::digest(&canonical);
    // One allocation, not a `format!` per byte (issue 14: a few digests per call).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(hash.len() * 2);
    for b in hash.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

/// The breaker's key for a call: tool + args digest.
pub fn call_key(tool: &str, args: &Value) -> String {
    format!("{tool}#{}", args_digest(args))
}

/// Whether a failure counts against a tool (breaker, withdrawal). Malformed calls made
/// no call and guard results are our own decisions: neither says the tool is failing.
pub fn counts_as_tool_failure(kind: ErrorKind) -> bool {
    matches!(kind.class(), ErrorClass::Transient | ErrorClass::Permanent)
        && kind != ErrorKind::OutcomeUnknown
}

/// What a finished call changes in the state.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The circuit for this exact call just opened.
    pub breaker_opened: bool,
    /// The tool was just withdrawn from the model.
    pub withdrawn: bool,
}

/// Records a call's result in the breaker and withdrawal counters.
pub fn record_result(
    state: &mut LoopState,
    policy: &Policy,
    tool: &str,
    args: &Value,
    error: Option<ErrorKind>,
) -> Verdict {
    let mut v = Verdict::default();
    if !error.is_some_and(counts_as_tool_failure) {
        return v;
    };
    let key = call_key(tool, args);
    let n = state.call_failures.entry(key.clone()).or_insert(0);
    *n += 1;
    if *n >= policy.breaker_threshold && state.open_circuits.insert(key) {
        v.breaker_opened = true;
    }
    let t = state.tool_failures.entry(tool.to_string()).or_insert(0);
    *t += 1;
    if *t >= policy.disable_after && state.disabled.insert(tool.to_string()) {
        v.withdrawn = true;
    }
    v
}

pub fn circuit_open(state: &LoopState, tool: &str, args: &Value) -> bool {
    // No digest while no circuit is open (issue 14: the gate of every call).
    !state.open_circuits.is_empty() && state.open_circuits.contains(&call_key(tool, args))
}

/// Whether a call needs a recorded human approval before it runs.
pub fn needs_approval(def: &ToolDef, args: &Value, policy: &Policy) -> bool {
    match def.approval {
        Approval::Always => true,
        Approval::Never => false,
        Approval::Auto => matches_approval_pattern(args, &policy.approval_patterns),
    }
}

/// Whether any pattern matches the call's arguments: each string value (keys too) and
/// the whole serialised JSON, all normalised ([`normalise_text`]), so neither case nor
/// whitespace runs nor JSON escapes (`\t`) hide a match; plain patterns are also
/// matched word by word against the readings of [`super::approval`] (`rm -fr`,
/// `DROP/**/TABLE`), and regular expressions see those readings too. A safety net, not
/// a guarantee (the limits are in that module's doc).
pub fn matches_approval_pattern(args: &Value, patterns: &[String]) -> bool {
    if patterns.is_empty() {
        return false;
    }
    let mut texts = vec![normalise_text(&args.to_string())];
    collect_strings(args, &mut texts);
    let raw = super::approval::texts(args);
    if patterns.iter().any(|p| match p.strip_prefix(REGEX_PREFIX) {
        // Validated at load; an invalid one (unreachable) errs on the side of asking.
        Some(re) => pattern_regex(re).map_or(true, |re| texts.iter().any(|t| re.is_match(t))),
        None => {
            texts.iter().any(|t| t.contains(p.as_str()))
                || raw.iter().any(|t| super::approval::matches_words(p, t))
        }
    }) {
        return true;
    }
    let readings: Vec<String> = raw
        .iter()
        .flat_map(|t| super::approval::readings(t))
        .map(|r| normalise_text(&r))
        .collect();
    patterns
        .iter()
        .filter_map(|p| p.strip_prefix(REGEX_PREFIX))
        .filter_map(|re| pattern_regex(re).ok())
        .any(|re| readings.iter().any(|t| re.is_match(t)))
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(normalise_text(s)),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => {
            for (k, i) in map {
                out.push(normalise_text(k));
                collect_strings(i, out);
            }
        }
        _ => {}
    }
}

/// Which loop pattern the stuck detector saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    RepeatedCall(String),
    RepeatedError(String),
    Oscillation(String, String),
}

impl Stuck {
    pub fn describe(&self) -> String {
        match self {
            Stuck::RepeatedCall(c) => format!("the same call repeated: {}", short(c)),
            Stuck::RepeatedError(e) => format!("the same error repeated: {e}"),
            Stuck::Oscillation(a, b) => {
                format!(
                    "alternating between two calls: {} and {}",
                    short(a),
                    short(b)
                )
            }
        }
    }
}

fn short(sig: &str) -> &str {
    sig.split('#').next().unwrap_or(sig)
}

/// How many recent signatures to remember (enough for A-B-A-B-A-B).
const HISTORY: usize = 6;

/// Notes a call (and its error, if any) and says whether the loop looks stuck.
pub fn observe_call(
    state: &mut LoopState,
    repeats: u32,
    tool: &str,
    args: &Value,
    error: Option<(ErrorKind, &str)>,
) -> Option<Stuck> {
    push(&mut state.recent_calls, call_key(tool, args));
    match error {
        Some((kind, message)) => push(
            &mut state.recent_errors,
            format!("{tool}: {} ({message})", kind.as_str()),
        ),
        // A success breaks a run of identical errors.
        None => state.recent_errors.clear(),
    }
    detect(state, repeats.max(2) as usize)
}

fn push(list: &mut Vec<String>, item: String) {
    list.push(item);
    if list.len() > HISTORY {
        list.remove(0);
    }
}

fn detect(state: &LoopState, n: usize) -> Option<Stuck> {
    let calls = &state.recent_calls;
    if let Some(last) = same_tail(calls, n) {
        return Some(Stuck::RepeatedCall(last));
    }
    if let Some(last) = same_tail(&state.recent_errors, n) {
        return Some(Stuck::RepeatedError(last));
    }
    if calls.len() >= HISTORY {
        let tail = &calls[calls.len() - HISTORY..];
        let (a, b) = (&tail[0], &tail[1]);
        if a != b
            && tail
                .iter()
                .enumerate()
                .all(|(i, c)| c == if i % 2 == 0 { a } else { b })
        {
            return Some(Stuck::Oscillation(a.clone(), b.clone()));
        }
    }
    None
}

fn same_tail(list: &[String], n: usize) -> Option<String> {
    if list.len() < n {
        return None;
    }
    let tail = &list[list.len() - n..];
    tail.iter().all(|x| x == &tail[0]).then(|| tail[0].clone())
}

/// Forget the history after a nudge, so the model gets a fair chance to change course.
pub fn reset_stuck_history(state: &mut LoopState) {
    state.recent_calls.clear();
    state.recent_errors.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digests_ignore_key_order_at_every_level() {
        let a = json!({"a": 1, "b": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
        let b = json!({"b": {"x": "s", "y": [1, {"p": 3, "q": 2}]}, "a": 1});
        assert_eq!(args_digest(&a), args_digest(&b));
        assert_ne!(args_digest(&a), args_digest(&json!({"a": 2})));
        assert_eq!(canonical_json(&json!({"b": 2, "a": 1})), r#"{"a":1,"b":2}"#);
    }

    /// The one-buffer writer gives the same text (so the same digests, stored in
    /// states and approvals) as the string-per-field version it replaced.
    #[test]
    fn canonical_json_is_the_text_it_always_was() {
        fn before(v: &Value) -> String {
            match v {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    let fields: Vec<String> = keys
                        .iter()
                        .map(|k| format!("{}:{}", Value::String((*k).clone()), before(&map[*k])))
                        .collect();
                    format!("{{{}}}", fields.join(","))
                }
                Value::Array(items) => {
                    let items: Vec<String> = items.iter().map(before).collect();
                    format!("[{}]", items.join(","))
                }
                other => other.to_string(),
            }
        }
        let cases = [
            json!({}),
            json!([]),
            json!(null),
            json!({"z": [1, 2.5, -3, {"y": null, "x": true}], "a\"\n\u{1}é": "q\"\\/\t☃", "": {}}),
            json!([{"b": {"d": [], "c": 1e300}, "a": "x"}, "s", false, 18446744073709551615u64]),
        ];
        for v in cases {
            assert_eq!(canonical_json(&v), before(&v), "{v}");
        }
    }

    fn policy() -> Policy {
        Policy::default()
    }

    #[test]
    fn the_breaker_opens_on_the_third_identical_failure_only() {
        let mut s = LoopState::default();
        let args = json!({"q": "x"});
        let fail = Some(ErrorKind::Unavailable);
        assert!(!record_result(&mut s, &policy(), "kb", &args, fail).breaker_opened);
        record_result(&mut s, &policy(), "kb", &json!({"q": "other"}), fail);
        assert!(!record_result(&mut s, &policy(), "kb", &args, fail).breaker_opened);
        assert!(!circuit_open(&s, "kb", &args));
        assert!(record_result(&mut s, &policy(), "kb", &json!({"q": "x"}), fail).breaker_opened);
        assert!(circuit_open(&s, "kb", &args));
        assert!(!circuit_open(&s, "kb", &json!({"q": "other"})));
    }

    #[test]
    fn malformed_and_guard_results_do_not_count_against_a_tool() {
        let mut s = LoopState::default();
        for kind in [
            ErrorKind::SchemaViolation,
            ErrorKind::CircuitOpen,
            ErrorKind::ApprovalDenied,
        ] {
            for _ in 0..5 {
                record_result(&mut s, &policy(), "kb", &json!({}), Some(kind));
            }
        }
        assert!(s.open_circuits.is_empty() && s.disabled.is_empty());
    }

    #[test]
    fn a_tool_is_withdrawn_after_disable_after_failures_with_any_args() {
        let mut s = LoopState::default();
        for i in 0..2 {
            let v = record_result(
                &mut s,
                &policy(),
                "kb",
                &json!({"i": i}),
                Some(ErrorKind::Timeout),
            );
            assert!(!v.withdrawn);
        }
        assert!(
            record_result(
                &mut s,
                &policy(),
                "kb",
                &json!({"i": 9}),
                Some(ErrorKind::NotFound)
            )
            .withdrawn
        );
    }

    #[test]
    fn detects_each_stuck_pattern() {
        let mut s = LoopState::default();
        let a = json!({"q": "a"});
        assert_eq!(observe_call(&mut s, 3, "t", &a, None), None);
        assert_eq!(observe_call(&mut s, 3, "t", &a, None), None);
        assert!(matches!(
            observe_call(&mut s, 3, "t", &a, None),
            Some(Stuck::RepeatedCall(_))
        ));

        let mut s = LoopState::default();
        for i in 0..2 {
            let r = observe_call(
                &mut s,
                3,
                "t",
                &json!({"i": i}),
                Some((ErrorKind::NotFound, "none")),
            );
            assert_eq!(r, None);
        }
        let r = observe_call(
            &mut s,
            3,
            "t",
            &json!({"i": 5}),
            Some((ErrorKind::NotFound, "none")),
        );
        assert_eq!(r, Some(Stuck::RepeatedError("t: not_found (none)".into())));

        let mut s = LoopState::default();
        let b = json!({"q": "b"});
        for i in 0..5 {
            let args = if i % 2 == 0 { &a } else { &b };
            assert_eq!(observe_call(&mut s, 3, "t", args, None), None, "call {i}");
        }
        assert!(matches!(
            observe_call(&mut s, 3, "t", &b, None),
            Some(Stuck::Oscillation(_, _))
        ));
    }

    #[test]
    fn a_success_breaks_a_run_of_errors() {
        let mut s = LoopState::default();
        observe_call(
            &mut s,
            3,
            "t",
            &json!({"i": 1}),
            Some((ErrorKind::NotFound, "x")),
        );
        observe_call(
            &mut s,
            3,
            "t",
            &json!({"i": 2}),
            Some((ErrorKind::NotFound, "x")),
        );
        observe_call(&mut s, 3, "u", &json!({"i": 3}), None);
        assert_eq!(
            observe_call(
                &mut s,
                3,
                "t",
                &json!({"i": 4}),
                Some((ErrorKind::NotFound, "x"))
            ),
            None
        );
    }

    #[test]
    fn approval_patterns_ignore_case_whitespace_runs_and_json_escapes() {
        let pats = vec!["drop table".to_string()];
        for arg in ["DROP  TABLE users", "drop\ttable users", "Drop\n Table x"] {
            assert!(
                matches_approval_pattern(&serde_json::json!({"sql": arg}), &pats),
                "{arg:?}"
            );
        }
        assert!(!matches_approval_pattern(
            &serde_json::json!({"sql": "select * from droptable"}),
            &pats
        ));
    }

    /// Issue 22: the plain patterns `rm -rf` and `drop table` missed these.
    #[test]
    fn plain_approval_patterns_see_rearranged_flags_and_sql_comments() {
        let pats = vec!["rm -rf".to_string(), "drop table".to_string()];
        for arg in [
            json!({"cmd": "rm -fr /srv"}),
            json!({"cmd": ["rm", "-r", "-f", "/srv"]}),
            json!({"sql": "DROP/**/TABLE users"}),
            json!({"cmd": "'rm' -rf /"}),
        ] {
            assert!(matches_approval_pattern(&arg, &pats), "{arg}");
        }
        assert!(!matches_approval_pattern(&json!({"cmd": "rm -r x"}), &pats));
    }

    #[test]
    fn approval_regex_patterns_match_rearranged_flags() {
        let pats = vec![r"re:rm\s+-(r\s*-?f|f\s*-?r)".to_string()];
        for cmd in ["rm -r -f /", "RM -fr /", "rm  -rf /", "rm\t-f -r x"] {
            assert!(
                matches_approval_pattern(&serde_json::json!({"cmd": [cmd]}), &pats),
                "{cmd:?}"
            );
        }
        assert!(!matches_approval_pattern(
            &serde_json::json!({"cmd": "rm -i x"}),
            &pats
        ));
    }
}
