//! Custom images on real gVisor (issue 17, first slice).
//!
//! - an OCI layout made here with two layers (a file, a whiteout of a file
//!   of layer 1, an opaque directory, an env var, a workdir; the second
//!   layer gzip-compressed) imports, and a sandbox created from it sees
//!   exactly that tree, that environment and that working directory;
//! - a sandbox of the image snapshots and clones (the clone runs the same
//!   image), delete of the image is refused (409) while a sandbox or
//!   snapshot uses it, then allowed, and its root filesystem is removed;
//! - escape tarballs (`..`, an absolute path, a symlink out of the root
//!   followed by a write through it, hard links out, a device node) are
//!   refused with 400 `image_invalid`, and nothing appears outside the image
//!   directory (checked on the host);
//! - a running sandbox becomes an image (`POST /v1/sandboxes/{id}/image`),
//!   and sandboxes created from it see its files;
//! - unknown images are 404 `image_not_found` (another tenant's: `tenants.rs`);
//! - in a cluster, images are node-local: every node lists an image, and a
//!   create naming it through another node runs on the image's node.

mod common;

use common::oci::{gzip, image_dirs, layer, oci_layout, shell_layer, tiny_image, Entry};
use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// One boot-heavy case at a time on this 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Layer 1: a shell system (`common::oci::shell_layer`) and files for
/// layer 2 to delete or hide.
fn base_layer() -> Vec<u8> {
    shell_layer(&[
        Entry::File("app/keep.txt", b"kept\n".to_vec(), 0o644),
        Entry::File("app/gone.txt", b"should be whited out\n".to_vec(), 0o644),
        Entry::File("opq/old.txt", b"hidden by the opaque dir\n".to_vec(), 0o644),
        Entry::File("opq/sub/deep.txt", b"hidden too\n".to_vec(), 0o644),
    ])
}

/// Layer 2: a whiteout, an opaque directory with a new file, a new file, the workdir.
fn top_layer() -> Vec<u8> {
    layer(&[
        Entry::File("app/.wh.gone.txt", Vec::new(), 0o644),
        Entry::File("opq/.wh..wh..opq", Vec::new(), 0o644),
        Entry::File("opq/new.txt", b"new in layer 2\n".to_vec(), 0o644),
        Entry::File("app/added.txt", b"added\n".to_vec(), 0o644),
        Entry::Dir("work/"),
    ])
}

async fn import(d: &Daemon, name_tag: &str, archive: Vec<u8>) -> (u16, Value) {
    let (name, tag) = name_tag.split_once(':').unwrap();
    d.call_with(
        "POST",
        &format!("/v1/images?name={name}&tag={tag}"),
        Some(archive),
        &[("content-type", "application/x-tar")],
    )
    .await
}

/// Creates a RUNNING sandbox through `/v1` with `extra` fields.
async fn create_with(d: &Daemon, name: &str, extra: Value) -> (String, Value) {
    let mut body = json!({"name": name, "vcpu": 1, "memoryMb": 1024});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, got) = d.call("POST", "/v1/sandboxes", Some(body)).await;
    assert!(status == 201 || status == 202, "create: {status} {got}");
    let id = got["data"]["id"].as_str().unwrap().to_string();
    let row = if status == 202 {
        d.wait_status(&id, "RUNNING", Duration::from_secs(120))
            .await
    } else {
        got["data"].clone()
    };
    (id, row)
}

