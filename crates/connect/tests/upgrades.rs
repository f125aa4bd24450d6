//! Connection upgrades across package versions, and deleting versions nobody uses.

mod common;

use common::harness::*;
use sbx_connect::api::UpdateConnectionRequest;
use sbx_connect::model::{BuildStatus, RunStatus};
use sbx_connect::service::{ConnectService, ErrorClass};
use serde_json::{json, Value};
use std::sync::Arc;

/// Describe answers `def`; a sync yields one record per job and a checkpoint.
fn connector(def: Value) -> Scripter {
    Arc::new(move |job: &Value, _| match job["kind"].as_str() {
        Some("describe") => script(vec![done(def.clone())]),
        Some("sync") => {
            let n = job["checkpoint"]["n"].as_u64().unwrap_or(0) + 1;
            script(vec![
                Act::Send(json!({"t": "records", "records": [{"id": n}]})),
                Act::Send(json!({"t": "checkpoint", "checkpoint": {"n": n}})),
                done(Value::Null),
            ])
        }
        _ => script(vec![done(Value::Null)]),
    })
}

fn with_syncs(syncs: Value) -> Value {
    let mut def = definition(json!({"type": "bearer"}), json!([]));
    def["syncs"] = syncs;
    def
}

async fn publish(svc: &ConnectService, fake: &Fake, version: &str, def: Value) {
    fake.set(connector(def));
    svc.upload_package("ws", &tarball(version, &format!("// {version}")))
        .expect("upload");
    let b = svc.build("ws", "conn", version).await.expect("build");
    assert_eq!(b.status, BuildStatus::Succeeded, "{b:?}");
}

fn to_version(v: &str) -> UpdateConnectionRequest {
    UpdateConnectionRequest {
        version: Some(v.into()),
        ..UpdateConnectionRequest::default()
    }
}

#[tokio::test]
async fn upgrades_keep_committed_data_or_refuse_naming_the_sync() {
    let dir = tempfile::tempdir().expect("tmp");
    let v1 = with_syncs(json!([
        {"name": "items", "mode": "merge", "primaryKey": "id"},
        {"name": "events", "mode": "append"}
    ]));
    let fake = Fake::new(connector(v1.clone()));
    let svc = open(dir.path(), fake.clone(), None);
    publish(&svc, &fake, "1.0.0", v1).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(run.status, RunStatus::Succeeded);

    // 2.0.0 keeps `items` as it was, changes `events` (never committed) and adds a sync.
    publish(
        &svc,
        &fake,
        "2.0.0",
        with_syncs(json!([
            {"name": "items", "mode": "merge", "primaryKey": "id"},
            {"name": "events", "mode": "replace"},
            {"name": "users", "mode": "append"}
        ])),
    )
    .await;
    // 3.0.0 changes the key of `items`, 4.0.0 drops it, 5.0.0 makes it an append sync.
    publish(
        &svc,
        &fake,
        "3.0.0",
        with_syncs(json!([{"name": "items", "mode": "merge", "primaryKey": ["org", "id"]}])),
    )
    .await;
    publish(
        &svc,
        &fake,
        "4.0.0",
        with_syncs(json!([{"name": "events", "mode": "append"}])),
    )
    .await;
    publish(
        &svc,
        &fake,
        "5.0.0",
        with_syncs(json!([{"name": "items", "mode": "append"}])),
    )
    .await;

    for (version, why) in [
        ("3.0.0", "sync \"items\" changes its primary key"),
        (
            "4.0.0",
            "sync \"items\" has committed data and is not in the new version",
        ),
        ("5.0.0", "sync \"items\" changes mode from merge to append"),
    ] {
        let e = svc
            .update_connection("ws", &c.id, to_version(version))
            .expect_err(version);
        assert_eq!(e.class(), ErrorClass::Conflict, "{e}");
        assert!(e.to_string().contains(why), "{version}: {e}");
    }
    assert_eq!(
        svc.get_connection("ws", &c.id).expect("get").version,
        "1.0.0"
    );
    let e = svc
        .update_connection("ws", &c.id, to_version("9.9.9"))
        .expect_err("unknown version");
    assert_eq!(e.class(), ErrorClass::NotFound);

    let moved = svc
        .update_connection("ws", &c.id, to_version("2.0.0"))
        .expect("upgrade");
    assert_eq!(moved.version, "2.0.0");
    assert_eq!(moved.config, json!({"pageSize": 50}));
    assert_eq!(records(&svc, &c.id, "items"), vec![json!({"id": 1})]);
    assert_eq!(
        svc.get_checkpoint("ws", &c.id, "items").expect("cp"),
        Some(json!({"n": 1}))
    );
    // The next run continues from the kept checkpoint, under the new version.
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(
        (run.status, run.version.as_str()),
        (RunStatus::Succeeded, "2.0.0")
    );
    assert_eq!(
        records(&svc, &c.id, "items"),
        vec![json!({"id": 1}), json!({"id": 2})]
    );
    svc.run_sync("ws", &c.id, "users")
        .await
        .expect("new sync runs");

    // Versions nobody uses can go; the one in use cannot.
    svc.delete_package_version("ws", "conn", "1.0.0")
        .expect("delete unused");
    assert_eq!(
        svc.get_package_version("ws", "conn", "1.0.0")
            .expect_err("gone")
            .class(),
        ErrorClass::NotFound
    );
    let e = svc
        .delete_package_version("ws", "conn", "2.0.0")
        .expect_err("in use");
    assert_eq!(e.class(), ErrorClass::Conflict);
    assert!(e.to_string().contains(&c.id), "{e}");
    assert_eq!(
        svc.delete_package_version("ws", "conn", "1.0.0")
            .expect_err("twice")
            .class(),
        ErrorClass::NotFound
    );
    assert_eq!(
        svc.list_packages("ws").expect("list")[0].versions,
        vec!["2.0.0", "3.0.0", "4.0.0", "5.0.0"]
    );
}

