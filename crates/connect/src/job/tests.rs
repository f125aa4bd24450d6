//! Job protocol tests against a scripted fake runner over an in-memory duplex stream.

use super::*;
use crate::limits::Limits;
use serde_json::json;
use std::sync::Mutex;
use tokio::io::{AsyncBufReadExt, DuplexStream};

#[derive(Default)]
struct Logs(Mutex<Vec<(LogLevel, String)>>);

impl LogSink for Logs {
    fn record(&self, level: LogLevel, message: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((level, message.to_string()));
    }
}

impl Logs {
    fn lines(&self) -> Vec<(LogLevel, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct FakeRunner {
    lines: tokio::io::Lines<BufReader<ReadHalf<DuplexStream>>>,
    w: WriteHalf<DuplexStream>,
}

impl FakeRunner {
    async fn send(&mut self, v: Value) {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        self.w.write_all(&line).await.expect("runner write");
    }

    async fn send_raw(&mut self, s: &str) {
        self.w.write_all(s.as_bytes()).await.expect("runner write");
    }

    async fn recv(&mut self) -> Option<Value> {
        let line = self.lines.next_line().await.ok()??;
        serde_json::from_str(&line).ok()
    }

    /// Sends hello and returns the job message.
    async fn start(&mut self) -> Value {
        self.send(json!({"t": "hello", "v": 1})).await;
        self.recv().await.expect("job message")
    }
}

fn pair() -> (DuplexStream, FakeRunner) {
    let (host, runner) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(runner);
    (
        host,
        FakeRunner {
            lines: BufReader::new(r).lines(),
            w,
        },
    )
}

fn spec(kind: JobKind, mode: Option<SyncMode>) -> JobSpec {
    let limits = Limits::default();
    JobSpec {
        kind,
        entry: "/pkg/index.js".into(),
        config: json!({"a": 1}),
        sync: mode.map(|mode| SyncTarget {
            name: "items".into(),
            mode,
            primary_key: Some(PrimaryKey::One("id".into())),
        }),
        checkpoint: Some(json!({"page": 1})),
        oauth_step: None,
        delivery: None,
        time_budget: Duration::from_secs(60),
        limits: limits.output,
        retry: limits.fetch_retry,
    }
}

fn env(dir: &tempfile::TempDir, logs: Arc<Logs>) -> JobEnv {
    JobEnv {
        broker: None,
        spool_path: Some(dir.path().join("spool").join("run.spool")),
        logs,
        max_log_message_bytes: 4096,
        max_log_bytes_per_run: 1 << 20,
        received: Arc::default(),
    }
}

fn failed(o: &JobOutcome) -> (FailureCategory, String) {
    match o {
        JobOutcome::Failed { category, kind } => (*category, kind.clone()),
        JobOutcome::Succeeded { .. } => (FailureCategory::Platform, "succeeded?".into()),
    }
}

#[tokio::test]
async fn describe_sends_job_and_returns_result() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        let job = runner.start().await;
        runner
            .send(json!({"t": "done", "result": {"syncs": []}}))
            .await;
        job
    });
    let out = drive(
        host,
        spec(JobKind::Describe, None),
        &env(&dir, Arc::default()),
    )
    .await;
    let job = script.await.expect("script");
    assert_eq!(job["t"], "job");
    assert_eq!(job["kind"], "describe");
    assert_eq!(job["entry"], "/pkg/index.js");
    assert_eq!(job["config"], json!({"a": 1}));
    assert_eq!(job["limits"]["maxBatches"], 10_000);
    assert_eq!(job["retry"]["maxAttempts"], 5);
    assert!(job["deadlineMs"]
        .as_u64()
        .is_some_and(|ms| ms > 59_000 && ms <= 60_000));
    match out {
        JobOutcome::Succeeded { result, spool } => {
            assert_eq!(result, json!({"syncs": []}));
            assert!(spool.is_none());
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn sync_spools_records_and_last_checkpoint() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        let job = runner.start().await;
        runner
            .send(json!({"t": "records", "records": [{"id": 1}, {"id": "b", "x": [1]}]}))
            .await;
        runner
            .send(json!({"t": "checkpoint", "checkpoint": {"page": 2}}))
            .await;
        runner
            .send(json!({"t": "records", "records": [{"id": 3}]}))
            .await;
        runner
            .send(json!({"t": "checkpoint", "checkpoint": {"page": 3}}))
            .await;
        runner.send(json!({"t": "done", "result": null})).await;
        job
    });
    let out = drive(
        host,
        spec(JobKind::Sync, Some(SyncMode::Merge)),
        &env(&dir, Arc::default()),
    )
    .await;
    let job = script.await.expect("script");
    assert_eq!(job["sync"], "items");
    assert_eq!(job["checkpoint"], json!({"page": 1}));
    let JobOutcome::Succeeded {
        spool: Some(spool), ..
    } = out
    else {
        panic!("expected success with a spool");
    };
    assert_eq!(spool.records(), 3);
    let mut r = spool.reader().expect("reader");
    let mut keys = Vec::new();
    let mut last_cp = None;
    while let Some(e) = r.next_entry().expect("entry") {
        match e {
            crate::spool::SpoolEntry::Record { key, .. } => keys.push(key),
            crate::spool::SpoolEntry::Checkpoint(c) => last_cp = Some(c),
        }
    }
    assert_eq!(
        keys,
        vec![
            Some("1".to_string()),
            Some("b".to_string()),
            Some("3".to_string())
        ]
    );
    assert_eq!(last_cp.as_deref(), Some(r#"{"page":3}"#));
}

async fn failing_sync(
    mode: SyncMode,
    limits: OutputLimits,
    msgs: Vec<Value>,
) -> (JobOutcome, Option<Value>, bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        for m in msgs {
            runner.send(m).await;
        }
        // The host answers a limit breach with `abort`.
        runner.recv().await
    });
    let mut s = spec(JobKind::Sync, Some(mode));
    s.limits = limits;
    let e = env(&dir, Arc::default());
    let out = drive(host, s, &e).await;
    let abort = script.await.expect("script");
    let spool_left = e.spool_path.as_ref().is_some_and(|p| p.exists());
    (out, abort, spool_left)
}

