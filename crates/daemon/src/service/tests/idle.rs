//! Idle sandboxes sleep (`service/idle.rs`) on the fake runtime, whose
//! freeze is a flag on the fake guest: its agent reads nothing while asleep,
//! so a request that did not thaw first would time out.

use super::*;
use crate::runtime::fake::{Life, Op};
use crate::service::DestroyOutcome;
use sbx_store::SnapshotStatus;

/// A harness whose sandboxes may sleep as soon as nothing happens.
fn sleepy() -> Harness {
    Harness::with(|c| c.limits.freeze_idle_after = Duration::from_nanos(1))
}

#[tokio::test]
async fn an_idle_sandbox_sleeps_and_its_next_request_wakes_it() {
    let h = sleepy();
    let r = h.running("idle").await;
    assert_eq!(h.service.freeze_idle().await, 1);
    assert!(h.runtime.is_asleep(r.id));
    assert_eq!(h.service.freeze_idle().await, 0, "asleep already");
    // sbxd's own usage sampling neither wakes it nor fails on it.
    h.service.sample_usage().await;
    h.service.sample_usage().await;
    assert!(h.runtime.is_asleep(r.id));
    assert_eq!(h.runtime.calls_for(Op::Thaw, r.id), 0);

    assert_eq!(h.exec(r.id, &["echo", "hi"]).await.unwrap().0, 0);
    assert!(!h.runtime.is_asleep(r.id));
    assert_eq!(h.runtime.calls_for(Op::Thaw, r.id), 1);
    // And it sleeps again once idle.
    assert_eq!(h.service.freeze_idle().await, 1);
    assert_eq!(h.exec(r.id, &["echo", "hi"]).await.unwrap().0, 0);
    assert_eq!(h.runtime.calls_for(Op::Thaw, r.id), 2);
}

#[tokio::test]
async fn a_guest_process_or_a_recent_request_keeps_a_sandbox_awake() {
    let h = sleepy();
    let busy = h.running("busy").await;
    let idle = h.running("idle").await;
    // A second pid in the guest's /proc: something besides the agent runs.
    h.runtime.put_guest_file(busy.id, "/proc/42", b"");
    assert_eq!(h.service.freeze_idle().await, 1);
    assert!(!h.runtime.is_asleep(busy.id));
    assert!(h.runtime.is_asleep(idle.id));

    let patient = Harness::with(|c| c.limits.freeze_idle_after = Duration::from_secs(3600));
    let r = patient.running("used").await;
    assert_eq!(patient.service.freeze_idle().await, 0);
    assert!(!patient.runtime.is_asleep(r.id));
    assert_eq!(patient.runtime.calls_for(Op::Freeze, r.id), 0);

    let never = Harness::with(|c| c.limits.freeze_idle_after = Duration::ZERO);
    let r = never.running("never").await;
    assert_eq!(never.service.freeze_idle().await, 0);
    assert_eq!(never.runtime.calls_for(Op::Freeze, r.id), 0);
}

#[tokio::test]
async fn sbxds_relay_does_not_keep_a_sandbox_awake_unless_the_agent_is_too_old_to_tell() {
    let h = sleepy();
    let relayed = h.running("relayed").await;
    let old = h.running("old").await;
    // Both reached through a relay (pid 7 in the guest): the agent leaves it
    // out; an agent older than `guest_processes` is asked for its /proc,
    // where the relay is one more pid, so that sandbox stays awake.
    for id in [relayed.id, old.id] {
        h.runtime.put_guest_file(id, "/proc/7", b"relay");
    }
    h.runtime.use_older_agent(old.id);
    assert_eq!(h.service.freeze_idle().await, 1);
    assert!(h.runtime.is_asleep(relayed.id));
    assert!(!h.runtime.is_asleep(old.id));

    // The older agent's sandbox sleeps once only PID 1 shows in its /proc.
    let fresh = h.running("fresh").await;
    h.runtime.use_older_agent(fresh.id);
    assert_eq!(h.service.freeze_idle().await, 1);
    assert!(h.runtime.is_asleep(fresh.id));
}

#[tokio::test]
async fn guests_that_do_not_answer_delay_a_round_once_not_once_each() {
    let h = sleepy();
    let mut silent = Vec::new();
    for i in 0..8 {
        let r = h.running(&format!("silent{i}")).await;
        h.runtime.set_stall(r.id, true);
        silent.push(r.id);
    }
    let idle = h.running("idle").await;
    let started = std::time::Instant::now();
    assert_eq!(h.service.freeze_idle().await, 1);
    // Each silent guest's count waits its full second; asked one after
    // another, the round would take 8 s.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "round took {took:?}");
    assert!(h.runtime.is_asleep(idle.id));
    assert!(silent.iter().all(|id| !h.runtime.is_asleep(*id)));
}

#[tokio::test]
async fn pause_snapshot_and_destroy_work_on_a_sleeping_sandbox() {
    let h = sleepy();
    let r = h.running("a").await;
    assert_eq!(h.service.freeze_idle().await, 1);
    h.service.pause(WS, r.id).await.unwrap();
    assert_eq!(h.runtime.life(r.id), Some(Life::Paused));
    h.service.resume(WS, r.id).await.unwrap();
    assert_eq!(h.exec(r.id, &["echo", "hi"]).await.unwrap().0, 0);

    assert_eq!(h.service.freeze_idle().await, 1);
    let snap = h
        .service
        .snapshot_create(WS, r.id, Some("asleep".into()))
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Ready, "{snap:?}");
    assert!(!h.runtime.is_asleep(r.id));

    assert_eq!(h.service.freeze_idle().await, 1);
    let outcome = h.service.destroy(WS, r.id).await.unwrap();
    assert!(matches!(outcome, DestroyOutcome::Terminated), "{outcome:?}");
    assert_eq!(h.runtime.life(r.id), None);
}

#[tokio::test]
async fn a_sandbox_thawed_behind_its_connection_sleeps_again() {
    let h = sleepy();
    let r = h.running("a").await;
    assert_eq!(h.service.freeze_idle().await, 1);
    h.runtime.thaw_behind_its_back(r.id);
    // The first round notices (and counts activity), the next one freezes again.
    assert_eq!(h.service.freeze_idle().await, 0);
    assert_eq!(h.service.freeze_idle().await, 1);
    assert!(h.runtime.is_asleep(r.id));
    assert_eq!(h.runtime.calls_for(Op::Freeze, r.id), 2);
}

#[tokio::test]
async fn a_failed_freeze_leaves_the_sandbox_awake_and_serving() {
    let h = sleepy();
    let r = h.running("a").await;
    h.runtime.fail_next(Op::Freeze, "no freezer cgroup");
    assert_eq!(h.service.freeze_idle().await, 0);
    assert!(!h.runtime.is_asleep(r.id));
    assert_eq!(h.exec(r.id, &["echo", "hi"]).await.unwrap().0, 0);
    assert_eq!(h.runtime.calls_for(Op::Thaw, r.id), 0);
    assert_eq!(h.service.freeze_idle().await, 1);
}
