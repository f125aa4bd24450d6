//! Pause/resume, destroy and the active-runtime limit.

use super::*;
use crate::runtime::fake::{Life, Op};
use crate::service::{DestroyOutcome, ServiceError};

#[tokio::test]
async fn pause_and_resume_are_idempotent_and_stop_the_clock() {
    let h = Harness::new();
    let r = h.running("sleeper").await;
    let paused = h.service.pause(WS, r.id).await.unwrap();
    assert_eq!(paused.status, SandboxStatus::Paused);
    assert!(h.get(r.id).running_since.is_none());
    assert_eq!(h.runtime.life(r.id), Some(Life::Paused));
    // Pausing a paused sandbox answers it as it is, without the runtime.
    let again = h.service.pause(WS, r.id).await.unwrap();
    assert_eq!(again.status, SandboxStatus::Paused);
    assert_eq!(h.runtime.calls_for(Op::Pause, r.id), 1);
    // The clock stands still while paused.
    let frozen = h.get(r.id).active_ms;
    let later = Instant::now() + Duration::from_millis(30);
    eventually("time passes", || Instant::now() >= later).await;
    assert_eq!(h.get(r.id).active_runtime_ms(chrono::Utc::now()), frozen);
    assert!(
        h.exec(r.id, &["true"]).await.is_err(),
        "a paused sandbox takes no commands"
    );

    let resumed = h.service.resume(WS, r.id).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Running);
    let row = h.get(r.id);
    assert!(row.running_since.is_some());
    assert_eq!(row.active_ms, frozen, "resume does not reset the clock");
    let again = h.service.resume(WS, r.id).await.unwrap();
    assert_eq!(again.status, SandboxStatus::Running);
    assert_eq!(h.runtime.calls_for(Op::Resume, r.id), 1);
    // The old connection answers again once thawed.
    assert_eq!(
        h.exec(r.id, &["echo", "back"]).await.unwrap().1,
        "echo back"
    );
}

#[tokio::test]
async fn a_failed_pause_goes_back_to_running() {
    let h = Harness::new();
    let r = h.running("stubborn").await;
    h.runtime.fail_next(Op::Pause, "cgroup freeze failed");
    assert!(matches!(
        h.service.pause(WS, r.id).await,
        Err(ServiceError::Unavailable(_))
    ));
    let now = h.get(r.id);
    assert_eq!(now.status, SandboxStatus::Running);
    assert!(now.running_since.is_some());
    h.runtime.fail_next(Op::Resume, "thaw failed");
    h.service.pause(WS, r.id).await.unwrap();
    assert!(h.service.resume(WS, r.id).await.is_err());
    assert_eq!(h.get(r.id).status, SandboxStatus::Paused);
}