#[tokio::test]
async fn merge_record_without_key_is_bad_batch() {
    let (out, abort, spool_left) = failing_sync(
        SyncMode::Merge,
        Limits::default().output,
        vec![json!({"t": "records", "records": [{"id": 1}, {"name": "no key"}]})],
    )
    .await;
    assert_eq!(
        failed(&out),
        (FailureCategory::PackageError, "bad_batch".into())
    );
    assert_eq!(abort, Some(json!({"t": "abort", "reason": "platform"})));
    assert!(!spool_left, "a failed run leaves no spool");
}

#[tokio::test]
async fn non_object_record_is_bad_batch() {
    let (out, _, _) = failing_sync(
        SyncMode::Append,
        Limits::default().output,
        vec![json!({"t": "records", "records": [1]})],
    )
    .await;
    assert_eq!(
        failed(&out),
        (FailureCategory::PackageError, "bad_batch".into())
    );
}

#[tokio::test]
async fn output_limits_fail_with_output_limit() {
    let base = Limits::default().output;
    let cases = [
        (
            OutputLimits {
                max_batches: 1,
                ..base
            },
            vec![
                json!({"t": "records", "records": [{}]}),
                json!({"t": "records", "records": [{}]}),
            ],
            "max_batches",
        ),
        (
            OutputLimits {
                max_records_per_batch: 2,
                ..base
            },
            vec![json!({"t": "records", "records": [{}, {}, {}]})],
            "max_records_per_batch",
        ),
        (
            OutputLimits {
                max_record_bytes: 10,
                ..base
            },
            vec![json!({"t": "records", "records": [{"x": "0123456789"}]})],
            "max_record_bytes",
        ),
        (
            OutputLimits {
                max_output_bytes: 20,
                ..base
            },
            vec![json!({"t": "records", "records": [{"x": "012345"}, {"x": "012345"}]})],
            "max_output_bytes",
        ),
        (
            OutputLimits {
                max_checkpoint_bytes: 8,
                ..base
            },
            vec![json!({"t": "checkpoint", "checkpoint": {"page": 123456}})],
            "max_checkpoint_bytes",
        ),
    ];
    for (limits, msgs, kind) in cases {
        let (out, abort, spool_left) = failing_sync(SyncMode::Append, limits, msgs).await;
        assert_eq!(
            failed(&out),
            (FailureCategory::OutputLimit, kind.to_string())
        );
        assert_eq!(
            abort,
            Some(json!({"t": "abort", "reason": "output_limit"})),
            "{kind}"
        );
        assert!(!spool_left);
    }
}

