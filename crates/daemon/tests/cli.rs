//! The `sbx` CLI against a real sbxd.

mod common;

use common::Daemon;
use std::path::PathBuf;
use std::process::{Command, Output};

fn sbx_binary() -> PathBuf {
    // `SBX_TEST_SBX`: a copy of this tree's sbx, for a target dir that several
    // worktrees share (as `SBX_TEST_SBXD`).
    if let Some(path) = std::env::var_os("SBX_TEST_SBX") {
        return PathBuf::from(path);
    }
    // Built by `cargo test --workspace` next to sbxd.
    let sbxd = PathBuf::from(env!("CARGO_BIN_EXE_sbxd"));
    let path = sbxd.with_file_name("sbx");
    assert!(
        path.exists(),
        "{} missing: run the tests with --workspace (./scripts/test)",
        path.display()
    );
    path
}

fn sbx(d: &Daemon, args: &[&str]) -> Output {
    let out = Command::new(sbx_binary())
        .arg("--url")
        .arg(&d.base)
        .args(args)
        .output()
        .expect("run sbx");
    println!(
        "sbx {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_create_exec_files_destroy() {
    let d = Daemon::start(&[]).await;
    let out = sbx(&d, &["create", "--name", "cli-box", "-e", "GREETING=hi"]);
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 36, "create prints the id");

    // exec prints output and exits with the command's code; names work as ids.
    let out = sbx(
        &d,
        &[
            "exec",
            "cli-box",
            "--",
            "sh",
            "-c",
            "echo $GREETING; echo oops >&2; exit 5",
        ],
    );
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");

    let list = sbx(&d, &["list"]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("cli-box"));
    let get = sbx(&d, &["get", &id]);
    assert!(String::from_utf8_lossy(&get.stdout).contains("RUNNING"));

    // The egress policy of the running sandbox, changed and shown.
    let net = sbx(
        &d,
        &["network", "cli-box", "--allow", "host=api.example.com:443"],
    );
    assert!(net.status.success());
    let shown: serde_json::Value = serde_json::from_slice(&net.stdout).expect("network JSON");
    assert_eq!(shown["policy"]["mode"], "allowlist", "{shown}");
    assert_eq!(
        shown["policy"]["allow"][0]["host"], "api.example.com",
        "{shown}"
    );
    let bare = sbx(&d, &["network", "cli-box"]);
    assert_eq!(bare.status.code(), Some(1));
    let get = sbx(&d, &["get", &id]);
    assert!(String::from_utf8_lossy(&get.stdout).contains("api.example.com"));

    // cp both ways, ls, mv, rm.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("in.txt");
    std::fs::write(&local, "file body").unwrap();
    assert!(sbx(
        &d,
        &["cp", local.to_str().unwrap(), &format!("{id}:/tmp/in.txt")]
    )
    .status
    .success());
    let back = dir.path().join("back.txt");
    assert!(sbx(
        &d,
        &["cp", &format!("{id}:/tmp/in.txt"), back.to_str().unwrap()]
    )
    .status
    .success());
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "file body");
    let ls = sbx(&d, &["ls", &format!("{id}:/tmp")]);
    assert!(String::from_utf8_lossy(&ls.stdout).contains("in.txt"));
    assert!(
        sbx(&d, &["mv", &format!("{id}:/tmp/in.txt"), "/tmp/moved.txt"])
            .status
            .success()
    );
    assert!(sbx(&d, &["rm", &format!("{id}:/tmp/moved.txt")])
        .status
        .success());
    let gone = sbx(
        &d,
        &[
            "cp",
            &format!("{id}:/tmp/moved.txt"),
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("sandbox_file_not_found"));

    // Errors carry the code and request id.
    let bad = sbx(
        &d,
        &["create", "--name", "x", "--vcpu", "3", "--memory", "3072"],
    );
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("invalid_field_format") && err.contains("request"),
        "{err}"
    );

    assert!(sbx(&d, &["destroy", &id]).status.success());
    d.wait_status(&id, "TERMINATED", std::time::Duration::from_secs(30))
        .await;
    let after = sbx(&d, &["exec", &id, "--", "true"]);
    assert_eq!(after.status.code(), Some(1));
}

