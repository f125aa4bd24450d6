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

#[tokio::test]
async fn every_grid_shape_boots_and_others_are_refused_naming_the_allowed() {
    let h = Harness::new();
    for (vcpu, memory_mb) in sbx_api_types::validate::SHAPES {
        let mut req = request(&format!("shape-{vcpu}x{memory_mb}"));
        req.vcpu = Some(vcpu.into());
        req.memory_mb = Some(memory_mb.into());
        match h.service.create(WS, req).await {
            Ok(CreateOutcome::Created(s)) => {
                assert_eq!((s.vcpu, s.memory_mb), (vcpu, memory_mb));
            }
            other => panic!("{vcpu}/{memory_mb}: {other:?}"),
        }
    }
    let mut off = request("off-grid");
    off.vcpu = Some(3);
    off.memory_mb = Some(3072);
    match h.service.create(WS, off).await {
        Err(ServiceError::Invalid(e)) => assert!(e.to_string().contains("4/16384"), "{e}"),
        other => panic!("3/3072: {other:?}"),
    }
}

#[tokio::test]
async fn shapes_narrow_what_creates_may_ask_for() {
    let h = Harness::with(|c| c.shapes = vec![(1, 1024), (2, 8192)]);
    let mut big = request("big");
    big.vcpu = Some(2);
    big.memory_mb = Some(8192);
    assert!(matches!(
        h.service.create(WS, big).await,
        Ok(CreateOutcome::Created(_))
    ));
    let mut seed = request("seed");
    seed.vcpu = Some(2);
    seed.memory_mb = Some(2048);
    match h.service.create(WS, seed).await {
        Err(ServiceError::Invalid(e)) => assert_eq!(
            e.to_string(),
            "resources: 2 vCPU / 2048 MiB is not offered; use 1/1024 or 2/8192"
        ),
        other => panic!("2/2048 outside --shapes: {other:?}"),
    }
    assert_eq!(
        h.runtime.calls(Op::Start),
        1,
        "the refused create booted nothing"
    );
}

#[test]
fn e2b_sandboxes_take_two_vcpus_when_offered() {
    use crate::service::e2b::shape_for;
    assert_eq!(shape_for(&sbx_api_types::validate::SHAPES), (2, 2048));
    assert_eq!(shape_for(&[(1, 1024), (2, 4096), (2, 8192)]), (2, 4096));
    assert_eq!(shape_for(&[(1, 2048), (4, 4096)]), (1, 2048));
}
