//! Handles of calls that outlive one answer: an upload in progress and a
//! stream of events; dropping either cancels its request.

use super::{AgentCallError, AgentConn, Answer, StreamItem, IO_CALL_TIMEOUT};
use crate::{AgentError, Body, Request};
use tokio::sync::{mpsc, oneshot};

/// An upload in progress (see [`AgentConn::begin_upload`]).
pub struct Upload {
    pub(super) id: u64,
    pub(super) conn: AgentConn,
    pub(super) answer: Option<oneshot::Receiver<Result<Answer, AgentError>>>,
}

impl Upload {
    /// Sends one chunk. Fails early if the agent already refused the upload.
    pub async fn send(&mut self, bytes: Vec<u8>) -> Result<(), AgentCallError> {
        if let Some(rx) = self.answer.as_mut() {
            if let Ok(result) = rx.try_recv() {
                self.answer = None;
                return Err(match result {
                    Ok((reply, _)) => AgentCallError::Unexpected(format!("{reply:?}")),
                    Err(e) => AgentCallError::Agent(e),
                });
            }
        }
        self.conn
            .send(self.id, Body::Request(Request::FileWriteData), bytes)
            .await
    }

    /// Commits the upload and waits for the agent's answer (at most [`IO_CALL_TIMEOUT`]).
    pub async fn finish(mut self) -> Result<Answer, AgentCallError> {
        let rx = self.answer.take().ok_or(AgentCallError::Closed)?;
        let end = Body::Request(Request::FileWriteEnd);
        self.conn
            .exchange(self.id, end, Vec::new(), rx, IO_CALL_TIMEOUT)
            .await
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Not finished: tell the agent to discard the temp file.
        if self.answer.is_some() {
            self.conn.pending().remove(&self.id);
            let conn = self.conn.clone();
            let id = self.id;
            tokio::spawn(async move {
                let _ = conn
                    .send(id, Body::Request(Request::FileWriteAbort), Vec::new())
                    .await;
            });
        }
    }
}

/// Receiving side of a streaming request; cancels the request when dropped early.
pub struct AgentStream {
    pub(super) id: u64,
    pub(super) rx: mpsc::Receiver<StreamItem>,
    pub(super) conn: AgentConn,
    pub(super) finished: bool,
}

impl AgentStream {
    /// The request id of this stream.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Next item; `None` when the connection closed before the stream ended.
    pub async fn next(&mut self) -> Option<StreamItem> {
        let item = self.rx.recv().await;
        if matches!(
            item,
            Some(StreamItem::End(..)) | Some(StreamItem::Failed(_)) | None
        ) {
            self.finished = true;
        }
        item
    }
}

impl Drop for AgentStream {
    fn drop(&mut self) {
        if !self.finished {
            self.conn.pending().remove(&self.id);
            self.conn.cancel_later(self.id);
        }
    }
}
