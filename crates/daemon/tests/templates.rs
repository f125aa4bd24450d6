//! Templates on real gVisor (issue 17): an image booted, its start command
//! run until the ready check passes, then snapshotted; creates are clones.
//!
//! - a template of the default image whose start command is
//!   `python3 -m http.server 8000` and whose ready check is port 8000: the
//!   FIRST exec in a sandbox created from it gets 200 from the server, with
//!   no wait or retry; the sandbox reports `template` and `imageRef`;
//! - an E2B `templateID` naming the template creates a clone of it;
//! - the template's snapshot cannot be deleted through `/v2/snapshots` (409),
//!   creates naming other fields with `template` are 400;
//! - a failing start command and a ready timeout leave the template FAILED
//!   with the reason (exit code, output); creating from it is 409
//!   `template_not_ready`;
//! - deleting the template removes its snapshot;
//! - a template of an imported image: deleting the image is 409 naming the
//!   template; re-importing the image's `name:tag` with new content rebuilds
//!   the template in the background (new snapshot, the old one deleted) and
//!   clones see the new content; `POST /v1/templates/{name}/rebuild` makes
//!   yet another snapshot;
//! - a build interrupted by an sbxd restart starts again (single node).
//!
//! Tenant isolation of `/v1/templates` is in `tenants.rs`.

mod common;

use common::oci::{layer, oci_layout, shell_layer, Entry};
use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One boot-heavy case at a time on this 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An image with a shell (`common::oci::shell_layer`) and `/marker` holding `marker`.
fn sh_image(marker: &str) -> Vec<u8> {
    let top = layer(&[Entry::File("marker", marker.as_bytes().to_vec(), 0o644)]);
    oci_layout(
        &[shell_layer(&[]), top],
        json!({"Env": ["PATH=/usr/bin:/bin"]}),
    )
}

