//! Broker tests against a local HTTPS server with its own CA (test port allowed, loopback-only filter).

mod common;

use sbx_connect::broker::{
    BrokerSession, FetchErrorCode, FetchReply, FetchRequest, HttpAnswer, TokenStore,
};
use sbx_connect::credentials::Credentials;
use sbx_connect::egress::BrokerConfig;
use sbx_connect::model::AuthDefinition;
use sbx_connect::oauth;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Default)]
struct Tokens {
    saved: Mutex<Vec<Credentials>>,
    reauth: Mutex<u32>,
}

impl TokenStore for Tokens {
    fn save(&self, c: &Credentials) -> Result<(), String> {
        self.saved
            .lock()
            .map_err(|e| e.to_string())?
            .push(c.clone());
        Ok(())
    }
    fn reauthorization_required(&self) -> Result<(), String> {
        *self.reauth.lock().map_err(|e| e.to_string())? += 1;
        Ok(())
    }
}

fn config(server: &common::TestServer) -> BrokerConfig {
    let mut c = BrokerConfig::new(Arc::new(|ip: IpAddr| ip.is_loopback()));
    c.allowed_port = server.port;
    c.add_roots_pem(server.ca_pem.as_bytes()).expect("ca");
    c.max_response_bytes = 4096;
    c
}

fn session(
    server: &common::TestServer,
    auth: AuthDefinition,
    creds: Credentials,
) -> (BrokerSession, Arc<Tokens>) {
    let tokens = Arc::new(Tokens::default());
    let s = BrokerSession::new(
        config(server),
        &server.origin(),
        auth,
        creds,
        tokens.clone(),
    )
    .expect("session");
    (s, tokens)
}

