//! Requests that go to the agent: exec (built-in and scripted answers),
//! processes, and a sandbox whose agent is not running.

use super::*;
use crate::runtime::fake::Op;
use crate::service::ServiceError;
use sbx_agent_proto::ProcessState;

#[tokio::test]
async fn exec_answers_come_from_the_agent() {
    let h = Harness::new();
    let r = h.running("commands").await;
    assert_eq!(
        h.exec(r.id, &["echo", "a", "b"]).await.unwrap(),
        (0, "echo a b".into())
    );
    assert_eq!(h.exec(r.id, &["printenv", "MISSING"]).await.unwrap().0, 1);
    h.runtime.set_exec(Arc::new(|argv: &[String]| {
        (3, argv.concat().into_bytes(), b"oops".to_vec())
    }));
    let req = ExecRequest {
        command: Some(vec!["x".into(), "y".into()]),
        ..ExecRequest::default()
    };
    let out = h.service.exec(WS, r.id, req).await.unwrap();
    assert_eq!(
        (out.exit_code, out.stdout, out.stderr),
        (3, b"xy".to_vec(), b"oops".to_vec())
    );
}

#[tokio::test]
async fn processes_start_list_get_and_wait() {
    let h = Harness::new();
    let r = h.running("procs").await;
    let req = sbx_api_types::ProcessStartRequest {
        command: Some(vec!["sleep".into(), "1".into()]),
        ..Default::default()
    };
    let started = h.service.process_start(WS, r.id, req).await.unwrap();
    assert_eq!(started.state, ProcessState::Running);
    let (list, _) = h.service.process_list(WS, r.id, 10, None).await.unwrap();
    assert_eq!(list.len(), 1);
    let waited = h
        .service
        .process_wait(WS, r.id, started.id, Some("1s"))
        .await
        .unwrap();
    assert_eq!(
        (waited.state, waited.exit_code),
        (ProcessState::Exited, Some(0))
    );
    assert!(matches!(
        h.service.process_get(WS, r.id, Uuid::new_v4()).await,
        Err(ServiceError::ProcessNotFound)
    ));
}

#[tokio::test]
async fn requests_to_an_ended_sandbox_do_not_reach_the_runtime() {
    let h = Harness::new();
    let r = h.running("ended").await;
    h.service.destroy(WS, r.id).await.unwrap();
    let connects = h.runtime.calls(Op::Connect);
    assert!(matches!(
        h.exec(r.id, &["true"]).await,
        Err(ServiceError::WrongState { .. })
    ));
    assert_eq!(h.runtime.calls(Op::Connect), connects);
}
