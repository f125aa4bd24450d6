//! `sbx connect ...`: packages, builds, connections, runs, logs and records of the Connect API.

mod args;
mod dev;
mod init;
mod webhooks;

pub use args::{
    AuthType, BuildCommand, ConnectCommand, ConnectionCommand, CredentialArgs, PackageCommand,
};

use crate::tarball;
use crate::util::table;
use anyhow::{bail, Context};
use sbx_client::connect::{CreateConnection, Credentials, Run, UpdateConnection};
use sbx_client::Client;
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::time::{Duration, Instant};

/// Interval between status polls of builds and runs.
const POLL: Duration = Duration::from_secs(1);

/// Runs `sbx connect ...`.
pub async fn run(c: &Client, cmd: ConnectCommand) -> anyhow::Result<u8> {
    match cmd {
        ConnectCommand::Init { name, dir } => {
            let dir = init::init(&name, dir.as_deref())?;
            eprintln!(
                "created {}: try it with sbx connect dev {} --origin URL --auth api-key --api-key KEY",
                dir.display(),
                dir.display()
            );
            Ok(0)
        }
        ConnectCommand::Dev(cmd) => dev::dev(c, *cmd).await,
        ConnectCommand::Package(cmd) => package(c, cmd).await,
        ConnectCommand::Build(cmd) => build(c, cmd).await,
        ConnectCommand::Connection(cmd) => connection(c, *cmd).await,
        ConnectCommand::Run {
            sync,
            connection,
            wait,
            timeout,
        } => {
            let run = c.connect_run_sync(&connection, &sync).await?;
            if !wait {
                println!("{}", run.id);
                return Ok(0);
            }
            let run = wait_run(c, run, timeout).await?;
            report_run(c, &run).await
        }
        ConnectCommand::Runs { connection, limit } => runs(c, &connection, limit).await,
        ConnectCommand::Logs { run } => logs(c, &run).await,
        ConnectCommand::Deliveries {
            connection,
            status,
            limit,
        } => webhooks::deliveries(c, &connection, status.as_deref(), limit).await,
        ConnectCommand::Webhooks {
            connection,
            scheme,
            header,
            id_header,
            rotate_urls,
        } => {
            let req = webhooks::setup_request(&scheme, header, id_header, rotate_urls);
            webhooks::setup(c, &connection, &req).await
        }
        ConnectCommand::Records {
            sync,
            connection,
            limit,
        } => records(c, &connection, &sync, limit).await,
        ConnectCommand::Checkpoint { sync, connection } => {
            let checkpoint = c.connect_checkpoint(&connection, &sync).await?;
            println!("{}", serde_json::to_string_pretty(&checkpoint)?);
            Ok(0)
        }
    }
}

