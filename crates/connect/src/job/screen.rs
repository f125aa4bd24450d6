//! Refuses job output that carries a secret of the connection: records, checkpoints, log
//! messages, results and failure words are screened with the broker's secret set before
//! anything is stored. The broker already redacts what the package receives; this catches a
//! secret that reached the package another way (an encoding the broker does not decode, a
//! guess) in the forms the screen knows.
//!
//! A hit fails the job (`package_error`, `credential_leak`) instead of redacting in place:
//! a record with `[redacted]` spliced into it is silently wrong data, while a failed run
//! commits nothing, is visible on the Runs tab and is retried by nobody.

use super::{JobEnv, JobOutcome, Stop};
use crate::model::{FailureCategory, LogLevel};
use crate::secrets::SecretSet;
use std::sync::Arc;

/// The failure kind of a job whose output carried a secret.
pub const CREDENTIAL_LEAK: &str = "credential_leak";

/// What is recorded in place of a log message that carried a secret.
pub const LEAK_NOTICE: &str = "A log message contained a credential of this connection; it was not recorded and the run failed (credential_leak).";

/// The secrets to screen with; `None` for jobs without a connection.
pub(super) fn secrets(env: &JobEnv) -> Option<Arc<SecretSet>> {
    env.broker.as_ref().map(|b| b.secrets())
}

/// Whether `text` carries a secret.
pub(super) fn leaks(secrets: Option<&SecretSet>, text: &[u8]) -> bool {
    secrets.is_some_and(|s| s.contains(text))
}

impl Stop {
    /// The package tried to store a secret: fail, commit nothing.
    pub(super) fn credential_leak() -> Self {
        Stop {
            outcome: JobOutcome::failed(FailureCategory::PackageError, CREDENTIAL_LEAK),
            abort: Some(CREDENTIAL_LEAK),
        }
    }
}

/// Fails the job if a log message carries a secret, recording a notice instead of it.
pub(super) fn screen_log(env: &JobEnv, message: &str) -> Result<(), Stop> {
    if leaks(secrets(env).as_deref(), message.as_bytes()) {
        env.logs.record(LogLevel::Error, LEAK_NOTICE);
        return Err(Stop::credential_leak());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{drive, JobSpec, LogSink, SyncTarget};
    use super::*;
    use crate::broker::{BrokerSession, TokenStore};
    use crate::credentials::Credentials;
    use crate::egress::BrokerConfig;
    use crate::limits::Limits;
    use crate::model::{AuthDefinition, JobKind, PrimaryKey, SyncMode};
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    use serde_json::{json, Value};
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    const TOKEN: &str = "sk_live_9f8e7d6c5b";

    struct NoTokens;

    impl TokenStore for NoTokens {
        fn save(&self, _: &Credentials) -> Result<(), String> {
            Ok(())
        }
        fn reauthorization_required(&self) -> Result<(), String> {
            Ok(())
        }
    }

    #[derive(Default)]
    struct Logs(Mutex<Vec<String>>);

    impl LogSink for Logs {
        fn record(&self, _: LogLevel, message: &str) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message.to_string());
        }
    }

    fn broker() -> Arc<BrokerSession> {
        let session = BrokerSession::new(
            BrokerConfig::new(Arc::new(|_| false)),
            "https://api.example.com",
            AuthDefinition::Bearer,
            Credentials::Bearer {
                token: TOKEN.into(),
            },
            Arc::new(NoTokens),
        )
        .expect("session");
        Arc::new(session)
    }

    /// The forms a package that got the token some other way might store it in.
    fn leaked_forms() -> Vec<String> {
        vec![
            TOKEN.to_string(),
            TOKEN.to_ascii_uppercase(),
            format!("Bearer {TOKEN}"),
            STANDARD.encode(TOKEN),
            URL_SAFE_NO_PAD.encode(format!("Bearer {TOKEN}")),
            url::form_urlencoded::byte_serialize(TOKEN.as_bytes()).collect(),
            hex::encode(TOKEN),
        ]
    }

    /// Runs one job whose runner sends `messages` after `hello`, then `done`.
    async fn run(kind: JobKind, messages: Vec<Value>) -> (JobOutcome, Vec<String>) {
        let dir = tempfile::tempdir().expect("tmp");
        let (host, runner) = tokio::io::duplex(1 << 20);
        let script = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(runner);
            let mut lines = BufReader::new(r).lines();
            let _ = w.write_all(b"{\"t\":\"hello\",\"v\":1}\n").await;
            let _ = lines.next_line().await;
            for m in messages {
                let _ = w.write_all(format!("{m}\n").as_bytes()).await;
            }
            let _ = w.write_all(b"{\"t\":\"done\",\"result\":null}\n").await;
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        let limits = Limits::default();
        let spec = JobSpec {
            kind,
            entry: "/pkg/index.js".into(),
            config: json!({}),
            sync: (kind == JobKind::Sync).then(|| SyncTarget {
                name: "items".into(),
                mode: SyncMode::Merge,
                primary_key: Some(PrimaryKey::One("id".into())),
            }),
            checkpoint: None,
            oauth_step: None,
            delivery: None,
            time_budget: Duration::from_secs(30),
            limits: limits.output,
            retry: limits.fetch_retry,
        };
        let logs = Arc::new(Logs::default());
        let env = JobEnv {
            broker: Some(broker()),
            spool_path: Some(dir.path().join("run.spool")),
            logs: logs.clone(),
            max_log_message_bytes: 4096,
            max_log_bytes_per_run: 1 << 20,
            received: Arc::default(),
        };
        let out = drive(host, spec, &env).await;
        script.abort();
        let lines = logs.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (out, lines)
    }

    fn is_leak(o: &JobOutcome) -> bool {
        matches!(o, JobOutcome::Failed { category: FailureCategory::PackageError, kind } if kind == CREDENTIAL_LEAK)
    }

    #[tokio::test]
    async fn records_checkpoints_logs_and_results_carrying_the_secret_fail_the_run() {
        for form in leaked_forms() {
            let record = json!({"t": "records", "records": [{"id": 1}, {"id": 2, "note": format!("x {form} y")}]});
            let (out, _) = run(JobKind::Sync, vec![record]).await;
            assert!(is_leak(&out), "record {form}: {out:?}");

            let checkpoint = json!({"t": "checkpoint", "checkpoint": {"cursor": form}});
            let (out, _) = run(JobKind::Sync, vec![checkpoint]).await;
            assert!(is_leak(&out), "checkpoint {form}: {out:?}");

            let log = json!({"t": "log", "level": "info", "message": format!("token is {form}")});
            let (out, lines) = run(JobKind::Verify, vec![log]).await;
            assert!(is_leak(&out), "log {form}: {out:?}");
            assert_eq!(lines, vec![LEAK_NOTICE.to_string()], "{form}");

            let (out, _) = run(
                JobKind::Verify,
                vec![json!({"t": "done", "result": {"echo": form}})],
            )
            .await;
            assert!(is_leak(&out), "result {form}: {out:?}");
        }
    }

    #[tokio::test]
    async fn clean_output_passes_the_screen() {
        let (out, lines) = run(
            JobKind::Sync,
            vec![
                json!({"t": "log", "level": "info", "message": "page 1 of sk_live (Bearer [redacted])"}),
                json!({"t": "records", "records": [{"id": 1, "token": "[redacted]"}]}),
                json!({"t": "checkpoint", "checkpoint": {"page": 2}}),
            ],
        )
        .await;
        match out {
            JobOutcome::Succeeded { spool, .. } => {
                assert_eq!(spool.map(|s| s.records()), Some(1));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(lines.len(), 1);
    }
}
