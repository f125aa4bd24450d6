//! Two lifecycle services over one store, as two sbxd on one database: each has
//! its own in-memory locks, so only the store's compare-and-set keeps them
//! apart. They share one fake runtime, whose counters show what reached it.

use super::*;
use crate::runtime::fake::Op;
use crate::service::ServiceError;
use sbx_store::{PostgresStore, SnapshotStatus, TestDatabase};

/// Longest time any one racing call may take before the test calls it hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// Two services on `open()`'s stores (each call another handle on the same data).
struct Pair {
    a: Arc<Service>,
    b: Arc<Service>,
    runtime: Arc<FakeRuntime>,
    _dir: tempfile::TempDir,
}

impl Pair {
    fn new(open: impl Fn(&Config) -> Arc<dyn Store>) -> Pair {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::for_tests(dir.path().to_path_buf());
        config.limits.snapshot_verify = false;
        let runtime = Arc::new(FakeRuntime::new());
        let service = |config: &Config| {
            let secrets =
                crate::service::SecretBox::load_or_create(&config.secret_key_path()).expect("key");
            Service::new(config.clone(), open(config), runtime.clone(), secrets)
        };
        let (a, b) = (service(&config), service(&config));
        Pair {
            a,
            b,
            runtime,
            _dir: dir,
        }
    }

    fn side(&self, i: usize) -> Arc<Service> {
        if i.is_multiple_of(2) {
            self.a.clone()
        } else {
            self.b.clone()
        }
    }
}

/// What one racing call answered: done, or refused with this message.
type Answer = std::result::Result<(), String>;

/// Runs `f` with the deadline; a call that does not answer in time fails the test.
async fn answered<T>(
    what: &str,
    f: impl std::future::Future<Output = crate::service::Result<T>>,
) -> Answer {
    match tokio::time::timeout(DEADLINE, f).await {
        Err(_) => panic!("{what} did not answer within {DEADLINE:?}"),
        Ok(Ok(_)) => Ok(()),
        // The answers one process gives a call that came second: wrong state,
        // or the state kept moving under it.
        Ok(Err(e @ (ServiceError::WrongState { .. } | ServiceError::Conflict(_)))) => {
            Err(e.to_string())
        }
        Ok(Err(e)) => panic!("{what}: unexpected answer {e:?}"),
    }
}

