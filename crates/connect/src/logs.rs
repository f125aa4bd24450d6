//! Log recording policy of a run: text only, 4 KiB per message, 1 MiB per run, then stop (said once).

use crate::model::LogLevel;

/// The least a message costs against the run budget: an empty message still makes a stored
/// line (row, timestamp, level), so a flood of empty messages must run out too.
pub const MIN_CHARGED_BYTES: usize = 64;

/// Errors of the logs module.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What to record for one `ctx.log` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogDecision {
    /// Record the message as is.
    Record(LogLevel, String),
    /// Record this notice instead: recording stops from now on.
    Stop(String),
    /// Record nothing.
    Drop,
}

/// Per-run recording state.
#[derive(Debug)]
pub struct LogPolicy {
    max_message_bytes: usize,
    max_run_bytes: usize,
    logged_bytes: usize,
    stopped: bool,
}

impl LogPolicy {
    /// A fresh policy for one run.
    pub fn new(max_message_bytes: usize, max_run_bytes: usize) -> Self {
        LogPolicy {
            max_message_bytes,
            max_run_bytes,
            logged_bytes: 0,
            stopped: false,
        }
    }

    /// Whether recording has stopped.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Decides what to record for a message.
    pub fn admit(&mut self, level: LogLevel, message: &str) -> LogDecision {
        if self.stopped {
            return LogDecision::Drop;
        }
        if message.len() > self.max_message_bytes {
            self.stopped = true;
            return LogDecision::Stop(format!(
                "A log message was larger than {} bytes; log recording stopped for the rest of this run.",
                self.max_message_bytes
            ));
        }
        let charge = message.len().max(MIN_CHARGED_BYTES);
        if self.logged_bytes + charge > self.max_run_bytes {
            self.stopped = true;
            return LogDecision::Stop(format!(
                "This run logged {} bytes; log recording stopped for the rest of this run.",
                self.max_run_bytes
            ));
        }
        self.logged_bytes += charge;
        LogDecision::Record(level, message.to_string())
    }
}

/// Deletes log lines older than the retention; returns how many went.
pub fn janitor(
    store: &dyn crate::store::Store,
    now: chrono::DateTime<chrono::Utc>,
    retention: std::time::Duration,
) -> Result<usize, LogsError> {
    let age = chrono::Duration::from_std(retention).unwrap_or(chrono::Duration::MAX);
    let cutoff = now.checked_sub_signed(age).unwrap_or(now);
    Ok(store.delete_logs_before(cutoff)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Runs;

    #[test]
    fn records_until_message_too_large_then_stops_once() {
        let mut p = LogPolicy::new(10, 1000);
        assert_eq!(
            p.admit(LogLevel::Info, "hello"),
            LogDecision::Record(LogLevel::Info, "hello".into())
        );
        assert_eq!(
            p.admit(LogLevel::Info, "0123456789"),
            LogDecision::Record(LogLevel::Info, "0123456789".into())
        );
        assert!(matches!(
            p.admit(LogLevel::Warn, "0123456789A"),
            LogDecision::Stop(_)
        ));
        assert!(p.stopped());
        assert_eq!(p.admit(LogLevel::Error, "x"), LogDecision::Drop);
        assert_eq!(p.admit(LogLevel::Error, "0123456789A"), LogDecision::Drop);
    }

    #[test]
    fn stops_when_run_total_reached() {
        let mut p = LogPolicy::new(4096, 150);
        for _ in 0..2 {
            assert!(matches!(
                p.admit(LogLevel::Info, "0123456789"),
                LogDecision::Record(..)
            ));
        }
        // Each message is charged at least 64 bytes: 128 + 64 > 150 crosses the run budget.
        match p.admit(LogLevel::Info, "0123456789") {
            LogDecision::Stop(text) => assert!(text.contains("stopped")),
            other => panic!("expected stop, got {other:?}"),
        }
        assert_eq!(p.admit(LogLevel::Info, "a"), LogDecision::Drop);
    }

    #[test]
    fn empty_messages_are_charged_and_stop_recording() {
        let mut p = LogPolicy::new(4096, 1 << 20);
        let mut recorded = 0usize;
        let mut stopped = false;
        for _ in 0..20_000 {
            match p.admit(LogLevel::Info, "") {
                LogDecision::Record(..) => recorded += 1,
                LogDecision::Stop(_) => stopped = true,
                LogDecision::Drop => {}
            }
        }
        assert!(stopped, "20,000 empty messages must stop recording");
        assert_eq!(recorded, (1 << 20) / MIN_CHARGED_BYTES);
        assert!(p.stopped());
    }

    #[test]
    fn default_limits_allow_exactly_4_kib() {
        let mut p = LogPolicy::new(4096, 1 << 20);
        let m = "x".repeat(4096);
        assert!(matches!(
            p.admit(LogLevel::Info, &m),
            LogDecision::Record(..)
        ));
        let m = "x".repeat(4097);
        assert!(matches!(p.admit(LogLevel::Info, &m), LogDecision::Stop(..)));
    }

    #[test]
    fn janitor_deletes_lines_past_retention() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = crate::store::SqliteStore::open(&dir.path().join("c.db")).expect("store");
        store
            .insert_log("ws", "r1", Some("c1"), LogLevel::Info, "old")
            .expect("log");
        let retention = std::time::Duration::from_secs(30 * 86400);
        let now = chrono::Utc::now();
        assert_eq!(janitor(&store, now, retention).expect("janitor"), 0);
        let later = now + chrono::Duration::days(31);
        assert_eq!(janitor(&store, later, retention).expect("janitor"), 1);
        let left = store
            .list_logs("ws", Some("c1"), None, None, 10)
            .expect("list");
        assert!(left.is_empty());
    }
}
