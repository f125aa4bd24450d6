//! Create: the RUNNING path, name idempotency, boot failure and boot timeout.

use super::*;
use crate::runtime::fake::{Life, Op};
use crate::service::ServiceError;

#[tokio::test]
async fn create_boots_configures_and_answers_running() {
    let h = Harness::new();
    let r = h.running("first").await;
    assert!(r.started_at.is_some() && h.get(r.id).running_since.is_some());
    assert_eq!(h.runtime.calls_for(Op::Start, r.id), 1);
    assert_eq!(h.runtime.life(r.id), Some(Life::Running));
    // The agent was configured with the sandbox's environment (plus the proxy variables).
    let env = h.runtime.configured_env(r.id).expect("configured");
    assert_eq!(env["GREETING"], "hello");
    assert!(env.contains_key("HTTP_PROXY") || env.contains_key("http_proxy"));
    // The registered connection serves commands without a new runtime connect.
    assert_eq!(
        h.exec(r.id, &["printenv", "GREETING"]).await.unwrap(),
        (0, "hello\n".into())
    );
    assert_eq!(h.runtime.calls_for(Op::Connect, r.id), 0);
}

#[tokio::test]
async fn a_held_name_answers_the_same_sandbox() {
    let h = Harness::new();
    let first = h.running("named").await;
    match h.service.create(WS, request("named")).await {
        Ok(CreateOutcome::Existing(again)) => assert_eq!(again.id, first.id),
        other => panic!("expected the existing sandbox, got {other:?}"),
    }
    let mut different = request("named");
    different.environment = Some(BTreeMap::from([("GREETING".into(), "bye".into())]));
    let taken = h.service.create(WS, different).await;
    assert!(
        matches!(taken, Err(ServiceError::NameTaken(_))),
        "{taken:?}"
    );
    assert_eq!(h.runtime.calls(Op::Start), 1, "one boot for one name");
}

#[tokio::test]
async fn a_boot_failure_fails_the_sandbox_and_cleans_up() {
    let h = Harness::new();
    h.runtime.fail_next(Op::Start, "no more loop devices");
    let r = h.create("doomed").await;
    assert_eq!(r.status, SandboxStatus::Failed, "{r:?}");
    let error = r.error.clone().unwrap_or_default();
    assert!(
        error.contains("failed to start") && error.contains("no more loop devices"),
        "{error}"
    );
    assert!(r.ended_at.is_some());
    eventually("the failed boot is cleaned up", || {
        h.runtime.calls_for(Op::Destroy, r.id) == 1
    })
    .await;
    // The name is free again.
    let again = h.running("doomed").await;
    assert_ne!(again.id, r.id);
}

#[tokio::test]
async fn a_boot_that_hangs_times_out() {
    let h = Harness::with(|c| c.limits.start_timeout = Duration::from_millis(300));
    h.runtime.hang_next_start();
    let r = h.create("slow").await;
    assert_eq!(r.status, SandboxStatus::Failed, "{r:?}");
    assert_eq!(r.error.as_deref(), Some("sandbox did not start in time"));
    eventually("the hung container is removed", || {
        h.runtime.calls_for(Op::Destroy, r.id) == 1 && h.runtime.life(r.id).is_none()
    })
    .await;
}

#[tokio::test]
async fn a_boot_slower_than_the_sync_wait_answers_starting() {
    let h = Harness::with(|c| c.limits.create_sync_wait = Duration::from_millis(20));
    // Far longer than the sync wait, so that the order holds on a loaded machine.
    h.runtime.set_delay(Op::Start, Duration::from_secs(1));
    let r = h.create("patient").await;
    assert_eq!(r.status, SandboxStatus::Starting);
    h.wait_status(r.id, SandboxStatus::Running).await;
    assert_eq!(h.runtime.calls_for(Op::Start, r.id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_during_the_boot_leaves_nothing_on_the_host() {
    let h = Harness::with(|c| c.limits.create_sync_wait = Duration::from_millis(20));
    h.runtime.set_delay(Op::Start, Duration::from_secs(1));
    let r = h.create("short-boot").await;
    assert_eq!(r.status, SandboxStatus::Starting);
    h.service.destroy(WS, r.id).await.unwrap();
    h.wait_status(r.id, SandboxStatus::Terminated).await;
    // The teardown ran before the container existed; the boot removes what it made.
    eventually("the late container is removed", || {
        h.runtime.calls_for(Op::Start, r.id) == 1
            && h.runtime.calls_for(Op::Destroy, r.id) == 2
            && h.runtime.life(r.id).is_none()
    })
    .await;
    assert_eq!(h.get(r.id).status, SandboxStatus::Terminated);
}
