//! Every failure explains itself, and missing things answer 404: service-level tests with the
//! scripted runner of `common::harness`.

mod common;

use common::harness::*;
use sbx_connect::api::{PageQuery, RecordsQuery};
use sbx_connect::limits::Limits;
use sbx_connect::model::{BuildStatus, FailureCategory, RunStatus};
use sbx_connect::sandbox::SandboxEnd;
use sbx_connect::service::{ConnectService, ErrorClass};
use serde_json::{json, Value};
use std::sync::Arc;

fn logs_of(svc: &ConnectService, run: &str) -> Vec<String> {
    svc.list_logs("ws", None, Some(run), &PageQuery::default())
        .expect("logs")
        .items
        .into_iter()
        .map(|l| l.message)
        .collect()
}

#[tokio::test]
async fn unknown_sync_names_are_not_found_on_every_route() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake, None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    let e = svc
        .read_records("ws", &c.id, "nosuch", &RecordsQuery::default())
        .expect_err("records of an unknown sync");
    assert_eq!(e.class(), ErrorClass::NotFound);
    assert_eq!(e.to_string(), "sync not found");
    let e = svc
        .get_checkpoint("ws", &c.id, "nosuch")
        .expect_err("checkpoint of an unknown sync");
    assert_eq!(e.class(), ErrorClass::NotFound);
    assert_eq!(e.to_string(), "sync not found");
    let e = svc
        .run_sync("ws", &c.id, "nosuch")
        .await
        .expect_err("run of an unknown sync");
    assert_eq!(e.class(), ErrorClass::NotFound);
    // A known sync that never committed is still an empty answer, not a 404.
    assert!(records(&svc, &c.id, "items").is_empty());
    assert_eq!(svc.get_checkpoint("ws", &c.id, "items").expect("cp"), None);
}

#[tokio::test]
async fn a_definition_error_lands_in_the_build_log_with_its_message() {
    let dir = tempfile::tempdir().expect("tmp");
    let message =
        "Invalid connector definition: defineConnector: config.properties.pageSize: unsupported keyword \"format\"";
    let fake = Fake::new(Arc::new(move |_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "log", "level": "error", "message": message})),
            Act::Send(json!({"t": "fail", "category": "package", "kind": "bad_definition"})),
        ])
    }));
    let svc = open(dir.path(), fake, None);
    svc.upload_package("ws", &tarball("1.0.0", "export default {}"))
        .expect("upload");
    let b = svc.build("ws", "conn", "1.0.0").await.expect("build");
    assert_eq!(b.status, BuildStatus::Failed);
    let failure = b.failure.unwrap_or_default();
    assert!(failure.contains("bad_definition"), "{failure}");
    assert!(
        b.log.contains(&format!("error {message}")),
        "the build log carries the describe run's message: {}",
        b.log
    );
}

#[tokio::test]
async fn limit_failures_name_the_limit_and_its_value() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");

    // The host's own check: 10,001 records in one batch.
    let batch: Vec<Value> = (0..10_001).map(|i| json!({"id": i})).collect();
    let line: Arc<str> = json!({"t": "records", "records": batch}).to_string().into();
    fake.set(Arc::new(move |_: &Value, _| {
        script(vec![Act::Raw(line.clone()), done(Value::Null)])
    }));
    let run = svc.run_sync("ws", &c.id, "events").await.expect("run");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.failure_category, Some(FailureCategory::OutputLimit));
    assert_eq!(run.failure_kind.as_deref(), Some("max_records_per_batch"));
    let logs = logs_of(&svc, &run.id);
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(
        logs[0].contains("max_records_per_batch") && logs[0].contains("at most 10000 records"),
        "{logs:?}"
    );

    // The runner's early checks name their limit too.
    for (kind, value) in [
        ("max_record_bytes", "1048576 bytes"),
        ("max_batches", "10000 batches"),
        ("max_checkpoint_bytes", "65536 bytes"),
    ] {
        fake.set(Arc::new(move |_: &Value, _| {
            script(vec![Act::Send(
                json!({"t": "fail", "category": "package", "kind": kind}),
            )])
        }));
        let run = svc.run_sync("ws", &c.id, "events").await.expect("run");
        assert_eq!(run.failure_category, Some(FailureCategory::OutputLimit));
        assert_eq!(run.failure_kind.as_deref(), Some(kind));
        let logs = logs_of(&svc, &run.id);
        assert!(
            logs.len() == 1 && logs[0].contains(kind) && logs[0].contains(value),
            "{logs:?}"
        );
    }

    // The memory limit: only the sandbox's end says so; the log names the value.
    fake.set(Arc::new(|_: &Value, _| Script {
        acts: vec![
            Act::Send(json!({"t": "records", "records": [{"x": 1}]})),
            Act::Close,
        ],
        end: SandboxEnd::MemoryLimit,
    }));
    let run = svc.run_sync("ws", &c.id, "events").await.expect("run");
    assert_eq!(run.failure_category, Some(FailureCategory::MemoryLimit));
    assert_eq!(run.failure_kind.as_deref(), Some("memory_limit"));
    let memory_mib = Limits::default().memory_mib;
    assert_eq!(
        logs_of(&svc, &run.id),
        vec![format!(
            "The run went over its memory limit (memory_limit: {memory_mib} MiB for the job \
             sandbox); it was stopped and nothing of it was committed."
        )]
    );

    // The time limit: a runner that never finishes is stopped at the budget; the log names it.
    fake.set(basic(definition(json!({"type": "bearer"}), json!([]))));
    let short = open_with_limits(
        dir.path().join("short").as_path(),
        fake.clone(),
        Limits {
            sync_time: std::time::Duration::from_millis(40),
            ..Limits::default()
        },
    );
    built(&short).await;
    let c2 = short
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    fake.set(Arc::new(|_: &Value, _| script(vec![])));
    let run = short.run_sync("ws", &c2.id, "events").await.expect("run");
    assert_eq!(run.failure_category, Some(FailureCategory::TimeLimit));
    let logs = logs_of(&short, &run.id);
    assert_eq!(
        logs,
        vec![
            "The run went over its time limit (time_limit: 40 ms for a sync job); it was \
              stopped and nothing of it was committed."
                .to_string()
        ],
    );
    assert!(records(&svc, &c.id, "events").is_empty());
}

