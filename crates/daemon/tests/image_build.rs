//! Dockerfile builds on real gVisor (issue 17): `POST /v1/images/build`.
//!
//! - a Dockerfile that `pip install`s a package from a package index (PyPI's
//!   wheel of six 1.17.0, fetched by tests/pypi/fetch.sh and served as a
//!   PEP 503 index by a test host in its own network namespace, which
//!   `--network-test-public-cidr` makes "public" for the build sandbox's
//!   default network policy), puts a package from the context on `sys.path`,
//!   COPYs context files (one left out by `.dockerignore`, some `--chown`ed),
//!   sets ENV/ARG/WORKDIR/USER: a sandbox of the image imports both packages,
//!   sees the files, the env, the cwd, and runs commands as the USER;
//! - the second build of the same Dockerfile and context is a cache hit:
//!   every step `cached`, no output (nothing ran), a small fraction of the
//!   first build's time; a changed build arg runs every step; a Dockerfile with one more step replays the others from their
//!   layers (the earlier RUN does not run again) and runs only the new one;
//! - a failing RUN fails the build with its exit code and output tail, no
//!   image and no build sandbox left;
//! - parse errors and unknown FROM images are ordinary 400/404 answers.

mod common;

use common::netns::{Names, Veth};
use common::{assert_error, Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

const NAMES: Names = Names {
    net: "10.217",
    ns: "sbxb-",
    host_if: "sbxbh",
    ns_if: "sbxbn",
};

/// A package index on a test host: tests/pypi (a `simple/six/` directory
/// holding PyPI's wheel, which http.server lists as the project page pip
/// reads) served on port 80 of a fresh network namespace.
fn package_index() -> Veth {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/pypi");
    assert!(
        root.join("simple/six").join(SIX_WHEEL).exists(),
        "{SIX_WHEEL} is not in {}/simple/six; run ./scripts/test (tests/pypi/fetch.sh)",
        root.display()
    );
    let mut host = Veth::create(&NAMES);
    let mut server = host.command("python3");
    server
        .args(["-m", "http.server", "80", "--bind", &host.ip, "--directory"])
        .arg(&root)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    host.spawn(&mut server);
    host.wait_port(80);
    host
}

const SIX_WHEEL: &str = "six-1.17.0-py2.py3-none-any.whl";

/// One boot-heavy case at a time on this 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A tar of `files` (path, content).
fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// Posts a build; answers the status and the NDJSON events (or the error body).
async fn build(d: &Daemon, query: &str, ctx: Vec<u8>) -> (u16, Vec<Value>) {
    let (status, body) = d
        .call_with(
            "POST",
            &format!("/v1/images/build?{query}"),
            Some(ctx),
            &[("content-type", "application/x-tar")],
        )
        .await;
    let events = match body {
        // One event only parses as JSON.
        Value::Object(_) if status == 200 => vec![body],
        Value::Object(_) => return (status, vec![body]),
        Value::String(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect(),
        other => panic!("unexpected body {other}"),
    };
    (status, events)
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// `{HOST}` is replaced by the package index's address.
const DOCKERFILE: &str = r#"# a small tools image
FROM default
ARG GREETING=hello
ENV APP_MODE=prod \
    GREETING=${GREETING}
WORKDIR /srv/app
COPY --chown=user:user app/ ./
COPY . /ctx/
COPY mypkg /opt/pkgs/mypkg
RUN pip install --no-cache-dir --index-url http://{HOST}/simple/ --trusted-host {HOST} six==1.17.0 && \
    echo /opt/pkgs > /usr/local/lib/python3.11/dist-packages/pkgs.pth && echo installed mypkg
USER user
LABEL purpose=test
CMD ["python3"]
"#;

fn tools_context(dockerfile: &str, greet: &str) -> Vec<u8> {
    context(&[
        ("Dockerfile", dockerfile),
        // The Dockerfile is left out of `COPY .`, so a changed Dockerfile
        // does not change that step.
        (".dockerignore", "secret.env\nDockerfile\n"),
        ("app/greet.txt", greet),
        ("keep.txt", "kept\n"),
        ("secret.env", "TOKEN=leak\n"),
        ("mypkg/__init__.py", "VALUE = 42\n"),
    ])
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_dockerfile_builds_an_image_and_a_second_build_is_a_cache_hit() {
    let _serial = SERIAL.lock().await;
    let index = package_index();
    let d = Daemon::start(&["--network-test-public-cidr", &index.cidr]).await;
    let _leftovers = KillLeftovers::of(&d);
    let dockerfile = DOCKERFILE.replace("{HOST}", &index.ip);

    let started = Instant::now();
    let (status, events) = build(
        &d,
        "name=tools&tag=1",
        tools_context(&dockerfile, "hi from the context\n"),
    )
    .await;
    let cold = started.elapsed();
    println!("cold build: {cold:?}");
    assert_eq!(status, 200, "{events:?}");
    let steps = of_type(&events, "step");
    assert_eq!(steps.len(), 11, "{events:#?}");
    assert!(steps.iter().all(|s| s["cached"] == false && s["of"] == 11));
    assert_eq!(steps[7]["line"], 10);
    assert!(steps[7]["instruction"]
        .as_str()
        .unwrap()
        .starts_with("RUN pip install"));
    let output: String = of_type(&events, "output")
        .iter()
        .map(|o| o["data"].as_str().unwrap().to_string())
        .collect();
    assert!(output.contains("installed mypkg"), "{events:#?}");
    assert!(
        output.contains("Successfully installed six-1.17.0"),
        "pip did not install six from the index: {events:#?}"
    );
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{events:#?}");
    let image = &result["image"];
    assert_eq!(image["name"], "tools");
    assert_eq!(image["origin"], "build");
    assert_eq!(image["config"]["user"], "user");
    assert_eq!(image["config"]["workdir"], "/srv/app");
    assert_eq!(image["config"]["labels"]["purpose"], "test");
    assert_eq!(image["config"]["cmd"], json!(["python3"]));
    let env = image["config"]["env"].as_array().unwrap();
    assert!(env.contains(&json!("APP_MODE=prod")), "{env:?}");
    assert!(env.contains(&json!("GREETING=hello")), "{env:?}");
    // The build sandbox is gone.
    d.assert_no_containers(Duration::from_secs(60), "the build sandbox stays")
        .await;

    // A sandbox of the image sees everything the Dockerfile did.
    let (status, got) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "user-of-tools", "image": "tools:1", "vcpu": 1, "memoryMb": 1024})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {got}");
    let id = got["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&id, "RUNNING", Duration::from_secs(120))
        .await;
    let (code, out, err) = d
        .sh(
            &id,
            "python3 -c 'import mypkg, six; print(mypkg.VALUE, six.__version__)'; cat greet.txt; pwd; id -un; \
             echo $APP_MODE $GREETING; stat -c %U greet.txt; cat /ctx/keep.txt; \
             test -e /ctx/secret.env && echo LEAKED; test -e /ctx/app/greet.txt && echo whole-context",
        )
        .await;
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(
        out,
        "42 1.17.0\nhi from the context\n/srv/app\nuser\nprod hello\nuser\nkept\nwhole-context\n",
        "{err}"
    );

    // Same Dockerfile, same context: served from the cache, nothing runs.
    let started = Instant::now();
    let (status, events) = build(
        &d,
        "name=tools&tag=2",
        tools_context(&dockerfile, "hi from the context\n"),
    )
    .await;
    let cached = started.elapsed();
    println!("cached build: {cached:?}");
    assert_eq!(status, 200);
    let steps = of_type(&events, "step");
    assert_eq!(steps.len(), 11);
    assert!(steps.iter().all(|s| s["cached"] == true), "{events:#?}");
    assert!(
        of_type(&events, "output").is_empty(),
        "a RUN ran: {events:#?}"
    );
    assert_eq!(events.last().unwrap()["image"]["digest"], image["digest"]);
    assert!(
        cached * 10 < cold,
        "cached {cached:?} is not a small fraction of {cold:?}"
    );
    assert!(
        d.runsc_containers().len() <= 1,
        "a build sandbox was booted"
    );

    // A changed build arg: every step runs (nothing before it has a layer).
    let (status, events) = build(
        &d,
        "name=tools&tag=3&buildArgs=%7B%22GREETING%22%3A%22bonjour%22%7D",
        tools_context(&dockerfile, "changed\n"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(of_type(&events, "step")
        .iter()
        .all(|s| s["cached"] == false));
    let env = events.last().unwrap()["image"]["config"]["env"].clone();
    assert!(
        env.as_array().unwrap().contains(&json!("GREETING=bonjour")),
        "{env}"
    );
    d.destroy_and_wait(&id).await;

    // Only a new last step: the prefix is replayed from its layers (the
    // RUN that printed "installed mypkg" does not run again).
    let longer = format!("{dockerfile}RUN echo tail-step > /home/user/tail.txt && echo ran-tail\n");
    let started = Instant::now();
    let (status, events) = build(
        &d,
        "name=tools&tag=4",
        tools_context(&longer, "hi from the context\n"),
    )
    .await;
    println!("prefix-cached build: {:?}", started.elapsed());
    assert_eq!(status, 200, "{events:#?}");
    let steps = of_type(&events, "step");
    assert_eq!(steps.len(), 12);
    // Up to the last replayed RUN (step 8); USER, LABEL and CMD after it
    // are metadata and run again, as does the new RUN.
    assert!(
        steps[..8].iter().all(|s| s["cached"] == true),
        "{events:#?}"
    );
    assert!(
        steps[8..].iter().all(|s| s["cached"] == false),
        "{events:#?}"
    );
    let output: String = of_type(&events, "output")
        .iter()
        .map(|o| o["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(output, "ran-tail\n", "{events:#?}");
    assert_eq!(events.last().unwrap()["type"], "result", "{events:#?}");
    let (status, got) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(
                json!({"name": "user-of-tools4", "image": "tools:4", "vcpu": 1, "memoryMb": 1024}),
            ),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {got}");
    let id = got["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&id, "RUNNING", Duration::from_secs(120))
        .await;
    let (code, out, err) = d
        .sh(
            &id,
            "python3 -c 'import mypkg, six; print(mypkg.VALUE, six.__version__)'; cat greet.txt /home/user/tail.txt; \
             stat -c %U greet.txt; test -e /.sbx-build-stamp && echo STAMP; true",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out, "42 1.17.0\nhi from the context\ntail-step\nuser\n",
        "{err}"
    );
    d.destroy_and_wait(&id).await;
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_failing_run_fails_the_build_and_leaves_nothing() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let ctx = context(&[(
        "Dockerfile",
        "FROM default\nRUN echo step one\nRUN sh -c 'echo boom; exit 3'\nRUN echo never\n",
    )]);
    let (status, events) = build(&d, "name=broken&tag=1", ctx).await;
    assert_eq!(status, 200);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{events:#?}");
    assert_eq!(last["code"], "build_failed");
    assert_eq!(last["exitCode"], 3);
    assert_eq!(last["line"], 3);
    assert!(
        last["outputTail"].as_str().unwrap().contains("boom"),
        "{last}"
    );
    assert!(
        last["message"].as_str().unwrap().contains("line 3"),
        "{last}"
    );
    assert_eq!(
        of_type(&events, "step").len(),
        3,
        "step 4 started: {events:#?}"
    );
    assert_error(
        &d.call("GET", "/v1/images/broken:1", None).await,
        404,
        "image_not_found",
    );
    d.assert_no_containers(Duration::from_secs(60), "the build sandbox stays")
        .await;
    let images = d.data_dir().join("images/sha256");
    let left: Vec<_> = std::fs::read_dir(&images)
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    // (`build-layers` holds the layer of the RUN that succeeded: cache, not an image.)
    assert!(
        left.iter().all(|n| n == "tmp" || n == "build-layers"),
        "image content left behind: {left:?}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn bad_dockerfiles_and_unknown_images_are_refused_before_any_work() {
    let _serial = SERIAL.lock().await;
    let d = Daemon::start(&[]).await;
    let _leftovers = KillLeftovers::of(&d);
    let ctx = |text: &str| context(&[("Dockerfile", text)]);
    let (status, body) = build(&d, "name=x", ctx("FROM default\n\nFROBNICATE it\n")).await;
    assert_eq!(status, 400, "{body:?}");
    let msg = body[0]["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("line 3: unknown instruction FROBNICATE"),
        "{msg}"
    );
    let (status, body) = build(&d, "name=x", ctx("FROM nope:1\nRUN true\n")).await;
    assert_eq!(status, 404, "{body:?}");
    assert_eq!(body[0]["errors"][0]["code"], "image_not_found");
    let (status, body) = build(&d, "name=x", ctx("FROM default\nCOPY missing.txt /x\n")).await;
    assert_eq!(status, 400, "{body:?}");
    let msg = body[0]["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("line 2: COPY missing.txt"), "{msg}");
    let (status, _) = build(&d, "name=x&dockerfile=other", ctx("FROM default\n")).await;
    assert_eq!(status, 400);
    assert!(d.runsc_containers().is_empty());
}
