//! Following a process's output across dropped connections without loss or repeats.

use futures::StreamExt;
use sbx_client::api::ProcessState;
use sbx_client::{Chunk, Client};
use std::time::Duration;
use uuid::Uuid;

/// Consecutive failed reconnects (with no output in between) before giving up.
const MAX_FAILURES: u32 = 10;

/// Where a resumed stream must start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResumeCursor {
    next: Option<u64>,
    received: bool,
    offsets_missing: bool,
}

impl ResumeCursor {
    /// Records a chunk that was delivered to the user.
    pub fn observe(&mut self, chunk: &Chunk) {
        self.received = true;
        match chunk.end_offset() {
            Some(end) => self.next = Some(end),
            None => self.offsets_missing = true,
        }
    }

    /// `fromOffset` for the next connection: `None` before any output (start as first
    /// asked), the end of the last chunk after. Resuming is impossible when the server
    /// sent chunks without offsets, since a fresh stream would repeat them.
    pub fn resume_from(&self) -> Result<Option<u64>, &'static str> {
        if !self.received {
            return Ok(None);
        }
        if self.offsets_missing {
            return Err("the server sent no chunk offsets, so the stream cannot be resumed without repeating output");
        }
        Ok(self.next)
    }
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(250u64 << failures.min(5)).min(Duration::from_secs(5))
}

/// Streams a process's output into `sink` until the process ends, reconnecting with
/// `fromOffset` when the connection drops.
pub async fn process_output(
    client: &Client,
    sandbox: Uuid,
    process: Uuid,
    tail: u64,
    mut sink: impl FnMut(&Chunk) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut cursor = ResumeCursor::default();
    let mut failures = 0u32;
    loop {
        let from = cursor.resume_from().map_err(anyhow::Error::msg)?;
        let tail_now = if from.is_some() { 0 } else { tail };
        let outcome = match client
            .process_stream(sandbox, process, tail_now, from)
            .await
        {
            Ok(mut stream) => {
                let mut outcome = Ok(());
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(chunk) => {
                            sink(&chunk)?;
                            cursor.observe(&chunk);
                            failures = 0;
                        }
                        Err(e) => {
                            outcome = Err(e);
                            break;
                        }
                    }
                }
                outcome
            }
            Err(e) => Err(e),
        };
        match outcome {
            // A clean end: the process is done, unless the server closed early.
            Ok(()) => match client.process_get(sandbox, process).await {
                Ok(p) if matches!(p.state, ProcessState::Running | ProcessState::Starting) => {}
                Ok(_) => return Ok(()),
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e.into()),
            },
            Err(e) if e.is_retryable() && failures < MAX_FAILURES => {
                eprintln!("sbx: output stream interrupted ({e}); reconnecting");
            }
            Err(e) => return Err(e.into()),
        }
        failures += 1;
        tokio::time::sleep(backoff(failures)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_client::api::OutputStream;

    fn chunk(offset: Option<u64>, data: &[u8]) -> Chunk {
        Chunk {
            stream: OutputStream::Stdout,
            data: data.to_vec(),
            at: None,
            offset,
        }
    }

    #[test]
    fn resumes_after_the_last_chunk() {
        let mut c = ResumeCursor::default();
        assert_eq!(c.resume_from(), Ok(None));
        c.observe(&chunk(Some(100), b"hello"));
        assert_eq!(c.resume_from(), Ok(Some(105)));
        c.observe(&chunk(Some(105), b""));
        assert_eq!(c.resume_from(), Ok(Some(105)));
        c.observe(&chunk(Some(105), b"world!"));
        assert_eq!(c.resume_from(), Ok(Some(111)));
    }

    #[test]
    fn refuses_to_resume_without_offsets() {
        let mut c = ResumeCursor::default();
        c.observe(&chunk(None, b"x"));
        assert!(c.resume_from().is_err());
    }

    #[test]
    fn backoff_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(30), Duration::from_secs(5));
    }
}