async fn import(d: &Daemon, name: &str, tag: &str, archive: Vec<u8>) {
    let (status, body) = d
        .call_with(
            "POST",
            &format!("/v1/images?name={name}&tag={tag}"),
            Some(archive),
            &[("content-type", "application/x-tar")],
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// `POST /v1/templates?wait=true`: the template as its build left it.
async fn build(d: &Daemon, spec: Value) -> Value {
    let started = Instant::now();
    let (status, body) = d.call("POST", "/v1/templates?wait=true", Some(spec)).await;
    assert_eq!(status, 200, "{body}");
    println!(
        "template {} built in {:?}: {}",
        body["data"]["name"],
        started.elapsed(),
        body["data"]["status"]
    );
    body["data"].clone()
}

/// Creates a sandbox from `template` and waits for RUNNING; returns its id
/// and the create's answer.
async fn create_from(d: &Daemon, name: &str, template: &str) -> (String, Value) {
    let started = Instant::now();
    let (status, got) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "template": template})),
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {got}");
    let id = got["data"]["id"].as_str().unwrap().to_string();
    if status == 202 {
        d.wait_status(&id, "RUNNING", Duration::from_secs(120))
            .await;
    }
    println!("create from template {template}: {:?}", started.elapsed());
    (id, got["data"].clone())
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_template_serves_on_the_first_exec_and_failed_builds_say_why() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);

    let web = build(
        &d,
        json!({"name": "web", "image": "default",
               "startCommand": "python3 -m http.server 8000",
               "readyCheck": {"port": 8000}}),
    )
    .await;
    assert_eq!(web["status"], "READY", "{web}");
    assert_eq!(web["creatable"], true, "{web}");
    assert_eq!(web["imageRef"], "default", "{web}");
    let snap = web["snapshotId"].as_str().unwrap().to_string();

    let (id, created) = create_from(&d, "w1", "web").await;
    assert_eq!(created["template"], "web", "{created}");
    assert_eq!(created["imageRef"], "default", "{created}");
    // The very first command: the server answers, no wait, no retry.
    let (code, out, err) = d
        .exec(
            &id,
            &[
                "python3",
                "-c",
                "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)",
            ],
        )
        .await;
    assert_eq!((code, out.trim()), (0, "200"), "{err}");
    let (_, detail) = d.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(detail["data"]["template"], "web", "{detail}");
    assert_eq!(detail["data"]["snapshotId"], snap.as_str(), "{detail}");

    // E2B: a templateID naming the template creates a clone of it too.
    let resp = d
        .http
        .post(d.url("/v2/sandboxes"))
        .header("x-api-key", "dev")
        .json(&json!({"templateID": "web"}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let e2b: Value = resp.json().await.unwrap();
    assert_eq!(status, 201, "{e2b}");
    assert_eq!(e2b["templateID"], "web", "{e2b}");
    let e2b_id = e2b["sandboxID"].as_str().unwrap().to_string();
    let (code, out, err) = d
        .exec(
            &e2b_id,
            &[
                "python3",
                "-c",
                "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)",
            ],
        )
        .await;
    assert_eq!((code, out.trim()), (0, "200"), "{err}");

    // The template owns its snapshot.
    let got = d
        .call("DELETE", &format!("/v2/snapshots/{snap}"), None)
        .await;
    assert_error(&got, 409, "invalid_request");
    assert!(got.1.to_string().contains("template"), "{}", got.1);
    // A template brings its shape, environment and image: nothing else goes with it.
    for extra in [
        json!({"image": "default"}),
        json!({"vcpu": 1, "memoryMb": 1024}),
        json!({"snapshotId": snap}),
        json!({"environment": {"A": "1"}}),
    ] {
        let mut body = json!({"name": "w-bad", "template": "web"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let got = d.call("POST", "/v1/sandboxes", Some(body)).await;
        assert_eq!(got.0, 400, "{extra}: {}", got.1);
    }
    let got = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "w-x", "template": "nope"})),
        )
        .await;
    assert_error(&got, 404, "template_not_found");
    let got = d
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "web", "image": "default"})),
        )
        .await;
    assert_error(&got, 409, "template_name_taken");
    let got = d
        .call("POST", "/v1/templates", Some(json!({"name": "Bad Name"})))
        .await;
    assert_eq!(got.0, 400, "{}", got.1);

    // A start command that fails: FAILED with its exit code and output.
    let bad = build(
        &d,
        json!({"name": "bad", "startCommand": "echo oops-from-start; exit 3",
               "readyCheck": {"port": 8000}}),
    )
    .await;
    assert_eq!(bad["status"], "FAILED", "{bad}");
    let why = bad["error"].as_str().unwrap();
    assert!(
        why.contains("exited with code 3") && why.contains("oops-from-start"),
        "{bad}"
    );
    assert_eq!(bad["creatable"], false, "{bad}");
    let got = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "b1", "template": "bad"})),
        )
        .await;
    assert_error(&got, 409, "template_not_ready");

    // A server that never listens: FAILED on the ready timeout.
    let slow = build(
        &d,
        json!({"name": "slow", "startCommand": "echo still-starting; sleep 600",
               "readyCheck": {"port": 8001}, "readyTimeoutSecs": 2}),
    )
    .await;
    assert_eq!(slow["status"], "FAILED", "{slow}");
    let why = slow["error"].as_str().unwrap();
    assert!(
        why.contains("ready timeout") && why.contains("still-starting"),
        "{slow}"
    );

    let (_, list) = d.call("GET", "/v1/templates", None).await;
    let names: Vec<&str> = list["data"]["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bad", "slow", "web"], "{list}");

    // Deleting the template deletes its snapshot; its clones keep running.
    assert_eq!(d.call("DELETE", "/v1/templates/web", None).await.0, 204);
    assert_error(
        &d.call("GET", "/v1/templates/web", None).await,
        404,
        "template_not_found",
    );
    let (status, s) = d.call("GET", &format!("/v2/snapshots/{snap}"), None).await;
    assert!(
        status == 404 || s["data"]["status"] == "DELETED",
        "{status} {s}"
    );
    let (code, _, _) = d.sh(&id, "true").await;
    assert_eq!(code, 0);
    for name in ["bad", "slow"] {
        assert_eq!(
            d.call("DELETE", &format!("/v1/templates/{name}"), None)
                .await
                .0,
            204
        );
    }
    d.destroy_all(Duration::from_secs(60)).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_template_rebuilds_when_its_image_moves_and_holds_the_image() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    import(&d, "tool", "1", sh_image("one")).await;
    let tool = build(
        &d,
        json!({"name": "tool", "image": "tool:1",
               "startCommand": "cat /marker > /root/started",
               "readyCheck": {"command": "cat /root/started"}}),
    )
    .await;
    assert_eq!(tool["status"], "READY", "{tool}");
    let first = tool["snapshotId"].as_str().unwrap().to_string();
    assert!(
        tool["imageRef"]
            .as_str()
            .unwrap()
            .starts_with("tool:1@sha256:"),
        "{tool}"
    );
    let (a, created) = create_from(&d, "t1", "tool").await;
    assert_eq!(created["imageRef"], tool["imageRef"], "{created}");
    // The start command's work is in the snapshot.
    let (code, out, err) = d.sh(&a, "cat /root/started /marker").await;
    assert_eq!((code, out.as_str()), (0, "oneone"), "{err}");

    // The template holds its image.
    let got = d.call("DELETE", "/v1/images/tool:1", None).await;
    assert_error(&got, 409, "invalid_request");
    assert!(got.1.to_string().contains("template tool"), "{}", got.1);

    // The name moves to new content: the template rebuilds on its own.
    import(&d, "tool", "1", sh_image("two")).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    let rebuilt = loop {
        let (_, t) = d.call("GET", "/v1/templates/tool", None).await;
        let t = t["data"].clone();
        // Until the rebuild is READY the old snapshot serves.
        assert!(t["snapshotId"].is_string(), "{t}");
        if t["status"] == "READY" && t["snapshotId"] != first.as_str() {
            break t;
        }
        assert_ne!(t["status"], "FAILED", "{t}");
        assert!(Instant::now() < deadline, "no rebuild: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let second = rebuilt["snapshotId"].as_str().unwrap().to_string();
    let (b, _) = create_from(&d, "t2", "tool").await;
    let (code, out, err) = d.sh(&b, "cat /root/started /marker").await;
    assert_eq!((code, out.as_str()), (0, "twotwo"), "{err}");
    // The replaced snapshot is deleted (its clone keeps running).
    let (status, s) = d.call("GET", &format!("/v2/snapshots/{first}"), None).await;
    assert!(
        status == 404 || s["data"]["status"] == "DELETED" || s["data"]["status"] == "DELETING",
        "{status} {s}"
    );
    assert_eq!(d.sh(&a, "cat /marker").await.1, "one");

    // An explicit rebuild makes another snapshot.
    let (status, again) = d
        .call("POST", "/v1/templates/tool/rebuild?wait=true", None)
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"]["status"], "READY", "{again}");
    assert_ne!(again["data"]["snapshotId"], second.as_str(), "{again}");

    d.destroy_all(Duration::from_secs(60)).await;
    assert_eq!(d.call("DELETE", "/v1/templates/tool", None).await.0, 204);
    assert_eq!(d.call("DELETE", "/v1/images/tool:1", None).await.0, 204);
}

/// A build that an sbxd restart interrupts starts again when sbxd comes
/// back (single node), and ends READY.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_build_interrupted_by_a_restart_starts_again() {
    let _serial = SERIAL.lock().await;
    let mut d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, t) = d
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "resumed",
                        "startCommand": "sleep 2; echo ok > /root/ready",
                        "readyCheck": {"command": "test -s /root/ready"}})),
        )
        .await;
    assert_eq!(
        (status, t["data"]["status"].as_str()),
        (202, Some("BUILDING")),
        "{t}"
    );
    d.kill9();
    d.spawn().await;
    let deadline = Instant::now() + Duration::from_secs(180);
    let t = loop {
        let (_, t) = d.call("GET", "/v1/templates/resumed", None).await;
        let t = t["data"].clone();
        if t["status"] == "READY" {
            break t;
        }
        assert_eq!(t["status"], "BUILDING", "{t}");
        assert!(Instant::now() < deadline, "the build did not resume: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(t["snapshotId"].is_string(), "{t}");
    let (id, _) = create_from(&d, "r1", "resumed").await;
    let (code, out, err) = d.sh(&id, "cat /root/ready").await;
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    d.destroy_all(Duration::from_secs(60)).await;
}