#[tokio::test(start_paused = true)]
async fn deadline_sends_abort_and_fails_time_limit() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        runner
            .send(json!({"t": "records", "records": [{"id": 1}]}))
            .await;
        // Then hang: the host must give up on its own.
        runner.recv().await
    });
    let mut s = spec(JobKind::Sync, Some(SyncMode::Append));
    s.time_budget = Duration::from_secs(900);
    let logs = Arc::new(Logs::default());
    let e = env(&dir, logs.clone());
    let out = drive(host, s, &e).await;
    assert_eq!(
        failed(&out),
        (FailureCategory::TimeLimit, "time_limit".into())
    );
    // The log names the limit and its value.
    assert_eq!(
        logs.lines(),
        vec![(
            LogLevel::Error,
            "The run went over its time limit (time_limit: 900 s for a sync job); it was \
             stopped and nothing of it was committed."
                .to_string()
        )]
    );
    assert_eq!(
        script.await.expect("script"),
        Some(json!({"t": "abort", "reason": "time_limit"}))
    );
    assert!(!e.spool_path.as_ref().is_some_and(|p| p.exists()));
}

#[tokio::test]
async fn logs_follow_the_policy() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        runner.send(json!({"t": "log", "level": "info", "message": "first", "fields": {"dropped": true}})).await;
        runner
            .send(json!({"t": "log", "level": "error", "message": "x".repeat(5000)}))
            .await;
        runner
            .send(json!({"t": "log", "level": "info", "message": "after"}))
            .await;
        runner.send(json!({"t": "done", "result": null})).await;
    });
    let logs = Arc::new(Logs::default());
    let out = drive(host, spec(JobKind::Verify, None), &env(&dir, logs.clone())).await;
    script.await.expect("script");
    assert!(matches!(out, JobOutcome::Succeeded { .. }));
    let lines = logs.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], (LogLevel::Info, "first".into()));
    assert!(lines[1].1.contains("stopped"));
}

#[tokio::test]
async fn runner_fail_maps_category_and_sanitizes_kind() {
    for (category, kind, want) in [
        ("package", "threw", (FailureCategory::PackageError, "threw")),
        (
            "package",
            "Error: secret token abc",
            (FailureCategory::PackageError, "unknown"),
        ),
        (
            "package",
            "output_limit",
            (FailureCategory::OutputLimit, "output_limit"),
        ),
        // Only the runner's own `runner_error` is a platform fault; any other kind is the
        // package's, whatever category it claims (no forced retries in fresh sandboxes).
        (
            "platform",
            "bad_definition",
            (FailureCategory::PackageError, "bad_definition"),
        ),
        (
            "platform",
            "protocol",
            (FailureCategory::PackageError, "protocol"),
        ),
        (
            "platform",
            "runner_error",
            (FailureCategory::Platform, "runner_error"),
        ),
        (
            "package",
            "runner_error",
            (FailureCategory::Platform, "runner_error"),
        ),
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        let (host, mut runner) = pair();
        let script = tokio::spawn(async move {
            runner.start().await;
            runner
                .send(json!({"t": "fail", "category": category, "kind": kind}))
                .await;
        });
        let out = drive(
            host,
            spec(JobKind::Verify, None),
            &env(&dir, Arc::default()),
        )
        .await;
        script.await.expect("script");
        assert_eq!(failed(&out), (want.0, want.1.to_string()));
    }
}

