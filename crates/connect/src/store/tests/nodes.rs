//! Several nodes on one store (cluster mode): the store, not a node's memory, decides which
//! node starts a sync, and a node declared lost can neither go on with its runs nor commit.

use super::rows::connection;
use super::{on_both_backends, Fixture};
use crate::commit::{CommitError, CommitTarget};
use crate::model::{FailureCategory, RunKind, RunStatus, SyncMode};
use crate::spool::SpoolWriter;
use crate::store::{NewRun, StoreError, NODE_LOST_KIND};
use chrono::{Duration, Utc};

on_both_backends!(
    one_queued_or_running_run_per_sync_whatever_the_node,
    a_scheduled_run_is_started_once_per_interval_by_one_node,
    a_lost_nodes_runs_fail_its_interval_is_owed_and_it_cannot_go_on,
    a_starting_node_fails_only_its_own_and_unowned_work,
    blobs_keep_their_first_value,
);

fn sync(name: &str) -> NewRun {
    NewRun {
        connection_id: Some("c1".into()),
        package: "conn".into(),
        version: "1.0.0".into(),
        kind: RunKind::Sync,
        sync: Some(name.into()),
    }
}

fn with_connection(f: &Fixture) {
    f.store
        .insert_connection("ws", "c1", &connection(Some(60)), b"sealed")
        .expect("connection");
}

pub(super) fn one_queued_or_running_run_per_sync_whatever_the_node(f: &Fixture) {
    with_connection(f);
    let (a, b) = ((f.for_node)("node-a"), (f.for_node)("node-b"));
    let run = a.insert_run("ws", &sync("items")).expect("a starts");
    assert!(
        matches!(
            b.insert_run("ws", &sync("items")),
            Err(StoreError::Exists(_))
        ),
        "a second node must not start the same sync"
    );
    // Another sync of the same connection is independent.
    b.insert_run("ws", &sync("users")).expect("b starts users");
    a.start_run("ws", &run.id, 1).expect("running");
    assert!(matches!(
        b.insert_run("ws", &sync("items")),
        Err(StoreError::Exists(_))
    ));
    a.succeed_run("ws", &run.id, 0, None).expect("done");
    b.insert_run("ws", &sync("items"))
        .expect("b starts once a's run ended");
}

pub(super) fn a_scheduled_run_is_started_once_per_interval_by_one_node(f: &Fixture) {
    with_connection(f);
    let (a, b) = ((f.for_node)("node-a"), (f.for_node)("node-b"));
    let now = Utc::now();
    let first = a
        .insert_scheduled_run("ws", &sync("items"), 60, now)
        .expect("a")
        .expect("due: a starts it");
    // Both nodes' schedulers saw it due at the same tick: only one starts it.
    assert_eq!(
        b.insert_scheduled_run("ws", &sync("items"), 60, now)
            .expect("b"),
        None
    );
    a.start_run("ws", &first.id, 1).expect("running");
    a.succeed_run("ws", &first.id, 0, None).expect("done");
    // Finished quickly: still not due again within the interval, on any node.
    let soon = now + Duration::seconds(30);
    assert_eq!(
        b.insert_scheduled_run("ws", &sync("items"), 60, soon)
            .expect("b"),
        None
    );
    assert_eq!(
        a.insert_scheduled_run("ws", &sync("items"), 60, soon)
            .expect("a"),
        None
    );
    let later = Utc::now() + Duration::seconds(61);
    let second = b
        .insert_scheduled_run("ws", &sync("items"), 60, later)
        .expect("b")
        .expect("due again after the interval");
    assert_eq!(
        a.insert_scheduled_run("ws", &sync("items"), 60, later)
            .expect("a"),
        None
    );
    assert_ne!(first.id, second.id);
}

