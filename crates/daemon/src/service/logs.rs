//! The sandbox console log (what PID 1 writes), read from the host file.

use super::{Result, Service, ServiceError};
use crate::runtime::console_log::{self, Gap};
use bytes::Bytes;
use futures::Stream;
use sbx_api_types::SandboxStatus;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How often a followed log is checked for growth.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// A piece of the console log.
#[derive(Debug)]
pub struct LogChunk {
    /// The bytes.
    pub bytes: Bytes,
    /// When they were read, ms since the epoch.
    pub at_ms: u64,
    /// What the reader missed just before these bytes: trimmed away while it
    /// was behind (it continues at the oldest byte kept), or a restart.
    pub gap: Gap,
}

/// How much one read of the log takes at most.
const CHUNK_BYTES: usize = 64 * 1024;

/// One blocking read on a thread of the blocking pool; the reader comes back with its result.
async fn read_chunk(
    mut reader: console_log::Reader,
) -> Option<(console_log::Reader, Result<(Vec<u8>, Gap), String>)> {
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; CHUNK_BYTES];
        let res = reader
            .read(&mut buf)
            .map(|r| {
                buf.truncate(r.len);
                (buf, r.gap)
            })
            .map_err(|e| e.to_string());
        (reader, res)
    })
    .await
    .ok()
}

impl Service {
    /// `GET /v2/sandboxes/{id}/logs`: the log so far, then (with `follow`) new output until the sandbox stops.
    pub async fn logs(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        follow: bool,
    ) -> Result<impl Stream<Item = LogChunk> + Send + 'static> {
        let record = self.load(workspace, id).await?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        let path = self.runtime.console_log(id);
        let reader = tokio::task::spawn_blocking(move || console_log::Reader::open(&path))
            .await
            .map_err(|e| ServiceError::Internal(format!("console log reader: {e}")))?
            .map_err(|e| ServiceError::Unavailable(format!("console log unavailable: {e}")))?;
        let this = self.clone();
        let state = (reader, this, id, follow);
        Ok(futures::stream::unfold(Some(state), |state| async move {
            let (reader, this, id, follow) = state?;
            let mut reader = reader;
            loop {
                // The reader keeps its place across trims; a gap comes with the next bytes.
                let (back, res) = read_chunk(reader).await?;
                reader = back;
                match res {
                    Ok((bytes, gap)) if !bytes.is_empty() => {
                        if gap != Gap::None {
                            tracing::debug!(sandbox = %id, ?gap, "console log reader fell behind a trim");
                        }
                        let chunk = LogChunk {
                            bytes: Bytes::from(bytes),
                            at_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
                            gap,
                        };
                        return Some((chunk, Some((reader, this, id, follow))));
                    }
                    Ok(_) if follow => {
                        let running = matches!(this.store.get_sandbox(id).await, Ok(Some(r)) if r.status == SandboxStatus::Running);
                        if !running {
                            return None;
                        }
                        tokio::time::sleep(FOLLOW_POLL).await;
                    }
                    Ok(_) => return None,
                    Err(e) => {
                        tracing::warn!(sandbox = %id, error = %e, "console log read failed");
                        return None;
                    }
                }
            }
        }))
    }

    /// Keeps every sandbox's console log within `--console-log-max-mb`.
    pub async fn trim_console_logs(self: &Arc<Self>) {
        let max_bytes = self.config.limits.console_log_max_mb * 1024 * 1024;
        if max_bytes == 0 {
            return;
        }
        let runtime = self.runtime.clone();
        if let Err(e) =
            tokio::task::spawn_blocking(move || runtime.trim_console_logs(max_bytes)).await
        {
            tracing::warn!(error = %e, "console log trimming stopped");
        }
    }
}
