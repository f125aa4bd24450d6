//! Concurrent transitions of one sandbox in one process: the final state is
//! consistent and every transition reached the runtime at most once.

use super::*;
use crate::runtime::fake::{Life, Op};

/// Races a pause against a destroy of one sandbox, `rounds` times.
async fn pause_vs_destroy(h: &Harness, rounds: usize) {
    for round in 0..rounds {
        let r = h.running(&format!("race-{round}")).await;
        let (s1, s2) = (h.service.clone(), h.service.clone());
        let pause = tokio::spawn(async move { s1.pause(WS, r.id).await });
        let destroy = tokio::spawn(async move { s2.destroy(WS, r.id).await });
        let (paused, destroyed) = (pause.await.unwrap(), destroy.await.unwrap());
        assert!(destroyed.is_ok(), "round {round}: {destroyed:?}");
        let end = h.wait_status(r.id, SandboxStatus::Terminated).await;
        assert!(end.running_since.is_none());
        assert_eq!(h.runtime.calls_for(Op::Destroy, r.id), 1, "round {round}");
        assert_eq!(h.runtime.life(r.id), None);
        // Either the pause won (and ran once) or it found the sandbox ending.
        let pauses = h.runtime.calls_for(Op::Pause, r.id);
        match paused {
            Ok(p) => {
                assert_eq!(p.status, SandboxStatus::Paused);
                assert_eq!(pauses, 1, "round {round}");
            }
            Err(_) => assert_eq!(pauses, 0, "round {round}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_racing_destroy_ends_terminated_with_one_call_each() {
    let h = Harness::new();
    pause_vs_destroy(&h, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_pause_racing_destroy_is_finished_before_the_teardown() {
    let h = Harness::new();
    h.runtime.set_delay(Op::Pause, Duration::from_millis(100));
    pause_vs_destroy(&h, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_pauses_resumes_and_destroys_converge() {
    let h = Harness::new();
    let r = h.running("hammered").await;
    let mut tasks = Vec::new();
    for i in 0..12 {
        let s = h.service.clone();
        tasks.push(tokio::spawn(async move {
            match i % 3 {
                0 => s.pause(WS, r.id).await.map(|_| ()),
                1 => s.resume(WS, r.id).await.map(|_| ()),
                _ => s.destroy(WS, r.id).await.map(|_| ()),
            }
        }));
    }
    for t in tasks {
        let _ = t.await.unwrap();
    }
    h.wait_status(r.id, SandboxStatus::Terminated).await;
    assert_eq!(h.runtime.calls_for(Op::Destroy, r.id), 1);
    assert_eq!(h.runtime.life(r.id), None);
    // Every pause that reached the runtime was of a running sandbox and vice versa:
    // the calls alternate, starting with a pause.
    let flips: Vec<Op> = h
        .runtime
        .call_log()
        .into_iter()
        .filter(|(op, id)| *id == r.id && matches!(op, Op::Pause | Op::Resume))
        .map(|(op, _)| op)
        .collect();
    for (i, op) in flips.iter().enumerate() {
        let want = if i % 2 == 0 { Op::Pause } else { Op::Resume };
        assert_eq!(*op, want, "{flips:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_name_creates_boot_one_sandbox() {
    let h = Harness::new();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let s = h.service.clone();
        tasks.push(tokio::spawn(async move {
            s.create(WS, request("only-one")).await
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        match t.await.unwrap().unwrap() {
            CreateOutcome::Created(r) | CreateOutcome::Existing(r) => ids.push(r.id),
        }
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(h.runtime.calls(Op::Start), 1);
    h.wait_status(ids[0], SandboxStatus::Running).await;
    assert_eq!(h.runtime.life(ids[0]), Some(Life::Running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_racing_pause_and_destroy_ends_consistent() {
    let h = Harness::with(|c| c.limits.snapshot_verify = false);
    h.runtime
        .set_delay(Op::Checkpoint, Duration::from_millis(100));
    let r = h.running("snapped").await;
    let (s1, s2, s3) = (h.service.clone(), h.service.clone(), h.service.clone());
    let snap = tokio::spawn(async move { s1.snapshot_create(WS, r.id, None).await });
    eventually("the checkpoint is under way", || {
        h.runtime.calls_for(Op::Checkpoint, r.id) == 1
    })
    .await;
    let pause = tokio::spawn(async move { s2.pause(WS, r.id).await });
    let destroy = tokio::spawn(async move { s3.destroy(WS, r.id).await });
    let snap = snap.await.unwrap().expect("snapshot answered");
    let _ = pause.await.unwrap();
    destroy.await.unwrap().expect("destroy answered");
    // The checkpoint held the transition lock: it finished first, on a running sandbox.
    assert_eq!(snap.status, sbx_store::SnapshotStatus::Ready, "{snap:?}");
    h.wait_status(r.id, SandboxStatus::Terminated).await;
    assert_eq!(h.runtime.calls_for(Op::Checkpoint, r.id), 1);
    assert!(h.runtime.calls_for(Op::Pause, r.id) <= 1);
    assert_eq!(h.runtime.calls_for(Op::Destroy, r.id), 1);
    assert_eq!(h.runtime.life(r.id), None);
}