fn get(url: &str, headers: &[(&str, &str)]) -> FetchRequest {
    FetchRequest {
        method: "GET".into(),
        url: url.into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        body: None,
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn answer(r: FetchReply) -> HttpAnswer {
    match r {
        FetchReply::Response(a) => a,
        FetchReply::Error { code, .. } => panic!("expected an HTTP answer, got {code:?}"),
    }
}

fn echoed_headers(a: &HttpAnswer) -> BTreeMap<String, String> {
    let v: Value = serde_json::from_slice(&a.body).expect("echo json");
    serde_json::from_value(v["headers"].clone()).expect("headers")
}

/// The headers the server got with the last request (the echo the package sees is redacted).
fn sent_headers(server: &common::TestServer) -> BTreeMap<String, String> {
    server.seen().last().expect("a request").headers.clone()
}

const SMUGGLED: &[(&str, &str)] = &[
    ("Authorization", "Bearer package-made"),
    ("Cookie", "sid=1"),
    ("X-Api-Key", "package-key"),
    ("X-Trace", "t-1"),
];

#[tokio::test]
async fn api_key_header_injected_and_package_credentials_stripped() {
    let server = common::start().await;
    let auth = AuthDefinition::ApiKey {
        header: Some("X-Api-Key".into()),
        query: None,
    };
    let (s, _) = session(
        &server,
        auth,
        Credentials::ApiKey {
            key: "k-secret".into(),
        },
    );
    let a = answer(s.fetch(get("/echo?x=1", SMUGGLED), deadline()).await);
    assert_eq!(a.status, 200);
    assert_eq!(
        a.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    // The package sees the echo with the injected key redacted ...
    let echoed = echoed_headers(&a);
    assert_eq!(
        echoed.get("x-api-key").map(String::as_str),
        Some("[redacted]")
    );
    assert!(!String::from_utf8_lossy(&a.body).contains("k-secret"));
    // ... while the server got the key.
    let h = sent_headers(&server);
    assert_eq!(h.get("x-api-key").map(String::as_str), Some("k-secret"));
    assert_eq!(h.get("x-trace").map(String::as_str), Some("t-1"));
    assert!(!h.contains_key("authorization"));
    assert!(!h.contains_key("cookie"));
    assert_eq!(server.paths(), vec!["/echo?x=1"]);
}

#[tokio::test]
async fn api_key_query_replaces_package_param() {
    let server = common::start().await;
    let auth = AuthDefinition::ApiKey {
        header: None,
        query: Some("key".into()),
    };
    let (s, _) = session(
        &server,
        auth,
        Credentials::ApiKey {
            key: "k-secret".into(),
        },
    );
    let url = format!("{}/echo?key=evil&x=1", server.origin());
    answer(s.fetch(get(&url, &[]), deadline()).await);
    assert_eq!(server.paths(), vec!["/echo?x=1&key=k-secret"]);
}

#[tokio::test]
async fn bearer_and_basic_injected() {
    let server = common::start().await;
    let (s, _) = session(
        &server,
        AuthDefinition::Bearer,
        Credentials::Bearer {
            token: "tok".into(),
        },
    );
    let a = answer(s.fetch(get("/echo", SMUGGLED), deadline()).await);
    assert_eq!(
        echoed_headers(&a).get("authorization").map(String::as_str),
        Some("[redacted]")
    );
    let h = sent_headers(&server);
    assert_eq!(
        h.get("authorization").map(String::as_str),
        Some("Bearer tok")
    );
    assert!(!h.contains_key("cookie"));
    assert!(!h.contains_key("x-api-key"));
    let (s, _) = session(
        &server,
        AuthDefinition::Basic,
        Credentials::Basic {
            username: "u".into(),
            password: "p".into(),
        },
    );
    let a = answer(s.fetch(get("/echo", SMUGGLED), deadline()).await);
    assert_eq!(
        echoed_headers(&a).get("authorization").map(String::as_str),
        Some("[redacted]")
    );
    let h = sent_headers(&server);
    assert_eq!(
        h.get("authorization").map(String::as_str),
        Some("Basic dTpw")
    );
}

#[tokio::test]
async fn redirects_are_returned_not_followed() {
    let server = common::start().await;
    let (s, _) = session(
        &server,
        AuthDefinition::Bearer,
        Credentials::Bearer {
            token: "tok".into(),
        },
    );
    let a = answer(s.fetch(get("/redirect", &[]), deadline()).await);
    assert_eq!(a.status, 302);
    assert_eq!(
        a.headers.get("location").map(String::as_str),
        Some("https://elsewhere.example/steal")
    );
    assert_eq!(server.paths(), vec!["/redirect"]);
    // Following it by hand goes to another origin: refused, so it never gets the credentials.
    let r = s
        .fetch(get("https://elsewhere.example/steal", &[]), deadline())
        .await;
    assert_eq!(
        r,
        FetchReply::Error {
            code: FetchErrorCode::Denied,
            retryable: false
        }
    );
}

#[tokio::test]
async fn other_origins_plain_http_ports_and_filtered_addresses_are_denied() {
    let server = common::start().await;
    let (s, _) = session(
        &server,
        AuthDefinition::Bearer,
        Credentials::Bearer {
            token: "tok".into(),
        },
    );
    let denied = FetchReply::Error {
        code: FetchErrorCode::Denied,
        retryable: false,
    };
    for url in [
        "https://example.com/echo".to_string(),
        format!("http://localhost:{}/echo", server.port),
        format!("https://127.0.0.1:{}/echo", server.port),
        "//example.com/echo".to_string(),
        "ftp://localhost/x".to_string(),
        "echo".to_string(),
    ] {
        assert_eq!(s.fetch(get(&url, &[]), deadline()).await, denied, "{url}");
    }
    // The origin itself on a port that is not allowed.
    let mut c = config(&server);
    c.allowed_port = 443;
    let s = BrokerSession::new(
        c,
        &server.origin(),
        AuthDefinition::Bearer,
        Credentials::Bearer { token: "t".into() },
        Arc::new(Tokens::default()),
    )
    .expect("session");
    assert_eq!(s.fetch(get("/echo", &[]), deadline()).await, denied);
    // An address filter that refuses loopback ("public addresses only").
    let mut c = config(&server);
    c.address_filter = Arc::new(|ip: IpAddr| !ip.is_loopback());
    let s = BrokerSession::new(
        c,
        &server.origin(),
        AuthDefinition::Bearer,
        Credentials::Bearer { token: "t".into() },
        Arc::new(Tokens::default()),
    )
    .expect("session");
    assert_eq!(s.fetch(get("/echo", &[]), deadline()).await, denied);
    assert!(
        server.paths().is_empty(),
        "nothing reached the server: {:?}",
        server.paths()
    );
}

#[tokio::test]
async fn response_size_is_bounded() {
    let server = common::start().await;
    let (s, _) = session(
        &server,
        AuthDefinition::Bearer,
        Credentials::Bearer {
            token: "tok".into(),
        },
    );
    let r = s.fetch(get("/big", &[]), deadline()).await;
    assert_eq!(
        r,
        FetchReply::Error {
            code: FetchErrorCode::TooLarge,
            retryable: false
        }
    );
}

fn oauth_auth(server: &common::TestServer) -> AuthDefinition {
    AuthDefinition::Oauth2 {
        authorize_url: format!("{}/authorize", server.origin()),
        token_url: format!("{}/token", server.origin()),
        scopes: vec!["read".into()],
        pkce: true,
    }
}

fn oauth_creds(access: &str, refresh: &str, expires_at: Option<i64>) -> Credentials {
    Credentials::Oauth2 {
        client_id: "cid".into(),
        client_secret: Some("csecret".into()),
        access_token: Some(access.into()),
        refresh_token: Some(refresh.into()),
        expires_at,
    }
}

#[tokio::test]
async fn expired_oauth_token_is_refreshed_and_persisted() {
    let server = common::start().await;
    let past = chrono::Utc::now().timestamp() - 10;
    let (s, tokens) = session(
        &server,
        oauth_auth(&server),
        oauth_creds("old-at", "good-rt", Some(past)),
    );
    let a = answer(s.fetch(get("/protected", &[]), deadline()).await);
    assert_eq!(a.status, 200);
    assert_eq!(server.paths(), vec!["/token", "/protected"]);
    let token_req = &server.seen()[0];
    assert!(token_req.body.contains("grant_type=refresh_token"));
    assert!(token_req.body.contains("client_secret=csecret"));
    let saved = tokens.saved.lock().map(|v| v.clone()).unwrap_or_default();
    match saved.as_slice() {
        [Credentials::Oauth2 {
            access_token,
            refresh_token,
            expires_at,
            ..
        }] => {
            assert_eq!(access_token.as_deref(), Some("new-at"));
            assert_eq!(refresh_token.as_deref(), Some("rt2"));
            assert!(expires_at.is_some_and(|e| e > past));
        }
        other => panic!("expected one save, got {other:?}"),
    }
    // The next request reuses the fresh token.
    answer(s.fetch(get("/protected", &[]), deadline()).await);
    assert_eq!(server.paths().len(), 3);
}

#[tokio::test]
async fn oauth_401_refreshes_once_and_retries() {
    let server = common::start().await;
    let (s, tokens) = session(
        &server,
        oauth_auth(&server),
        oauth_creds("old-at", "good-rt", None),
    );
    let a = answer(s.fetch(get("/protected", &[]), deadline()).await);
    assert_eq!(a.status, 200);
    assert_eq!(server.paths(), vec!["/protected", "/token", "/protected"]);
    assert_eq!(tokens.saved.lock().map(|v| v.len()).unwrap_or(0), 1);
}

#[tokio::test]
async fn rejected_refresh_requires_reauthorization() {
    let server = common::start().await;
    let (s, tokens) = session(
        &server,
        oauth_auth(&server),
        oauth_creds("old-at", "bad-rt", Some(0)),
    );
    let want = FetchReply::Error {
        code: FetchErrorCode::ReauthorizationRequired,
        retryable: false,
    };
    assert_eq!(s.fetch(get("/protected", &[]), deadline()).await, want);
    assert!(s.needs_reauthorization());
    assert_eq!(*tokens.reauth.lock().expect("lock"), 1);
    // Later requests fail at once without calling anyone.
    assert_eq!(s.fetch(get("/protected", &[]), deadline()).await, want);
    assert_eq!(server.paths(), vec!["/token"]);
}

#[tokio::test]
async fn oauth_code_exchange_and_cross_origin_token_endpoint() {
    let server = common::start().await;
    let c = config(&server);
    let token_url = format!("{}/token", server.origin());
    let client = oauth::Client {
        id: "cid",
        secret: None,
    };
    let t = oauth::exchange_code(
        &c,
        &token_url,
        client,
        "c0de",
        "https://sbx/cb",
        Some("verifier"),
    )
    .await
    .expect("exchange");
    assert_eq!(t.access_token, "new-at");
    assert_eq!(t.refresh_token.as_deref(), Some("good-rt"));
    let e =
        oauth::exchange_code(&c, &token_url, client, "wrong", "https://sbx/cb", Some("v")).await;
    assert!(matches!(e, Err(oauth::OauthError::Rejected)));
    // The token endpoint on a denied scheme.
    let e = oauth::refresh(
        &c,
        &format!("http://localhost:{}/token", server.port),
        client,
        "good-rt",
    )
    .await;
    assert!(matches!(e, Err(oauth::OauthError::Egress(_))));
}

struct NoLogs;

impl sbx_connect::job::LogSink for NoLogs {
    fn record(&self, _: sbx_connect::model::LogLevel, _: &str) {}
}

/// Two fetches in flight at once: the first only completes after the second reached the server,
/// so a host that answered fetches one by one would never finish.
#[tokio::test]
async fn job_fetches_are_answered_concurrently() {
    use sbx_connect::job::{drive, JobEnv, JobOutcome, JobSpec};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let server = common::start().await;
    let (s, _) = session(
        &server,
        AuthDefinition::Bearer,
        Credentials::Bearer {
            token: "tok".into(),
        },
    );
    let (host, runner) = tokio::io::duplex(1 << 20);
    let script = tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(runner);
        let mut lines = BufReader::new(r).lines();
        let send = |v: Value| format!("{v}\n").into_bytes();
        w.write_all(&send(serde_json::json!({"t": "hello", "v": 1})))
            .await
            .expect("hello");
        lines.next_line().await.expect("job");
        for (id, path) in [(1, "/wait"), (2, "/release")] {
            let f = serde_json::json!({"t": "fetch", "id": id, "method": "GET", "url": path, "headers": {}, "body": null});
            w.write_all(&send(f)).await.expect("fetch");
        }
        let mut order = Vec::new();
        for _ in 0..2 {
            let line = lines.next_line().await.ok().flatten().unwrap_or_default();
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            assert_eq!(v["t"], "fetch_result", "{v}");
            assert_eq!(v["status"], 200);
            order.push(v["id"].as_u64().unwrap_or(0));
        }
        w.write_all(&send(serde_json::json!({"t": "done", "result": null})))
            .await
            .expect("done");
        order
    });
    let limits = sbx_connect::limits::Limits::default();
    let spec = JobSpec {
        kind: sbx_connect::model::JobKind::Verify,
        entry: "/pkg/index.js".into(),
        config: serde_json::json!({}),
        sync: None,
        checkpoint: None,
        oauth_step: None,
        delivery: None,
        time_budget: Duration::from_secs(60),
        limits: limits.output,
        retry: limits.fetch_retry,
    };
    let env = JobEnv {
        broker: Some(Arc::new(s)),
        spool_path: None,
        logs: Arc::new(NoLogs),
        max_log_message_bytes: 4096,
        max_log_bytes_per_run: 1 << 20,
        received: Arc::default(),
    };
    // The timeout only turns a hang (serialized fetches) into a failure; it does not order anything.
    let out = tokio::time::timeout(Duration::from_secs(30), drive(host, spec, &env))
        .await
        .expect("fetches must not be serialized");
    assert!(matches!(out, JobOutcome::Succeeded { .. }), "{out:?}");
    // Both results arrive; their order is a race (the /wait answer is sent as soon as /release
    // reached the server, possibly before the /release answer), so only the set is asserted.
    let mut ids = script.await.expect("script");
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2]);
}

#[tokio::test]
async fn query_api_key_echoed_by_the_server_is_redacted() {
    let server = common::start().await;
    let auth = AuthDefinition::ApiKey {
        header: None,
        query: Some("api_key".into()),
    };
    let key = "k/secret+key";
    let (s, _) = session(&server, auth, Credentials::ApiKey { key: key.into() });
    let a = answer(s.fetch(get("/echo?x=1", &[]), deadline()).await);
    let body = String::from_utf8_lossy(&a.body).into_owned();
    // The server got the key (percent-encoded in the URL) and echoed the URL back.
    assert_eq!(server.paths(), vec!["/echo?x=1&api_key=k%2Fsecret%2Bkey"]);
    assert!(!body.contains("k%2Fsecret%2Bkey"), "{body}");
    assert!(!body.contains(key), "{body}");
    assert!(body.contains("api_key=[redacted]"), "{body}");
}