async fn snapshot_ready(d: &Daemon, id: &str) -> String {
    let (status, snap) = d
        .call("POST", &format!("/v2/sandboxes/{id}/snapshots"), None)
        .await;
    assert!(status == 201 || status == 202, "{status} {snap}");
    let sid = snap["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, got) = d.call("GET", &format!("/v2/snapshots/{sid}"), None).await;
        if got["data"]["status"] == "READY" {
            return sid;
        }
        assert!(
            got["data"]["status"] == "CREATING",
            "snapshot did not become READY: {got}"
        );
        assert!(Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every path under `dir` (relative), sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.symlink_metadata().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn an_imported_image_boots_with_its_tree_env_and_workdir_snapshots_and_clones() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let archive = oci_layout(
        &[base_layer(), gzip(&top_layer())],
        json!({"Env": ["PATH=/usr/bin:/bin", "IMG_VAR=from-image", "OVERRIDE=image"],
               "WorkingDir": "/work", "User": "root", "Cmd": ["sh"]}),
    );
    let started = Instant::now();
    let (status, img) = import(&d, "tiny:1", archive.clone()).await;
    println!(
        "import of a {} byte OCI layout: {:?}",
        archive.len(),
        started.elapsed()
    );
    assert_eq!(status, 201, "{img}");
    let digest = img["data"]["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{img}");
    assert_eq!(img["data"]["origin"], "import");
    assert_eq!(img["data"]["config"]["workdir"], "/work");
    assert!(
        img["data"]["sizeBytes"].as_u64().unwrap() > 100_000,
        "{img}"
    );
    // The same content again under another name: the same digest, stored once.
    let (status, again) = import(&d, "tiny:again", archive).await;
    assert_eq!((status, &again["data"]["digest"]), (201, &json!(digest)));
    assert_eq!(image_dirs(&d), vec![digest["sha256:".len()..].to_string()]);
    let (_, list) = d.call("GET", "/v1/images", None).await;
    let names: Vec<String> = list["data"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}:{}",
                i["name"].as_str().unwrap(),
                i["tag"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["default:latest", "tiny:1", "tiny:again"], "{list}");
    let (status, got) = d.call("GET", "/v1/images/tiny:1", None).await;
    assert_eq!((status, &got["data"]["digest"]), (200, &json!(digest)));
    assert_eq!(d.call("DELETE", "/v1/images/tiny:again", None).await.0, 204);

    // A sandbox of the image sees exactly its tree, environment and workdir.
    let started = Instant::now();
    let (id, row) = create_with(
        &d,
        "from-image",
        json!({"image": "tiny:1", "environment": {"OVERRIDE": "request"}}),
    )
    .await;
    println!("create -> RUNNING from the image: {:?}", started.elapsed());
    assert_eq!(row["imageRef"], format!("tiny:1@{digest}"), "{row}");
    let (code, out, err) = d
        .sh(
            &id,
            "pwd; echo \"$IMG_VAR $OVERRIDE\"; cd /app && echo app: *; cd /opq && echo opq: *; \
         cat /app/keep.txt /opq/new.txt; test -e /etc/os-release || echo no-default-files; \
         test -e /usr/bin/python3 || echo no-python",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "/work\nfrom-image request\napp: added.txt keep.txt\nopq: new.txt\nkept\nnew in layer 2\n\
         no-default-files\nno-python\n"
    );
    // An explicit cwd still wins over the image's.
    let (status, res) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(json!({"command": ["sh", "-c", "pwd"], "cwd": "/app"})),
        )
        .await;
    assert_eq!(status, 200, "{res}");
    assert_eq!(common::b64(&res["data"]["stdout"]), "/app\n", "{res}");
    let (_, detail) = d.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(detail["data"]["environment"]["IMG_VAR"], "from-image");
    // Writes go to the sandbox's own layer, never into the shared image.
    let (code, _, err) = d
        .sh(&id, "echo mine > /app/keep.txt && echo x > /new-file")
        .await;
    assert_eq!(code, 0, "{err}");
    let rootfs = d
        .data_dir()
        .join("images/sha256")
        .join(&digest["sha256:".len()..])
        .join("rootfs");
    assert_eq!(
        std::fs::read(rootfs.join("app/keep.txt")).unwrap(),
        b"kept\n"
    );
    assert!(!rootfs.join("new-file").exists());

    // Snapshot and clone: the clone runs on the same image, with the source's writes.
    let sid = snapshot_ready(&d, &id).await;
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "clone", "snapshotId": sid})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {body}");
    let clone = body["data"]["id"].as_str().unwrap().to_string();
    let row = d
        .wait_status(&clone, "RUNNING", Duration::from_secs(120))
        .await;
    assert_eq!(row["imageRef"], format!("tiny:1@{digest}"));
    let (code, out, err) = d.sh(&clone, "pwd; cat /app/keep.txt /new-file").await;
    assert_eq!((code, out.as_str()), (0, "/work\nmine\nx\n"), "{err}");
    // A clone names no image of its own.
    assert_error(
        &d.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "c2", "snapshotId": sid, "image": "tiny:1"})),
        )
        .await,
        400,
        "invalid_field_format",
    );

    // In use: delete refused (sandboxes, then the snapshot alone), then allowed.
    let refused = d.call("DELETE", "/v1/images/tiny:1", None).await;
    assert_error(&refused, 409, "invalid_request");
    assert!(refused.1.to_string().contains(&id), "{}", refused.1);
    d.destroy_and_wait(&id).await;
    d.destroy_and_wait(&clone).await;
    let refused = d.call("DELETE", "/v1/images/tiny:1", None).await;
    assert_error(&refused, 409, "invalid_request");
    assert!(refused.1.to_string().contains(&sid), "{}", refused.1);
    let (status, _) = d
        .call("DELETE", &format!("/v2/snapshots/{sid}"), None)
        .await;
    assert!(status == 204 || status == 202, "{status}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = d.call("DELETE", "/v1/images/tiny:1", None).await;
        if status == 204 {
            break;
        }
        assert_eq!(status, 409, "{body}");
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Nothing names or uses it: its root filesystem is gone.
    assert!(image_dirs(&d).is_empty(), "{:?}", image_dirs(&d));
    assert_error(
        &d.call("GET", "/v1/images/tiny:1", None).await,
        404,
        "image_not_found",
    );
    assert_error(
        &d.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "gone", "vcpu": 1, "memoryMb": 1024, "image": "tiny:1"})),
        )
        .await,
        404,
        "image_not_found",
    );
    assert_error(
        &d.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "gone", "vcpu": 1, "memoryMb": 1024, "image": digest})),
        )
        .await,
        404,
        "image_not_found",
    );
    assert_error(
        &d.call("DELETE", "/v1/images/default", None).await,
        409,
        "invalid_request",
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn escape_tarballs_are_refused_and_write_nothing_outside_the_image() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let outside = tempfile::Builder::new()
        .prefix("sbx-image-escape-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(outside.path().join("victim"), b"untouched").unwrap();
    let out = outside.path().display().to_string();
    let data_before = tree(d.data_dir());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "dotdot",
            layer(&[Entry::File("../../../escaped", b"x".to_vec(), 0o644)]),
        ),
        (
            "absolute path",
            layer(&[Entry::File(&format!("{out}/escaped"), b"x".to_vec(), 0o644)]),
        ),
        (
            "write through a symlink out of the root",
            layer(&[
                Entry::Symlink("link", &out),
                Entry::File("link/escaped", b"x".to_vec(), 0o644),
            ]),
        ),
        (
            "hard link to a host file",
            layer(&[Entry::Hardlink("h", &format!("{out}/victim"))]),
        ),
        (
            "hard link through a symlink",
            layer(&[Entry::Symlink("l", &out), Entry::Hardlink("h", "l/victim")]),
        ),
        ("device node", layer(&[Entry::Char("dev/sda")])),
    ];
    for (what, bad) in cases {
        // The bad layer sits on a good one: refused as a whole, nothing kept.
        let archive = oci_layout(&[tiny_layer(), bad], json!({}));
        let got = import(&d, "evil:1", archive).await;
        assert_error(&got, 400, "image_invalid");
        let message = got.1["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("refused entry"), "{what}: {message}");
        let mut left: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, vec!["victim"], "{what}");
        assert_eq!(
            std::fs::read(outside.path().join("victim")).unwrap(),
            b"untouched",
            "{what}"
        );
        assert!(!Path::new("/escaped").exists(), "{what}");
        assert!(image_dirs(&d).is_empty(), "{what}: {:?}", image_dirs(&d));
        // Nothing of the upload stays in the data dir (the spool and the
        // half-made image are removed).
        let now: Vec<String> = tree(d.data_dir())
            .into_iter()
            .filter(|p| !data_before.contains(p) && !p.starts_with("runsc"))
            .collect();
        assert!(
            now.iter()
                .all(|p| ["images", "images/sha256", "images/sha256/tmp"].contains(&p.as_str())),
            "{what}: left {now:?}"
        );
    }
    let (_, list) = d.call("GET", "/v1/images", None).await;
    assert!(!list.to_string().contains("evil"), "{list}");
    // Not an image archive at all: 400 too.
    assert_error(
        &import(&d, "evil:2", b"not a tarball".to_vec()).await,
        400,
        "image_invalid",
    );
    // Bad names are refused before the body is read.
    assert_error(
        &import(&d, "Bad_Name:1", tiny_image("x")).await,
        400,
        "invalid_field_format",
    );
}

