//! Per-job budgets and per-run output limits (all configurable; defaults from the seed and DESIGN.md).

use crate::model::JobKind;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Errors of the limits module.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// A limit that must be positive is zero.
    #[error("connect limit {0} must be greater than zero")]
    Zero(&'static str),
    /// A limit is above what the protocol can carry.
    #[error("connect limit {0} must be at most {1}")]
    TooLarge(&'static str, u64),
}

/// Largest `max_response_bytes`: the body travels base64-encoded (4/3) in one `fetch_reply`
/// line, and the runner refuses lines over 16 MiB (`MAX_LINE_BYTES` in `sdk/lib/channel.mjs`);
/// 11 MiB leaves about 1.3 MiB for the status and headers.
pub const MAX_RESPONSE_BYTES: u64 = 11 * 1024 * 1024;

/// Retry policy the runner applies to `ctx.fetch` (sent in the `job` message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// First backoff delay before jitter.
    pub base_delay_ms: u64,
    /// Largest backoff delay.
    pub max_delay_ms: u64,
    /// Largest `Retry-After` the runner honours.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay_ms: 250,
            max_delay_ms: 10_000,
            max_retry_after_ms: 30_000,
        }
    }
}

/// The output limits of one run, as the `job` message carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputLimits {
    /// Batches (`records` messages) per run.
    pub max_batches: u64,
    /// Records per batch.
    pub max_records_per_batch: u64,
    /// Bytes of one record's JSON text.
    pub max_record_bytes: u64,
    /// Bytes of all records of a run.
    pub max_output_bytes: u64,
    /// Bytes of one checkpoint's JSON text.
    pub max_checkpoint_bytes: u64,
}

impl OutputLimits {
    /// The limit behind an `output_limit` failure kind, said for people with its value (for the
    /// run's log); `None` for a kind that names no output limit.
    pub fn explain(&self, kind: &str) -> Option<String> {
        let what = match kind {
            "max_batches" => format!("at most {} batches per run", self.max_batches),
            "max_records_per_batch" => {
                format!("at most {} records per batch", self.max_records_per_batch)
            }
            "max_record_bytes" => format!(
                "at most {} bytes per record (its JSON text)",
                self.max_record_bytes
            ),
            "max_output_bytes" => format!(
                "at most {} bytes of records per run (their JSON text)",
                self.max_output_bytes
            ),
            "max_checkpoint_bytes" => format!(
                "at most {} bytes per checkpoint (its JSON text)",
                self.max_checkpoint_bytes
            ),
            "max_batch_bytes" => {
                "a batch must serialise to less than 16 MiB (16777216 bytes)".to_string()
            }
            // The runner of an older SDK names no particular limit.
            "output_limit" => "one of the run's output limits".to_string(),
            _ => return None,
        };
        Some(format!(
            "The run went over an output limit ({kind}: {what}); nothing of the run was committed."
        ))
    }
}

/// A duration as people read a limit: whole seconds when it is one, else milliseconds.
fn budget_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The run-log notice of a job stopped by its time budget: which limit and its value, like
/// [`OutputLimits::explain`] (the run itself carries only `time_limit`).
pub fn time_limit_notice(kind: &str, budget: Duration) -> String {
    format!(
        "The run went over its time limit (time_limit: {} for a {kind} job); it was stopped and \
         nothing of it was committed.",
        budget_text(budget)
    )
}

/// The run-log notice of a job whose sandbox ran out of memory.
pub fn memory_limit_notice(memory_mib: u64) -> String {
    format!(
        "The run went over its memory limit (memory_limit: {memory_mib} MiB for the job \
         sandbox); it was stopped and nothing of it was committed."
    )
}

/// All Connect limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time budget of a sync run.
    pub sync_time: Duration,
    /// Time budget of a connection test.
    pub verify_time: Duration,
    /// Time budget of an OAuth step.
    pub oauth_time: Duration,
    /// Time budget of a describe job.
    pub describe_time: Duration,
    /// Time budget of a build.
    pub build_time: Duration,
    /// Memory budget of every job sandbox, MiB.
    pub memory_mib: u64,
    /// Output limits of a sync run.
    pub output: OutputLimits,
    /// Largest recorded log message, bytes.
    pub max_log_message_bytes: usize,
    /// Log bytes recorded per run before recording stops.
    pub max_log_bytes_per_run: usize,
    /// How long log lines are kept.
    pub log_retention: Duration,
    /// Extra attempts after a platform failure (each in a fresh sandbox).
    pub platform_retries: u32,
    /// The runner's `ctx.fetch` retry policy.
    pub fetch_retry: RetryPolicy,
    /// Largest response body the broker hands to a package.
    pub max_response_bytes: u64,
    /// Shortest schedule interval a connection may have, seconds.
    pub min_schedule_secs: u64,
    /// Webhook delivery limits.
    pub webhooks: WebhookLimits,
}

