//! The Connect methods of the client against a tiny in-process fake of sbxd.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use sbx_client::connect::{CreateConnection, Credentials};
use sbx_client::{Client, ClientError};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

fn envelope(status: StatusCode, data: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        json!({"data": data, "metadata": {"fetchedAt": "2026-07-30T12:00:00Z"}}).to_string(),
    )
        .into_response()
}

fn version() -> Value {
    json!({
        "name": "@acme/items", "version": "1.0.0", "sha256": "ab", "size": 3,
        "entry": "index.mjs", "createdAt": "2026-07-30T12:00:00Z",
        "buildId": null, "definition": null
    })
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn upload_reports_created_or_unchanged() {
    let seen: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let s = seen.clone();
    let app = Router::new().route(
        "/v1/connect/packages",
        post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let ct = headers["content-type"].to_str().unwrap().to_string();
                let mut seen = s.lock().unwrap();
                seen.push((ct, body.len()));
                let status = if seen.len() == 1 {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                envelope(status, version())
            }
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let first = c.connect_upload_package(vec![1, 2, 3]).await.unwrap();
    assert!(first.created);
    assert_eq!(first.version.name, "@acme/items");
    let again = c.connect_upload_package(vec![1, 2, 3]).await.unwrap();
    assert!(!again.created);
    assert_eq!(seen.lock().unwrap()[0], ("application/gzip".to_string(), 3));
}

#[tokio::test]
async fn scoped_names_are_one_path_segment_and_errors_decode() {
    let app = Router::new().route(
        "/v1/connect/packages/{package}/versions/{version}",
        get(|Path((p, v)): Path<(String, String)>| async move {
            if p == "@acme/items" && v == "1.0.0" {
                envelope(StatusCode::OK, version())
            } else {
                (
                    StatusCode::NOT_FOUND,
                    [("content-type", "application/json")],
                    json!({"errors": [{"code": "connect_package_not_found", "message": "package version not found"}]})
                        .to_string(),
                )
                    .into_response()
            }
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let v = c.connect_version("@acme/items", "1.0.0").await.unwrap();
    assert_eq!(v.version, "1.0.0");
    match c.connect_version("nope", "1.0.0").await {
        Err(ClientError::Api { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (404, "connect_package_not_found"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn records_pages_follow_the_cursor_header() {
    let app = Router::new().route(
        "/v1/connect/connections/{id}/syncs/{sync}/records",
        get(|RawQuery(q): RawQuery| async move {
            let q = q.unwrap_or_default();
            let mut resp = if q.contains("cursor=2") {
                "{\"id\":3}\n".into_response()
            } else {
                "{\"id\":1}\n{\"id\":2}\n".into_response()
            };
            resp.headers_mut()
                .insert("content-type", "application/x-ndjson".parse().unwrap());
            if !q.contains("cursor=2") {
                resp.headers_mut()
                    .insert("x-next-cursor", "2".parse().unwrap());
            }
            resp
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let first = c
        .connect_records("c1", "items", Some(2), None)
        .await
        .unwrap();
    assert_eq!(first.records, vec![json!({"id": 1}), json!({"id": 2})]);
    assert_eq!(first.next_cursor.as_deref(), Some("2"));
    let last = c
        .connect_records("c1", "items", Some(2), first.next_cursor.as_deref())
        .await
        .unwrap();
    assert_eq!(last.records, vec![json!({"id": 3})]);
    assert_eq!(last.next_cursor, None);
}

#[tokio::test]
async fn create_connection_sends_camel_case_credentials() {
    let body: Arc<Mutex<Option<Value>>> = Arc::default();
    let b = body.clone();
    let app = Router::new().route(
        "/v1/connect/connections",
        post(move |raw: Bytes| {
            let b = b.clone();
            async move {
                *b.lock().unwrap() = serde_json::from_slice(&raw).ok();
                envelope(
                    StatusCode::CREATED,
                    json!({
                        "id": "c1", "name": "n", "package": "p", "version": "1.0.0",
                        "config": {}, "origin": "https://api.example.com", "authKind": "basic",
                        "status": "active", "scheduleIntervalSeconds": null,
                        "createdAt": "2026-07-30T12:00:00Z", "updatedAt": "2026-07-30T12:00:00Z"
                    }),
                )
            }
        }),
    );
    let c = Client::new(&serve(app).await, None).unwrap();
    let conn = c
        .connect_connection_create(&CreateConnection {
            name: "n".into(),
            package: "p".into(),
            version: "1.0.0".into(),
            config: json!({}),
            origin: "https://api.example.com".into(),
            credentials: Credentials::Basic {
                username: "u".into(),
                password: "pw".into(),
            },
            schedule_interval_seconds: Some(3600),
        })
        .await
        .unwrap();
    assert_eq!(conn.status, "active");
    let sent = body.lock().unwrap().clone().unwrap();
    assert_eq!(
        sent["credentials"],
        json!({"type": "basic", "username": "u", "password": "pw"})
    );
    assert_eq!(sent["scheduleIntervalSeconds"], 3600);
}