#[tokio::test]
async fn protocol_errors_fail_as_package_error_after_hello() {
    // Before hello no package code runs: a bad hello is the runner's (platform) fault.
    let cases: Vec<(Vec<&str>, FailureCategory)> = vec![
        (
            vec!["{\"t\":\"records\",\"records\":[]}\n"],
            FailureCategory::Platform,
        ),
        (
            vec!["{\"t\":\"hello\",\"v\":2}\n"],
            FailureCategory::Platform,
        ),
        (vec!["not json\n"], FailureCategory::Platform),
    ];
    // After hello, package code shares the channel: a broken line is a package error.
    let after_hello: Vec<Vec<&str>> = vec![
        vec!["{\"t\":\"hello\",\"v\":1}\n", "not json\n"],
        vec!["{\"t\":\"hello\",\"v\":1}\n", "{\"t\":\"teleport\"}\n"],
        vec![
            "{\"t\":\"hello\",\"v\":1}\n",
            "{\"t\":\"log\",\"level\":\"loud\",\"message\":\"x\"}\n",
        ],
        vec![
            "{\"t\":\"hello\",\"v\":1}\n",
            "{\"t\":\"records\",\"records\":[{}]}\n",
        ],
    ];
    let cases = cases.into_iter().chain(
        after_hello
            .into_iter()
            .map(|l| (l, FailureCategory::PackageError)),
    );
    for (lines, want) in cases {
        let dir = tempfile::tempdir().expect("tmp");
        let (host, mut runner) = pair();
        let script_lines: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        let script = tokio::spawn(async move {
            for l in script_lines {
                runner.send_raw(&l).await;
            }
            // Drain until the host closes.
            while runner.recv().await.is_some() {}
        });
        let out = drive(
            host,
            spec(JobKind::Verify, None),
            &env(&dir, Arc::default()),
        )
        .await;
        script.await.expect("script");
        assert_eq!(failed(&out), (want, "protocol".into()), "{lines:?}");
    }
}

#[tokio::test]
async fn lost_channel_is_platform() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        runner
            .send(json!({"t": "records", "records": [{"id": 1}]}))
            .await;
        drop(runner);
    });
    let e = env(&dir, Arc::default());
    let out = drive(host, spec(JobKind::Sync, Some(SyncMode::Append)), &e).await;
    script.await.expect("script");
    assert_eq!(
        failed(&out),
        (FailureCategory::Platform, "channel_lost".into())
    );
    assert!(!e.spool_path.as_ref().is_some_and(|p| p.exists()));
}

#[tokio::test]
async fn fetch_without_broker_is_denied_and_duplicate_ids_are_protocol_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        let f = |id: u64| json!({"t": "fetch", "id": id, "method": "GET", "url": "/x", "headers": {}, "body": null});
        runner.send(f(1)).await;
        runner.send(f(2)).await;
        let a = runner.recv().await;
        let b = runner.recv().await;
        runner.send(f(2)).await;
        let c = runner.recv().await;
        (a, b, c)
    });
    let out = drive(
        host,
        spec(JobKind::Describe, None),
        &env(&dir, Arc::default()),
    )
    .await;
    let (a, b, c) = script.await.expect("script");
    let mut ids: Vec<u64> = [&a, &b]
        .iter()
        .filter_map(|m| m.as_ref()?["id"].as_u64())
        .collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
    let a = a.expect("reply");
    assert_eq!(a["t"], "fetch_error");
    assert_eq!(a["code"], "denied");
    assert_eq!(a["retryable"], false);
    assert_eq!(c, Some(json!({"t": "abort", "reason": "platform"})));
    assert_eq!(
        failed(&out),
        (FailureCategory::PackageError, "protocol".into())
    );
}

