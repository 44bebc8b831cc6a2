//! Unit tests for URL templates, header expansion and status mapping.

use super::*;
use serde_json::json;

#[test]
fn a_template_with_a_placeholder_in_the_host_is_refused_at_call_time() {
    let err = fill_url("http://{host}/x", &json!({"host": "evil.example"})).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolBug);
}

#[test]
fn values_are_encoded_and_stay_in_their_component() {
    let url = fill_url(
        "http://h:1/kb/{id}?q={q}",
        &json!({"id": "a/b?c#d", "q": "x y&z=1#f"}),
    )
    .unwrap();
    assert_eq!(
        url.as_str(),
        "http://h:1/kb/a%2Fb%3Fc%23d?q=x%20y%26z%3D1%23f"
    );
    assert_eq!(url.host_str(), Some("h"));
}

#[test]
fn dot_segments_are_refused() {
    let err = fill_url("http://h/kb/{id}/x", &json!({"id": ".."})).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArguments);
    assert!(fill_url("http://h/kb/v{id}", &json!({"id": ".."})).is_ok());
}

#[test]
fn two_placeholders_forming_a_dot_segment_are_refused() {
    // Issue 12 item 9: `{a}{b}` with `.` and `.` is `..` after substitution.
    let err = fill_url("http://h/kb/{a}{b}/x", &json!({"a": ".", "b": "."})).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArguments);
    assert!(fill_url("http://h/kb/{a}{b}?q=..", &json!({"a": "v", "b": "."})).is_ok());
}

#[test]
fn a_missing_argument_is_invalid_arguments() {
    let err = fill_url("http://h/s?q={q}", &json!({})).unwrap_err();
    assert_eq!(
        err,
        ToolError::new(
            ErrorKind::InvalidArguments,
            "missing argument `q` for the url"
        )
    );
    let err = fill_url("http://h/s?q={q}", &json!({"q": [1]})).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArguments);
}

#[test]
fn numbers_fill_as_text() {
    let url = fill_url("http://h/o/{n}", &json!({"n": 42})).unwrap();
    assert_eq!(url.path(), "/o/42");
}

#[test]
fn header_variables_come_from_env_and_errors_name_only_the_variable() {
    let t = BTreeMap::from([(
        "Authorization".to_string(),
        "Bearer ${KB_TOKEN}".to_string(),
    )]);
    let h = expand_headers(&t, |v| (v == "KB_TOKEN").then(|| "s3cret".to_string())).unwrap();
    assert_eq!(h["authorization"], "Bearer s3cret");
    assert!(h["authorization"].is_sensitive());
    let err = expand_headers(&t, |_| None).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolBug);
    assert_eq!(
        err.message,
        "header `Authorization` needs the environment variable `KB_TOKEN`, which is not set"
    );
}

#[test]
fn statuses_map_to_kinds() {
    use ErrorKind::*;
    let kind = |s: u16| status_kind(StatusCode::from_u16(s).unwrap());
    let got: Vec<_> = [
        200, 204, 408, 429, 500, 502, 503, 504, 400, 422, 401, 403, 404, 409, 418, 501,
    ]
    .map(kind)
    .to_vec();
    let want = [
        None,
        None,
        Some(Timeout),
        Some(RateLimited),
        Some(ServerError),
        Some(Unavailable),
        Some(Unavailable),
        Some(Unavailable),
        Some(InvalidArguments),
        Some(InvalidArguments),
        Some(PermissionDenied),
        Some(PermissionDenied),
        Some(NotFound),
        Some(Conflict),
        Some(ToolBug),
        Some(ToolBug),
    ];
    assert_eq!(got, want);
}
