//! Snapshots and clones: checkpoint and restore reach the runtime once each.

use super::*;
use crate::runtime::fake::Op;
use crate::service::ServiceError;
use sbx_store::SnapshotStatus;

#[tokio::test]
async fn snapshot_then_clone_restores_memory_and_keeps_the_source_serving() {
    let h = Harness::new();
    let source = h.running("source").await;
    let snap = h
        .service
        .snapshot_create(WS, source.id, Some("snap".into()))
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Ready, "{snap:?}");
    assert!(snap.stored_bytes > 0);
    assert_eq!(snap.compatibility_id, "fake-runtime-v1");
    assert_eq!(h.runtime.calls_for(Op::Checkpoint, source.id), 1);
    // Verification restored the checkpoint once into a throwaway sandbox.
    assert_eq!(h.runtime.calls(Op::Restore), 1);
    // The source reconnected after the checkpoint and still serves.
    assert_eq!(h.get(source.id).status, SandboxStatus::Running);
    assert_eq!(
        h.exec(source.id, &["echo", "still"]).await.unwrap().1,
        "echo still"
    );

    let clone_req = CreateSandboxRequest {
        name: Some("clone".into()),
        snapshot_id: Some(snap.id),
        ..CreateSandboxRequest::default()
    };
    let clone = match h.service.create(WS, clone_req).await.unwrap() {
        CreateOutcome::Created(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(clone.status, SandboxStatus::Running, "{clone:?}");
    assert_eq!(clone.snapshot_id, Some(snap.id));
    assert_eq!(h.runtime.calls_for(Op::Restore, clone.id), 1);
    assert_eq!(h.runtime.calls_for(Op::Start, clone.id), 0);
    // The environment came back with the memory (the clone is not configured again).
    assert_eq!(
        h.exec(clone.id, &["printenv", "GREETING"]).await.unwrap(),
        (0, "hello\n".into())
    );
    assert_eq!(h.runtime.calls_for(Op::WaitReady, clone.id), 1);
    eventually("the verification probe is removed", || {
        h.runtime.host_ids().len() == 2
    })
    .await;
}

#[tokio::test]
async fn a_failed_checkpoint_fails_the_snapshot_and_not_the_source() {
    let h = Harness::with(|c| c.limits.snapshot_verify = false);
    let source = h.running("source").await;
    h.runtime.fail_next(Op::Checkpoint, "checkpoint refused");
    let snap = h
        .service
        .snapshot_create(WS, source.id, None)
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Failed);
    assert!(snap
        .error
        .unwrap_or_default()
        .contains("checkpoint refused"));
    assert_eq!(h.runtime.calls_for(Op::Checkpoint, source.id), 1);
    assert_eq!(h.runtime.calls(Op::Restore), 0);
    assert_eq!(
        h.exec(source.id, &["echo", "fine"]).await.unwrap().1,
        "echo fine"
    );
    let clone_req = CreateSandboxRequest {
        name: Some("clone".into()),
        snapshot_id: Some(snap.id),
        ..CreateSandboxRequest::default()
    };
    assert!(matches!(
        h.service.create(WS, clone_req).await,
        Err(ServiceError::SnapshotNotReady(_))
    ));
}

#[tokio::test]
async fn a_deleted_snapshot_cannot_be_cloned() {
    let h = Harness::with(|c| c.limits.snapshot_verify = false);
    let source = h.running("source").await;
    let snap = h
        .service
        .snapshot_create(WS, source.id, None)
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Ready);
    h.service.snapshot_delete(WS, snap.id).await.unwrap();
    h.service.snapshot_delete(WS, snap.id).await.unwrap();
    assert!(!h.service.snapshot_dir(snap.id).exists());
    let clone_req = CreateSandboxRequest {
        name: Some("clone".into()),
        snapshot_id: Some(snap.id),
        ..CreateSandboxRequest::default()
    };
    assert!(matches!(
        h.service.create(WS, clone_req).await,
        Err(ServiceError::SnapshotNotFound)
    ));
    assert_eq!(h.runtime.calls(Op::Restore), 0);
}

