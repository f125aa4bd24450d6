//! Workspace quotas (`--workspace-max-*`) on the fake runtime: the store
//! refuses the insert, nothing boots, and ended sandboxes give their share back.

use super::*;
use crate::service::ServiceError;

#[tokio::test]
async fn a_workspace_at_its_quota_is_refused_until_a_sandbox_ends() {
    let h = Harness::with(|c| {
        c.limits.workspace_quota = sbx_store::WorkspaceQuota {
            sandboxes: 2,
            vcpus: 0,
            memory_mb: 0,
        }
    });
    let a = h.running("a").await;
    h.running("b").await;
    let starts = h.runtime.calls(crate::runtime::fake::Op::Start);
    match h.service.create(WS, request("c")).await {
        Err(ServiceError::WorkspaceQuota(why)) => {
            assert_eq!(why, "2 of 2 sandboxes in use", "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.runtime.calls(crate::runtime::fake::Op::Start),
        starts,
        "nothing booted"
    );
    let metrics = sbx_metrics::global().encode();
    assert!(
        metrics.contains(r#"sbx_admission_refusals_total{reason="quota"} "#),
        "{metrics}"
    );
    // A repeat of a create that worked still answers with its sandbox.
    match h.service.create(WS, request("a")).await {
        Ok(CreateOutcome::Existing(s)) => assert_eq!(s.id, a.id),
        other => panic!("{other:?}"),
    }
    // Another workspace has its own quota.
    assert!(matches!(
        h.service.create("other-ws/env", request("c")).await,
        Ok(CreateOutcome::Created(_))
    ));
    h.service.destroy(WS, a.id).await.unwrap();
    h.wait_status(a.id, SandboxStatus::Terminated).await;
    h.running("c").await;
}

#[tokio::test]
async fn vcpus_and_memory_are_summed_over_the_workspace() {
    let h = Harness::with(|c| {
        c.limits.workspace_quota = sbx_store::WorkspaceQuota {
            sandboxes: 0,
            vcpus: 2,
            memory_mb: 4096,
        }
    });
    h.running("a").await;
    let big = CreateSandboxRequest {
        vcpu: Some(2),
        memory_mb: Some(2048),
        ..request("big")
    };
    match h.service.create(WS, big).await {
        Err(ServiceError::WorkspaceQuota(why)) => {
            assert_eq!(
                why,
                "1 of 2 vCPUs in use, 1024 of 4096 MiB of memory in use"
            )
        }
        other => panic!("{other:?}"),
    }
    h.running("b").await;
}