/// Limits of webhook deliveries (per connection).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WebhookLimits {
    /// Largest delivery body, bytes (`413` above).
    pub max_body_bytes: usize,
    /// Deliveries per second a connection's token bucket refills (`429` when empty).
    pub rate_per_second: f64,
    /// Deliveries a connection may send at once (the bucket's size).
    pub burst: u32,
    /// Pending deliveries a connection's inbox holds (`429` when full).
    pub max_pending: u64,
    /// Jobs a delivery gets before a platform failure marks it failed.
    pub max_attempts: u32,
    /// How far a signed timestamp may be from now (replay window).
    pub timestamp_tolerance: Duration,
}

impl Default for WebhookLimits {
    fn default() -> Self {
        WebhookLimits {
            max_body_bytes: 1024 * 1024,
            rate_per_second: 10.0,
            burst: 50,
            max_pending: 1000,
            max_attempts: 5,
            timestamp_tolerance: Duration::from_secs(300),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sync_time: Duration::from_secs(15 * 60),
            verify_time: Duration::from_secs(60),
            oauth_time: Duration::from_secs(60),
            describe_time: Duration::from_secs(60),
            build_time: Duration::from_secs(10 * 60),
            memory_mib: 1024,
            output: OutputLimits {
                max_batches: 10_000,
                max_records_per_batch: 10_000,
                max_record_bytes: 1024 * 1024,
                max_output_bytes: 256 * 1024 * 1024,
                max_checkpoint_bytes: 64 * 1024,
            },
            max_log_message_bytes: 4 * 1024,
            max_log_bytes_per_run: 1024 * 1024,
            log_retention: Duration::from_secs(30 * 24 * 3600),
            platform_retries: 2,
            fetch_retry: RetryPolicy::default(),
            max_response_bytes: MAX_RESPONSE_BYTES,
            min_schedule_secs: crate::service::MIN_SCHEDULE_SECONDS,
            webhooks: WebhookLimits::default(),
        }
    }
}

impl Limits {
    /// The time budget of a job of this kind.
    pub fn time_budget(&self, kind: JobKind) -> Duration {
        match kind {
            // A delivery's job has a sync run's budgets.
            JobKind::Sync | JobKind::Webhook => self.sync_time,
            JobKind::Verify => self.verify_time,
            JobKind::Oauth => self.oauth_time,
            JobKind::Describe => self.describe_time,
        }
    }

