//! An agent that stalls (never answers) costs only requests that need that
//! agent: the sandbox fails or waits, destroy and other sandboxes do not.

use super::*;
use crate::runtime::fake::Op;
use crate::service::{DestroyOutcome, ServiceError};

/// What "promptly" means for a destroy here (the service's own wait is 5 s).
const PROMPT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_never_answered_fails_the_boot_only() {
    let h = Harness::new();
    let healthy = h.running("healthy").await;
    h.runtime.stall_next_start();
    let stalled = h.create("stalled").await;
    assert_eq!(stalled.status, SandboxStatus::Failed, "{stalled:?}");
    let error = stalled.error.unwrap_or_default();
    assert!(error.contains("agent did not become ready"), "{error}");
    eventually("the stalled sandbox is removed", || {
        h.runtime.calls_for(Op::Destroy, stalled.id) == 1
    })
    .await;
    assert_eq!(
        h.exec(healthy.id, &["echo", "ok"]).await.unwrap().1,
        "echo ok"
    );
    let started = Instant::now();
    assert!(matches!(
        h.service.destroy(WS, stalled.id).await,
        Ok(DestroyOutcome::Terminated)
    ));
    assert!(started.elapsed() < PROMPT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_answers_promptly_while_a_command_and_a_reconnect_stall() {
    let h = Harness::with_runtime(
        Arc::new(FakeRuntime::new().with_handshake_timeout(Duration::from_secs(30))),
        |_| {},
    );
    let stuck = h.running("stuck").await;
    let other = h.running("other").await;
    h.runtime.set_stall(stuck.id, true);
    // The relay dies; the monitor's reconnect sends a hello that is never
    // answered, holding the attach gate for the handshake's 30 s.
    h.runtime.drop_connections(stuck.id);
    eventually("the monitor is reconnecting", || {
        h.runtime.calls_for(Op::Connect, stuck.id) == 1
    })
    .await;
    // A command now waits at the gate behind that reconnect.
    let service = h.service.clone();
    let id = stuck.id;
    let waiting_exec = tokio::spawn(async move {
        let req = ExecRequest {
            command: Some(vec!["true".into()]),
            ..ExecRequest::default()
        };
        service.exec(WS, id, req).await
    });
    assert_eq!(
        h.exec(other.id, &["echo", "ok"]).await.unwrap().1,
        "echo ok"
    );
    let started = Instant::now();
    let outcome = h.service.destroy(WS, stuck.id).await.unwrap();
    assert!(
        started.elapsed() < PROMPT,
        "destroy took {:?}",
        started.elapsed()
    );
    assert!(matches!(outcome, DestroyOutcome::Terminated), "{outcome:?}");
    assert_eq!(h.get(stuck.id).status, SandboxStatus::Terminated);
    assert_eq!(h.runtime.calls_for(Op::Destroy, stuck.id), 1);
    // The waiting command ends with the sandbox, not after the gate's 60 s.
    let answer = tokio::time::timeout(PROMPT, waiting_exec)
        .await
        .expect("the waiting exec ends with its sandbox")
        .unwrap();
    assert!(answer.is_err(), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_answers_promptly_while_a_snapshot_waits_on_a_stalled_agent() {
    let h = Harness::new();
    let stuck = h.running("stuck").await;
    h.runtime.set_stall(stuck.id, true);
    // The capture's `sync` is never answered: the snapshot stays CREATING
    // while the capture waits on the agent (its deadline is minutes).
    let snap = h
        .service
        .snapshot_create(WS, stuck.id, Some("s".into()))
        .await
        .unwrap();
    assert_eq!(snap.status, sbx_store::SnapshotStatus::Creating, "{snap:?}");
    let started = Instant::now();
    let outcome = h.service.destroy(WS, stuck.id).await.unwrap();
    assert!(
        started.elapsed() < PROMPT,
        "destroy waited {:?} behind the snapshot's agent call",
        started.elapsed()
    );
    assert!(matches!(outcome, DestroyOutcome::Terminated), "{outcome:?}");
    assert_eq!(h.runtime.calls_for(Op::Destroy, stuck.id), 1);
    // The capture then fails: its checkpoint never reaches the runtime.
    eventually("the snapshot fails", || {
        h.store.get_snapshot(snap.id).unwrap().unwrap().status == sbx_store::SnapshotStatus::Failed
    })
    .await;
    assert_eq!(h.runtime.calls_for(Op::Checkpoint, stuck.id), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_from_a_silent_agent_ends_at_the_idle_deadline() {
    let idle = Duration::from_millis(300);
    let h = Harness::with_runtime(Arc::new(FakeRuntime::new()), |c| {
        c.limits.file_transfer_idle = idle;
    });
    let silent = h.running("silent").await;
    h.runtime.set_stall(silent.id, true);
    // The agent takes the FileRead and never sends its first event: without
    // the idle deadline this waits forever, holding the API connection.
    let started = Instant::now();
    let outcome = tokio::time::timeout(PROMPT, h.service.download(WS, silent.id, "/etc/hostname"))
        .await
        .expect("the download answers");
    let took = started.elapsed();
    match outcome {
        Err(ServiceError::Unavailable(message)) => {
            assert!(message.contains("did not answer"), "{message}")
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a silent agent answered a download"),
    }
    assert!(took >= idle, "gave up before the deadline: {took:?}");
}
