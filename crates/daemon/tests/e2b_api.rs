//! The E2B control plane (contract `protocol/e2b` §2) on real gVisor: every
//! route, bad inputs (a clear `{"code","message"}` error, nothing stored),
//! authentication (401) and tenants (404), the E2B timeout, and the same
//! sandboxes through `/v2`. The real SDK runs in `e2b_sdk.rs`.

mod common;
mod e2b_common;

use common::Daemon;
use e2b_common::{assert_e2b_error, create, e2b, ids, LEGACY_KEY};
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_routes_auth_tenants_and_bad_inputs() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let acme = d.create_key("acme", None);
    let globex = d.create_key("globex", None);
    let key = Some(acme.as_str());

    // Authentication: E2B's 401 shape on E2B paths; the shared path without
    // X-API-KEY stays the inngest API's.
    assert_e2b_error(
        &e2b(&d, None, "GET", "/sandboxes/x", None).await,
        401,
        "no key",
    );
    assert_e2b_error(
        &e2b(&d, Some("wrong"), "GET", "/v2/sandboxes", None).await,
        401,
        "wrong key",
    );
    assert_e2b_error(
        &e2b(&d, Some("signkey-sbx-00"), "DELETE", "/sandboxes/x", None).await,
        401,
        "unknown key",
    );
    let (status, body, _) = e2b(&d, None, "GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["errors"].is_array(),
        "the inngest API answers without X-API-KEY: {body}"
    );

    // Bad creates: a clear 400/404 and nothing stored.
    let bad = [
        (json!({"templateID": "no-such-template"}), 404),
        (json!({"templateID": "base", "timeout": 0}), 400),
        (json!({"templateID": "base", "timeout": 999_999}), 400),
        (json!({"templateID": "base", "timeout": "soon"}), 400),
        (json!({"templateID": "base", "metadata": {"k": 1}}), 400),
        (json!({"templateID": "base", "envVars": {"": "x"}}), 400),
        (
            json!({"templateID": "base", "network": {"rules": {"a.com": []}}}),
            400,
        ),
        (
            json!({"templateID": "base", "network": {"denyOut": ["10.0.0.0/8"]}}),
            400,
        ),
        (
            json!({"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]}),
            400,
        ),
        (json!(["base"]), 400),
    ];
    for (body, status) in bad {
        let got = e2b(&d, key, "POST", "/v2/sandboxes", Some(body.clone())).await;
        assert_e2b_error(&got, status, &body.to_string());
    }
    let too_much: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    let got = e2b(
        &d,
        key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"metadata": too_much})),
    )
    .await;
    assert_e2b_error(&got, 400, "65 metadata entries");
    let (status, list, _) = e2b(&d, key, "GET", "/v2/sandboxes", None).await;
    assert_eq!(
        (status, list.clone()),
        (200, json!([])),
        "bad creates stored nothing"
    );
    assert!(
        d.runsc_containers().is_empty(),
        "bad creates booted nothing"
    );

    // Create.
    let (status, created, _) = e2b(
        &d,
        key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"templateID": "base", "timeout": 300, "metadata": {"team": "a b", "n": "1"}, "envVars": {"FOO": "bar"}})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["sandboxID"].as_str().unwrap().to_string();
    assert_eq!(created["templateID"], "base");
    assert_eq!(created["alias"], "base");
    assert_eq!(created["envdVersion"], "0.6.4");
    assert!(created["clientID"].is_string());
    assert!(created["domain"].is_null());
    let token = created["envdAccessToken"].as_str().unwrap();
    assert!(
        token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{token}"
    );
    let second = create(&d, &acme, json!({"metadata": {"team": "c", "n": "2"}})).await;

    // The same sandbox through /v2 (the inngest API), with the same key.
    let bearer = format!("Bearer {}", hashed_signing_key(&acme));
    let (status, v2) = d
        .call_with(
            "GET",
            &format!("/v2/sandboxes/{id}"),
            None,
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(
        (status, v2["data"]["status"].as_str()),
        (200, Some("RUNNING")),
        "{v2}"
    );
    let (status, env) = d
        .call_with(
            "GET",
            &format!("/v1/sandboxes/{id}"),
            None,
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(status, 200, "{env}");
    assert_eq!(
        env["data"]["environment"]["FOO"], "bar",
        "envVars are the sandbox environment"
    );

    // Info.
    let (status, info, _) = e2b(&d, key, "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["sandboxID"], id.as_str());
    assert_eq!(info["state"], "running");
    assert_eq!(info["metadata"], json!({"team": "a b", "n": "1"}));
    assert_eq!(
        info["lifecycle"],
        json!({"onTimeout": "kill", "autoResume": false})
    );
    for field in ["startedAt", "endAt", "envdVersion"] {
        assert!(info[field].is_string(), "{field}: {info}");
    }
    for field in ["cpuCount", "memoryMB", "diskSizeMB"] {
        assert!(info[field].as_u64().is_some(), "{field}: {info}");
    }
    let end = chrono::DateTime::parse_from_rfc3339(info["endAt"].as_str().unwrap()).unwrap();
    let left = (end.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_seconds();
    assert!(
        (250..=300).contains(&left),
        "endAt is the timeout away: {left}"
    );
    // Ids that name no sandbox are 404 (kill then answers false in the SDK).
    assert_e2b_error(
        &e2b(&d, key, "GET", "/sandboxes/not-an-id", None).await,
        404,
        "bad id",
    );

    // List: filters (metadata encoded as the SDKs do, §2.4), state, paging.
    let (status, all, next) = e2b(&d, key, "GET", "/v2/sandboxes", None).await;
    assert_eq!((status, ids(&all).len(), next), (200, 2, None), "{all}");
    let (_, one, _) = e2b(
        &d,
        key,
        "GET",
        "/v2/sandboxes?metadata=team%3Da%252520b",
        None,
    )
    .await;
    assert_eq!(ids(&one), vec![id.clone()], "metadata filter");
    let (_, none, _) = e2b(&d, key, "GET", "/v2/sandboxes?metadata=team%3Dzzz", None).await;
    assert_eq!(ids(&none).len(), 0);
    let (_, p1, t1) = e2b(&d, key, "GET", "/v2/sandboxes?limit=1", None).await;
    let t1 = t1.expect("a next token");
    let (_, p2, _) = e2b(
        &d,
        key,
        "GET",
        &format!("/v2/sandboxes?limit=1&nextToken={t1}"),
        None,
    )
    .await;
    let mut paged = [ids(&p1), ids(&p2)].concat();
    paged.sort();
    let mut want = vec![id.clone(), second.clone()];
    want.sort();
    assert_eq!(paged, want, "two pages of one");
    for q in [
        "state=gone",
        "limit=0",
        "limit=x",
        "nextToken=junk",
        "startedAfter=yesterday",
        "metadata=%25zz",
    ] {
        let got = e2b(&d, key, "GET", &format!("/v2/sandboxes?{q}"), None).await;
        assert_e2b_error(&got, 400, q);
    }

    // Another tenant sees nothing and touches nothing: 404 everywhere.
    let other = Some(globex.as_str());
    let (_, theirs, _) = e2b(&d, other, "GET", "/v2/sandboxes", None).await;
    assert_eq!(theirs, json!([]));
    for (method, path, body) in [
        ("GET", format!("/sandboxes/{id}"), None),
        ("DELETE", format!("/sandboxes/{id}"), None),
        (
            "POST",
            format!("/sandboxes/{id}/timeout"),
            Some(json!({"timeout": 10})),
        ),
        ("POST", format!("/sandboxes/{id}/pause"), Some(json!({}))),
        (
            "POST",
            format!("/v2/sandboxes/{id}/connect"),
            Some(json!({})),
        ),
        ("GET", format!("/sandboxes/{id}/metrics"), None),
        (
            "POST",
            format!("/sandboxes/{id}/snapshots"),
            Some(json!({})),
        ),
        ("POST", format!("/sandboxes/{id}/fork"), Some(json!({}))),
        ("PUT", format!("/sandboxes/{id}/network"), Some(json!({}))),
    ] {
        let got = e2b(&d, other, method, &path, body).await;
        assert_e2b_error(&got, 404, &format!("other tenant {method} {path}"));
    }

    // Timeout.
    let path = format!("/sandboxes/{id}/timeout");
    let (status, _, _) = e2b(&d, key, "POST", &path, Some(json!({"timeout": 60}))).await;
    assert_eq!(status, 204);
    let (_, info, _) = e2b(&d, key, "GET", &format!("/sandboxes/{id}"), None).await;
    let end = chrono::DateTime::parse_from_rfc3339(info["endAt"].as_str().unwrap()).unwrap();
    let left = (end.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_seconds();
    assert!((30..=60).contains(&left), "setTimeout moved endAt: {left}");
    assert_e2b_error(
        &e2b(&d, key, "POST", &path, Some(json!({}))).await,
        400,
        "timeout missing",
    );
    assert_e2b_error(
        &e2b(&d, key, "POST", &path, Some(json!({"timeout": -1}))).await,
        400,
        "negative",
    );
    let (status, _, _) = e2b(&d, key, "POST", &path, Some(json!({"timeout": 600}))).await;
    assert_eq!(status, 204);

    // Metrics (an array of samples; e2b_sdk checks their values) and network update.
    let (status, metrics, _) = e2b(&d, key, "GET", &format!("/sandboxes/{id}/metrics"), None).await;
    assert_eq!((status, metrics.is_array()), (200, true), "{metrics}");
    let network = format!("/sandboxes/{id}/network");
    let (status, body, _) = e2b(&d, key, "PUT", &network, Some(json!({}))).await;
    assert_eq!(status, 204, "network update to the default: {body}");
    let got = e2b(
        &d,
        key,
        "PUT",
        &network,
        Some(json!({"denyOut": ["10.0.0.0/8"]})),
    )
    .await;
    assert_e2b_error(&got, 400, "a network sbx cannot express");
    let got = e2b(
        &d,
        key,
        "PUT",
        &network,
        Some(json!({"allow_internet_access": "no"})),
    )
    .await;
    assert_e2b_error(&got, 400, "a network update that does not parse");
    let got = e2b(
        &d,
        key,
        "PATCH",
        &format!("/sandboxes/{id}"),
        Some(json!({})),
    )
    .await;
    assert_e2b_error(&got, 405, "a method the route lacks");

    // Pause (409 the second time), list by state, connect resumes (201) then 200.
    let pause = format!("/sandboxes/{id}/pause");
    let (status, _, _) = e2b(&d, key, "POST", &pause, Some(json!({}))).await;
    assert_eq!(status, 204);
    assert_e2b_error(
        &e2b(&d, key, "POST", &pause, Some(json!({}))).await,
        409,
        "paused twice",
    );
    let (_, paused, _) = e2b(&d, key, "GET", "/v2/sandboxes?state=paused", None).await;
    assert_eq!(ids(&paused), vec![id.clone()]);
    let (_, running, _) = e2b(&d, key, "GET", "/v2/sandboxes?state=running", None).await;
    assert_eq!(ids(&running), vec![second.clone()]);
    let connect = format!("/v2/sandboxes/{id}/connect");
    let got = e2b(&d, key, "POST", &connect, Some(json!({"memory": false}))).await;
    assert_e2b_error(&got, 400, "reboot on resume");
    let (status, resumed, _) = e2b(&d, key, "POST", &connect, Some(json!({"timeout": 120}))).await;
    assert_eq!(status, 201, "{resumed}");
    assert_eq!(
        resumed["envdAccessToken"], created["envdAccessToken"],
        "same token after resume"
    );
    let (status, _, _) = e2b(&d, key, "POST", &connect, Some(json!({}))).await;
    assert_eq!(status, 200, "connect to a running sandbox");
    let (_, info, _) = e2b(&d, key, "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(info["state"], "running");

    // Snapshots: create (201), a sandbox from it, list, delete (204, then 404).
    let (status, snap, _) = e2b(
        &d,
        key,
        "POST",
        &format!("/sandboxes/{id}/snapshots"),
        Some(json!({"name": "warm"})),
    )
    .await;
    assert_eq!(status, 201, "{snap}");
    let snap_id = snap["snapshotID"].as_str().unwrap().to_string();
    assert_eq!(snap["names"], json!(["warm"]));
    let clone = create(&d, &acme, json!({"templateID": snap_id})).await;
    let (_, clone_info, _) = e2b(&d, key, "GET", &format!("/sandboxes/{clone}"), None).await;
    assert_eq!(clone_info["templateID"], snap_id.as_str());
    let got = e2b(
        &d,
        key,
        "POST",
        "/v2/sandboxes",
        Some(json!({"templateID": snap_id, "envVars": {"A": "b"}})),
    )
    .await;
    assert_e2b_error(&got, 400, "envVars with a snapshot");
    let (status, snaps, _) = e2b(&d, key, "GET", &format!("/snapshots?sandboxID={id}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(snaps, json!([{"snapshotID": snap_id, "names": ["warm"]}]));
    let (_, snaps, _) = e2b(
        &d,
        key,
        "GET",
        &format!("/snapshots?sandboxID={second}"),
        None,
    )
    .await;
    assert_eq!(snaps, json!([]));
    let (_, theirs, _) = e2b(&d, other, "GET", "/snapshots", None).await;
    assert_eq!(theirs, json!([]), "snapshots are per tenant");
    assert_e2b_error(
        &e2b(&d, other, "DELETE", &format!("/templates/{snap_id}"), None).await,
        404,
        "other tenant's snapshot",
    );
    let (status, _, _) = e2b(&d, key, "DELETE", &format!("/templates/{snap_id}"), None).await;
    assert_eq!(status, 204);
    assert_e2b_error(
        &e2b(&d, key, "DELETE", &format!("/templates/{snap_id}"), None).await,
        404,
        "deleted twice",
    );
    assert_e2b_error(
        &e2b(&d, key, "DELETE", "/templates/base", None).await,
        404,
        "templates are not deleted",
    );

    // Fork: one sandbox booted from a fresh snapshot, with the source's metadata.
    let (status, forks, _) = e2b(
        &d,
        key,
        "POST",
        &format!("/sandboxes/{id}/fork"),
        Some(json!({"count": 1})),
    )
    .await;
    assert_eq!(status, 201, "{forks}");
    let fork = forks[0]["sandbox"]["sandboxID"]
        .as_str()
        .expect("a fork")
        .to_string();
    let (_, fork_info, _) = e2b(&d, key, "GET", &format!("/sandboxes/{fork}"), None).await;
    assert_eq!(fork_info["metadata"], info["metadata"]);
    let got = e2b(
        &d,
        key,
        "POST",
        &format!("/sandboxes/{id}/fork"),
        Some(json!({"count": 21})),
    )
    .await;
    assert_e2b_error(&got, 400, "too many forks");

    // Kill: 204, then 404; the sandbox is gone from every API.
    for sandbox in [&id, &second, &clone, &fork] {
        let (status, _, _) = e2b(&d, key, "DELETE", &format!("/sandboxes/{sandbox}"), None).await;
        assert_eq!(status, 204, "kill {sandbox}");
    }
    assert_e2b_error(
        &e2b(&d, key, "DELETE", &format!("/sandboxes/{id}"), None).await,
        404,
        "killed twice",
    );
    assert_e2b_error(
        &e2b(&d, key, "GET", &format!("/sandboxes/{id}"), None).await,
        404,
        "info after kill",
    );
    let (_, left, _) = e2b(&d, key, "GET", "/v2/sandboxes", None).await;
    assert_eq!(left, json!([]));
    d.assert_no_containers(Duration::from_secs(60), "every E2B sandbox was killed")
        .await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_timeout_destroys_or_pauses() {
    // The JS SDK's e2e fixture template id, aliased to the default image.
    let alias = "q52rcyz0ua30keeiy22u";
    let template = format!("{alias}=default");
    let d = Daemon::start(&["--signing-key", LEGACY_KEY, "--e2b-template", &template]).await;
    let key = d.create_key("acme", None);
    let killed = create(&d, &key, json!({"timeout": 2})).await;
    let paused = create(
        &d,
        &key,
        json!({"templateID": alias, "timeout": 2, "autoPause": true}),
    )
    .await;
    // A sandbox made through /v2 keeps running: it has no E2B timeout.
    let bearer = format!("Bearer {}", hashed_signing_key(LEGACY_KEY));
    let body = json!({"name": "plain", "vcpu": 1, "memoryMb": 1024}).to_string();
    let (status, made) = d
        .call_with(
            "POST",
            "/v2/sandboxes",
            Some(body.into_bytes()),
            &[("authorization", &bearer)],
        )
        .await;
    assert!(status == 201 || status == 202, "{made}");
    let v2 = made["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s1, _, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{killed}"), None).await;
        let (_, p, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{paused}"), None).await;
        if s1 == 404 && p["state"] == "paused" {
            break;
        }
        assert!(Instant::now() < deadline, "timeouts not enforced: {s1} {p}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, p, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{paused}"), None).await;
    assert_eq!(p["lifecycle"]["onTimeout"], "pause");
    assert_eq!(
        (p["templateID"].as_str(), p["alias"].as_str()),
        (Some(alias), Some(alias))
    );
    // Resumed with a new timeout, it runs again until that one ends.
    let (status, _, _) = e2b(
        &d,
        Some(&key),
        "POST",
        &format!("/v2/sandboxes/{paused}/connect"),
        Some(json!({"timeout": 600})),
    )
    .await;
    assert_eq!(status, 201);
    let (_, p, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{paused}"), None).await;
    assert_eq!(p["state"], "running");
    let (status, body) = d.call("GET", &format!("/v2/sandboxes/{v2}"), None).await;
    assert_eq!(status, 401, "{body}");
    let (_, body) = d
        .call_with(
            "GET",
            &format!("/v2/sandboxes/{v2}"),
            None,
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(body["data"]["status"], "RUNNING", "{body}");
    // Each tenant kills only its own: the other's sandbox is 404, even to kill.
    for (owner, stranger, id) in [
        (key.as_str(), LEGACY_KEY, &paused),
        (LEGACY_KEY, key.as_str(), &v2),
    ] {
        let path = format!("/sandboxes/{id}");
        let (status, _, _) = e2b(&d, Some(stranger), "DELETE", &path, None).await;
        assert_eq!(status, 404, "a stranger kills {id}");
        let (status, _, _) = e2b(&d, Some(owner), "DELETE", &path, None).await;
        assert_eq!(status, 204, "the owner kills {id}");
    }
    d.assert_no_containers(Duration::from_secs(60), "every sandbox was killed")
        .await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_fields_survive_an_sbxd_kill_9() {
    let mut d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let key = d.create_key("acme", None);
    let (status, made, _) = e2b(
        &d,
        Some(&key),
        "POST",
        "/v2/sandboxes",
        Some(json!({"timeout": 600, "metadata": {"k": "v"}, "autoPause": true})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let id = made["sandboxID"].as_str().unwrap().to_string();
    let (_, before, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{id}"), None).await;
    d.kill9();
    d.spawn().await;
    let (status, after, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{after}");
    for field in [
        "metadata",
        "endAt",
        "envdAccessToken",
        "lifecycle",
        "templateID",
        "state",
    ] {
        assert_eq!(after[field], before[field], "{field} after kill -9");
    }
    let (status, _, _) = e2b(&d, Some(&key), "DELETE", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 204);
    d.assert_no_containers(Duration::from_secs(60), "killed")
        .await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_record_files_of_an_earlier_sbxd_are_imported_into_the_store_once() {
    // An sbxd from before the store table kept E2B fields in DATA_DIR/e2b/<id>.json:
    // a sandbox whose fields are only in such a file.
    let mut d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let key = d.create_key("acme", None);
    let id = create(&d, &key, json!({"timeout": 600})).await;
    let workspace = d.sql(&format!(
        "SELECT workspace FROM e2b_sandboxes WHERE id = '{id}'"
    ));
    assert_eq!(workspace.trim(), "acme/production");
    d.kill9();
    d.sql(&format!("DELETE FROM e2b_sandboxes WHERE id = '{id}'"));
    let token = "ab".repeat(32);
    let end = chrono::Utc::now() + chrono::Duration::seconds(900);
    let file = json!({
        "sandboxId": id, "workspace": "acme/production", "templateId": "base",
        "metadata": {"from": "file"}, "endAt": end.to_rfc3339(), "autoPause": true,
        "envdAccessToken": token, "allowInternetAccess": true,
    });
    let dir = d.data_dir().join("e2b");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(format!("{id}.json")), file.to_string()).unwrap();
    std::fs::write(dir.join("garbage.json"), b"{").unwrap();

    // The next start imports it and renames the directory.
    d.spawn().await;
    let (status, got, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["metadata"]["from"], "file", "{got}");
    assert_eq!(got["envdAccessToken"], token.as_str());
    assert_eq!(got["lifecycle"]["onTimeout"], "pause", "{got}");
    assert!(!dir.exists(), "the directory is renamed once imported");
    assert!(d
        .data_dir()
        .join("e2b.imported")
        .join(format!("{id}.json"))
        .exists());
    // A later start imports nothing again; the stored row (changed since) stays.
    let (status, _, _) = e2b(
        &d,
        Some(&key),
        "POST",
        &format!("/sandboxes/{id}/timeout"),
        Some(json!({"timeout": 300})),
    )
    .await;
    assert_eq!(status, 204);
    let (_, changed, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{id}"), None).await;
    d.kill9();
    d.spawn().await;
    let (_, again, _) = e2b(&d, Some(&key), "GET", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(again["endAt"], changed["endAt"]);
    assert_ne!(again["endAt"], got["endAt"]);
    let (status, _, _) = e2b(&d, Some(&key), "DELETE", &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 204);
    d.assert_no_containers(Duration::from_secs(60), "killed")
        .await;
}