    /// Rejects a configuration with a zero limit (which would fail every job).
    pub fn validate(&self) -> Result<(), LimitsError> {
        let durations = [
            ("sync_time", self.sync_time),
            ("verify_time", self.verify_time),
            ("oauth_time", self.oauth_time),
            ("describe_time", self.describe_time),
            ("build_time", self.build_time),
            ("log_retention", self.log_retention),
        ];
        for (name, value) in durations {
            if value.is_zero() {
                return Err(LimitsError::Zero(name));
            }
        }
        let numbers = [
            ("memory_mib", self.memory_mib),
            ("max_batches", self.output.max_batches),
            ("max_records_per_batch", self.output.max_records_per_batch),
            ("max_record_bytes", self.output.max_record_bytes),
            ("max_output_bytes", self.output.max_output_bytes),
            ("max_checkpoint_bytes", self.output.max_checkpoint_bytes),
            ("max_log_message_bytes", self.max_log_message_bytes as u64),
            ("max_log_bytes_per_run", self.max_log_bytes_per_run as u64),
            (
                "fetch_retry.max_attempts",
                u64::from(self.fetch_retry.max_attempts),
            ),
            ("max_response_bytes", self.max_response_bytes),
            (
                "webhooks.max_body_bytes",
                self.webhooks.max_body_bytes as u64,
            ),
            ("webhooks.burst", u64::from(self.webhooks.burst)),
            ("webhooks.max_pending", self.webhooks.max_pending),
            (
                "webhooks.max_attempts",
                u64::from(self.webhooks.max_attempts),
            ),
        ];
        for (name, value) in numbers {
            if value == 0 {
                return Err(LimitsError::Zero(name));
            }
        }
        if self.webhooks.rate_per_second.is_nan() || self.webhooks.rate_per_second <= 0.0 {
            return Err(LimitsError::Zero("webhooks.rate_per_second"));
        }
        // The body travels base64-encoded in the `job` line (16 MiB at most).
        if self.webhooks.max_body_bytes > 8 * 1024 * 1024 {
            return Err(LimitsError::TooLarge(
                "webhooks.max_body_bytes",
                8 * 1024 * 1024,
            ));
        }
        if self.max_response_bytes > MAX_RESPONSE_BYTES {
            return Err(LimitsError::TooLarge(
                "max_response_bytes",
                MAX_RESPONSE_BYTES,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_values() {
        let l = Limits::default();
        assert_eq!(l.time_budget(JobKind::Sync), Duration::from_secs(900));
        assert_eq!(l.time_budget(JobKind::Verify), Duration::from_secs(60));
        assert_eq!(l.time_budget(JobKind::Oauth), Duration::from_secs(60));
        assert_eq!(l.time_budget(JobKind::Describe), Duration::from_secs(60));
        assert_eq!(l.build_time, Duration::from_secs(600));
        assert_eq!(l.memory_mib, 1024);
        assert_eq!(l.output.max_batches, 10_000);
        assert_eq!(l.output.max_records_per_batch, 10_000);
        assert_eq!(l.output.max_record_bytes, 1 << 20);
        assert_eq!(l.output.max_output_bytes, 256 << 20);
        assert_eq!(l.output.max_checkpoint_bytes, 64 << 10);
        assert_eq!(l.max_log_message_bytes, 4096);
        assert_eq!(l.max_log_bytes_per_run, 1 << 20);
        assert_eq!(l.log_retention, Duration::from_secs(30 * 86400));
        assert_eq!(l.platform_retries, 2);
        assert_eq!(l.fetch_retry.max_attempts, 5);
        assert_eq!(l.fetch_retry.base_delay_ms, 250);
        assert_eq!(l.fetch_retry.max_delay_ms, 10_000);
        assert_eq!(l.fetch_retry.max_retry_after_ms, 30_000);
        assert_eq!(l.max_response_bytes, 11 << 20);
        // The base64 reply line of the largest body must fit the runner's 16 MiB line limit.
        assert!(l.max_response_bytes.div_ceil(3) * 4 + (1 << 20) <= 16 << 20);
        assert!(l.validate().is_ok());
    }

    #[test]
    fn limit_failures_name_the_limit_and_its_value() {
        let o = Limits::default().output;
        let text = o.explain("max_records_per_batch").unwrap_or_default();
        assert!(
            text.contains("max_records_per_batch") && text.contains("10000"),
            "{text}"
        );
        let text = o.explain("max_record_bytes").unwrap_or_default();
        assert!(text.contains("1048576"), "{text}");
        let text = o.explain("max_batches").unwrap_or_default();
        assert!(text.contains("10000 batches"), "{text}");
        assert!(o.explain("threw").is_none());
    }

    #[test]
    fn zero_limits_are_rejected() {
        let mut l = Limits::default();
        l.output.max_batches = 0;
        assert!(matches!(
            l.validate(),
            Err(LimitsError::Zero("max_batches"))
        ));
        let l = Limits {
            sync_time: Duration::ZERO,
            ..Limits::default()
        };
        assert!(matches!(l.validate(), Err(LimitsError::Zero("sync_time"))));
    }

    #[test]
    fn output_limits_serialize_in_protocol_names() {
        let v = serde_json::to_value(Limits::default().output).unwrap_or_default();
        assert_eq!(v["maxRecordsPerBatch"], 10_000);
        assert_eq!(v["maxCheckpointBytes"], 65_536);
        let r = serde_json::to_value(RetryPolicy::default()).unwrap_or_default();
        assert_eq!(r["maxRetryAfterMs"], 30_000);
    }
}