fn tiny_layer() -> Vec<u8> {
    layer(&[Entry::File("etc/ok", b"ok".to_vec(), 0o644)])
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_running_sandbox_becomes_an_image_that_new_sandboxes_boot() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let started = Instant::now();
    let (src, _) = create_with(&d, "source", json!({})).await;
    println!(
        "create -> RUNNING from the default image: {:?}",
        started.elapsed()
    );
    let (code, _, err) = d
        .sh(
            &src,
            "mkdir -p /opt/made && echo from-sandbox > /opt/made/file && rm /etc/os-release \
         && echo scratch > /tmp/not-kept",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let started = Instant::now();
    let (status, img) = d
        .call(
            "POST",
            &format!("/v1/sandboxes/{src}/image"),
            Some(json!({"name": "made", "tag": "v1"})),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(status, 201, "{img}");
    assert_eq!(img["data"]["origin"], "sandbox");
    let size = img["data"]["sizeBytes"].as_u64().unwrap();
    println!("image from a default-image sandbox: {size} bytes in {took:?}");

    let started = Instant::now();
    let (made, row) = create_with(&d, "from-made", json!({"image": "made:v1"})).await;
    println!(
        "create -> RUNNING from the sandbox's image: {:?}",
        started.elapsed()
    );
    assert!(
        row["imageRef"]
            .as_str()
            .unwrap()
            .starts_with("made:v1@sha256:"),
        "{row}"
    );
    let (code, out, err) = d
        .sh(
            &made,
            "cat /opt/made/file; test -e /etc/os-release || echo removed-stays-removed; \
         test -e /tmp/not-kept || echo tmp-not-kept; python3 -c 'print(1+1)'",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "from-sandbox\nremoved-stays-removed\ntmp-not-kept\n2\n"
    );
    // The source is unchanged and still running.
    let (code, out, _) = d.sh(&src, "cat /opt/made/file").await;
    assert_eq!((code, out.as_str()), (0, "from-sandbox\n"));
    // Not running: refused.
    d.destroy_and_wait(&src).await;
    assert_error(
        &d.call(
            "POST",
            &format!("/v1/sandboxes/{src}/image"),
            Some(json!({"name": "made", "tag": "v2"})),
        )
        .await,
        409,
        "invalid_request",
    );
    d.destroy_and_wait(&made).await;
    assert_eq!(d.call("DELETE", "/v1/images/made:v1", None).await.0, 204);
    assert!(image_dirs(&d).is_empty());
}

#[tokio::test]
#[ignore = "needs root, runsc, the image and PostgreSQL; run ./scripts/test"]
async fn in_a_cluster_a_create_naming_an_image_runs_on_the_image_node() {
    let _serial = SERIAL.lock().await;
    let db = common::cluster::database();
    let token = common::cluster::TOKEN;
    let a = common::cluster::node_with(db.url(), "node-a", token, &[]).await;
    let _la = KillLeftovers::of(&a);
    let b = common::cluster::node_with(db.url(), "node-b", token, &[]).await;
    let _lb = KillLeftovers::of(&b);
    let (status, img) = import(&b, "on-b:1", tiny_image_with_sh()).await;
    assert_eq!(status, 201, "{img}");
    assert_eq!(img["data"]["nodeId"], "node-b");
    // Every node lists it (the rows are shared); the files are on B only.
    let (_, list) = a.call("GET", "/v1/images", None).await;
    assert!(list.to_string().contains("on-b"), "{list}");
    assert!(image_dirs(&a).is_empty());
    // Creates through A run on B, each time.
    for i in 0..3 {
        let (id, row) = create_with(&a, &format!("img-{i}"), json!({"image": "on-b:1"})).await;
        assert!(
            row["imageRef"].as_str().unwrap().starts_with("on-b:1@"),
            "{row}"
        );
        let node = a.sql(&format!("SELECT node_id FROM sandboxes WHERE id = '{id}'"));
        assert_eq!(node.trim(), "node-b", "sandbox {id}");
        let (code, out, err) = a.sh(&id, "cat /marker").await;
        assert_eq!((code, out.as_str()), (0, "on-b"), "{err}");
    }
    a.destroy_all(Duration::from_secs(60)).await;
}

/// An image with `sh` and `cat` (the base layer) and `/marker`.
fn tiny_image_with_sh() -> Vec<u8> {
    let top = layer(&[Entry::File("marker", b"on-b".to_vec(), 0o644)]);
    oci_layout(&[base_layer(), top], json!({"Env": ["PATH=/usr/bin:/bin"]}))
}

/// E2B templates name images: a tenant's `name:tag` as the `templateID`, and
/// a `--e2b-template NAME=IMAGE` alias; an unknown template is E2B's `404`.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn e2b_templates_name_a_tenants_images() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&["--e2b-template", "tools=tiny:1"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, body) = import(&d, "tiny:1", tiny_image_with_sh()).await;
    assert_eq!(status, 201, "{body}");
    let e2b_create = |template: &'static str| {
        d.http
            .post(d.url("/v2/sandboxes"))
            .header("x-api-key", "dev")
            .json(&json!({"templateID": template}))
            .send()
    };
    for template in ["tiny:1", "tools"] {
        let resp = e2b_create(template).await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(status, 201, "{template}: {body}");
        assert_eq!(body["templateID"], template, "{body}");
        let id = body["sandboxID"].as_str().unwrap().to_string();
        let (code, out, err) = d.sh(&id, "cat /marker").await;
        assert_eq!((code, out.as_str()), (0, "on-b"), "{template}: {err}");
        d.destroy_and_wait(&id).await;
    }
    let resp = e2b_create("nope:1").await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], 404, "{body}");
}