#[test]
fn key_text_handles_composite_and_rejects_non_scalars() {
    let rec = json!({"a": 1, "b": "x", "c": null, "d": {"e": 1}});
    let map = rec.as_object().expect("object");
    assert_eq!(
        key_text(map, &PrimaryKey::One("a".into())).as_deref(),
        Some("1")
    );
    assert_eq!(
        key_text(map, &PrimaryKey::One("b".into())).as_deref(),
        Some("x")
    );
    assert_eq!(
        key_text(map, &PrimaryKey::Many(vec!["a".into(), "b".into()])).as_deref(),
        Some("[1,\"x\"]")
    );
    assert_eq!(key_text(map, &PrimaryKey::One("c".into())), None);
    assert_eq!(key_text(map, &PrimaryKey::One("d".into())), None);
    assert_eq!(key_text(map, &PrimaryKey::One("z".into())), None);
    assert_eq!(
        key_text(map, &PrimaryKey::Many(vec!["a".into(), "c".into()])),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn package_failure_after_the_signal_margin_is_time_limit() {
    assert_eq!(
        signal_margin(Duration::from_secs(900)),
        Duration::from_secs(5)
    );
    assert_eq!(
        signal_margin(Duration::from_secs(10)),
        Duration::from_secs(1)
    );
    assert_eq!(
        signal_margin(Duration::from_millis(100)),
        Duration::from_millis(50)
    );
    let dir = tempfile::tempdir().expect("tmp");
    let (host, mut runner) = pair();
    let script = tokio::spawn(async move {
        runner.start().await;
        // The runner aborted ctx.signal 1 s before the 10 s deadline; the package threw.
        tokio::time::sleep(Duration::from_millis(9_500)).await;
        runner
            .send(json!({"t": "fail", "category": "package", "kind": "threw"}))
            .await;
    });
    let mut s = spec(JobKind::Verify, None);
    s.time_budget = Duration::from_millis(10_500);
    let logs = Arc::new(Logs::default());
    let out = drive(host, s, &env(&dir, logs.clone())).await;
    script.await.expect("script");
    assert_eq!(
        failed(&out),
        (FailureCategory::TimeLimit, "time_limit".into())
    );
    assert!(
        logs.lines()
            .iter()
            .any(|(_, l)| l.contains("(time_limit: 10500 ms for a verify job)")),
        "{:?}",
        logs.lines()
    );
}

#[tokio::test]
async fn a_runner_that_stops_reading_cannot_queue_more_than_the_byte_budget() {
    const BUDGET: usize = 2048;
    let dir = tempfile::tempdir().expect("tmp");
    // A small pipe so the host's writes block as soon as the runner stops reading.
    let (host, runner) = tokio::io::duplex(256);
    let (r, mut w) = tokio::io::split(runner);
    let (outbox, rx) = Outbox::new(BUDGET);
    let probe = outbox.clone();
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(probe.queued_bytes(), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let script = {
        let sent = sent.clone();
        tokio::spawn(async move {
            // Never reads (keeps the read half alive so the pipe stays open).
            let _keep = r;
            w.write_all(b"{\"t\":\"hello\",\"v\":1}\n")
                .await
                .expect("hello");
            for id in 0..2000u64 {
                let f = json!({"t": "fetch", "id": id, "method": "GET",
                               "url": format!("/x?pad={}", "p".repeat(200)), "headers": {}});
                let mut line = f.to_string().into_bytes();
                line.push(b'\n');
                if w.write_all(&line).await.is_err() {
                    return;
                }
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let mut s = spec(JobKind::Describe, None);
    s.time_budget = Duration::from_millis(1500);
    let out = drive_with(host, s, &env(&dir, Arc::default()), outbox, rx).await;
    watch.abort();
    script.abort();
    assert_eq!(
        failed(&out),
        (FailureCategory::TimeLimit, "time_limit".into())
    );
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(peak > 0, "replies were queued");
    assert!(peak <= BUDGET, "queued {peak} bytes > budget {BUDGET}");
    // Backpressure reached the runner: the host stopped reading long before 2000 fetches.
    let sent = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(sent < 2000, "host kept reading: {sent}");
}
