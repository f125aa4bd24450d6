//! The host side of the job protocol: hello → job, then fetches answered by the broker, logs
//! through the recording policy, output into the spool under the limits, until done/fail/deadline.

mod output;
mod screen;
pub mod wire;

pub use output::key_text;
use output::{spool_checkpoint, spool_records};
pub use screen::{CREDENTIAL_LEAK, LEAK_NOTICE};

use crate::broker::{BrokerSession, FetchErrorCode, FetchReply, FetchRequest};
use crate::limits::{OutputLimits, RetryPolicy};
use crate::logs::{LogDecision, LogPolicy};
use crate::model::{FailureCategory, JobKind, LogLevel, PrimaryKey, SyncMode};
use crate::spool::{Spool, SpoolWriter};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use wire::{Incoming, ReadLine};

/// Fetches in flight at once; beyond this the host stops reading until one finishes. A fetch
/// counts until its reply line is queued for the writer, and queuing waits for write budget.
const MAX_FETCHES_IN_FLIGHT: usize = 32;

/// Bytes of outgoing lines waiting for the writer per job. A runner that stops reading its
/// socket cannot make the host hold more than this in queued replies (plus at most
/// [`MAX_FETCHES_IN_FLIGHT`] replies waiting for budget).
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// Lines queued for the writer (the byte budget is what bounds memory).
const WRITE_QUEUE_LINES: usize = 16;

/// One line for the writer, holding its share of the byte budget until written.
struct Outgoing {
    line: Vec<u8>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// The sending side of the writer queue: each line first acquires its size in bytes from the
/// job's budget (a line larger than the whole budget takes all of it).
#[derive(Clone)]
struct Outbox {
    tx: mpsc::Sender<Outgoing>,
    budget: Arc<tokio::sync::Semaphore>,
    limit: usize,
}

impl Outbox {
    fn new(limit: usize) -> (Self, mpsc::Receiver<Outgoing>) {
        let limit = limit.clamp(
            1,
            tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize),
        );
        let (tx, rx) = mpsc::channel(WRITE_QUEUE_LINES);
        let budget = Arc::new(tokio::sync::Semaphore::new(limit));
        (Outbox { tx, budget, limit }, rx)
    }

    /// Bytes currently waiting for the writer.
    #[cfg(test)]
    fn queued_bytes(&self) -> usize {
        self.limit - self.budget.available_permits()
    }

    async fn send(&self, line: Vec<u8>) -> Result<(), ()> {
        let n = line.len().clamp(1, self.limit) as u32;
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| ())?;
        self.tx
            .send(Outgoing {
                line,
                _permit: permit,
            })
            .await
            .map_err(|_| ())
    }
}

/// Errors of the job module (set-up only; job failures are [`JobOutcome::Failed`]).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A sync job needs a sync target and a spool path.
    #[error("a sync job needs a sync target and a spool path")]
    MissingSyncTarget,
}

/// A duplex byte stream to the runner.
pub trait JobChannel: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> JobChannel for T {}

/// Receives the log lines the policy lets through.
pub trait LogSink: Send + Sync {
    /// Records one line.
    fn record(&self, level: LogLevel, message: &str);
}

/// The sync a job runs.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    /// Sync name.
    pub name: String,
    /// Commit mode.
    pub mode: SyncMode,
    /// Primary key (merge).
    pub primary_key: Option<PrimaryKey>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Kind.
    pub kind: JobKind,
    /// Entry module path inside the sandbox (`/pkg/...`).
    pub entry: String,
    /// Validated config (`{}` for describe).
    pub config: Value,
    /// Sync (kind sync).
    pub sync: Option<SyncTarget>,
    /// Last committed checkpoint (kind sync).
    pub checkpoint: Option<Value>,
    /// OAuth hook (kind oauth).
    pub oauth_step: Option<String>,
    /// The delivery (kind webhook): `{id, receivedAt, headers, body: base64}`.
    pub delivery: Option<Value>,
    /// Time budget from the `job` message on.
    pub time_budget: Duration,
    /// Output limits.
    pub limits: OutputLimits,
    /// Fetch retry policy for the runner.
    pub retry: RetryPolicy,
}

/// What the host lends a job.
pub struct JobEnv {
    /// The broker for `fetch` (none: every fetch is denied).
    pub broker: Option<Arc<BrokerSession>>,
    /// Where the sync spool goes.
    pub spool_path: Option<PathBuf>,
    /// Where recorded logs go.
    pub logs: Arc<dyn LogSink>,
    /// Largest recorded log message.
    pub max_log_message_bytes: usize,
    /// Log bytes recorded per run.
    pub max_log_bytes_per_run: usize,
    /// Records spooled so far (the live progress of a running sync or delivery).
    pub received: Arc<AtomicU64>,
}

