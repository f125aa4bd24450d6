//! Rows in and out through the store's API: the same answers from both backends.

use super::{on_both_backends, Fixture};
use crate::commit::CommitTarget;
use crate::model::{
    AuthKind, BuildStatus, ConnectionStatus, Definition, FailureCategory, LogLevel, RunKind,
    RunStatus, SyncMode,
};
use crate::spool::SpoolWriter;
use crate::store::{
    CredentialBlob, NewConnection, NewPackageVersion, NewRun, OauthPending, StoreError,
    VersionChange, VersionChangeOutcome, VersionDeletion,
};
use chrono::{DateTime, Utc};
use serde_json::json;

on_both_backends!(
    packages_versions_and_builds,
    connections_credentials_and_oauth,
    runs_and_logs,
    a_reopened_store_reads_the_same,
    a_version_change_holds_only_while_nothing_ran_or_committed_since_the_check,
);

/// A move of a connection from `from` to `to`, checked with `committed` syncs.
fn change(from: &str, to: &str, committed: &[&str]) -> VersionChange {
    VersionChange {
        from: from.into(),
        to: to.into(),
        config: json!({"v": to}),
        committed_syncs: committed.iter().map(|s| s.to_string()).collect(),
    }
}

fn sync_run(version: &str) -> NewRun {
    NewRun {
        connection_id: Some("c1".into()),
        package: "conn".into(),
        version: version.into(),
        kind: RunKind::Sync,
        sync: Some("items".into()),
    }
}

/// The upgrade race: the service checks (no sync running, these syncs committed), then moves
/// the connection. Whatever happens in between makes the move a no-op instead of letting a
/// sync commit under a definition that is no longer the connection's.
pub(super) fn a_version_change_holds_only_while_nothing_ran_or_committed_since_the_check(
    f: &Fixture,
) {
    let s = &*f.store;
    s.insert_connection("ws", "c1", &connection(None), b"sealed")
        .expect("connection");
    let at = |v: &str| {
        let c = s.get_connection("ws", "c1").expect("get");
        assert_eq!(c.version, v);
    };
    // A sync run claimed after the check (queued, then running): refused while it is going.
    let run = s.insert_run("ws", &sync_run("1.0.0")).expect("run");
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "2.0.0", &[]))
            .expect("queued"),
        VersionChangeOutcome::SyncRunning
    );
    s.start_run("ws", &run.id, 1).expect("start");
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "2.0.0", &[]))
            .expect("running"),
        VersionChangeOutcome::SyncRunning
    );
    at("1.0.0");
    // It committed and ended: the set of committed syncs is not what was checked.
    commit_one(f, "c1", "items");
    s.succeed_run("ws", &run.id, 1, None).expect("succeed");
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "2.0.0", &[]))
            .expect("committed since"),
        VersionChangeOutcome::CommittedChanged
    );
    at("1.0.0");
    // Another run of another kind does not hold a move (only syncs commit).
    let verify = NewRun {
        kind: RunKind::Verify,
        sync: None,
        ..sync_run("1.0.0")
    };
    s.insert_run("ws", &verify).expect("verify run");
    // Checked against the current state: the move happens, config with it.
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "2.0.0", &["items"]))
            .expect("move"),
        VersionChangeOutcome::Changed
    );
    let c = s.get_connection("ws", "c1").expect("get");
    assert_eq!(
        (c.version.as_str(), &c.config),
        ("2.0.0", &json!({"v": "2.0.0"}))
    );
    // A second mover that checked against 1.0.0 changes nothing.
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "3.0.0", &["items"]))
            .expect("stale"),
        VersionChangeOutcome::VersionMoved("2.0.0".into())
    );
    at("2.0.0");
    // A sync claimed under 1.0.0 before the move cannot start after it.
    assert!(matches!(
        s.insert_run("ws", &sync_run("1.0.0")),
        Err(StoreError::Changed(_))
    ));
    assert_eq!(s.list_runs("ws", "c1", None, 10).expect("runs").len(), 2);
    s.insert_run("ws", &sync_run("2.0.0"))
        .expect("a run of the version in force");
    assert!(matches!(
        s.set_connection_version("ws", "nope", &change("1.0.0", "2.0.0", &[])),
        Err(StoreError::NotFound("connection"))
    ));
}

pub(super) fn version(v: &str) -> NewPackageVersion {
    NewPackageVersion {
        name: "conn".into(),
        version: v.into(),
        sha256: "ab".repeat(32),
        size: 1234,
        entry: "index.js".into(),
    }
}

