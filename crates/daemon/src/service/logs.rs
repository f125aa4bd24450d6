//! The sandbox console log (what PID 1 writes), read from the host file.

use super::{Result, Service, ServiceError};
use crate::runtime::console_log;
use bytes::Bytes;
use futures::Stream;
use sbx_api_types::SandboxStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
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
}

impl Service {
    /// `GET /v2/sandboxes/{id}/logs`: the log so far, then (with `follow`) new output until the sandbox stops.
    pub async fn logs(
        self: &Arc<Self>,
        workspace: &str,
        id: Uuid,
        follow: bool,
    ) -> Result<impl Stream<Item = LogChunk> + Send + 'static> {
        let record = self.load(workspace, id)?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::not_running(record.status));
        }
        let path = self.runtime.console_log(id);
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("console log unavailable: {e}")))?;
        let this = self.clone();
        let state = (file, 0u64, this, id, follow);
        Ok(futures::stream::unfold(Some(state), |state| async move {
            let (mut file, mut pos, this, id, follow) = state?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                // The oldest part may have been trimmed away (a hole) since the last read.
                pos = console_log::next_data(&file, pos);
                if file.seek(std::io::SeekFrom::Start(pos)).await.is_err() {
                    return None;
                }
                match file.read(&mut buf).await {
                    Ok(n) if n > 0 => {
                        pos += n as u64;
                        let chunk = LogChunk {
                            bytes: Bytes::copy_from_slice(&buf[..n]),
                            at_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
                        };
                        return Some((chunk, Some((file, pos, this, id, follow))));
                    }
                    Ok(_) if follow => {
                        let running = matches!(this.store.get_sandbox(id), Ok(Some(r)) if r.status == SandboxStatus::Running);
                        if !running {
                            return None;
                        }
                        tokio::time::sleep(FOLLOW_POLL).await;
                    }
                    _ => return None,
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
