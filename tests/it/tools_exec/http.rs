//! HTTP tools against wiremock: status mapping, Retry-After, timeouts, URL encoding,
//! header variables and request bodies.

use super::support::{Harness, http_tool, set_test_env};
use agentrun::config::types::{ToolDef, ToolKind};
use agentrun::tools::outcome::{ErrorKind, ToolError};
use serde_json::json;
use std::time::{Duration, SystemTime};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn server_answering(status: u16, response: ResponseTemplate, times: u64) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .respond_with(response.set_body_string(format!("status {status}")))
        .expect(times)
        .mount(&server)
        .await;
    server
}

fn search_tool(server: &MockServer) -> ToolDef {
    http_tool(
        "search_kb",
        "GET",
        &format!("{}/search?q={{q}}", server.uri()),
    )
}

#[tokio::test]
async fn a_429_carries_retry_after_in_seconds() {
    let server = server_answering(
        429,
        ResponseTemplate::new(429).insert_header("Retry-After", "7"),
        1,
    )
    .await;
    let err = Harness::new()
        .attempt(&search_tool(&server), json!({"q": "x"}))
        .await
        .unwrap_err();
    let mut want = ToolError::new(
        ErrorKind::RateLimited,
        "search_kb: HTTP 429 Too Many Requests: status 429",
    )
    .not_acted();
    want.retry_after = Some(Duration::from_secs(7));
    assert_eq!(err, want);
}

#[tokio::test]
async fn a_429_carries_retry_after_as_an_http_date() {
    let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
    let server = server_answering(
        429,
        ResponseTemplate::new(429).insert_header("Retry-After", at.as_str()),
        1,
    )
    .await;
    let err = Harness::new()
        .attempt(&search_tool(&server), json!({"q": "x"}))
        .await
        .unwrap_err();
    let secs = err.retry_after.expect("retry_after").as_secs();
    assert!((55..=60).contains(&secs), "{secs}");
}

#[tokio::test]
async fn retry_after_is_honoured_over_the_computed_backoff() {
    let server = server_answering(
        429,
        ResponseTemplate::new(429).insert_header("Retry-After", "1"),
        3,
    )
    .await;
    let h = Harness::new();
    let mut def = search_tool(&server);
    def.retry.max_backoff = Duration::from_secs(30);
    let (result, attempts) = h.with_retry(&def, json!({"q": "x"})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::RateLimited, 3)
    );
    assert_eq!(h.sleeps_ms(), vec![1000, 1000]);
}

#[tokio::test]
async fn retry_after_above_max_retry_after_is_not_waited_for() {
    // Issue 12 item 10: it used to be cut to max_backoff and retried.
    let server = server_answering(
        429,
        ResponseTemplate::new(429).insert_header("Retry-After", "3600"),
        1,
    )
    .await;
    let h = Harness::new();
    let (result, attempts) = h.with_retry(&search_tool(&server), json!({"q": "x"})).await;
    let err = result.unwrap_err();
    assert_eq!(
        (err.kind, err.retry_after, attempts),
        (ErrorKind::RateLimited, Some(Duration::from_secs(3600)), 1)
    );
    assert_eq!(h.sleeps_ms(), Vec::<u128>::new());
}

#[tokio::test]
async fn a_503_is_retried_as_unavailable() {
    let server = server_answering(503, ResponseTemplate::new(503), 3).await;
    let h = Harness::new();
    let (result, attempts) = h.with_retry(&search_tool(&server), json!({"q": "x"})).await;
    let want = ToolError::new(
        ErrorKind::Unavailable,
        "search_kb: HTTP 503 Service Unavailable: status 503",
    )
    .not_acted();
    assert_eq!((result, attempts), (Err(want), 3));
}

#[tokio::test]
async fn a_403_is_tried_once_as_permission_denied() {
    let server = server_answering(403, ResponseTemplate::new(403), 1).await;
    let h = Harness::new();
    let (result, attempts) = h.with_retry(&search_tool(&server), json!({"q": "x"})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::PermissionDenied, 1)
    );
    assert_eq!(h.sleeps_ms(), Vec::<u128>::new());
}

#[tokio::test]
async fn a_404_is_tried_once_as_not_found() {
    let server = server_answering(404, ResponseTemplate::new(404), 1).await;
    let h = Harness::new();
    let (result, attempts) = h.with_retry(&search_tool(&server), json!({"q": "x"})).await;
    assert_eq!(
        (result.unwrap_err().kind, attempts),
        (ErrorKind::NotFound, 1)
    );
}