#[tokio::test]
async fn an_upgrade_is_refused_when_a_sync_run_exists_that_this_service_did_not_claim() {
    // Another sbxd on the same PostgreSQL (or a run queued between the check and the move):
    // this service's own "is a sync running" check cannot see it, the store's guard does.
    let dir = tempfile::tempdir().expect("tmp");
    let v1 = with_syncs(json!([{"name": "items", "mode": "append"}]));
    let fake = Fake::new(connector(v1.clone()));
    let svc = open(dir.path(), fake.clone(), None);
    publish(&svc, &fake, "1.0.0", v1.clone()).await;
    publish(&svc, &fake, "1.1.0", v1).await;
    let c = svc
        .create_connection("ws", bearer_connection("https://api.example.com", None))
        .expect("create");
    let queued = svc
        .store()
        .insert_run(
            "ws",
            &sbx_connect::store::NewRun {
                connection_id: Some(c.id.clone()),
                package: "conn".into(),
                version: "1.0.0".into(),
                kind: sbx_connect::model::RunKind::Sync,
                sync: Some("items".into()),
            },
        )
        .expect("a run claimed elsewhere");
    let e = svc
        .update_connection("ws", &c.id, to_version("1.1.0"))
        .expect_err("a sync run is queued");
    assert_eq!(e.class(), ErrorClass::Conflict);
    assert!(
        e.to_string().contains("a sync of this connection started"),
        "{e}"
    );
    assert_eq!(
        svc.get_connection("ws", &c.id).expect("get").version,
        "1.0.0",
        "nothing changed"
    );
    // Once it ended the move goes through; a run claimed for 1.0.0 can no longer start.
    svc.store()
        .fail_run(
            "ws",
            &queued.id,
            sbx_connect::model::FailureCategory::Platform,
            "internal",
        )
        .expect("end it");
    let moved = svc
        .update_connection("ws", &c.id, to_version("1.1.0"))
        .expect("move");
    assert_eq!(moved.version, "1.1.0");
    let late = svc.store().insert_run(
        "ws",
        &sbx_connect::store::NewRun {
            connection_id: Some(c.id.clone()),
            package: "conn".into(),
            version: "1.0.0".into(),
            kind: sbx_connect::model::RunKind::Sync,
            sync: Some("items".into()),
        },
    );
    assert!(
        matches!(late, Err(sbx_connect::store::StoreError::Changed(_))),
        "{late:?}"
    );
    let run = svc.run_sync("ws", &c.id, "items").await.expect("sync");
    assert_eq!(
        (run.status, run.version.as_str()),
        (RunStatus::Succeeded, "1.1.0")
    );
}