pub(super) fn a_lost_nodes_runs_fail_its_interval_is_owed_and_it_cannot_go_on(f: &Fixture) {
    with_connection(f);
    let (a, b) = ((f.for_node)("node-a"), (f.for_node)("node-b"));
    let now = Utc::now();
    let run = a
        .insert_scheduled_run("ws", &sync("items"), 60, now)
        .expect("a")
        .expect("due");
    a.start_run("ws", &run.id, 1).expect("running");
    let b_run = b.insert_run("ws", &sync("users")).expect("b's own run");

    let (failed, builds) = b.fail_work_of_lost_node("node-a").expect("fail over");
    assert_eq!((failed, builds), (vec![run.id.clone()], 0));
    let got = b.get_run("ws", &run.id).expect("get");
    assert_eq!(
        (
            got.status,
            got.failure_category,
            got.failure_kind.as_deref()
        ),
        (
            RunStatus::Failed,
            Some(FailureCategory::Platform),
            Some(NODE_LOST_KIND)
        )
    );
    assert_eq!(
        b.get_run("ws", &b_run.id).expect("get").status,
        RunStatus::Queued,
        "the other node's run is untouched"
    );
    // The interval of the lost run is still owed: due at once, not in 60 s.
    let rerun = b
        .insert_scheduled_run("ws", &sync("items"), 60, now + Duration::seconds(5))
        .expect("b")
        .expect("owed");

    // The lost node, back (or never really gone), cannot go on with its run...
    assert!(matches!(
        a.start_run("ws", &run.id, 2),
        Err(StoreError::Changed(_))
    ));
    // ...nor commit its output...
    let mut w = SpoolWriter::create(&f.spool_path).expect("spool");
    w.append_record(None, "{\"n\":1}").expect("record");
    let spool = w.finish().expect("finish");
    let target = CommitTarget {
        workspace: "ws",
        connection_id: "c1",
        sync: "items",
        mode: SyncMode::Append,
        run_id: Some(&run.id),
        delivery: None,
    };
    assert!(matches!(
        a.commit(target, spool),
        Err(CommitError::Fenced(id)) if id == run.id
    ));
    assert_eq!(a.count_records("ws", "c1", "items").expect("count"), 0);
    // ...nor overwrite the verdict.
    a.succeed_run("ws", &run.id, 5, None).expect("no-op");
    assert_eq!(
        a.get_run("ws", &run.id).expect("get").status,
        RunStatus::Failed
    );
    // The run that replaced it commits.
    b.start_run("ws", &rerun.id, 1).expect("running");
    let mut w = SpoolWriter::create(&f.spool_path).expect("spool");
    w.append_record(None, "{\"n\":1}").expect("record");
    let spool = w.finish().expect("finish");
    let target = CommitTarget {
        run_id: Some(&rerun.id),
        delivery: None,
        ..target
    };
    assert_eq!(b.commit(target, spool).expect("commit").records, 1);
}

pub(super) fn a_starting_node_fails_only_its_own_and_unowned_work(f: &Fixture) {
    with_connection(f);
    let (a, b) = ((f.for_node)("node-a"), (f.for_node)("node-b"));
    let of_a = a.insert_run("ws", &sync("items")).expect("a");
    let of_b = b.insert_run("ws", &sync("users")).expect("b");
    // A run of no recorded node: left by sbxd before cluster mode.
    let unowned = f.store.insert_run("ws", &sync("events")).expect("unowned");
    let build_a = a.insert_build("ws", "conn", "1.0.0").expect("build a");
    let build_b = b.insert_build("ws", "conn", "1.0.0").expect("build b");

    let mut failed = b.fail_unfinished_runs().expect("b restarts");
    failed.sort();
    let mut want = vec![of_b.id.clone(), unowned.id.clone()];
    want.sort();
    assert_eq!(failed, want);
    assert_eq!(b.fail_unfinished_builds().expect("builds"), 1);
    assert_eq!(
        a.get_run("ws", &of_a.id).expect("get").status,
        RunStatus::Queued,
        "a restart of node b must not fail node a's run"
    );
    assert_eq!(
        a.get_build("ws", &build_a.id).expect("get").status,
        crate::model::BuildStatus::Queued
    );
    assert_eq!(
        b.get_build("ws", &build_b.id).expect("get").status,
        crate::model::BuildStatus::Failed
    );
    // Node a declared lost: its build fails too.
    assert_eq!(
        b.fail_work_of_lost_node("node-a").expect("lost"),
        (vec![of_a.id.clone()], 1)
    );
}

pub(super) fn blobs_keep_their_first_value(f: &Fixture) {
    let (a, b) = ((f.for_node)("node-a"), (f.for_node)("node-b"));
    assert_eq!(b.get_blob("artifact/x").expect("get"), None);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    a.put_blob("artifact/x", &big).expect("put");
    a.put_blob("artifact/x", b"other").expect("put again");
    assert_eq!(b.get_blob("artifact/x").expect("get"), Some(big));
}