#[tokio::test]
async fn destroy_is_idempotent_and_reaches_the_runtime_once() {
    let h = Harness::new();
    let r = h.running("short-lived").await;
    let outcome = h.service.destroy(WS, r.id).await.unwrap();
    assert!(matches!(outcome, DestroyOutcome::Terminated), "{outcome:?}");
    let gone = h.get(r.id);
    assert_eq!(gone.status, SandboxStatus::Terminated);
    assert!(gone.ended_at.is_some() && gone.running_since.is_none());
    assert!(matches!(
        h.service.destroy(WS, r.id).await,
        Ok(DestroyOutcome::Terminated)
    ));
    assert_eq!(h.runtime.calls_for(Op::Destroy, r.id), 1);
    assert_eq!(h.runtime.life(r.id), None);
    assert!(matches!(
        h.service.destroy(WS, Uuid::new_v4()).await,
        Err(ServiceError::SandboxNotFound)
    ));
    assert!(matches!(
        h.service.destroy("other-ws/env", r.id).await,
        Err(ServiceError::SandboxNotFound)
    ));
    // Paused sandboxes are destroyed the same way.
    let p = h.running("paused-then-gone").await;
    h.service.pause(WS, p.id).await.unwrap();
    h.service.destroy(WS, p.id).await.unwrap();
    assert_eq!(h.get(p.id).status, SandboxStatus::Terminated);
    assert_eq!(h.runtime.calls_for(Op::Destroy, p.id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_teardown_stays_terminating_and_is_retried() {
    let h = Harness::new();
    let r = h.running("sticky").await;
    h.runtime.fail_next(Op::Destroy, "device busy");
    let s = h.service.clone();
    let first = tokio::spawn(async move { s.destroy(WS, r.id).await });
    eventually("the first teardown attempt failed", || {
        h.runtime.calls_for(Op::Destroy, r.id) == 1
    })
    .await;
    // The truth until the retry succeeds: resources may be left.
    assert_eq!(h.get(r.id).status, SandboxStatus::Terminating);
    // A repeated destroy joins the teardown in progress instead of starting another.
    let again = h.service.destroy(WS, r.id).await.unwrap();
    assert!(matches!(again, DestroyOutcome::Terminated), "{again:?}");
    let first = first.await.unwrap().unwrap();
    assert!(matches!(first, DestroyOutcome::Terminated), "{first:?}");
    assert_eq!(h.get(r.id).status, SandboxStatus::Terminated);
    assert_eq!(
        h.runtime.calls_for(Op::Destroy, r.id),
        2,
        "one failure, one retry"
    );
}

#[tokio::test]
async fn the_active_runtime_limit_ends_running_sandboxes_only() {
    let h = Harness::with(|c| c.limits.active_runtime = Duration::from_millis(500));
    let busy = h.running("busy").await;
    let resting = h.running("resting").await;
    h.service.pause(WS, resting.id).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    // The sweeper is driven by hand here (sbxd runs it every second).
    while h.get(busy.id).status != SandboxStatus::Terminated {
        assert!(
            Instant::now() < deadline,
            "the limit never ended {}",
            busy.id
        );
        h.service.enforce_runtime_limits().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = h.get(busy.id);
    let reason = ended.error.unwrap_or_default();
    assert!(reason.starts_with("active runtime limit"), "{reason}");
    assert!(ended.active_ms >= 500);
    assert_eq!(h.runtime.calls_for(Op::Destroy, busy.id), 1);
    // A paused sandbox's clock stands still: it is not ended.
    h.service.enforce_runtime_limits().await;
    assert_eq!(h.get(resting.id).status, SandboxStatus::Paused);
    assert_eq!(h.runtime.calls_for(Op::Destroy, resting.id), 0);
}

#[tokio::test]
async fn a_sandbox_killed_behind_the_services_back_fails_with_the_hosts_reason() {
    let h = Harness::new();
    let r = h.running("victim").await;
    let other = h.running("bystander").await;
    h.runtime.kill(
        r.id,
        Some("sandbox exceeded its memory limit and was stopped"),
    );
    let failed = h.wait_status(r.id, SandboxStatus::Failed).await;
    assert_eq!(
        failed.error.as_deref(),
        Some("sandbox exceeded its memory limit and was stopped")
    );
    eventually("the dead sandbox is cleaned up", || {
        h.runtime.calls_for(Op::Destroy, r.id) == 1
    })
    .await;
    assert_eq!(
        h.exec(other.id, &["echo", "ok"]).await.unwrap().1,
        "echo ok"
    );
}

#[tokio::test]
async fn a_dropped_connection_is_reopened_while_the_sandbox_lives() {
    let h = Harness::new();
    let r = h.running("flaky-relay").await;
    h.runtime.drop_connections(r.id);
    eventually("the monitor reconnects", || {
        h.runtime.calls_for(Op::Connect, r.id) >= 1
    })
    .await;
    assert_eq!(
        h.exec(r.id, &["echo", "again"]).await.unwrap().1,
        "echo again"
    );
    assert_eq!(h.get(r.id).status, SandboxStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_during_a_reconnect_does_not_fail_the_sandbox() {
    let h = Harness::new();
    let r = h.running("frozen-mid-reconnect").await;
    // The relay dies and the monitor's reconnect waits for a hello that the
    // agent will not answer before the sandbox is paused.
    h.runtime.set_stall(r.id, true);
    h.runtime.drop_connections(r.id);
    eventually("the monitor is reconnecting", || {
        h.runtime.calls_for(Op::Connect, r.id) == 1
    })
    .await;
    let paused = h.service.pause(WS, r.id).await.unwrap();
    assert_eq!(paused.status, SandboxStatus::Paused);
    h.runtime.set_stall(r.id, false);
    // The handshake (1 s on the fake) times out against the frozen agent.
    // The monitor decides under the attach gate: once the handshake failed
    // and the gate is free, it has decided.
    eventually("the reconnect gave up", || {
        h.runtime.failed_handshakes(r.id) == 1 && h.service.gate_for(r.id).try_lock().is_ok()
    })
    .await;
    let now = h.get(r.id);
    assert_eq!(now.status, SandboxStatus::Paused, "{:?}", now.error);
    assert_eq!(h.runtime.calls_for(Op::Destroy, r.id), 0);
    h.service.resume(WS, r.id).await.unwrap();
    assert_eq!(
        h.exec(r.id, &["echo", "thawed"]).await.unwrap().1,
        "echo thawed"
    );
}

#[tokio::test]
async fn a_network_update_is_stored_for_a_running_sandbox_of_its_tenant_only() {
    use sbx_api_types::{AllowRule, NetworkMode, NetworkPolicy};
    let h = Harness::new();
    let r = h.running("net").await;
    let allow = NetworkPolicy {
        mode: NetworkMode::Allowlist,
        allow: vec![AllowRule {
            host: Some("api.example.com".into()),
            cidr: None,
            ports: None,
        }],
    };
    let updated = h
        .service
        .update_network(WS, r.id, allow.clone())
        .await
        .unwrap();
    assert_eq!(updated.network, allow);
    assert_eq!(h.get(r.id).network, allow);
    // Another tenant's key and a bad policy change nothing.
    let public = NetworkPolicy::mode(NetworkMode::Public);
    assert!(matches!(
        h.service
            .update_network("other-ws/env", r.id, public.clone())
            .await,
        Err(ServiceError::SandboxNotFound)
    ));
    assert!(matches!(
        h.service
            .update_network(WS, r.id, NetworkPolicy::mode(NetworkMode::Allowlist))
            .await,
        Err(ServiceError::Invalid(_))
    ));
    assert_eq!(h.get(r.id).network, allow);
    // Paused: refused as not running, the stored policy kept.
    h.service.pause(WS, r.id).await.unwrap();
    assert!(matches!(
        h.service.update_network(WS, r.id, public).await,
        Err(ServiceError::WrongState { .. })
    ));
    assert_eq!(h.get(r.id).network, allow);
}