pub(super) fn definition(syncs: &[&str]) -> Definition {
    let syncs: Vec<_> = syncs
        .iter()
        .map(|s| json!({"name": s, "mode": "append"}))
        .collect();
    serde_json::from_value(json!({"auth": {"type": "bearer"}, "syncs": syncs})).expect("definition")
}

pub(super) fn connection(schedule: Option<u64>) -> NewConnection {
    NewConnection {
        name: "c".into(),
        package: "conn".into(),
        version: "1.0.0".into(),
        config: json!({"region": "eu"}),
        origin: "https://api.example.com".into(),
        auth_kind: AuthKind::Bearer,
        status: ConnectionStatus::Active,
        schedule_interval_seconds: schedule,
    }
}

/// A stored time: the model's text, recent.
fn recent(text: &str) -> DateTime<Utc> {
    let t = DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .with_timezone(&Utc);
    let age = Utc::now() - t;
    assert!(
        age >= chrono::Duration::seconds(-5) && age < chrono::Duration::minutes(5),
        "{text} is not recent"
    );
    t
}

pub(super) fn packages_versions_and_builds(f: &Fixture) {
    let s = &*f.store;
    let v1 = s
        .insert_package_version("ws", &version("1.0.0"))
        .expect("insert");
    assert_eq!((v1.size, v1.entry.as_str()), (1234, "index.js"));
    assert_eq!((v1.build_id.clone(), v1.definition.clone()), (None, None));
    recent(&v1.created_at);
    assert!(matches!(
        s.insert_package_version("ws", &version("1.0.0")),
        Err(StoreError::Exists(_))
    ));
    s.insert_package_version("ws", &version("1.1.0"))
        .expect("insert");
    let packages = s.list_packages("ws").expect("list");
    assert_eq!(packages.len(), 1);
    assert_eq!(packages[0].versions, vec!["1.0.0", "1.1.0"]);
    assert!(s.list_packages("other").expect("list").is_empty());
    assert_eq!(
        s.list_package_versions("ws", "conn")
            .expect("versions")
            .len(),
        2
    );
    assert!(matches!(
        s.get_package_version("other", "conn", "1.0.0"),
        Err(StoreError::NotFound("package version"))
    ));

    let b = s.insert_build("ws", "conn", "1.0.0").expect("build");
    assert_eq!(
        (b.status, b.finished_at.clone()),
        (BuildStatus::Queued, None)
    );
    assert_eq!(s.get_build("ws", &b.id).expect("get"), b);
    s.update_build(
        "ws",
        &b.id,
        BuildStatus::Succeeded,
        "ok\n",
        Some("/a"),
        None,
    )
    .expect("update");
    let done = s.get_build("ws", &b.id).expect("get");
    assert_eq!(
        (done.status, done.log.as_str()),
        (BuildStatus::Succeeded, "ok\n")
    );
    assert_eq!(done.artifact_dir.as_deref(), Some("/a"));
    recent(done.finished_at.as_deref().expect("finished"));
    assert!(matches!(
        s.update_build("ws", "nope", BuildStatus::Failed, "", None, None),
        Err(StoreError::NotFound("build"))
    ));
    let def = definition(&["items"]);
    s.set_version_build("ws", "conn", "1.0.0", &b.id, &def)
        .expect("set build");
    let v1 = s.get_package_version("ws", "conn", "1.0.0").expect("get");
    assert_eq!(
        (v1.build_id.as_deref(), v1.definition.as_ref()),
        (Some(b.id.as_str()), Some(&def))
    );
    // The same definition again is fine; another one is refused.
    s.set_version_build("ws", "conn", "1.0.0", &b.id, &def)
        .expect("same definition");
    assert!(matches!(
        s.set_version_build("ws", "conn", "1.0.0", &b.id, &definition(&["other"])),
        Err(StoreError::Exists(_))
    ));

    // A version with a build going cannot be deleted; a restart fails that build.
    let going = s.insert_build("ws", "conn", "1.1.0").expect("build");
    assert_eq!(
        s.delete_package_version("ws", "conn", "1.1.0")
            .expect("delete"),
        VersionDeletion::Building
    );
    assert_eq!(s.fail_unfinished_builds().expect("fail"), 1);
    let failed = s.get_build("ws", &going.id).expect("get");
    assert_eq!(failed.status, BuildStatus::Failed);
    assert_eq!(
        s.delete_package_version("ws", "conn", "1.1.0")
            .expect("delete"),
        VersionDeletion::Deleted {
            build_ids: vec![going.id.clone()]
        }
    );
    assert!(matches!(
        s.delete_package_version("ws", "conn", "1.1.0"),
        Err(StoreError::NotFound(_))
    ));
    // A version in use stays.
    s.insert_connection("ws", "c1", &connection(None), b"sealed")
        .expect("connection");
    assert_eq!(
        s.delete_package_version("ws", "conn", "1.0.0")
            .expect("delete"),
        VersionDeletion::UsedBy(vec!["c1".into()])
    );
    s.delete_connection("ws", "c1").expect("delete connection");
    assert!(matches!(
        s.delete_package_version("ws", "conn", "1.0.0")
            .expect("delete"),
        VersionDeletion::Deleted { .. }
    ));
    // The package goes with its last version.
    assert!(s.list_packages("ws").expect("list").is_empty());
}