/// How a job ended.
#[derive(Debug)]
pub enum JobOutcome {
    /// `done`: the result and, for syncs, the finished spool to commit.
    Succeeded {
        /// The `done` result.
        result: Value,
        /// The spool (kind sync).
        spool: Option<Spool>,
    },
    /// The job failed; nothing is to be committed.
    Failed {
        /// Category.
        category: FailureCategory,
        /// Short machine word.
        kind: String,
    },
}

impl JobOutcome {
    fn failed(category: FailureCategory, kind: &str) -> Self {
        JobOutcome::Failed {
            category,
            kind: kind.to_string(),
        }
    }

    /// The failure category, if failed.
    pub fn failure_category(&self) -> Option<FailureCategory> {
        match self {
            JobOutcome::Succeeded { .. } => None,
            JobOutcome::Failed { category, .. } => Some(*category),
        }
    }
}

/// A failure detected by the host, with the `abort` reason to send (if any).
struct Stop {
    outcome: JobOutcome,
    abort: Option<&'static str>,
}

impl Stop {
    /// A broken message after `hello`: package code shares the runner's process and can write
    /// to the channel, so this is the package's fault (no retry in a fresh sandbox).
    fn protocol() -> Self {
        Stop {
            outcome: JobOutcome::failed(FailureCategory::PackageError, "protocol"),
            abort: Some("platform"),
        }
    }

    /// A broken or missing `hello`: sent before any package code is loaded, so the runner
    /// (platform) is at fault.
    fn platform_protocol() -> Self {
        Stop {
            outcome: JobOutcome::failed(FailureCategory::Platform, "protocol"),
            abort: Some("platform"),
        }
    }

    fn output_limit(kind: &str) -> Self {
        Stop {
            outcome: JobOutcome::failed(FailureCategory::OutputLimit, kind),
            abort: Some("output_limit"),
        }
    }

    fn bad_batch() -> Self {
        Stop {
            outcome: JobOutcome::failed(FailureCategory::PackageError, "bad_batch"),
            abort: Some("platform"),
        }
    }
}

/// Per-job state.
struct State {
    spool: Option<SpoolWriter>,
    batches: u64,
    output_bytes: u64,
    logs: LogPolicy,
    fetch_ids: HashSet<u64>,
    fetches: JoinSet<()>,
}

/// Runs the host side of one job over `channel` and returns how it ended. Nothing is committed
/// here: a sync's spool comes back in [`JobOutcome::Succeeded`] for the caller to commit.
pub async fn drive<S>(channel: S, spec: JobSpec, env: &JobEnv) -> JobOutcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, rx) = Outbox::new(MAX_QUEUED_BYTES);
    drive_with(channel, spec, env, outbox, rx).await
}

async fn drive_with<S>(
    channel: S,
    spec: JobSpec,
    env: &JobEnv,
    tx: Outbox,
    rx: mpsc::Receiver<Outgoing>,
) -> JobOutcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let spool = match (spec.kind, &spec.sync, &env.spool_path) {
        (JobKind::Sync | JobKind::Webhook, Some(_), Some(path)) => {
            match SpoolWriter::create(path) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "creating the spool failed");
                    return JobOutcome::failed(FailureCategory::Platform, "spool");
                }
            }
        }
        (JobKind::Sync | JobKind::Webhook, _, _) => {
            tracing::error!(error = %JobError::MissingSyncTarget, "bad job spec");
            return JobOutcome::failed(FailureCategory::Platform, "spec");
        }
        _ => None,
    };
    let (read_half, write_half) = tokio::io::split(channel);
    let mut reader = BufReader::with_capacity(256 * 1024, read_half);
    let writer = tokio::spawn(write_loop(write_half, rx));
    let mut state = State {
        spool,
        batches: 0,
        output_bytes: 0,
        logs: LogPolicy::new(env.max_log_message_bytes, env.max_log_bytes_per_run),
        fetch_ids: HashSet::new(),
        fetches: JoinSet::new(),
    };
    // The budget counts from the start; the runner hears how much is left when `job` is sent.
    let deadline = Instant::now() + spec.time_budget;
    let stop = match tokio::time::timeout_at(
        deadline,
        run(&mut reader, &tx, &mut state, &spec, env, deadline),
    )
    .await
    {
        Ok(Ok(outcome)) => Stop {
            outcome,
            abort: None,
        },
        Ok(Err(stop)) => stop,
        Err(_) => Stop {
            outcome: JobOutcome::failed(FailureCategory::TimeLimit, "time_limit"),
            abort: Some("time_limit"),
        },
    };
    state.fetches.shutdown().await;
    if let Some(reason) = stop.abort {
        let _ =
            tokio::time::timeout(Duration::from_secs(1), tx.send(wire::abort_line(reason))).await;
    }
    drop(tx);
    // Give the writer a moment to flush the abort; the caller kills the sandbox anyway.
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    let outcome = match stop.outcome {
        JobOutcome::Failed { .. }
            if env
                .broker
                .as_ref()
                .is_some_and(|b| b.needs_reauthorization()) =>
        {
            JobOutcome::failed(FailureCategory::ReauthorizationRequired, "refresh_rejected")
        }
        other => other,
    };
    // A limit failure says which limit and its value in the run's log: the run itself carries
    // only the kind. Recorded outside the log policy, like the leak notice, so it always lands.
    // (The memory limit is known only once the sandbox ended: `service::execute` records it.)
    match &outcome {
        JobOutcome::Failed {
            category: FailureCategory::OutputLimit,
            kind,
        } => {
            if let Some(notice) = spec.limits.explain(kind) {
                env.logs.record(LogLevel::Error, &notice);
            }
        }
        JobOutcome::Failed {
            category: FailureCategory::TimeLimit,
            ..
        } => env.logs.record(
            LogLevel::Error,
            &crate::limits::time_limit_notice(spec.kind.as_str(), spec.time_budget),
        ),
        _ => {}
    }
    // An unfinished spool writer in `state` is dropped here, deleting its file.
    outcome
}