#[tokio::test]
async fn a_slow_response_hits_the_timeout() {
    let slow = ResponseTemplate::new(200).set_delay(Duration::from_secs(3));
    let server = server_answering(200, slow, 1).await;
    let mut def = search_tool(&server);
    def.retry.timeout = Duration::from_millis(200);
    let err = Harness::new()
        .attempt(&def, json!({"q": "x"}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::new(ErrorKind::Timeout, "search_kb exceeded 200ms")
    );
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let def = http_tool("search_kb", "GET", "http://127.0.0.1:1/search?q={q}");
    let err = Harness::new()
        .attempt(&def, json!({"q": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{}", err.message);
}

#[tokio::test]
async fn placeholders_are_percent_encoded_inside_path_and_query() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/kb/a%2Fb%3Fc%23d/items"))
        .and(query_param("q", "x y/z?w#v&k=1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"hits": 1})))
        .expect(1)
        .mount(&server)
        .await;
    let def = http_tool(
        "kb",
        "GET",
        &format!("{}/kb/{{id}}/items?q={{q}}", server.uri()),
    );
    let args = json!({"id": "a/b?c#d", "q": "x y/z?w#v&k=1"});
    assert_eq!(
        Harness::new().attempt(&def, args).await,
        Ok(json!({"hits": 1}))
    );
    let requests = server.received_requests().await.expect("recording");
    assert_eq!(
        requests[0].url.query_pairs().count(),
        1,
        "{}",
        requests[0].url
    );
}

#[tokio::test]
async fn header_variables_are_read_from_the_environment() {
    set_test_env();
    let server = MockServer::start().await;
    Mock::given(header("authorization", "Bearer s3cret"))
        .respond_with(ResponseTemplate::new(200).set_body_string("plain text"))
        .expect(1)
        .mount(&server)
        .await;
    let mut def = search_tool(&server);
    let mut missing = def.clone();
    set_header(&mut def, "Bearer ${AGENTRUN_TEST_KB_TOKEN}");
    assert_eq!(
        Harness::new().attempt(&def, json!({"q": "x"})).await,
        Ok(json!("plain text"))
    );

    set_header(&mut missing, "Bearer ${AGENTRUN_TEST_UNSET_TOKEN}");
    let err = Harness::new()
        .attempt(&missing, json!({"q": "x"}))
        .await
        .unwrap_err();
    let msg = "search_kb: header `Authorization` needs the environment variable `AGENTRUN_TEST_UNSET_TOKEN`, which is not set";
    assert_eq!(err, ToolError::new(ErrorKind::ToolBug, msg));
}

fn set_header(def: &mut ToolDef, value: &str) {
    if let ToolKind::Http(spec) = &mut def.kind {
        spec.headers
            .insert("Authorization".to_string(), value.to_string());
    }
}

#[tokio::test]
async fn post_sends_the_arguments_as_json_and_get_sends_no_body() {
    let server = MockServer::start().await;
    let args = json!({"id": "ORD-1", "note": "refund"});
    Mock::given(method("POST"))
        .and(path("/orders"))
        .and(body_json(&args))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"created": true})))
        .expect(1)
        .mount(&server)
        .await;
    let def = http_tool("create", "post", &format!("{}/orders", server.uri()));
    assert_eq!(
        Harness::new().attempt(&def, args.clone()).await,
        Ok(json!({"created": true}))
    );

    let get = http_tool("read", "GET", &format!("{}/orders", server.uri()));
    let _ = Harness::new().attempt(&get, args).await;
    let requests = server.received_requests().await.expect("recording");
    assert!(requests[1].body.is_empty(), "GET sent a body");
}

#[tokio::test]
async fn a_large_body_is_cut_at_the_cap() {
    let server = server_answering(200, ResponseTemplate::new(200), 1).await;
    let mut def = search_tool(&server);
    if let ToolKind::Http(spec) = &mut def.kind {
        spec.output_cap = 4;
    }
    let got = Harness::new().attempt(&def, json!({"q": "x"})).await;
    assert_eq!(got, Ok(json!("stat\n[output cut at 4 bytes]")));
}

#[tokio::test]
async fn a_missing_url_argument_is_invalid_arguments_and_sends_nothing() {
    let server = server_answering(200, ResponseTemplate::new(200), 0).await;
    let err = Harness::new()
        .attempt(&search_tool(&server), json!({}))
        .await
        .unwrap_err();
    let want = ToolError::new(
        ErrorKind::InvalidArguments,
        "search_kb: missing argument `q` for the url",
    );
    assert_eq!(err, want);
}