/// `rounds` times: same-name creates through both services, then concurrent
/// pauses, resumes, snapshots and destroys of the one sandbox they made.
async fn hammer(p: &Pair, rounds: usize) {
    for round in 0..rounds {
        let name = format!("hammered-{round}");
        let creates: Vec<_> = (0..4)
            .map(|i| {
                let (s, name) = (p.side(i), name.clone());
                tokio::spawn(async move {
                    tokio::time::timeout(DEADLINE, s.create(WS, request(&name)))
                        .await
                        .expect("create answered in time")
                })
            })
            .collect();
        let mut ids = Vec::new();
        for c in creates {
            match c.await.expect("create task") {
                Ok(CreateOutcome::Created(r) | CreateOutcome::Existing(r)) => ids.push(r.id),
                Err(e) => panic!("round {round}: create: {e:?}"),
            }
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "round {round}: one sandbox per name: {ids:?}");
        let id = ids[0];
        assert_eq!(p.runtime.calls_for(Op::Start, id), 1, "round {round}");
        eventually(
            "the sandbox runs",
            || matches!(p.a.store.blocking().get_sandbox(id).expect("read"), Some(r) if r.status == SandboxStatus::Running),
        )
        .await;

        // Same-name creates among them: the sandbox itself while its name is
        // held (any active state), or one new sandbox once it is TERMINATED.
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let (s, name) = (p.side(i), name.clone());
                tokio::spawn(async move {
                    let mut made = None;
                    let answer = match i % 8 {
                        0 | 3 => answered("pause", s.pause(WS, id)).await,
                        1 | 4 => answered("resume", s.resume(WS, id)).await,
                        2 | 5 => answered("snapshot", s.snapshot_create(WS, id, None)).await,
                        6 => answered("destroy", s.destroy(WS, id)).await,
                        _ => {
                            let created =
                                tokio::time::timeout(DEADLINE, s.create(WS, request(&name)))
                                    .await
                                    .expect("create answered in time");
                            match created {
                                Ok(CreateOutcome::Created(r) | CreateOutcome::Existing(r)) => {
                                    made = Some(r.id);
                                    Ok(())
                                }
                                Err(e) => panic!("create during the race: {e:?}"),
                            }
                        }
                    };
                    (answer, made)
                })
            })
            .collect();
        let mut answers = Vec::new();
        let mut successors = Vec::new();
        for c in calls {
            let (answer, made) = c.await.expect("racing task");
            answers.push(answer);
            successors.extend(made.filter(|m| *m != id));
        }
        successors.sort();
        successors.dedup();
        assert!(
            successors.len() <= 1,
            "round {round}: one successor per name: {successors:?}"
        );
        for next in successors {
            assert_eq!(p.runtime.calls_for(Op::Start, next), 1, "round {round}");
            eventually(
                "the successor runs",
                || matches!(p.a.store.blocking().get_sandbox(next).expect("read"), Some(r) if r.status == SandboxStatus::Running),
            )
            .await;
            p.b.destroy(WS, next).await.expect("destroy the successor");
            eventually(
                "the successor is terminated",
                || matches!(p.a.store.blocking().get_sandbox(next).expect("read"), Some(r) if r.status == SandboxStatus::Terminated),
            )
            .await;
            assert_eq!(p.runtime.calls_for(Op::Destroy, next), 1, "round {round}");
        }

        // Consistent: the store says TERMINATED and nothing is left on the "host".
        eventually(
            "the sandbox is terminated",
            || matches!(p.b.store.blocking().get_sandbox(id).expect("read"), Some(r) if r.status == SandboxStatus::Terminated),
        )
        .await;
        let end = p.a.load(WS, id).await.expect("row");
        assert!(end.running_since.is_none(), "round {round}: {end:?}");
        assert_eq!(p.runtime.life(id), None, "round {round}");
        // Each transition reached the runtime once: one destroy for two destroy
        // calls, and pauses and resumes strictly alternate (no pause of a
        // sandbox another service was pausing already, no double resume).
        assert_eq!(
            p.runtime.calls_for(Op::Destroy, id),
            1,
            "round {round}: {answers:?}"
        );
        let flips: Vec<Op> = p
            .runtime
            .call_log()
            .into_iter()
            .filter(|(op, sid)| *sid == id && matches!(op, Op::Pause | Op::Resume))
            .map(|(op, _)| op)
            .collect();
        for (i, op) in flips.iter().enumerate() {
            let want = if i.is_multiple_of(2) {
                Op::Pause
            } else {
                Op::Resume
            };
            assert_eq!(*op, want, "round {round}: {flips:?}");
        }
        // Every snapshot settles, and none is READY without its own checkpoint.
        let mut snaps = Vec::new();
        eventually("every snapshot settles", || {
            snaps =
                p.a.store
                    .blocking()
                    .list_snapshots(WS, None, 100, None)
                    .expect("list")
                    .into_iter()
                    .filter(|s| s.source_sandbox == id)
                    .collect();
            snaps.iter().all(|s| s.status != SnapshotStatus::Creating)
        })
        .await;
        let ready = snaps
            .iter()
            .filter(|s| s.status == SnapshotStatus::Ready)
            .count();
        let checkpoints = p.runtime.calls_for(Op::Checkpoint, id);
        assert!(
            ready <= checkpoints && checkpoints <= snaps.len(),
            "round {round}: {ready} ready, {checkpoints} checkpoints, {} snapshots",
            snaps.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_one_sqlite_file_never_both_act() {
    let p = Pair::new(|config| {
        Arc::new(SqliteStore::open(&config.database_path()).expect("open SQLite"))
    });
    hammer(&p, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL; run ./scripts/test"]
async fn two_services_on_one_postgresql_never_both_act() {
    let url = std::env::var("SBX_TEST_DATABASE_URL")
        .expect("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL");
    let db = TestDatabase::create(&url).expect("test database");
    let db_url = db.url().to_string();
    let p = Pair::new(move |_| Arc::new(PostgresStore::open(&db_url).expect("open PostgreSQL")));
    hammer(&p, 6).await;
    drop(p);
    drop(db);
}

/// Two services on one SQLite file (the deterministic races below).
fn sqlite_pair() -> Pair {
    Pair::new(|config| Arc::new(SqliteStore::open(&config.database_path()).expect("open SQLite")))
}

/// A running sandbox made through `a`.
async fn running(p: &Pair, name: &str) -> SandboxRecord {
    match p.a.create(WS, request(name)).await {
        Ok(CreateOutcome::Created(r)) if r.status == SandboxStatus::Running => {
            p.a.load(WS, r.id).await.expect("row")
        }
        other => panic!("create {name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_that_lost_to_a_destroy_answers_wrong_state() {
    let p = sqlite_pair();
    let r = running(&p, "paused-then-destroyed").await;
    p.runtime.set_delay(Op::Pause, Duration::from_millis(300));
    let a = p.a.clone();
    let pause = tokio::spawn(async move { a.pause(WS, r.id).await });
    eventually("the pause reached the runtime", || {
        p.runtime.calls_for(Op::Pause, r.id) == 1
    })
    .await;
    // B's lock is its own: only the row (PAUSING, moved on by B) stands between them.
    tokio::time::timeout(DEADLINE, p.b.destroy(WS, r.id))
        .await
        .expect("destroy answered in time")
        .expect("destroy");
    let paused = tokio::time::timeout(DEADLINE, pause)
        .await
        .expect("pause answered in time")
        .expect("pause task");
    match paused {
        Err(ServiceError::WrongState {
            is,
            needs: "RUNNING",
        }) => {
            assert!(is == "TERMINATING" || is == "TERMINATED", "{is}")
        }
        other => panic!("the pause lost to a destroy: {other:?}"),
    }
    eventually(
        "terminated",
        || matches!(p.a.store.blocking().get_sandbox(r.id).expect("read"), Some(s) if s.status == SandboxStatus::Terminated),
    )
    .await;
    assert_eq!(p.runtime.calls_for(Op::Pause, r.id), 1);
    assert_eq!(p.runtime.calls_for(Op::Destroy, r.id), 1);
    assert_eq!(p.runtime.life(r.id), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_that_lost_to_a_pause_decides_again_on_the_new_row() {
    let p = sqlite_pair();
    let r = running(&p, "stale-destroy").await;
    // A read the row, then B paused it (two writes) before A wrote its change.
    let stale = p.a.load(WS, r.id).await.expect("row");
    p.b.pause(WS, r.id).await.expect("pause");
    let paused = p.b.load(WS, r.id).await.expect("row");
    assert_eq!(paused.generation, stale.generation + 2);
    let (row, won) =
        p.a.change_row(stale.clone(), |r| {
            if r.status.is_active() && r.status != SandboxStatus::Terminating {
                r.status = SandboxStatus::Terminating;
            }
        })
        .await
        .expect("the change is made on the current row");
    assert!(won);
    assert_eq!(row.status, SandboxStatus::Terminating);
    assert_eq!(row.generation, stale.generation + 3);
    // A pause on that stale read is refused by what the row says now.
    let (row, won) =
        p.a.change_row(stale, |r| {
            if r.status == SandboxStatus::Running {
                r.status = SandboxStatus::Pausing;
            }
        })
        .await
        .expect("answered");
    assert!(!won, "nothing to pause: {row:?}");
    assert_eq!(row.status, SandboxStatus::Terminating);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_through_the_other_service_waits_for_the_checkpoint() {
    let p = sqlite_pair();
    let r = running(&p, "paused-after-snapshot").await;
    p.runtime
        .set_delay(Op::Checkpoint, Duration::from_millis(300));
    let a = p.a.clone();
    let snap = tokio::spawn(async move { a.snapshot_create(WS, r.id, None).await });
    eventually("the checkpoint is under way", || {
        p.runtime.calls_for(Op::Checkpoint, r.id) == 1
    })
    .await;
    // B does not hold A's lock: the CREATING snapshot in the store holds the pause back.
    let paused = tokio::time::timeout(DEADLINE, p.b.pause(WS, r.id))
        .await
        .expect("pause answered in time")
        .expect("pause");
    assert_eq!(paused.status, SandboxStatus::Paused);
    let snap = snap.await.expect("task").expect("snapshot answered");
    assert_eq!(snap.status, SnapshotStatus::Ready, "{snap:?}");
    let order: Vec<Op> = p
        .runtime
        .call_log()
        .into_iter()
        .filter(|(op, id)| *id == r.id && matches!(op, Op::Checkpoint | Op::Pause))
        .map(|(op, _)| op)
        .collect();
    assert_eq!(order, vec![Op::Checkpoint, Op::Pause]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_whose_sandbox_changed_during_the_checkpoint_is_not_ready() {
    let p = sqlite_pair();
    let r = running(&p, "moved-under-snapshot").await;
    p.runtime
        .set_delay(Op::Checkpoint, Duration::from_millis(300));
    let a = p.a.clone();
    let snap = tokio::spawn(async move { a.snapshot_create(WS, r.id, None).await });
    eventually("the checkpoint is under way", || {
        p.runtime.calls_for(Op::Checkpoint, r.id) == 1
    })
    .await;
    // Another actor writes the row meanwhile (as one that ignores CREATING would).
    let mut moved = p.b.load(WS, r.id).await.expect("row");
    moved.error = Some("changed by another actor".into());
    p.b.store
        .update_sandbox(&mut moved)
        .await
        .expect("compare-and-set on the current row");
    let snap = snap.await.expect("task").expect("snapshot answered");
    let mut settled = None;
    eventually("the snapshot settles", || {
        settled = p.a.store.blocking().get_snapshot(snap.id).expect("read");
        matches!(&settled, Some(s) if s.status != SnapshotStatus::Creating)
    })
    .await;
    let settled = settled.expect("snapshot");
    assert_eq!(settled.status, SnapshotStatus::Failed, "{settled:?}");
}

/// One `Idempotency-Key` claimed through `a` while `b` repeats the request: `b` waits
/// for a live claim and replays its answer; a claim whose owner stopped renewing its
/// lease is reported as interrupted, never run again.
async fn claims_of_a_live_peer_are_waited_for(p: &Pair) {
    use crate::service::{Claim, ClaimKey};
    let key = |k: &str| ClaimKey {
        tenant: WS.to_string(),
        path: "/v2/sandboxes/x/exec".to_string(),
        key: k.to_string(),
    };
    // A request running in `a`: `b`'s repeat waits for it instead of calling it interrupted.
    let running = key("running-in-a");
    assert_eq!(
        p.a.idempotency_claim(&running, "f").await.expect("claim"),
        Claim::Run
    );
    let (b, repeat_key) = (p.b.clone(), running.clone());
    let mut repeat = tokio::spawn(async move { b.idempotency_claim(&repeat_key, "f").await });
    // Without the lease the repeat would answer operation_ambiguous at once; with it, it
    // waits for as long as the first request runs.
    let early = tokio::time::timeout(Duration::from_millis(500), &mut repeat).await;
    assert!(
        early.is_err(),
        "the repeat answered while the first request ran: {early:?}"
    );
    p.a.idempotency_finish(&running, 200, b"{\"done\":true}")
        .await;
    let replayed = tokio::time::timeout(DEADLINE, repeat)
        .await
        .expect("the repeat answered")
        .expect("task")
        .expect("replay");
    assert_eq!(replayed, Claim::Replay(200, b"{\"done\":true}".to_vec()));

    // The lease is renewed while `a` runs a request.
    let renewed = key("renewed-by-a");
    assert_eq!(
        p.a.idempotency_claim(&renewed, "f").await.expect("claim"),
        Claim::Run
    );
    let lease = |k: &str| {
        p.a.store
            .blocking()
            .idempotency_get(WS, "/v2/sandboxes/x/exec", k)
            .expect("read")
            .expect("claim kept")
            .lease_until
    };
    let first = lease("renewed-by-a");
    let claimed_at =
        first - chrono::Duration::from_std(crate::service::CLAIM_LEASE).expect("lease");
    eventually("the clock moves on", || {
        chrono::Utc::now() > claimed_at + chrono::Duration::milliseconds(2)
    })
    .await;
    p.a.renew_idempotency_leases().await;
    assert!(lease("renewed-by-a") > first, "the lease was not renewed");

    // `a` stops (its leases end, as when they run out): `b` says so and runs nothing.
    let abandoned = key("abandoned-by-a");
    assert_eq!(
        p.a.idempotency_claim(&abandoned, "f").await.expect("claim"),
        Claim::Run
    );
    let ended =
        p.b.store
            .blocking()
            .idempotency_abandon_others(p.b.boot_id)
            .expect("end a's leases");
    assert_eq!(ended, 2, "a's two unfinished claims");
    match p.b.idempotency_claim(&abandoned, "f").await {
        Err(ServiceError::Ambiguous(why)) => assert!(why.contains("interrupted"), "{why}"),
        other => panic!("an abandoned claim must be ambiguous: {other:?}"),
    }
    // `b`'s own claims are not touched by ending the others'.
    let own = key("own-of-b");
    assert_eq!(
        p.b.idempotency_claim(&own, "f").await.expect("claim"),
        Claim::Run
    );
    assert_eq!(
        p.b.store
            .blocking()
            .idempotency_abandon_others(p.b.boot_id)
            .expect("end others' leases"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_live_peer_are_waited_for_on_sqlite() {
    claims_of_a_live_peer_are_waited_for(&sqlite_pair()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL; run ./scripts/test"]
async fn claims_of_a_live_peer_are_waited_for_on_postgresql() {
    let url = std::env::var("SBX_TEST_DATABASE_URL")
        .expect("SBX_TEST_DATABASE_URL is not set: run ./scripts/test, which starts PostgreSQL");
    let db = TestDatabase::create(&url).expect("test database");
    let db_url = db.url().to_string();
    let p = Pair::new(move |_| Arc::new(PostgresStore::open(&db_url).expect("open PostgreSQL")));
    claims_of_a_live_peer_are_waited_for(&p).await;
    drop(p);
    drop(db);
}