/// With an object store, images travel: the importing node stores the image
/// in object storage before naming it, a create through another node runs
/// there (no pinning) on the fetched image, a clone there after the local
/// copy is gone fetches it again, and the objects go once nothing uses them.
#[tokio::test]
#[ignore = "needs root, runsc, the image, PostgreSQL and S3; run ./scripts/test"]
async fn with_an_object_store_images_are_fetched_by_any_node() {
    let _serial = SERIAL.lock().await;
    let db = common::cluster::database();
    let token = common::cluster::TOKEN;
    let prefix = format!("img-{}", uuid::Uuid::new_v4());
    let s3 = common::s3_flags(&prefix);
    let mut flags: Vec<&str> = s3.iter().map(String::as_str).collect();
    let a = common::cluster::node_with(db.url(), "node-a", token, &flags).await;
    let _la = KillLeftovers::of(&a);
    // One secret key for the cluster: it seals the objects' data keys.
    let key = a.data_dir().join("secret.key");
    let key = key.to_str().unwrap().to_string();
    flags.extend(["--secret-key-file", key.as_str()]);
    let b = common::cluster::node_with(db.url(), "node-b", token, &flags).await;
    let _lb = KillLeftovers::of(&b);
    let bucket = common::s3::s3_client();

    let (status, img) = import(&a, "shared:1", tiny_image_with_sh()).await;
    assert_eq!(status, 201, "{img}");
    let hex = img["data"]["digest"].as_str().unwrap()["sha256:".len()..].to_string();
    let objects = common::s3::keys_under(&bucket, &format!("{prefix}/images/")).await;
    assert!(
        objects.iter().any(|k| k.ends_with("/manifest.json")) && objects.len() >= 3,
        "{objects:?}"
    );
    assert!(image_dirs(&b).is_empty());

    // A create through B with A drained runs on B, on the fetched image.
    let (status, body) = b.call("POST", "/v1/nodes/node-a/drain", None).await;
    assert_eq!(status, 200, "{body}");
    let (id, row) = create_with(&b, "on-b", json!({"image": "shared:1"})).await;
    let node = b.sql(&format!("SELECT node_id FROM sandboxes WHERE id = '{id}'"));
    assert_eq!(node.trim(), "node-b", "{row}");
    assert_eq!(image_dirs(&b), [hex.as_str()]);
    let (code, out, err) = b.sh(&id, "cat /marker").await;
    assert_eq!((code, out.as_str()), (0, "on-b"), "{err}");

    // B loses its copy; a clone of a snapshot of that sandbox fetches it again.
    let snap = snapshot_ready(&b, &id).await;
    b.destroy_and_wait(&id).await;
    std::fs::remove_dir_all(b.data_dir().join("images/sha256").join(&hex)).unwrap();
    let (status, c) = b
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "clone-b", "snapshotId": snap})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {c}");
    let cid = c["data"]["id"].as_str().unwrap().to_string();
    b.wait_status(&cid, "RUNNING", Duration::from_secs(120))
        .await;
    assert_eq!(
        image_dirs(&b),
        [hex.as_str()],
        "fetched again for the clone"
    );
    let (code, out, err) = b.sh(&cid, "cat /marker").await;
    assert_eq!((code, out.as_str()), (0, "on-b"), "{err}");

    // Nothing uses it any more: the sweep removes the files and the objects.
    b.destroy_and_wait(&cid).await;
    let (status, _) = b
        .call("DELETE", &format!("/v2/snapshots/{snap}"), None)
        .await;
    assert!(status == 204 || status == 202, "{status}");
    // The snapshot's deletion finishes in the background: until then it uses the image.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = b.call("DELETE", "/v1/images/shared:1", None).await;
        if status == 204 {
            break;
        }
        assert_eq!(status, 409, "{body}");
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(image_dirs(&b).is_empty());
    let objects = common::s3::keys_under(&bucket, &format!("{prefix}/images/")).await;
    assert!(objects.is_empty(), "{objects:?}");
    a.destroy_all(Duration::from_secs(60)).await;
}

