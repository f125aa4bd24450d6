//! Two Connect services on one PostgreSQL, as two nodes of a cluster (fake job sandboxes,
//! real database): each due sync starts on exactly one node, and a node runs packages that
//! another node uploaded and built (fetched from the store).
//!
//! Needs a server at `SBX_TEST_DATABASE_URL` (`./scripts/test` starts one); without it the
//! test prints a note and checks nothing.

mod common;

use common::harness::*;
use sbx_connect::model::{Run, RunStatus};
use sbx_connect::service::ConnectService;
use serde_json::json;
use std::time::{Duration, Instant};

fn database() -> Option<sbx_store::TestDatabase> {
    let Ok(url) = std::env::var("SBX_TEST_DATABASE_URL") else {
        eprintln!("SBX_TEST_DATABASE_URL is not set: skipping (./scripts/test starts PostgreSQL)");
        return None;
    };
    Some(sbx_store::TestDatabase::create(&url).expect("creating a test database"))
}

/// Waits until every run has ended; returns them as they ended.
async fn ended(svc: &ConnectService, runs: &[Run]) -> Vec<Run> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now: Vec<Run> = runs
            .iter()
            .map(|r| svc.get_run("ws", &r.id).expect("run"))
            .collect();
        if now
            .iter()
            .all(|r| matches!(r.status, RunStatus::Succeeded | RunStatus::Failed))
        {
            return now;
        }
        assert!(Instant::now() < deadline, "runs did not end: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn syncs(runs: &[Run]) -> Vec<String> {
    let mut names: Vec<String> = runs.iter().filter_map(|r| r.sync.clone()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn each_due_sync_starts_on_one_node_which_fetches_the_package_another_built() {
    let Some(db) = database() else {
        return;
    };
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let a = open_node(dir_a.path(), fake.clone(), db.url(), "node-a");
    let b = open_node(dir_b.path(), fake.clone(), db.url(), "node-b");
    // Uploaded and built through node a only.
    built(&a).await;
    let build_id = a
        .get_package_version("ws", "conn", "1.0.0")
        .expect("version")
        .build_id
        .expect("built");
    let c = a
        .create_connection(
            "ws",
            bearer_connection("https://api.example.com", Some(3600)),
        )
        .expect("connection");

    // Both schedulers find the three syncs due at the same tick: node b ticks first and
    // starts them; node a's ticks (and b's again) start nothing.
    let now = chrono::Utc::now();
    let started_b = b.scheduler_tick(now).expect("tick b");
    let started_a = a.scheduler_tick(now).expect("tick a");
    let again_b = b.scheduler_tick(now).expect("tick b again");
    assert_eq!(syncs(&started_b), vec!["all", "events", "items"]);
    assert!(
        started_a.is_empty() && again_b.is_empty(),
        "{started_a:?} {again_b:?}"
    );
    let done = ended(&b, &started_b).await;
    assert!(
        done.iter().all(|r| r.status == RunStatus::Succeeded),
        "{done:?}"
    );
    // Node b ran a package it never built: it fetched it from the store.
    assert!(
        dir_b
            .path()
            .join("artifacts")
            .join(&build_id)
            .join("package.json")
            .is_file(),
        "node b has no copy of the built package"
    );
    // Finished at once, still not due within the interval on either node.
    let soon = chrono::Utc::now() + chrono::Duration::seconds(10);
    assert!(a.scheduler_tick(soon).expect("tick").is_empty());
    assert!(b.scheduler_tick(soon).expect("tick").is_empty());

    // The next interval: whichever node ticks first starts each sync, once.
    let later = chrono::Utc::now() + chrono::Duration::seconds(3601);
    let (ta, tb) = (a.clone(), b.clone());
    let (ra, rb) = tokio::join!(
        tokio::task::spawn_blocking(move || ta.scheduler_tick(later).expect("tick a")),
        tokio::task::spawn_blocking(move || tb.scheduler_tick(later).expect("tick b")),
    );
    let mut all = ra.expect("join a");
    all.extend(rb.expect("join b"));
    assert_eq!(syncs(&all), vec!["all", "events", "items"], "{all:?}");
    ended(&a, &all).await;

    // Run now through one node while the other runs the sync: refused, not run twice.
    let running = a.start_sync("ws", &c.id, "items").expect("run now on a");
    if let Err(e) = b.start_sync("ws", &c.id, "items") {
        assert!(e.to_string().contains("already running"), "{e}");
    } else {
        // Only possible if a's run had already ended.
        assert_ne!(
            a.get_run("ws", &running.id).expect("run").status,
            RunStatus::Queued
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_nodes_sync_is_run_again_at_once_by_another() {
    let Some(db) = database() else {
        return;
    };
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let fake = Fake::new(basic(definition(json!({"type": "bearer"}), json!([]))));
    let a = open_node(dir_a.path(), fake.clone(), db.url(), "node-a");
    let b = open_node(dir_b.path(), fake.clone(), db.url(), "node-b");
    built(&a).await;
    a.create_connection(
        "ws",
        bearer_connection("https://api.example.com", Some(3600)),
    )
    .expect("connection");
    let now = chrono::Utc::now();
    let first = a.scheduler_tick(now).expect("tick a");
    assert_eq!(first.len(), 3);
    ended(&a, &first).await;
    // Node a is declared lost while its next runs are queued: simulated by a's runs of
    // the next interval being failed over by node b before they run.
    let later = now + chrono::Duration::seconds(3601);
    let second = {
        let store = a.store();
        let mut runs = Vec::new();
        for r in &first {
            let new = sbx_connect::store::NewRun {
                connection_id: r.connection_id.clone(),
                package: r.package.clone(),
                version: r.version.clone(),
                kind: r.kind,
                sync: r.sync.clone(),
            };
            runs.push(
                store
                    .insert_scheduled_run("ws", &new, 3600, later)
                    .expect("insert")
                    .expect("due"),
            );
        }
        runs
    };
    assert_eq!(b.fail_work_of_lost_node("node-a").expect("fail over"), 3);
    for r in &second {
        let got = b.get_run("ws", &r.id).expect("run");
        assert_eq!(
            (got.status, got.failure_kind.as_deref()),
            (RunStatus::Failed, Some("node_lost"))
        );
    }
    // The interval is owed: node b starts each sync again at its next tick, not an hour on.
    let rerun = b
        .scheduler_tick(later + chrono::Duration::seconds(5))
        .expect("tick b");
    assert_eq!(syncs(&rerun), vec!["all", "events", "items"]);
    let done = ended(&b, &rerun).await;
    assert!(done.iter().all(|r| r.status == RunStatus::Succeeded));
}