async fn package(c: &Client, cmd: PackageCommand) -> anyhow::Result<u8> {
    match cmd {
        PackageCommand::Upload { path } => {
            let tarball = read_package(Path::new(&path))?;
            let up = c.connect_upload_package(tarball).await?;
            let what = if up.created {
                "uploaded"
            } else {
                "unchanged (same content)"
            };
            eprintln!(
                "{what}; build it with: sbx connect build start {} {} --wait",
                up.version.name, up.version.version
            );
            println!("{}@{}", up.version.name, up.version.version);
        }
        PackageCommand::List => {
            let rows: Vec<Vec<String>> = c
                .connect_packages()
                .await?
                .into_iter()
                .map(|p| vec![p.name, p.versions.join(", "), p.created_at])
                .collect();
            print!("{}", table(&["NAME", "VERSIONS", "CREATED"], &rows));
        }
        PackageCommand::Get {
            name,
            package_version,
        } => {
            let v = c.connect_version(&name, &package_version).await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        PackageCommand::Delete {
            name,
            package_version,
        } => {
            c.connect_version_delete(&name, &package_version).await?;
            eprintln!("deleted {name}@{package_version}");
        }
    }
    Ok(0)
}

/// The tarball to upload: a directory is packed, a file is sent as it is.
fn read_package(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.is_dir() {
        return tarball::pack_dir(path).context("packing the package directory");
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

async fn build(c: &Client, cmd: BuildCommand) -> anyhow::Result<u8> {
    match cmd {
        BuildCommand::Start {
            name,
            package_version,
            wait,
            timeout,
        } => {
            let mut b = c.connect_build_start(&name, &package_version).await?;
            if !wait {
                println!("{}", b.id);
                return Ok(0);
            }
            let deadline = Instant::now() + timeout;
            while !b.is_finished() {
                if Instant::now() >= deadline {
                    bail!("build {} still {} after {timeout:?}", b.id, b.status);
                }
                tokio::time::sleep(POLL).await;
                b = c.connect_build(&b.id).await?;
            }
            print!("{}", b.log);
            report_build(&b.id, &b.status, b.failure.as_deref())
        }
        BuildCommand::Get { id } => {
            let b = c.connect_build(&id).await?;
            print!("{}", b.log);
            report_build(&b.id, &b.status, b.failure.as_deref())
        }
        BuildCommand::List {
            name,
            package_version,
        } => {
            let rows: Vec<Vec<String>> = c
                .connect_builds(&name, &package_version)
                .await?
                .into_iter()
                .map(|b| {
                    vec![
                        b.id,
                        b.status,
                        b.created_at,
                        b.finished_at.unwrap_or_default(),
                    ]
                })
                .collect();
            print!("{}", table(&["ID", "STATUS", "CREATED", "FINISHED"], &rows));
            Ok(0)
        }
    }
}

/// Prints the build's outcome on stderr; exit 1 unless it succeeded.
fn report_build(id: &str, status: &str, failure: Option<&str>) -> anyhow::Result<u8> {
    match failure {
        Some(f) => eprintln!("build {id}: {status}: {f}"),
        None => eprintln!("build {id}: {status}"),
    }
    Ok(if status == "failed" { 1 } else { 0 })
}

async fn connection(c: &Client, cmd: ConnectionCommand) -> anyhow::Result<u8> {
    match cmd {
        ConnectionCommand::Create {
            name,
            package,
            package_version,
            origin,
            config,
            schedule,
            credentials,
        } => {
            let Some(creds) = credentials_from(&credentials, &mut stdin_secret)? else {
                bail!("--auth is required (api-key, bearer, basic, oauth2 or none)");
            };
            let req = CreateConnection {
                name,
                package,
                version: package_version,
                config: parse_config(&config)?,
                origin,
                credentials: creds,
                schedule_interval_seconds: schedule.map(|d| d.as_secs()),
            };
            let conn = c.connect_connection_create(&req).await?;
            eprintln!("connection {}: {}", conn.id, conn.status);
            println!("{}", conn.id);
            Ok(0)
        }
        ConnectionCommand::List => {
            let rows: Vec<Vec<String>> = c
                .connect_connections()
                .await?
                .into_iter()
                .map(|k| {
                    vec![
                        k.id,
                        k.name,
                        format!("{}@{}", k.package, k.version),
                        k.status,
                        k.schedule_interval_seconds
                            .map(|s| format!("{s}s"))
                            .unwrap_or_else(|| "-".into()),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["ID", "NAME", "PACKAGE", "STATUS", "SCHEDULE"], &rows)
            );
            Ok(0)
        }
        ConnectionCommand::Get { id } => {
            let conn = c.connect_connection(&id).await?;
            println!("{}", serde_json::to_string_pretty(&conn)?);
            Ok(0)
        }
        ConnectionCommand::Update {
            id,
            name,
            config,
            schedule,
            no_schedule,
            disable,
            enable,
            package_version,
            credentials,
        } => {
            let req = UpdateConnection {
                name,
                config: config.as_deref().map(parse_config).transpose()?,
                credentials: credentials_from(&credentials, &mut stdin_secret)?,
                schedule_interval_seconds: match (schedule, no_schedule) {
                    (Some(d), _) => Some(Some(d.as_secs())),
                    (None, true) => Some(None),
                    (None, false) => None,
                },
                status: match (disable, enable) {
                    (true, _) => Some("disabled".into()),
                    (_, true) => Some("active".into()),
                    _ => None,
                },
                version: package_version,
            };
            let conn = c.connect_connection_update(&id, &req).await?;
            println!("{}", serde_json::to_string_pretty(&conn)?);
            Ok(0)
        }
        ConnectionCommand::Delete { id } => {
            c.connect_connection_delete(&id).await?;
            Ok(0)
        }
        ConnectionCommand::Test { id } => {
            let run = c.connect_test(&id).await?;
            report_run(c, &run).await
        }
        ConnectionCommand::OauthStart { id, redirect_uri } => {
            let start = c.connect_oauth_start(&id, &redirect_uri).await?;
            eprintln!("state: {}", start.state);
            println!("{}", start.authorize_url);
            Ok(0)
        }
        ConnectionCommand::OauthCallback { state, code } => {
            let done = c.connect_oauth_callback(&state, &code).await?;
            println!("{}", serde_json::to_string_pretty(&done.connection)?);
            let Some(run) = done.run else {
                return Ok(0);
            };
            eprintln!("afterAuthorize run {}: {}", run.id, run.status);
            // The tokens are stored, but the package's own set-up failed: a script must not
            // take the sign-in as done.
            if run.status == "failed" {
                return report_failure(c, &run).await;
            }
            Ok(0)
        }
    }
}

/// Parses `--config`: JSON, or `@FILE` holding JSON.
fn parse_config(raw: &str) -> anyhow::Result<serde_json::Value> {
    let text = match raw.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?,
        None => raw.to_string(),
    };
    serde_json::from_str(&text).context("--config must be JSON (or @FILE with JSON)")
}

/// Builds the credentials from the flags; `read_secret` supplies the secret with `--secret-stdin`.
/// `None` without `--auth`.
pub fn credentials_from(
    a: &CredentialArgs,
    read_secret: &mut dyn FnMut() -> anyhow::Result<String>,
) -> anyhow::Result<Option<Credentials>> {
    let Some(auth) = a.auth else {
        if a.api_key.is_some()
            || a.token.is_some()
            || a.password.is_some()
            || a.client_id.is_some()
            || a.secret_stdin
        {
            bail!("credential flags need --auth");
        }
        return Ok(None);
    };
    let mut secret = |flag: &Option<String>, name: &str| -> anyhow::Result<Option<String>> {
        match (flag, a.secret_stdin) {
            (Some(_), true) => {
                bail!("give {name} either as a flag or with --secret-stdin, not both")
            }
            (Some(v), false) => Ok(Some(v.clone())),
            (None, true) => Ok(Some(read_secret()?)),
            (None, false) => Ok(None),
        }
    };
    let creds = match auth {
        AuthType::ApiKey => Credentials::ApiKey {
            key: secret(&a.api_key, "--api-key")?
                .context("apiKey needs --api-key or --secret-stdin")?,
        },
        AuthType::Bearer => Credentials::Bearer {
            token: secret(&a.token, "--token")?
                .context("bearer needs --token or --secret-stdin")?,
        },
        AuthType::Basic => Credentials::Basic {
            username: a.username.clone().context("basic needs --username")?,
            password: secret(&a.password, "--password")?
                .context("basic needs --password or --secret-stdin")?,
        },
        AuthType::Oauth2 => Credentials::Oauth2 {
            client_id: a.client_id.clone().context("oauth2 needs --client-id")?,
            client_secret: secret(&a.client_secret, "--client-secret")?,
        },
        AuthType::None => Credentials::None,
    };
    Ok(Some(creds))
}

/// Reads a secret from stdin without echoing it on a terminal; drops one trailing newline.
fn stdin_secret() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let mut value = String::new();
    if stdin.is_terminal() {
        eprint!("secret: ");
        let echo_off = std::process::Command::new("stty")
            .arg("-echo")
            .stdin(std::process::Stdio::inherit())
            .status()
            .is_ok_and(|s| s.success());
        let read = stdin.read_line(&mut value);
        if echo_off {
            let _ = std::process::Command::new("stty")
                .arg("echo")
                .stdin(std::process::Stdio::inherit())
                .status();
        }
        eprintln!();
        read?;
    } else {
        stdin
            .lock()
            .read_to_string(&mut value)
            .context("the secret on stdin must be UTF-8")?;
    }
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        bail!("the secret on stdin is empty");
    }
    Ok(value)
}

async fn wait_run(c: &Client, mut run: Run, timeout: Duration) -> anyhow::Result<Run> {
    let deadline = Instant::now() + timeout;
    while !run.is_finished() {
        if Instant::now() >= deadline {
            bail!("run {} still {} after {timeout:?}", run.id, run.status);
        }
        tokio::time::sleep(POLL).await;
        run = c.connect_run(&run.id).await?;
    }
    Ok(run)
}

/// Log lines shown on stderr when a run failed.
const LOG_TAIL_LINES: usize = 20;

/// Prints a run as JSON; when it failed, its log tail goes to stderr (the run carries no
/// message; the log says why) and the exit code is 1.
async fn report_run(c: &Client, run: &Run) -> anyhow::Result<u8> {
    println!("{}", serde_json::to_string_pretty(run)?);
    if run.status != "failed" {
        return Ok(0);
    }
    report_failure(c, run).await
}

/// Says why a failed run failed, with its log tail, on stderr; the exit code 1.
async fn report_failure(c: &Client, run: &Run) -> anyhow::Result<u8> {
    eprintln!(
        "run {} failed: {} {}",
        run.id,
        run.failure_category.as_deref().unwrap_or("-"),
        run.failure_kind.as_deref().unwrap_or("-")
    );
    let tail = log_tail(c, &run.id, LOG_TAIL_LINES).await?;
    if tail.is_empty() {
        eprintln!("(the run logged nothing)");
    } else {
        eprintln!("last {} log line(s) of the run:", tail.len());
        for line in tail {
            eprintln!("{line}");
        }
    }
    Ok(1)
}

/// The last `n` log lines of a run, formatted (a run records at most 1 MiB of logs).
async fn log_tail(c: &Client, run: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let mut tail = std::collections::VecDeque::with_capacity(n);
    let mut cursor: Option<String> = None;
    loop {
        let (lines, page) = c
            .connect_run_logs(run, Some(1000), cursor.as_deref())
            .await?;
        for l in lines {
            if tail.len() == n {
                tail.pop_front();
            }
            tail.push_back(log_line(&l.ts, &l.level, &l.message));
        }
        match page.cursor.filter(|_| page.has_more) {
            Some(next) => cursor = Some(next),
            None => return Ok(tail.into()),
        }
    }
}

/// One log message as printed: a multi-line message stays one entry, its further lines
/// indented under the first, so they cannot be read as separate messages.
pub fn log_line(ts: &str, level: &str, message: &str) -> String {
    let message = message.trim_end_matches(['\n', '\r']).replace("\r\n", "\n");
    format!("{ts} {level:<5} {}", message.replace('\n', "\n    | "))
}

async fn runs(c: &Client, connection: &str, limit: u32) -> anyhow::Result<u8> {
    let (items, _) = c
        .connect_runs(connection, Some(limit.clamp(1, 1000)), None)
        .await?;
    let rows: Vec<Vec<String>> = items
        .into_iter()
        .map(|r| {
            vec![
                r.id,
                r.kind,
                r.sync.unwrap_or_else(|| "-".into()),
                r.status,
                r.started_at.unwrap_or_else(|| "-".into()),
                r.duration_ms
                    .map(|ms| format!("{:.1}s", ms as f64 / 1000.0))
                    .unwrap_or_else(|| "-".into()),
                r.records_committed.to_string(),
                r.failure_category.unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "KIND", "SYNC", "STATUS", "STARTED", "DURATION", "RECORDS", "FAILURE"],
            &rows
        )
    );
    Ok(0)
}

async fn logs(c: &Client, run: &str) -> anyhow::Result<u8> {
    let mut cursor: Option<String> = None;
    loop {
        let (lines, page) = c
            .connect_run_logs(run, Some(1000), cursor.as_deref())
            .await?;
        for l in lines {
            println!("{}", log_line(&l.ts, &l.level, &l.message));
        }
        match page.cursor.filter(|_| page.has_more) {
            Some(next) => cursor = Some(next),
            None => return Ok(0),
        }
    }
}

async fn records(
    c: &Client,
    connection: &str,
    sync: &str,
    limit: Option<u64>,
) -> anyhow::Result<u8> {
    let mut cursor: Option<String> = None;
    let mut printed = 0u64;
    loop {
        let page = c
            .connect_records(connection, sync, Some(1000), cursor.as_deref())
            .await?;
        for r in page.records {
            if limit.is_some_and(|l| printed >= l) {
                return Ok(0);
            }
            println!("{}", serde_json::to_string(&r)?);
            printed += 1;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::Parser;

    fn creds(args: &[&str], stdin: &str) -> anyhow::Result<Option<Credentials>> {
        let mut argv = vec!["sbx", "connect", "connection", "update", "c1"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv)?;
        let crate::Command::Connect(ConnectCommand::Connection(cmd)) = cli.command else {
            panic!("not connection")
        };
        let ConnectionCommand::Update { credentials, .. } = *cmd else {
            panic!("not connection update")
        };
        let stdin = stdin.to_string();
        credentials_from(&credentials, &mut || Ok(stdin.clone()))
    }

    #[test]
    fn credentials_from_flags_or_stdin() {
        assert_eq!(creds(&[], "").expect("none"), None);
        assert_eq!(
            creds(&["--auth", "api-key", "--api-key", "k1"], "").expect("flag"),
            Some(Credentials::ApiKey { key: "k1".into() })
        );
        assert_eq!(
            creds(&["--auth", "bearer", "--secret-stdin"], "t-from-stdin").expect("stdin"),
            Some(Credentials::Bearer {
                token: "t-from-stdin".into()
            })
        );
        assert_eq!(
            creds(&["--auth", "oauth2", "--client-id", "cid"], "").expect("oauth2"),
            Some(Credentials::Oauth2 {
                client_id: "cid".into(),
                client_secret: None
            })
        );
        assert!(creds(&["--auth", "basic", "--password", "p"], "").is_err());
        assert!(creds(&["--api-key", "k"], "").is_err());
        assert!(creds(
            &["--auth", "api-key", "--api-key", "k", "--secret-stdin"],
            "x"
        )
        .is_err());
    }

    #[test]
    fn connect_commands_parse() {
        let cli = Cli::parse_from([
            "sbx",
            "connect",
            "run",
            "items",
            "--connection",
            "c1",
            "--wait",
        ]);
        let crate::Command::Connect(ConnectCommand::Run {
            sync,
            connection,
            wait,
            ..
        }) = cli.command
        else {
            panic!("not connect run")
        };
        assert_eq!(
            (sync.as_str(), connection.as_str(), wait),
            ("items", "c1", true)
        );
        assert!(Cli::try_parse_from(["sbx", "connect", "records", "items"]).is_err());
        let cli = Cli::parse_from([
            "sbx",
            "connect",
            "connection",
            "create",
            "--name",
            "n",
            "--package",
            "p",
            "--package-version",
            "1.0.0",
            "--origin",
            "https://api.example.com",
            "--schedule",
            "1h",
            "--auth",
            "none",
        ]);
        let crate::Command::Connect(ConnectCommand::Connection(cmd)) = cli.command else {
            panic!("not connection")
        };
        assert!(matches!(*cmd, ConnectionCommand::Create { .. }));
    }

    #[test]
    fn a_multi_line_log_message_prints_as_one_entry() {
        assert_eq!(
            log_line("t", "error", "first\nsecond\r\nthird\n"),
            "t error first\n    | second\n    | third"
        );
        assert_eq!(log_line("t", "info", "one"), "t info  one");
    }

    #[test]
    fn connection_update_takes_a_package_version() {
        let cli = Cli::parse_from([
            "sbx",
            "connect",
            "connection",
            "update",
            "c1",
            "--package-version",
            "2.0.0",
        ]);
        let crate::Command::Connect(ConnectCommand::Connection(cmd)) = cli.command else {
            panic!("not connection")
        };
        let ConnectionCommand::Update {
            package_version, ..
        } = *cmd
        else {
            panic!("not update")
        };
        assert_eq!(package_version.as_deref(), Some("2.0.0"));
        assert!(Cli::try_parse_from(["sbx", "connect", "package", "delete", "p", "1.0.0"]).is_ok());
    }

    #[test]
    fn config_is_json_or_a_file() {
        assert_eq!(
            parse_config(r#"{"a":1}"#).expect("json"),
            serde_json::json!({"a": 1})
        );
        assert!(parse_config("{nope").is_err());
        let f = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(f.path(), r#"{"b":2}"#).expect("write");
        assert_eq!(
            parse_config(&format!("@{}", f.path().display())).expect("file"),
            serde_json::json!({"b": 2})
        );
    }
}