/// `POST /v1/images/{ref}/tag`: another name for the same content; naming
/// an image `default` makes it the tenant's default, which a `/v2` create
/// (the inngest SDK's) boots, until the name is deleted.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_tenant_tags_its_own_default_image() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, img) = import(&d, "tools:1", tiny_image_with_sh()).await;
    assert_eq!(status, 201, "{img}");
    let digest = img["data"]["digest"].clone();
    let tag = |target: Value| d.call("POST", "/v1/images/tools:1/tag", Some(target));
    let (status, alias) = tag(json!({"name": "tools", "tag": "stable"})).await;
    assert_eq!(
        (status, &alias["data"]["digest"]),
        (201, &digest),
        "{alias}"
    );
    assert_error(
        &tag(json!({"name": "default", "tag": "2"})).await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call("POST", "/v1/images/nope:1/tag", Some(json!({"name": "x"})))
            .await,
        404,
        "image_not_found",
    );
    let (status, def) = tag(json!({"name": "default"})).await;
    assert_eq!(
        (status, &def["data"]["name"]),
        (201, &json!("default")),
        "{def}"
    );
    let (_, list) = d.call("GET", "/v1/images", None).await;
    let names: Vec<(String, Value)> = list["data"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                format!(
                    "{}:{}",
                    i["name"].as_str().unwrap(),
                    i["tag"].as_str().unwrap()
                ),
                i["digest"].clone(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("default:latest".to_string(), digest.clone()),
            ("tools:1".to_string(), digest.clone()),
            ("tools:stable".to_string(), digest.clone()),
        ],
        "{list}"
    );

    // A create naming no image (the inngest SDK's /v2) boots the tenant's default.
    let id = d.create_running("uses-default").await;
    let (code, out, err) = d.sh(&id, "cat /marker").await;
    assert_eq!((code, out.as_str()), (0, "on-b"), "{err}");
    let (_, got) = d.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert!(
        got["data"]["imageRef"]
            .as_str()
            .unwrap()
            .starts_with("default:latest@sha256:"),
        "{got}"
    );
    d.destroy_and_wait(&id).await;

    // Deleting the name brings the node's default back; that one stays.
    assert_eq!(d.call("DELETE", "/v1/images/default", None).await.0, 204);
    let id = d.create_running("node-default").await;
    let (code, _, _) = d.sh(&id, "test -e /marker").await;
    assert_ne!(code, 0, "the node's default image has no /marker");
    assert_error(
        &d.call("DELETE", "/v1/images/default", None).await,
        409,
        "invalid_request",
    );
    d.destroy_and_wait(&id).await;
}