fn commit_one(f: &Fixture, connection_id: &str, sync: &str) {
    let mut w = SpoolWriter::create(&f.spool_path).expect("spool");
    w.append_record(None, r#"{"n":1}"#).expect("record");
    w.append_checkpoint(r#"{"page":1}"#).expect("checkpoint");
    let target = CommitTarget {
        workspace: "ws",
        connection_id,
        sync,
        mode: SyncMode::Append,
        run_id: None,
        delivery: None,
    };
    f.store
        .commit(target, w.finish().expect("finish"))
        .expect("commit");
}

pub(super) fn connections_credentials_and_oauth(f: &Fixture) {
    let s = &*f.store;
    let c = s
        .insert_connection("ws", "c1", &connection(Some(60)), b"blob-1")
        .expect("insert");
    assert_eq!(c.config, json!({"region": "eu"}));
    assert_eq!(
        (c.auth_kind, c.status),
        (AuthKind::Bearer, ConnectionStatus::Active)
    );
    assert_eq!(c.schedule_interval_seconds, Some(60));
    assert_eq!(c.created_at, c.updated_at);
    recent(&c.created_at);
    assert_eq!(s.get_connection("ws", "c1").expect("get"), c);
    assert!(matches!(
        s.get_connection("other", "c1"),
        Err(StoreError::NotFound("connection"))
    ));
    s.insert_connection("ws", "c2", &connection(None), b"blob-2")
        .expect("insert");
    s.insert_connection("ws2", "c3", &connection(Some(5)), b"blob-3")
        .expect("insert");
    let ids: Vec<String> = s
        .list_connections("ws")
        .expect("list")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["c1", "c2"]);
    let scheduled: Vec<(String, String)> = s
        .list_scheduled_connections()
        .expect("scheduled")
        .into_iter()
        .map(|(ws, c)| (ws, c.id))
        .collect();
    assert_eq!(
        scheduled,
        vec![("ws".into(), "c1".into()), ("ws2".into(), "c3".into())]
    );

    let c = s
        .update_connection(
            "ws",
            "c1",
            "renamed",
            &json!({"region": "us"}),
            ConnectionStatus::Disabled,
            None,
        )
        .expect("update");
    assert_eq!(
        (c.name.as_str(), c.status, c.schedule_interval_seconds),
        ("renamed", ConnectionStatus::Disabled, None)
    );
    assert!(matches!(
        s.update_connection(
            "ws",
            "nope",
            "x",
            &json!({}),
            ConnectionStatus::Active,
            None
        ),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        s.set_connection_version("ws", "c1", &change("1.0.0", "2.0.0", &[]))
            .expect("version"),
        VersionChangeOutcome::Changed
    );
    s.set_connection_status("ws", "c1", ConnectionStatus::Active)
        .expect("status");
    let c = s.get_connection("ws", "c1").expect("get");
    assert_eq!(
        (c.version.as_str(), &c.config, c.status),
        ("2.0.0", &json!({"v": "2.0.0"}), ConnectionStatus::Active)
    );
    s.set_connection_credentials(
        "ws",
        "c1",
        b"blob-1b",
        Some(ConnectionStatus::ReauthorizationRequired),
    )
    .expect("credentials");
    assert_eq!(
        s.get_connection_credentials("ws", "c1").expect("get"),
        b"blob-1b"
    );
    assert_eq!(
        s.get_connection("ws", "c1").expect("get").status,
        ConnectionStatus::ReauthorizationRequired
    );
    assert!(matches!(
        s.set_connection_status("ws", "nope", ConnectionStatus::Active),
        Err(StoreError::NotFound(_))
    ));

    // Key rotation: every blob, then a compare-and-set that a newer write wins.
    assert_eq!(
        s.credential_blobs().expect("blobs"),
        vec![
            CredentialBlob {
                workspace: "ws".into(),
                connection_id: "c1".into(),
                blob: b"blob-1b".to_vec()
            },
            CredentialBlob {
                workspace: "ws".into(),
                connection_id: "c2".into(),
                blob: b"blob-2".to_vec()
            },
            CredentialBlob {
                workspace: "ws2".into(),
                connection_id: "c3".into(),
                blob: b"blob-3".to_vec()
            },
        ]
    );
    assert!(s
        .replace_credentials("ws", "c2", b"blob-2", b"rotated-2")
        .expect("replace"));
    assert_eq!(
        s.get_connection_credentials("ws", "c2").expect("get"),
        b"rotated-2"
    );
    assert!(!s
        .replace_credentials("ws", "c2", b"blob-2", b"again")
        .expect("stale"));
    assert!(!s
        .replace_credentials("ws2", "c2", b"rotated-2", b"x")
        .expect("other workspace"));
    assert_eq!(
        s.get_connection_credentials("ws", "c2").expect("get"),
        b"rotated-2"
    );

    // A sign-in state works once.
    let p = OauthPending {
        connection_id: "c1".into(),
        verifier: "v".into(),
        redirect_uri: "https://app/cb".into(),
    };
    s.insert_oauth_pending("ws", "state-1", &p)
        .expect("pending");
    assert!(matches!(
        s.take_oauth_pending("other", "state-1"),
        Err(StoreError::NotFound("oauth state"))
    ));
    assert_eq!(s.take_oauth_pending("ws", "state-1").expect("take"), p);
    assert!(matches!(
        s.take_oauth_pending("ws", "state-1"),
        Err(StoreError::NotFound(_))
    ));

    // Deleting a connection takes its data, runs, logs and sign-ins along.
    commit_one(f, "c1", "items");
    commit_one(f, "c2", "items");
    assert_eq!(s.committed_syncs("ws", "c1").expect("syncs"), vec!["items"]);
    let run = s
        .insert_run(
            "ws",
            &NewRun {
                connection_id: Some("c1".into()),
                package: "conn".into(),
                version: "2.0.0".into(),
                kind: RunKind::Sync,
                sync: Some("items".into()),
            },
        )
        .expect("run");
    s.insert_log("ws", &run.id, Some("c1"), LogLevel::Info, "hello")
        .expect("log");
    s.insert_oauth_pending("ws", "state-2", &p)
        .expect("pending");
    s.delete_connection("ws", "c1").expect("delete");
    assert!(matches!(
        s.get_connection("ws", "c1"),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.count_records("ws", "c1", "items").expect("count"), 0);
    assert_eq!(s.get_checkpoint("ws", "c1", "items").expect("cp"), None);
    assert!(s.committed_syncs("ws", "c1").expect("syncs").is_empty());
    assert!(matches!(
        s.get_run("ws", &run.id),
        Err(StoreError::NotFound("run"))
    ));
    assert!(s
        .list_logs("ws", Some("c1"), None, None, 10)
        .expect("logs")
        .is_empty());
    assert!(s.take_oauth_pending("ws", "state-2").is_err());
    assert!(matches!(
        s.delete_connection("ws", "c1"),
        Err(StoreError::NotFound(_))
    ));
    // The other connection's data stays.
    assert_eq!(s.count_records("ws", "c2", "items").expect("count"), 1);
    assert_eq!(
        s.get_checkpoint("ws", "c2", "items").expect("cp"),
        Some(json!({"page": 1}))
    );
}

pub(super) fn runs_and_logs(f: &Fixture) {
    let s = &*f.store;
    let new = |sync: &str| NewRun {
        connection_id: Some("c1".into()),
        package: "conn".into(),
        version: "1.0.0".into(),
        kind: RunKind::Sync,
        sync: Some(sync.into()),
    };
    s.insert_connection("ws", "c1", &connection(None), b"sealed")
        .expect("connection");
    assert_eq!(s.last_sync_run_at("ws", "c1", "items").expect("last"), None);
    let r1 = s.insert_run("ws", &new("items")).expect("run");
    // One queued or running run per sync.
    assert!(matches!(
        s.insert_run("ws", &new("items")),
        Err(StoreError::Exists(_))
    ));
    s.start_run("ws", &r1.id, 2).expect("start");
    s.succeed_run("ws", &r1.id, 42, Some(&json!({"ok": true})))
        .expect("succeed");
    let r2 = s.insert_run("ws", &new("items")).expect("run");
    let r3 = s.insert_run("ws", &new("other")).expect("run");
    assert_eq!(
        (r1.status, r1.attempt, r1.kind),
        (RunStatus::Queued, 0, RunKind::Sync)
    );
    recent(&r1.created_at);
    let ids = |runs: Vec<crate::model::Run>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.list_runs("ws", "c1", None, 10).expect("list")),
        vec![r3.id.clone(), r2.id.clone(), r1.id.clone()]
    );
    assert_eq!(
        ids(s.list_runs("ws", "c1", Some(&r3.id), 1).expect("page")),
        vec![r2.id.clone()]
    );
    assert_eq!(
        ids(s.list_runs("ws", "c1", Some(&r1.id), 10).expect("end")),
        Vec::<String>::new()
    );
    assert!(s
        .list_runs("other", "c1", None, 10)
        .expect("list")
        .is_empty());
    let last = s
        .last_sync_run_at("ws", "c1", "items")
        .expect("last")
        .expect("some");
    assert_eq!(crate::store::ts(last), r2.created_at);

    let done = s.get_run("ws", &r1.id).expect("get");
    assert_eq!(
        (done.status, done.attempt, done.records_committed),
        (RunStatus::Succeeded, 2, 42)
    );
    recent(done.started_at.as_deref().expect("started"));
    recent(done.finished_at.as_deref().expect("finished"));
    assert_eq!(
        s.get_run_result("ws", &r1.id).expect("result"),
        Some(json!({"ok": true}))
    );
    assert_eq!(s.get_run_result("ws", &r2.id).expect("result"), None);
    assert!(matches!(
        s.get_run_result("ws", "nope"),
        Err(StoreError::NotFound("run"))
    ));
    s.fail_run("ws", &r2.id, FailureCategory::TimeLimit, "sync_time")
        .expect("fail");
    let failed = s.get_run("ws", &r2.id).expect("get");
    assert_eq!(
        (
            failed.status,
            failed.failure_category,
            failed.failure_kind.as_deref()
        ),
        (
            RunStatus::Failed,
            Some(FailureCategory::TimeLimit),
            Some("sync_time")
        )
    );
    assert_eq!(
        s.fail_unfinished_runs().expect("unfinished"),
        vec![r3.id.clone()]
    );
    let r3 = s.get_run("ws", &r3.id).expect("get");
    assert_eq!(
        (r3.failure_category, r3.failure_kind.as_deref()),
        (Some(FailureCategory::Platform), Some("daemon_restart"))
    );

    s.insert_log("ws", &r1.id, Some("c1"), LogLevel::Info, "one")
        .expect("log");
    s.insert_log("ws", &r2.id, Some("c1"), LogLevel::Warn, "two")
        .expect("log");
    s.insert_log("ws", "describe-run", None, LogLevel::Error, "three")
        .expect("log");
    let all = s.list_logs("ws", Some("c1"), None, None, 10).expect("logs");
    assert_eq!(
        all.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(),
        vec!["one", "two"]
    );
    recent(&all[0].ts);
    assert_eq!(all[1].level, LogLevel::Warn);
    let of_run = s
        .list_logs("ws", None, Some(&r2.id), None, 10)
        .expect("logs");
    assert_eq!(of_run.len(), 1);
    let after = s
        .list_logs("ws", Some("c1"), None, Some(all[0].id), 10)
        .expect("logs");
    assert_eq!(after, vec![all[1].clone()]);
    assert_eq!(
        s.list_logs("ws", None, None, None, 10).expect("logs").len(),
        3
    );
    assert_eq!(
        s.delete_logs_before(Utc::now() - chrono::Duration::days(1))
            .expect("janitor"),
        0
    );
    assert_eq!(
        s.delete_logs_before(Utc::now() + chrono::Duration::days(1))
            .expect("janitor"),
        3
    );
}

pub(super) fn a_reopened_store_reads_the_same(f: &Fixture) {
    f.store
        .insert_package_version("ws", &version("1.0.0"))
        .expect("insert");
    let c = f
        .store
        .insert_connection("ws", "c1", &connection(None), b"sealed")
        .expect("insert");
    commit_one(f, "c1", "items");
    let again = (f.reopen)();
    assert_eq!(again.get_connection("ws", "c1").expect("get"), c);
    assert_eq!(again.count_records("ws", "c1", "items").expect("count"), 1);
    assert_eq!(
        again.list_packages("ws").expect("list"),
        f.store.list_packages("ws").expect("list")
    );
}