async fn write_loop<W: AsyncWrite>(mut w: WriteHalf<W>, mut rx: mpsc::Receiver<Outgoing>) {
    // Each line's budget share is released when `out` drops, after it is written.
    while let Some(out) = rx.recv().await {
        if w.write_all(&out.line).await.is_err() || w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

async fn send(tx: &Outbox, line: Vec<u8>) -> Result<(), Stop> {
    tx.send(line).await.map_err(|_| Stop {
        outcome: JobOutcome::failed(FailureCategory::Platform, "channel_lost"),
        abort: None,
    })
}

async fn next_message<S: AsyncRead>(
    reader: &mut BufReader<ReadHalf<S>>,
    state: &mut State,
) -> Result<Incoming, Stop> {
    let mut buf = Vec::new();
    loop {
        if state.fetches.len() >= MAX_FETCHES_IN_FLIGHT {
            // Backpressure: read nothing more until a fetch finishes.
            state.fetches.join_next().await;
            continue;
        }
        tokio::select! {
            read = wire::read_line(reader, &mut buf, wire::MAX_LINE_BYTES) => {
                return match read {
                    Ok(ReadLine::Line) => serde_json::from_slice::<Incoming>(&buf).map_err(|e| {
                        tracing::info!(error = %e, "bad message from runner");
                        Stop::protocol()
                    }),
                    Ok(ReadLine::TooLong) => Err(Stop::protocol()),
                    Ok(ReadLine::Eof) | Err(_) => Err(Stop {
                        outcome: JobOutcome::failed(FailureCategory::Platform, "channel_lost"),
                        abort: None,
                    }),
                };
            }
            Some(_) = state.fetches.join_next(), if !state.fetches.is_empty() => {}
        }
    }
}

async fn run<S: AsyncRead>(
    reader: &mut BufReader<ReadHalf<S>>,
    tx: &Outbox,
    state: &mut State,
    spec: &JobSpec,
    env: &JobEnv,
    deadline: Instant,
) -> Result<JobOutcome, Stop> {
    let hello = next_message(reader, state).await.map_err(|stop| {
        match stop.outcome.failure_category() {
            Some(FailureCategory::PackageError) => Stop::platform_protocol(),
            _ => stop,
        }
    })?;
    if hello.t != "hello" || hello.v != Some(1) {
        return Err(Stop::platform_protocol());
    }
    let remaining = deadline.saturating_duration_since(Instant::now());
    let job = wire::JobMessage {
        t: "job",
        kind: spec.kind.as_str(),
        entry: &spec.entry,
        config: &spec.config,
        sync: spec.sync.as_ref().map(|s| s.name.as_str()),
        checkpoint: spec.checkpoint.as_ref(),
        oauth_step: spec.oauth_step.as_deref(),
        delivery: spec.delivery.as_ref(),
        deadline_ms: remaining.as_millis().min(u128::from(u64::MAX)) as u64,
        limits: spec.limits,
        retry: spec.retry,
    };
    send(tx, wire::line(&job)).await?;
    loop {
        let msg = next_message(reader, state).await?;
        match msg.t.as_str() {
            "fetch" => start_fetch(msg, state, env, tx, deadline)?,
            "log" => record_log(msg, state, env)?,
            "records" => spool_records(msg, state, spec, env)?,
            // A delivery is committed whole: a webhook job has no checkpoint.
            "checkpoint" if spec.kind == JobKind::Webhook => return Err(Stop::protocol()),
            "checkpoint" => spool_checkpoint(msg, state, spec, env)?,
            "done" => return finish(msg, state, env),
            "fail" => return Ok(runner_failure(msg, deadline, spec, env)),
            _ => return Err(Stop::protocol()),
        }
    }
}

fn start_fetch(
    msg: Incoming,
    state: &mut State,
    env: &JobEnv,
    tx: &Outbox,
    deadline: Instant,
) -> Result<(), Stop> {
    let (Some(id), Some(method), Some(url)) = (msg.id, msg.method, msg.url) else {
        return Err(Stop::protocol());
    };
    if !state.fetch_ids.insert(id) {
        return Err(Stop::protocol());
    }
    let body = match msg.body {
        None => None,
        Some(b) => Some(STANDARD.decode(b).map_err(|_| Stop::protocol())?),
    };
    let req = FetchRequest {
        method,
        url,
        headers: msg.headers.unwrap_or_default(),
        body,
    };
    let broker = env.broker.clone();
    let tx = tx.clone();
    state.fetches.spawn(async move {
        let reply = match broker {
            Some(b) => b.fetch(req, deadline).await,
            None => FetchReply::Error {
                code: FetchErrorCode::Denied,
                retryable: false,
            },
        };
        let _ = tx.send(wire::fetch_reply_line(id, &reply)).await;
    });
    Ok(())
}

fn record_log(msg: Incoming, state: &mut State, env: &JobEnv) -> Result<(), Stop> {
    let (Some(level), Some(message)) = (msg.level, msg.message) else {
        return Err(Stop::protocol());
    };
    let level = LogLevel::parse(&level).map_err(|_| Stop::protocol())?;
    screen::screen_log(env, &message)?;
    match state.logs.admit(level, &message) {
        LogDecision::Record(level, text) => env.logs.record(level, &text),
        LogDecision::Stop(notice) => env.logs.record(LogLevel::Warn, &notice),
        LogDecision::Drop => {}
    }
    Ok(())
}

fn finish(msg: Incoming, state: &mut State, env: &JobEnv) -> Result<JobOutcome, Stop> {
    // The result of verify and OAuth jobs is stored on the run.
    if let Some(result) = &msg.result {
        if screen::leaks(
            screen::secrets(env).as_deref(),
            result.to_string().as_bytes(),
        ) {
            return Err(Stop::credential_leak());
        }
    }
    let spool = match state.spool.take() {
        None => None,
        Some(w) => Some(w.finish().map_err(|e| {
            tracing::warn!(error = %e, "spool flush failed");
            Stop {
                outcome: JobOutcome::failed(FailureCategory::Platform, "spool"),
                abort: None,
            }
        })?),
    };
    Ok(JobOutcome::Succeeded {
        result: msg.result.unwrap_or(Value::Null),
        spool,
    })
}

/// How long before the deadline the runner aborts `ctx.signal` (the runner's own formula:
/// 10% of the budget, at least 100 ms, at most 5 s and at most half the budget).
pub fn signal_margin(budget: Duration) -> Duration {
    let tenth = budget / 10;
    tenth
        .max(Duration::from_millis(100))
        .min(Duration::from_secs(5))
        .min(budget / 2)
}

fn runner_failure(msg: Incoming, deadline: Instant, spec: &JobSpec, env: &JobEnv) -> JobOutcome {
    let (budget, spec_limits) = (spec.time_budget, spec.limits);
    // Keep only a short machine word: the runner never sends messages, and we never store one.
    let kind = msg
        .kind
        .filter(|k| {
            !k.is_empty()
                && k.len() <= 40
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .unwrap_or_else(|| "unknown".to_string());
    // The kind is stored on the run: a lower-case token would fit the word rule.
    if screen::leaks(screen::secrets(env).as_deref(), kind.as_bytes()) {
        return JobOutcome::failed(FailureCategory::PackageError, screen::CREDENTIAL_LEAK);
    }
    // Only `runner_error` is a fault of the platform's runner; every other failure it reports
    // (including `protocol`: the package broke the channel) is the package's, and is not retried.
    if kind == "runner_error" {
        return JobOutcome::Failed {
            category: FailureCategory::Platform,
            kind,
        };
    }
    match msg.category.as_deref() {
        // The runner checks the output limits early and reports them as package failures, named
        // by the limit (`max_records_per_batch`, ...; `output_limit` from older runners).
        Some("package") if spec_limits.explain(&kind).is_some() => JobOutcome::Failed {
            category: FailureCategory::OutputLimit,
            kind,
        },
        // After the runner aborted ctx.signal the package usually throws an AbortError: that is
        // the time limit, not a package error.
        Some("package") if Instant::now() + signal_margin(budget) >= deadline => {
            JobOutcome::failed(FailureCategory::TimeLimit, "time_limit")
        }
        _ => JobOutcome::Failed {
            category: FailureCategory::PackageError,
            kind,
        },
    }
}

#[cfg(test)]
mod tests;