#[tokio::test]
async fn only_a_running_sandbox_is_snapshotted() {
    let h = Harness::new();
    let r = h.running("paused").await;
    h.service.pause(WS, r.id).await.unwrap();
    assert!(matches!(
        h.service.snapshot_create(WS, r.id, None).await,
        Err(ServiceError::WrongState { .. })
    ));
    assert_eq!(h.runtime.calls(Op::Checkpoint), 0);
}

#[tokio::test]
async fn a_clone_whose_restore_fails_is_failed_and_cleaned_up() {
    let h = Harness::with(|c| c.limits.snapshot_verify = false);
    let source = h.running("source").await;
    let snap = h
        .service
        .snapshot_create(WS, source.id, None)
        .await
        .unwrap();
    h.runtime.fail_next(Op::Restore, "restore: image corrupt");
    let clone_req = CreateSandboxRequest {
        name: Some("clone".into()),
        snapshot_id: Some(snap.id),
        ..CreateSandboxRequest::default()
    };
    let clone = match h.service.create(WS, clone_req).await.unwrap() {
        CreateOutcome::Created(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(clone.status, SandboxStatus::Failed, "{clone:?}");
    assert!(clone.error.unwrap_or_default().contains("image corrupt"));
    eventually("the failed clone is cleaned up", || {
        h.runtime.calls_for(Op::Destroy, clone.id) == 1
    })
    .await;
    assert_eq!(h.get(source.id).status, SandboxStatus::Running);
}

/// A real S3 client (object_store) aimed at a closed loopback port: the
/// upload fails, so the snapshot does, with the store's reason; the source
/// keeps running. The runtime is the fake one.
#[tokio::test]
async fn an_unreachable_object_store_fails_the_snapshot_and_not_the_source() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = Harness::with(move |c| {
        c.limits.snapshot_verify = false;
        c.limits.create_sync_wait = std::time::Duration::from_secs(60);
        c.snapshot_store = crate::config::snapshot_store_config(
            "s3://sbx-snaps/test",
            Some(format!("http://127.0.0.1:{port}")),
            "us-east-1".into(),
        )
        .unwrap();
    });
    let source = h.running("source").await;
    let snap = h
        .service
        .snapshot_create(WS, source.id, None)
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Failed, "{snap:?}");
    let error = snap.error.unwrap_or_default();
    assert!(
        error.starts_with("uploading the snapshot to object storage failed: "),
        "{error}"
    );
    assert!(!h.service.snapshot_dir(snap.id).exists());
    assert_eq!(h.get(source.id).status, SandboxStatus::Running);
    assert_eq!(
        h.exec(source.id, &["echo", "fine"]).await.unwrap().1,
        "echo fine"
    );
}

/// A READY snapshot whose files this node does not have (local store: the
/// data dir lost them): the clone fails before any restore, with a clear
/// error, and its sandbox is FAILED with the same reason.
#[tokio::test]
async fn a_clone_whose_snapshot_files_are_gone_fails_before_restoring() {
    let h = Harness::with(|c| c.limits.snapshot_verify = false);
    let source = h.running("source").await;
    let snap = h
        .service
        .snapshot_create(WS, source.id, None)
        .await
        .unwrap();
    assert_eq!(snap.status, SnapshotStatus::Ready);
    std::fs::remove_dir_all(h.service.snapshot_dir(snap.id)).unwrap();
    let clone_req = CreateSandboxRequest {
        name: Some("clone".into()),
        snapshot_id: Some(snap.id),
        ..CreateSandboxRequest::default()
    };
    let Err(ServiceError::StartFailed(reason)) = h.service.create(WS, clone_req).await else {
        panic!("a clone of absent files must fail");
    };
    assert!(
        reason.starts_with("the snapshot's files could not be fetched: snapshot ")
            && reason.contains("missing from the local data dir"),
        "{reason}"
    );
    assert_eq!(h.runtime.calls(Op::Restore), 0);
    let page = h.service.list(WS, 10, None).await.unwrap();
    let clone = page.items.iter().find(|s| s.name == "clone").unwrap();
    assert_eq!(clone.status, SandboxStatus::Failed);
    assert_eq!(clone.error.as_deref(), Some(reason.as_str()));
}