#[tokio::test]
async fn http_failures_carry_the_status_and_multi_line_messages_stay_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Send(json!({"t": "log", "level": "error", "message": "first line\nsecond line"})),
            Act::Send(json!({"t": "fail", "category": "package", "kind": "http_401"})),
        ])
    }));
    let run = svc.test_connection("ws", &c.id).await.expect("test");
    assert_eq!(run.failure_category, Some(FailureCategory::PackageError));
    assert_eq!(run.failure_kind.as_deref(), Some("http_401"));
    assert_eq!(logs_of(&svc, &run.id), vec!["first line\nsecond line"]);
}

#[tokio::test]
async fn config_validation_lists_every_problem() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut def = definition(json!({"type": "bearer"}), json!([]));
    def["config"] = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["account"],
        "properties": {
            "account": {"type": "string"},
            "pageSize": {"type": "integer", "maximum": 100}
        }
    });
    let fake = Fake::new(basic(def));
    let svc = open(dir.path(), fake, None);
    built(&svc).await;
    let mut req = bearer_connection("https://api.example.com", None);
    req.config = json!({"pageSize": 500, "extra": true});
    let e = svc.create_connection("ws", req).expect_err("bad config");
    assert_eq!(e.class(), ErrorClass::Invalid);
    assert_eq!(
        e.to_string(),
        "config.account: is required; config.extra: is not an allowed property; \
         config.pageSize: must be <= 100"
    );
}

#[tokio::test]
async fn stored_records_come_back_with_sorted_keys_and_records_committed_counts_every_record() {
    let dir = tempfile::tempdir().expect("tmp");
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let svc = open(dir.path(), fake.clone(), None);
    built(&svc).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    // The documented behaviour (sdk/README.md "Stored records"): key order is not kept, and a
    // merge key yielded twice counts twice in recordsCommitted.
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Raw(
                r#"{"t":"records","records":[{"z":1,"id":1,"a":{"y":1,"b":2}},{"id":1,"z":2}]}"#
                    .into(),
            ),
            done(Value::Null),
        ])
    }));
    let run = svc.run_sync("ws", &c.id, "items").await.expect("run");
    assert_eq!(run.records_committed, 2);
    let page = svc
        .read_records("ws", &c.id, "items", &RecordsQuery::default())
        .expect("records");
    let texts: Vec<String> = page.items.iter().map(|r| r.data.to_string()).collect();
    assert_eq!(texts, vec![r#"{"id":1,"z":2}"#]);
    fake.set(Arc::new(|_: &Value, _| {
        script(vec![
            Act::Raw(r#"{"t":"records","records":[{"z":1,"id":1,"a":{"y":1,"b":2}}]}"#.into()),
            done(Value::Null),
        ])
    }));
    svc.run_sync("ws", &c.id, "events").await.expect("run");
    let page = svc
        .read_records("ws", &c.id, "events", &RecordsQuery::default())
        .expect("records");
    assert_eq!(
        page.items[0].data.to_string(),
        r#"{"a":{"b":2,"y":1},"id":1,"z":1}"#
    );
}
