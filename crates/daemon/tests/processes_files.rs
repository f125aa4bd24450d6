//! Processes, output streams and files on real gVisor (issue: the rest of the v2 contract).

mod common;

use common::{assert_error, Daemon};
use futures::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

async fn start(d: &Daemon, id: &str, argv: &[&str]) -> String {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({ "command": argv })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["state"], "RUNNING");
    assert!(body["data"]["pid"].as_i64().unwrap() > 0);
    body["data"]["id"].as_str().unwrap().to_string()
}

async fn wait(d: &Daemon, id: &str, pid: &str) -> Value {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{pid}/wait?timeout=60000ms"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["data"].clone()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn processes_signals_output_and_bad_input() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("procs").await;
    let other = d.create_running("other").await;

    let p = start(
        &d,
        &id,
        &["sh", "-c", "echo out1; echo err1 >&2; echo out2; exit 7"],
    )
    .await;
    let done = wait(&d, &id, &p).await;
    assert_eq!(done["state"], "EXITED");
    assert_eq!(done["exitCode"], 7);
    assert!(done.get("terminationSignal").is_none());
    let (status, got) = d
        .call("GET", &format!("/v2/sandboxes/{id}/processes/{p}"), None)
        .await;
    assert_eq!(status, 200);
    assert!(got["data"]["endedAt"].is_string());
    let (_, out) = d
        .call(
            "GET",
            &format!("/v2/sandboxes/{id}/processes/{p}/output?tailBytes=0"),
            None,
        )
        .await;
    let chunks = out["data"]["chunks"].as_array().unwrap();
    let joined: String = chunks
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c["stream"].as_str().unwrap(),
                common::b64(&c["data"])
            )
        })
        .collect();
    assert!(
        joined.contains("STDOUT:out1") && joined.contains("STDERR:err1"),
        "{joined}"
    );
    assert!(chunks
        .iter()
        .all(|c| c["encoding"] == "base64" && c["at"].is_string()));

    // SIGTERM to the group: KILLED with the signal; signalling again is a no-op 204.
    let sleeper = start(&d, &id, &["sh", "-c", "sleep 300 & sleep 300; wait"]).await;
    let (status, _) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{sleeper}/signals"),
            Some(json!({"signal": 15, "includeChildren": true})),
        )
        .await;
    assert_eq!(status, 204);
    let killed = wait(&d, &id, &sleeper).await;
    assert_eq!(killed["state"], "KILLED");
    assert_eq!(killed["terminationSignal"], 15);
    assert!(killed.get("exitCode").is_none());
    let (status, _) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{sleeper}/signals"),
            Some(json!({"signal": 9, "includeChildren": true})),
        )
        .await;
    assert_eq!(status, 204);

    // A missing executable cannot start: a clear 4xx, and the sandbox is fine.
    let failed = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({"command": ["/no/such/exe"]})),
        )
        .await;
    assert_error(&failed, 400, "invalid_field_format");

    // Bad input.
    let sig_path = format!("/v2/sandboxes/{id}/processes/{p}/signals");
    let sig = |v: Value| d.call("POST", &sig_path, Some(v));
    assert_error(
        &sig(json!({"signal": 0, "includeChildren": true})).await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &sig(json!({"signal": 65, "includeChildren": true})).await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &sig(json!({"includeChildren": true})).await,
        400,
        "missing_field",
    );
    assert_error(
        &d.call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{p}/wait?timeout=300001ms"),
            None,
        )
        .await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call(
            "GET",
            &format!("/v2/sandboxes/{id}/processes/{p}/output?tailBytes=524289"),
            None,
        )
        .await,
        400,
        "invalid_field_format",
    );
    // A process id from another sandbox is unknown here.
    assert_error(
        &d.call("GET", &format!("/v2/sandboxes/{other}/processes/{p}"), None)
            .await,
        404,
        "sandbox_process_not_found",
    );
    assert_error(
        &d.call(
            "POST",
            &format!("/v2/sandboxes/{other}/processes/{p}/wait"),
            None,
        )
        .await,
        404,
        "sandbox_process_not_found",
    );
    // Wait timeout: 504, the process keeps running.
    let long = start(&d, &id, &["sleep", "30"]).await;
    assert_error(
        &d.call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes/{long}/wait?timeout=200ms"),
            None,
        )
        .await,
        504,
        "sandbox_process_wait_timed_out",
    );
    let (_, still) = d
        .call("GET", &format!("/v2/sandboxes/{id}/processes/{long}"), None)
        .await;
    assert_eq!(still["data"]["state"], "RUNNING");

    // List is sorted by id and paginates without gaps.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".into(),
        };
        let (status, page) = d
            .call("GET", &format!("/v2/sandboxes/{id}/processes{q}"), None)
            .await;
        assert_eq!(status, 200);
        for item in page["data"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_string());
        }
        cursor = page["page"]["cursor"].as_str().map(String::from);
        if cursor.is_none() {
            break;
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);
    assert!(seen.contains(&p) && seen.contains(&sleeper) && seen.contains(&long));
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn dropped_stream_resumes_without_loss_or_replay() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("stream").await;
    // Long enough (~6 s) that the stream is opened while it still writes.
    let script = "for i in $(seq 1 60); do echo line-$i; sleep 0.1; done";
    let p = start(&d, &id, &["sh", "-c", script]).await;
    let url = d.url(&format!(
        "/v2/sandboxes/{id}/processes/{p}/output/stream?tailBytes=0"
    ));
    // Read a few frames, then drop the connection.
    let mut got = Vec::<u8>::new();
    let mut next_offset = 0u64;
    {
        let resp = d.http.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        let mut frames = 0;
        while frames < 3 {
            let piece = body.next().await.expect("stream ended early").unwrap();
            buf.extend_from_slice(&piece);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let frame: Value = serde_json::from_slice(&line).unwrap();
                assert_eq!(frame["type"], "log");
                let bytes = common::b64(&frame["data"]);
                assert_eq!(
                    frame["offset"].as_u64().unwrap(),
                    next_offset,
                    "offsets are contiguous"
                );
                next_offset += bytes.len() as u64;
                got.extend_from_slice(bytes.as_bytes());
                frames += 1;
            }
        }
    }
    // Resume from where we stopped and read to the end.
    let resp = d
        .http
        .get(format!("{url}&fromOffset={next_offset}"))
        .send()
        .await
        .unwrap();
    let body = resp.text().await.unwrap();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let frame: Value = serde_json::from_str(line).unwrap();
        assert_eq!(frame["type"], "log", "{line}");
        assert_eq!(frame["offset"].as_u64().unwrap(), next_offset);
        let bytes = common::b64(&frame["data"]);
        next_offset += bytes.len() as u64;
        got.extend_from_slice(bytes.as_bytes());
    }
    let expected: String = (1..=60).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(String::from_utf8(got).unwrap(), expected);
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn files_big_round_trip_concurrency_and_path_safety() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("files").await;
    let files = format!("/v2/sandboxes/{id}/files");

    // 100 MiB round trip, streamed; sbxd's RSS stays flat meanwhile.
    let data: Vec<u8> = (0..100 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let pid = d.child.as_ref().unwrap().id();
    let before = rss_kib(pid);
    let sampler = tokio::spawn(async move {
        let mut max = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            max = max.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        max
    });
    let started = Instant::now();
    let resp = d
        .http
        .put(d.url(&format!("{files}?path=/tmp/big.bin&mode=0600")))
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .unwrap();
    let up_secs = started.elapsed().as_secs_f64();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body["data"],
        json!({"path": "/tmp/big.bin", "bytesWritten": data.len()})
    );
    sampler.abort();
    let during = rss_kib(pid);
    println!(
        "100 MiB upload {:.0} MB/s; sbxd RSS before {before} KiB, after {during} KiB",
        104.857 / up_secs
    );
    assert!(
        during < before + 64 * 1024,
        "sbxd RSS grew from {before} to {during} KiB during a 100 MiB upload"
    );
    let (code, out, _) = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "sha256sum /tmp/big.bin; stat -c %a /tmp/big.bin",
            ],
        )
        .await;
    assert_eq!(code, 0);
    assert!(out.starts_with(&sha(&data)), "{out}");
    assert!(out.trim_end().ends_with("600"), "{out}");
    let download_big = || async {
        let resp = d
            .http
            .get(d.url(&format!("{files}?path=/tmp/big.bin")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp
    };
    let resp = download_big().await;
    assert_eq!(
        resp.headers()["content-length"],
        data.len().to_string().as_str()
    );
    assert_eq!(resp.headers()["x-sandbox-file-mode"], "0600");
    let back = resp.bytes().await.unwrap();
    assert_eq!(sha(&back), sha(&data));

    // A large download whose file shrinks while it is sent is cut short,
    // never padded or passed off as complete: the body ends before its
    // Content-Length. The client reads nothing until the file is truncated,
    // so back-pressure holds the sender a few MiB into the 100 MiB.
    let resp = download_big().await;
    let (code, _, _) = d
        .exec(&id, &["sh", "-c", "truncate -s 0 /tmp/big.bin"])
        .await;
    assert_eq!(code, 0);
    let cut = resp.bytes().await;
    assert!(
        cut.is_err(),
        "a download of a file truncated mid-way ended as if complete ({:?} bytes)",
        cut.map(|b| b.len())
    );

    // Over 100 MiB: 413 and no partial file or temp file left.
    let too_big = vec![7u8; 100 * 1024 * 1024 + 1];
    let resp = d
        .http
        .put(d.url(&format!("{files}?path=/tmp/huge.bin")))
        .body(too_big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    // The rest of the body was never read: the connection is closed, and
    // the client is told so (no broken pipe on its next request).
    assert_eq!(resp.headers()["connection"], "close");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "sandbox_file_too_large");
    for _ in 0..3 {
        let again = d
            .http
            .get(d.url(&format!("/v2/sandboxes/{id}")))
            .send()
            .await;
        assert_eq!(again.map(|r| r.status().as_u16()).ok(), Some(200));
    }
    let (_, ls, _) = d.exec(&id, &["ls", "-a", "/tmp"]).await;
    assert!(!ls.contains("huge"), "partial upload left behind: {ls}");

    // 20 processes and 5 uploads at once.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let d2 = d.http.clone();
        let url = d.url(&format!("/v2/sandboxes/{id}/processes"));
        tasks.push(tokio::spawn(async move {
            let r = d2
                .post(url)
                .header("content-type", "application/json")
                .body(json!({"command": ["sh", "-c", format!("echo p{i}")]}).to_string())
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }));
    }
    for i in 0..5 {
        let d2 = d.http.clone();
        let url = d.url(&format!("{files}?path=/tmp/up{i}.bin"));
        tasks.push(tokio::spawn(async move {
            let r = d2
                .put(url)
                .body(vec![i as u8; 3 * 1024 * 1024])
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }));
    }
    for t in tasks {
        let status = t.await.unwrap();
        assert!(
            status == 200 || status == 201,
            "concurrent call got {status}"
        );
    }
    let (_, sums, _) = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "for i in 0 1 2 3 4; do head -c 1 /tmp/up$i.bin | od -An -tu1; done",
            ],
        )
        .await;
    assert_eq!(
        sums.split_whitespace().collect::<Vec<_>>(),
        vec!["0", "1", "2", "3", "4"]
    );

    // Bad input.
    assert_error(
        &d.call("PUT", &format!("{files}?path=relative"), Some(json!("x")))
            .await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call(
            "PUT",
            &format!("{files}?path=/tmp/../etc/x"),
            Some(json!("x")),
        )
        .await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call("GET", &format!("{files}?path=/tmp"), None).await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call("GET", &format!("{files}?path=/dev/null"), None)
            .await,
        400,
        "invalid_field_format",
    );
    assert_error(
        &d.call("GET", &format!("{files}?path=/nope"), None).await,
        404,
        "sandbox_file_not_found",
    );
    // A file whose size reads as 0 is sent to its end (it was cut to 0 bytes); an empty
    // file is still an empty body.
    for (path, want) in [("/proc/meminfo", "MemTotal"), ("/tmp/empty", "")] {
        if path == "/tmp/empty" {
            d.exec(&id, &["touch", path]).await;
        }
        let resp = d
            .http
            .get(d.url(&format!("{files}?path={path}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let body = resp.text().await.unwrap();
        assert!(body.contains(want), "{path}: {body:?}");
        assert_eq!(body.is_empty(), want.is_empty(), "{path}: {body:?}");
    }
    assert_error(&d.call("GET", &files, None).await, 400, "missing_field");
    assert_error(
        &d.call(
            "PUT",
            &format!("{files}?path=/tmp/x&mode=0999"),
            Some(json!("x")),
        )
        .await,
        400,
        "invalid_field_format",
    );
    // Upload onto a directory is refused and the directory is untouched.
    assert_error(
        &d.call("PUT", &format!("{files}?path=/tmp"), Some(json!("x")))
            .await,
        400,
        "invalid_field_format",
    );
    // No body at all.
    let resp = d
        .http
        .put(d.url(&format!("{files}?path=/tmp/nobody")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    // Symlinks resolve inside the sandbox: they cannot reach the host.
    let host_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let host_secret = host_dir.path().join("secret");
    std::fs::write(&host_secret, "host-only").unwrap();
    let target = host_secret.display().to_string();
    d.exec(&id, &["ln", "-s", &target, "/tmp/link"]).await;
    assert_error(
        &d.call("GET", &format!("{files}?path=/tmp/link"), None)
            .await,
        404,
        "sandbox_file_not_found",
    );
    d.exec(
        &id,
        &[
            "ln",
            "-s",
            &host_dir.path().display().to_string(),
            "/tmp/dirlink",
        ],
    )
    .await;
    let resp = d
        .http
        .put(d.url(&format!("{files}?path=/tmp/dirlink/planted")))
        .body("x")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success() || resp.status().is_client_error());
    assert!(
        !host_dir.path().join("planted").exists(),
        "an upload through a symlink wrote on the host"
    );
    assert_eq!(std::fs::read_to_string(&host_secret).unwrap(), "host-only");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn v1_filesystem_calls() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("fs").await;
    let fs = format!("/v1/sandboxes/{id}/fs");
    let (status, _) = d
        .call("POST", &format!("{fs}/mkdir?path=/work/a/b"), None)
        .await;
    assert_eq!(status, 204);
    let resp = d
        .http
        .put(d.url(&format!("/v2/sandboxes/{id}/files?path=/work/a/b/f.txt")))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (_, stat) = d
        .call("GET", &format!("{fs}/stat?path=/work/a/b/f.txt"), None)
        .await;
    assert_eq!(stat["data"]["kind"], "file");
    assert_eq!(stat["data"]["size"], 5);
    assert_eq!(stat["data"]["mode"], "0644");
    let (_, list) = d
        .call("GET", &format!("{fs}/list?path=/work/a/b"), None)
        .await;
    assert_eq!(list["data"][0]["name"], "f.txt");
    let (status, _) = d
        .call(
            "POST",
            &format!("{fs}/rename"),
            Some(json!({"from": "/work/a/b/f.txt", "to": "/work/g.txt"})),
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(d.exec(&id, &["cat", "/work/g.txt"]).await.1, "hello");
    assert_error(
        &d.call("POST", &format!("{fs}/remove?path=/work"), None)
            .await,
        409,
        "invalid_request",
    );
    let (status, _) = d
        .call(
            "POST",
            &format!("{fs}/remove?path=/work&recursive=true"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_error(
        &d.call("GET", &format!("{fs}/stat?path=/work"), None).await,
        404,
        "sandbox_file_not_found",
    );
    assert_error(
        &d.call("POST", &format!("{fs}/remove?path=/"), None).await,
        400,
        "invalid_request",
    );
}
