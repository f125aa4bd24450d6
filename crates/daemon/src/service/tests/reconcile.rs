//! Restart reconciliation as a table: the rows of docs/architecture.md
//! ("Restart reconciliation"), each a stored status and a host state, all
//! reconciled at once by one fresh service (what sbxd does at start).

use super::*;
use crate::runtime::fake::{Life, Op};
use sbx_store::{SnapshotRecord, SnapshotStatus};

/// What the fake host has for a sandbox when sbxd starts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Host {
    /// Nothing.
    Missing,
    /// A live container whose agent answers.
    Alive,
    /// A live container whose agent never answers.
    Stalled,
    /// A paused (frozen) container.
    Frozen,
    /// A container whose processes are dead.
    Dead,
}

/// One row of the table and what must come of it.
struct Row {
    stored: SandboxStatus,
    host: Host,
    /// Status once reconciliation settled.
    want: SandboxStatus,
    /// `error` must contain this (None: no error).
    error: Option<&'static str>,
    /// Runtime calls for this sandbox: (start, destroy, connect).
    calls: (usize, usize, usize),
    /// The sandbox is left on the host afterwards.
    kept: bool,
}

const LOST: &str = "lost while sbxd was not running";
const SILENT: &str = "sandbox agent did not answer after sbxd restarted: ";

fn table() -> Vec<Row> {
    use Host::*;
    use SandboxStatus::*;
    let row = |stored, host, want, error, calls, kept| Row {
        stored,
        host,
        want,
        error,
        calls,
        kept,
    };
    vec![
        // RUNNING, alive and answering ping over a new relay: keep, reattach.
        row(Running, Alive, Running, None, (0, 0, 1), true),
        // RUNNING, missing or dead: FAILED as lost, clean up.
        row(Running, Missing, Failed, Some(LOST), (0, 1, 0), false),
        row(Running, Dead, Failed, Some(LOST), (0, 1, 0), false),
        // RUNNING and alive, but its agent never answers: FAILED saying so
        // (it was not lost), clean up.
        row(Running, Stalled, Failed, Some(SILENT), (0, 1, 1), false),
        // PENDING, STARTING, any host state: destroy what is there, boot again.
        row(Pending, Missing, Running, None, (1, 1, 0), true),
        row(Starting, Missing, Running, None, (1, 1, 0), true),
        row(Starting, Alive, Running, None, (1, 1, 0), true),
        row(Starting, Dead, Running, None, (1, 1, 0), true),
        // PAUSING, PAUSED, RESUMING on the host: its real state decides.
        row(Paused, Frozen, Paused, None, (0, 0, 0), true),
        row(Pausing, Frozen, Paused, None, (0, 0, 0), true),
        row(Pausing, Alive, Running, None, (0, 0, 1), true),
        row(Resuming, Alive, Running, None, (0, 0, 1), true),
        row(Resuming, Frozen, Paused, None, (0, 0, 0), true),
        // ... and missing: FAILED, clean up.
        row(Paused, Missing, Failed, Some(LOST), (0, 1, 0), false),
        row(Pausing, Missing, Failed, Some(LOST), (0, 1, 0), false),
        row(Resuming, Missing, Failed, Some(LOST), (0, 1, 0), false),
        // TERMINATING, any host state: finish the teardown.
        row(Terminating, Alive, Terminated, None, (0, 1, 0), false),
        row(Terminating, Missing, Terminated, None, (0, 1, 0), false),
        // Ended sandboxes are left alone; what the host still has of them is an orphan.
        row(Terminated, Missing, Terminated, None, (0, 0, 0), false),
        row(Failed, Alive, Failed, None, (0, 1, 0), false),
    ]
}

/// A stored sandbox in `status`, as an earlier sbxd left it.
/// The harness's node id (`NodeConfig::default()`).
const NODE: &str = "local";

fn stored(store: &dyn Store, name: &str, status: SandboxStatus) -> Uuid {
    let now = chrono::Utc::now();
    let running = matches!(status, SandboxStatus::Running | SandboxStatus::Pausing);
    let record = SandboxRecord {
        id: Uuid::new_v4(),
        workspace: WS.into(),
        name: name.into(),
        status: SandboxStatus::Starting,
        vcpu: 1,
        memory_mb: 1024,
        environment: BTreeMap::new(),
        secrets: Vec::new(),
        snapshot_id: None,
        image_ref: "default".into(),
        created_at: now,
        started_at: (status != SandboxStatus::Starting).then_some(now),
        ended_at: (!status.is_active()).then_some(now),
        error: None,
        active_ms: 0,
        running_since: running.then_some(now),
        network: Default::default(),
        generation: 0,
        node_id: NODE.into(),
    };
    store.create_sandbox(&record).expect("insert");
    store
        .update_sandbox(&mut SandboxRecord {
            status,
            ..record.clone()
        })
        .expect("update");
    record.id
}