/// `sbx top --once` (and `sbx top` on a pipe) prints one table, the busiest sandbox first.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_top_once_lists_the_busy_sandbox_first() {
    let d = Daemon::start(&["--usage-sample-secs", "1"]).await;
    for name in ["top-idle", "top-busy"] {
        assert!(sbx(&d, &["create", "--name", name]).status.success());
    }
    let start = sbx(&d, &["start", "top-busy", "--shell", "while :; do :; done"]);
    assert!(start.status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = sbx(&d, &["top", "--once"]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("ID") && lines[0].contains("CPU%"),
            "{text}"
        );
        assert_eq!(lines.len(), 3, "a header and both sandboxes: {text}");
        let first: Vec<&str> = lines[1].split_whitespace().collect();
        let busy_cpu: f64 = first.get(3).and_then(|c| c.parse().ok()).unwrap_or(0.0);
        if first.get(1) == Some(&"top-busy") && busy_cpu > 50.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "top never showed top-busy first: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    // Not a terminal: plain `sbx top` prints one table and exits too.
    let piped = sbx(&d, &["top"]);
    assert!(piped.status.success());
    assert!(String::from_utf8_lossy(&piped.stdout).contains("top-idle"));
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_preview_and_port_print_a_url_that_reaches_the_guest_server() {
    let d = Daemon::start(&["--e2b-domain", "sbx.test"]).await;
    let out = sbx(&d, &["create", "--name", "web", "--preview", "token"]);
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = sbx(
        &d,
        &[
            "start",
            "web",
            "--",
            "python3",
            "-m",
            "http.server",
            "8000",
            "-d",
            "/etc",
        ],
    );
    assert!(out.status.success());

    // `sbx port`: the URL on stdout, the token header on stderr.
    let out = sbx(&d, &["port", "web", "8000"]);
    assert!(out.status.success());
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(url, format!("http://8000-{id}.sbx.test/"));
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let token = stderr
        .strip_prefix("e2b-traffic-access-token: ")
        .unwrap_or_else(|| panic!("the token header on stderr: {stderr}"))
        .to_string();
    assert_eq!(token.len(), 64);

    // That URL (its host, to this sbxd) with the token reaches the server.
    let host = format!("8000-{id}.sbx.test");
    let fetch = |token: Option<String>| {
        let mut req = d.http.get(d.url("/hostname")).header("host", &host);
        if let Some(t) = token {
            req = req.header("e2b-traffic-access-token", t);
        }
        req.send()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = fetch(Some(token.clone())).await.unwrap().status().as_u16();
        if status == 200 {
            break;
        }
        assert_eq!(
            status, 502,
            "only 'nothing listens yet' while the server starts"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the server never answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(fetch(None).await.unwrap().status().as_u16(), 401);

    // `sbx preview --public`, then `--off`: `sbx port` then says how to turn them on.
    let out = sbx(&d, &["preview", "web", "--public"]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("preview JSON");
    assert_eq!(
        (shown["enabled"].clone(), shown["public"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(fetch(None).await.unwrap().status().as_u16(), 200);
    let out = sbx(&d, &["preview", "web", "--off"]);
    assert!(out.status.success());
    assert_eq!(fetch(None).await.unwrap().status().as_u16(), 404);
    let out = sbx(&d, &["port", "web", "8000"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sbx preview"));
    assert!(sbx(&d, &["destroy", "web"]).status.success());
}

/// `sbx shapes` lists what this sbxd offers (`--shapes`); `sbx create --shape`
/// asks for one; a shape sbxd leaves out is refused by it, naming the offered
/// ones, and a shape off the grid by the CLI before any request.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_shapes_lists_and_creates_the_offered_shapes() {
    let d = Daemon::start(&["--shapes", "1x1024,2x4096"]).await;
    let out = sbx(&d, &["shapes"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let shapes: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(shapes, ["1x1024", "2x4096"], "{text}");

    let out = sbx(&d, &["create", "--name", "wide", "--shape", "2x4096"]);
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (_, body) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
    assert_eq!(
        body["data"]["resources"],
        serde_json::json!({"vcpu": 2, "memoryMb": 4096})
    );

    let out = sbx(&d, &["create", "--name", "seed", "--shape", "2x2048"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid_field_format") && err.contains("use 1/1024 or 2/4096"),
        "{err}"
    );
    let out = sbx(&d, &["create", "--name", "odd", "--shape", "3x3072"]);
    assert_eq!(out.status.code(), Some(2), "refused by the CLI's parser");
    assert!(String::from_utf8_lossy(&out.stderr).contains("4/16384"));
    d.destroy_all(std::time::Duration::from_secs(60)).await;
}

/// `sbx top` live on a terminal: scripts/top-capture runs it in tmux with
/// three busy sandboxes of three shapes and captures the screen once each
/// shows its load (the capture shown in docs/operations.md).
#[tokio::test]
#[ignore = "needs root, runsc, the image and tmux; run ./scripts/test"]
async fn cli_top_under_tmux_shows_three_busy_sandboxes() {
    let d = Daemon::start(&["--usage-sample-secs", "1"]).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/top-capture");
    let dir = tempfile::tempdir().unwrap();
    let screen = dir.path().join("top.txt");
    let d2 = d.base.clone();
    let (bin, path) = (sbx_binary(), screen.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(script)
            .arg(&path)
            .env("SBX_URL", d2)
            .env("SBX_BIN", bin)
            .output()
            .expect("run scripts/top-capture")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "top-capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&screen).unwrap();
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("CPU%"),
        "{text}"
    );
    assert_eq!(lines.len(), 4, "the header and three sandboxes: {text}");
    // Every sandbox with a sample, sorted by CPU, highest first.
    let cpu: Vec<f64> = lines[1..]
        .iter()
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols[3].parse().unwrap_or_else(|_| panic!("CPU% of {l}"))
        })
        .collect();
    assert!(cpu.windows(2).all(|w| w[0] >= w[1]), "{text}");
    for name in ["build-", "train-", "serve-"] {
        assert!(lines.iter().any(|l| l.contains(name)), "{name}: {text}");
    }
    // The script destroyed its sandboxes.
    let (_, list) = d.call("GET", "/v2/sandboxes", None).await;
    for s in list["data"].as_array().unwrap() {
        assert_eq!(s["status"], "TERMINATED", "{s}");
    }
}

/// `sbx image import/ls/get/from/rm` and `sbx create --image`: an imported
/// image boots, a sandbox becomes an image, and removal is refused while used.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_images_import_list_create_from_and_remove() {
    let d = Daemon::start(&[]).await;
    let archive = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(archive.path(), common::oci::tiny_image("from-cli")).unwrap();
    let path = archive.path().to_str().unwrap();
    let out = sbx(&d, &["image", "import", path, "-t", "cli-img:1"]);
    assert!(out.status.success());
    let img: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (img["name"].as_str(), img["tag"].as_str()),
        (Some("cli-img"), Some("1"))
    );
    let out = sbx(&d, &["image", "ls"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let names: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["default:latest", "cli-img:1"], "{text}");
    let out = sbx(&d, &["image", "get", "cli-img:1"]);
    assert!(out.status.success());

    // A sandbox of the default image becomes an image; one booted from it sees the file.
    let out = sbx(&d, &["create", "--name", "src"]);
    assert!(out.status.success());
    let out = sbx(
        &d,
        &["exec", "src", "--", "sh", "-c", "echo cli > /opt/cli-made"],
    );
    assert!(out.status.success());
    let out = sbx(&d, &["image", "from", "src", "-t", "made"]);
    assert!(out.status.success());
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (made["tag"].as_str(), made["origin"].as_str()),
        (Some("latest"), Some("sandbox"))
    );
    let out = sbx(&d, &["create", "--name", "from-made", "--image", "made"]);
    assert!(out.status.success());
    let out = sbx(&d, &["exec", "from-made", "--", "cat", "/opt/cli-made"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cli\n");

    // In use: refused, with the server's code; after the sandbox ends: removed.
    let out = sbx(&d, &["image", "rm", "made"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_request"));
    d.destroy_all(std::time::Duration::from_secs(60)).await;
    let out = sbx(&d, &["image", "rm", "made"]);
    assert!(out.status.success());
    let out = sbx(&d, &["image", "rm", "cli-img:1"]);
    assert!(out.status.success());
    let out = sbx(&d, &["image", "get", "cli-img:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("image_not_found"));
}

/// `sbx template create/ls/get/rebuild/rm` and `sbx create --template`: a
/// template's start command has run in its clones; a failed build exits 1.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_templates_create_list_clone_and_remove() {
    let d = Daemon::start(&[]).await;
    let _leftovers = common::KillLeftovers::of(&d);
    let out = sbx(
        &d,
        &[
            "template",
            "create",
            "cli-tpl",
            "--start-cmd",
            "echo started > /root/mark",
            "--ready-cmd",
            "test -s /root/mark",
            "--wait",
        ],
    );
    assert!(out.status.success());
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["status"], "READY", "{t}");
    let out = sbx(&d, &["template", "ls"]);
    let ls = String::from_utf8_lossy(&out.stdout);
    assert!(ls.contains("cli-tpl") && ls.contains("READY"), "{ls}");
    let out = sbx(
        &d,
        &["create", "--name", "from-tpl", "--template", "cli-tpl"],
    );
    assert!(out.status.success());
    let out = sbx(&d, &["exec", "from-tpl", "--", "cat", "/root/mark"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
    let out = sbx(&d, &["template", "rebuild", "cli-tpl", "--wait"]);
    assert!(out.status.success());
    let out = sbx(&d, &["template", "get", "cli-tpl"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["status"], "READY", "{got}");
    assert_ne!(got["snapshotId"], t["snapshotId"], "{got}");

    let out = sbx(
        &d,
        &[
            "template",
            "create",
            "cli-bad",
            "--start-cmd",
            "exit 7",
            // A check that never passes: the build waits, so it sees the
            // exit (without a check it is ready as soon as it started).
            "--ready-cmd",
            "test -e /never-there",
            "--wait",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("exited with code 7"));
    let out = sbx(
        &d,
        &["create", "--name", "from-bad", "--template", "cli-bad"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("template_not_ready"));

    for name in ["cli-tpl", "cli-bad"] {
        assert!(sbx(&d, &["template", "rm", name]).status.success());
    }
    let out = sbx(&d, &["template", "get", "cli-tpl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("template_not_found"));
    d.destroy_all(std::time::Duration::from_secs(60)).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn cli_image_build_prints_the_log_and_exits_non_zero_on_failure() {
    let d = Daemon::start(&[]).await;
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("f.txt"), "from the context\n").unwrap();
    // A Dockerfile outside the context directory (`-f`).
    let outside = tempfile::tempdir().unwrap();
    let good = outside.path().join("Good.Dockerfile");
    std::fs::write(
        &good,
        "FROM default\nARG WORD=x\nCOPY f.txt /f.txt\nRUN echo word=$WORD && cat /f.txt\n",
    )
    .unwrap();
    let ctx_arg = ctx.path().to_str().unwrap();
    let out = sbx(
        &d,
        &[
            "image",
            "build",
            "-f",
            good.to_str().unwrap(),
            ctx_arg,
            "-t",
            "clibuilt:1",
            "--build-arg",
            "WORD=hello",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("Step 3/4 : COPY f.txt /f.txt"), "{stdout}");
    assert!(
        stdout.contains("word=hello\nfrom the context\n"),
        "{stdout}"
    );
    assert!(stdout.contains("Built clibuilt:1 sha256:"), "{stdout}");
    // Again: every step from the cache.
    let out = sbx(
        &d,
        &[
            "image",
            "build",
            "-f",
            good.to_str().unwrap(),
            ctx_arg,
            "-t",
            "clibuilt:2",
            "--build-arg",
            "WORD=hello",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout.matches("(cached)").count(), 4, "{stdout}");

    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM default\nRUN echo boom; exit 3\n",
    )
    .unwrap();
    let out = sbx(&d, &["image", "build", ctx_arg, "-t", "clifail:1"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        stderr.contains("build_failed") && stderr.contains("boom"),
        "{stderr}"
    );
    let out = sbx(&d, &["image", "build", ctx_arg, "-t", "Bad:Name"]);
    assert_ne!(out.status.code(), Some(0));
}
