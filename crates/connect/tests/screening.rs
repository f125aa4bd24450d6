//! Records, checkpoints and log messages are screened for the connection's credentials before
//! they are stored: a run that tries to store one in any known form fails as
//! `package_error`/`credential_leak`, commits nothing and keeps the last checkpoint.

mod common;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use common::harness::*;
use sbx_connect::api::PageQuery;
use sbx_connect::job::{CREDENTIAL_LEAK, LEAK_NOTICE};
use sbx_connect::model::{FailureCategory, RunStatus};
use serde_json::{json, Value};
use std::sync::Arc;

/// The harness's bearer token, in forms a package might store after getting it some other way.
fn leaked_forms() -> Vec<String> {
    let token = "tok-secret";
    vec![
        token.to_string(),
        token.to_ascii_uppercase(),
        format!("Bearer {token}"),
        STANDARD.encode(token),
        URL_SAFE_NO_PAD.encode(format!("Bearer {token}")),
        STANDARD.encode(format!("{{\"auth\":\"Bearer {token}\"}}")),
        "tok%2Dsecret".to_string(),
        hex::encode(token),
        token
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
    ]
}

fn stored_logs(svc: &sbx_connect::service::ConnectService, conn: &str) -> Vec<String> {
    svc.list_logs("ws", Some(conn), None, &PageQuery::default())
        .expect("logs")
        .items
        .into_iter()
        .map(|l| l.message)
        .collect()
}

#[tokio::test]
async fn runs_that_store_a_credential_fail_and_store_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    // A clean run commits a checkpoint to keep.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "records", "records": [{"id": 1}]})),
            Act::Send(json!({"t": "checkpoint", "checkpoint": {"page": 1}})),
            done(Value::Null),
        ])
    }));
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");

    for form in leaked_forms() {
        for place in ["record", "checkpoint", "log"] {
            let f = form.clone();
            let p = place.to_string();
            fake.set(Arc::new(move |_: &Value, _| {
                let mut acts = vec![Act::Send(
                    json!({"t": "records", "records": [{"id": 2, "v": "clean"}]}),
                )];
                acts.push(Act::Send(match p.as_str() {
                    "record" => json!({"t": "records", "records": [{"id": 3, "v": f}]}),
                    "checkpoint" => json!({"t": "checkpoint", "checkpoint": {"cursor": f}}),
                    _ => json!({"t": "log", "level": "info", "message": format!("got {f}")}),
                }));
                acts.push(done(Value::Null));
                script(acts)
            }));
            let starts = fake.starts();
            let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
            let what = format!("{place} {form}");
            assert_eq!(run.status, RunStatus::Failed, "{what}");
            assert_eq!(
                run.failure_category,
                Some(FailureCategory::PackageError),
                "{what}"
            );
            assert_eq!(run.failure_kind.as_deref(), Some(CREDENTIAL_LEAK), "{what}");
            assert_eq!(fake.starts(), starts + 1, "{what}: not retried");
            assert_eq!(
                records(&svc, &c.id, "items"),
                vec![json!({"id": 1})],
                "{what}"
            );
            assert_eq!(
                svc.get_checkpoint("ws", &c.id, "items").expect("cp"),
                Some(json!({"page": 1})),
                "{what}"
            );
            for line in stored_logs(&svc, &c.id) {
                assert!(!line.contains(&form), "{what}: stored log {line}");
            }
        }
    }
    // The log that carried it was replaced by the notice.
    assert!(stored_logs(&svc, &c.id).contains(&LEAK_NOTICE.to_string()));

    // A connection test whose result carries it fails the same way.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![done(json!({"whoami": "Bearer tok-secret"}))])
    }));
    let run = svc.test_connection("ws", &c.id).await.expect("verify");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.failure_kind.as_deref(), Some(CREDENTIAL_LEAK));
}