fn snapshot(store: &dyn Store, status: SnapshotStatus) -> Uuid {
    let now = chrono::Utc::now();
    let record = SnapshotRecord {
        id: Uuid::new_v4(),
        workspace: WS.into(),
        name: None,
        source_sandbox: Uuid::new_v4(),
        status: SnapshotStatus::Creating,
        vcpu: 1,
        memory_mb: 1024,
        environment: BTreeMap::new(),
        secrets: Vec::new(),
        image_ref: "default".into(),
        source_image_id: "0".repeat(64),
        compatibility_id: "fake-runtime-v1".into(),
        stored_bytes: 0,
        created_at: now,
        updated_at: now,
        expires_at: now + chrono::Duration::days(1),
        error: None,
        network: Default::default(),
        generation: 0,
    };
    store
        .create_snapshot(&record, now, 0)
        .expect("insert snapshot");
    store
        .update_snapshot(&mut SnapshotRecord {
            status,
            ..record.clone()
        })
        .expect("update snapshot");
    record.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_follows_the_table() {
    let h = Harness::new();
    let rows = table();
    let mut ids = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let id = stored(h.store.as_ref(), &format!("row-{i}"), row.stored);
        match row.host {
            Host::Missing => {}
            Host::Alive => h.runtime.add_host_sandbox(id, Life::Running),
            Host::Frozen => h.runtime.add_host_sandbox(id, Life::Paused),
            Host::Dead => h.runtime.add_host_sandbox(id, Life::Stopped),
            Host::Stalled => {
                h.runtime.add_host_sandbox(id, Life::Running);
                h.runtime.set_stall(id, true);
            }
        }
        ids.push(id);
    }
    // Host state no sandbox owns at all.
    let orphan = Uuid::new_v4();
    h.runtime.add_host_sandbox(orphan, Life::Running);
    let creating = snapshot(h.store.as_ref(), SnapshotStatus::Creating);
    let deleting = snapshot(h.store.as_ref(), SnapshotStatus::Deleting);

    h.service.reconcile().await.expect("reconcile");

    for (row, id) in rows.iter().zip(&ids) {
        let what = format!("{:?} with host {:?}", row.stored, row.host);
        let settled = || {
            let r = h.get(*id);
            let calls = (
                h.runtime.calls_for(Op::Start, *id),
                h.runtime.calls_for(Op::Destroy, *id),
                h.runtime.calls_for(Op::Connect, *id),
            );
            r.status == row.want && calls == row.calls && h.runtime.life(*id).is_some() == row.kept
        };
        let deadline = Instant::now() + PATIENCE;
        while !settled() {
            if Instant::now() >= deadline {
                let r = h.get(*id);
                panic!(
                    "{what}: status {:?} (want {:?}), error {:?}, calls (start, destroy, connect) = ({}, {}, {}) (want {:?}), on host: {:?}",
                    r.status,
                    row.want,
                    r.error,
                    h.runtime.calls_for(Op::Start, *id),
                    h.runtime.calls_for(Op::Destroy, *id),
                    h.runtime.calls_for(Op::Connect, *id),
                    row.calls,
                    h.runtime.life(*id),
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = h.get(*id);
        match row.error {
            Some(part) => {
                let error = r.error.clone().unwrap_or_default();
                assert!(error.contains(part), "{what}: error {error:?}");
            }
            None => assert_eq!(r.error, None, "{what}"),
        }
        if row.want == SandboxStatus::Running {
            let (code, out) = h.exec(*id, &["echo", "back"]).await.expect(&what);
            assert_eq!((code, out.as_str()), (0, "echo back"), "{what}");
            assert!(r.running_since.is_some(), "{what}: the clock runs");
        }
        if row.want == SandboxStatus::Paused {
            assert!(r.running_since.is_none(), "{what}: the clock stands still");
        }
    }
    eventually("the orphan is destroyed", || {
        h.runtime.calls_for(Op::Destroy, orphan) == 1 && h.runtime.life(orphan).is_none()
    })
    .await;
    let failed = h.store.get_snapshot(creating).unwrap().unwrap();
    assert_eq!(failed.status, SnapshotStatus::Failed);
    assert_eq!(
        failed.error.as_deref(),
        Some("interrupted by a restart of sbxd")
    );
    let deleted = h.store.get_snapshot(deleting).unwrap().unwrap();
    assert_eq!(deleted.status, SnapshotStatus::Deleted);
}
