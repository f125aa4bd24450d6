//! Tenants on real gVisor: a key of workspace A cannot see, list, touch or
//! guess B's resources on any route (404, never 403), names and secrets are
//! per tenant, environments separate, and a revoked key gets 401.
//!
//! The routes come from `docs/openapi.yaml`, which `openapi.rs` checks against
//! the router: a new route without a cross-tenant case here fails this test.

mod common;

use common::{assert_error, b64, Daemon, KillLeftovers};
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The configured (legacy) key: workspace `default`.
const LEGACY_KEY: &str = "signkey-prod-0123456789abcdef0123456789abcdef";

/// One caller: a key and an optional `x-inngest-env`.
struct Caller<'a> {
    d: &'a Daemon,
    auth: String,
    env: Option<&'a str>,
}

impl<'a> Caller<'a> {
    fn new(d: &'a Daemon, key: &str) -> Caller<'a> {
        Caller {
            d,
            auth: format!("Bearer {}", hashed_signing_key(key)),
            env: None,
        }
    }

    fn with_env(&self, env: &'a str) -> Caller<'a> {
        Caller {
            d: self.d,
            auth: self.auth.clone(),
            env: Some(env),
        }
    }

    async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        extra: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut headers = vec![("authorization", self.auth.as_str())];
        if let Some(env) = self.env {
            headers.push(("x-inngest-env", env));
        }
        headers.extend_from_slice(extra);
        self.d.call_with(method, path, body, &headers).await
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.raw(method, path, body.map(|b| b.to_string().into_bytes()), &[])
            .await
    }

    async fn create(&self, body: Value) -> String {
        let (status, created) = self.call("POST", "/v2/sandboxes", Some(body)).await;
        assert_eq!(status, 201, "{created}");
        created["data"]["id"].as_str().unwrap().to_string()
    }

    async fn sh(&self, id: &str, script: &str) -> (i64, String) {
        let (status, body) = self
            .call(
                "POST",
                &format!("/v2/sandboxes/{id}/exec"),
                Some(json!({"command": ["sh", "-c", script], "timeout": "30000ms"})),
            )
            .await;
        assert_eq!(status, 200, "exec {script}: {body}");
        (
            body["data"]["exitCode"].as_i64().unwrap(),
            b64(&body["data"]["stdout"]),
        )
    }
}

/// Every (METHOD, path template) in `docs/openapi.yaml`.
fn spec_routes() -> Vec<(String, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.yaml");
    let spec: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut routes = Vec::new();
    for (p, item) in spec["paths"].as_mapping().unwrap() {
        for (m, _) in item.as_mapping().unwrap() {
            let m = m.as_str().unwrap();
            if ["get", "post", "put", "delete", "patch"].contains(&m) {
                routes.push((m.to_uppercase(), p.as_str().unwrap().to_string()));
            }
        }
    }
    routes
}

/// A's resources, as B tries to reach them.
struct Fixture {
    sandbox: String,
    process: String,
    snapshot: String,
    /// A's Connect package name (version 1.0.0), build, connection and run.
    package: String,
    build: String,
    connection: String,
    run: String,
    /// A's image's digest (B imports its own `a-only:1` along the way).
    image: String,
}

/// A build context holding only a Dockerfile.
fn dockerfile_context(dockerfile: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(dockerfile.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "Dockerfile", dockerfile.as_bytes())
        .unwrap();
    b.into_inner().unwrap()
}

/// A gzip tarball of `examples/NAME` (files at the archive root).
fn example_tarball(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(out.path())
        .arg("--exclude=node_modules")
        .arg("-C")
        .arg(&dir)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar {name}");
    std::fs::read(out.path()).unwrap()
}

/// What B must get.
#[derive(Debug)]
enum Expect {
    /// 404 with this contract code.
    NotFound(&'static str),
    /// 200 and the body does not mention this marker (A's id or name).
    Lacks(String),
    /// This status (B acting on its own namespace; A's resources checked afterwards).
    Status(u16),
    /// A route that belongs to no tenant (the console's page, assets and
    /// session): any non-5xx answer, never mentioning this marker.
    NoLeak(String),
}

/// B's request against A's resources for one route, and what B must get.
/// Panics for a route without a case: add one when you add a route.
fn case(method: &str, template: &str, a: &Fixture) -> (String, Option<Vec<u8>>, Expect) {
    use Expect::*;
    let json = |v: Value| Some(v.to_string().into_bytes());
    let path = template
        .replace(
            "/v2/snapshots/{id}",
            &format!("/v2/snapshots/{}", a.snapshot),
        )
        .replace("{id}", &a.sandbox)
        .replace("{pid}", &a.process)
        .replace("{name}", "A_ONLY")
        // A's image is a-only:1 (image names are lowercase).
        .replace("{reference}", "a-only:1")
        .replace("{package}", &a.package)
        .replace("{version}", "1.0.0")
        .replace("{buildId}", &a.build)
        .replace("{connectionId}", &a.connection)
        .replace("{runId}", &a.run)
        .replace("{sync}", "items")
        // A's connection has no webhooks: a delivery id or token of A's cannot exist, and
        // B still gets the same 404 as for any unknown one.
        .replace("{deliveryId}", "dlv_a")
        .replace("{token}", "whk_a");
    let steal = json!({"name": "stolen", "snapshotId": a.snapshot});
    let sandbox_nf = NotFound("sandbox_not_found");
    match (method, template) {
        ("GET", "/healthz") => (path, None, Status(200)),
        // The node's metrics hold no tenant's ids; a tenant's key is not the metrics token.
        ("GET", "/metrics") => (path, None, Status(401)),
        ("GET", "/") | ("GET", "/console/session") | ("DELETE", "/console/session") => {
            (path, None, NoLeak(a.sandbox.clone()))
        }
        ("GET", "/console/assets/{file}") => (
            "/console/assets/app.js".into(),
            None,
            NoLeak(a.sandbox.clone()),
        ),
        ("POST", "/console/session") => (
            path,
            json(json!({"key": "not-a-key"})),
            NoLeak(a.sandbox.clone()),
        ),
        ("GET", "/v1/pool") => (path, None, Lacks(a.sandbox.clone())),
        // The node's offered shapes: the same for every tenant.
        ("GET", "/v1/shapes") => (path, None, Lacks(a.sandbox.clone())),
        // Nodes belong to the operator: any key lists them (never a tenant's
        // resources), only a key of the `default` workspace drains them.
        ("GET", "/v1/nodes") => (path, None, Lacks(a.sandbox.clone())),
        ("POST", "/v1/nodes/{id}/drain") | ("POST", "/v1/nodes/{id}/undrain") => {
            (path, None, Status(403))
        }
        ("POST", "/v2/sandboxes") | ("POST", "/v1/sandboxes") => {
            (path, json(steal), NotFound("sandbox_snapshot_not_found"))
        }
        ("GET", "/v2/sandboxes") => (path, None, Lacks(a.sandbox.clone())),
        ("GET", "/v2/snapshots") => (
            "/v2/snapshots?name=snap-a".into(),
            None,
            Lacks(a.snapshot.clone()),
        ),
        ("GET", "/v1/secrets") => (path, None, Lacks("A_ONLY".into())),
        // A's volume is called A_ONLY: B sees none; B's own of the same name
        // is created and deleted (after the reads); A's is checked afterwards.
        ("GET", "/v1/volumes") => (path, None, Lacks("A_ONLY".into())),
        ("GET", "/v1/volumes/{name}") => (path, None, NotFound("volume_not_found")),
        ("POST", "/v1/volumes") => (
            path,
            json(json!({"name": "A_ONLY", "sizeMb": 16})),
            Status(201),
        ),
        ("DELETE", "/v1/volumes/{name}") => (path, None, Status(204)),
        // Images: B sees none of A's, cannot read or delete A's a-only:1, and
        // imports and deletes its own of the same name; A's is checked afterwards.
        ("GET", "/v1/images") => (path, None, Lacks("a-only".into())),
        ("GET", "/v1/images/{reference}") => (path, None, NotFound("image_not_found")),
        ("POST", "/v1/images") => (
            "/v1/images?name=a-only&tag=1".into(),
            Some(common::oci::tiny_image("b")),
            Status(201),
        ),
        ("DELETE", "/v1/images/{reference}") => (path, None, Status(204)),
        // B builds FROM A's image by its digest: as unknown to B as any image.
        ("POST", "/v1/images/build") => (
            "/v1/images/build?name=stolen".into(),
            Some(dockerfile_context(&format!("FROM {}\n", a.image))),
            NotFound("image_not_found"),
        ),
        // By A's digest: B cannot name A's content, whatever B imported meanwhile.
        ("POST", "/v1/images/{reference}/tag") => (
            format!("/v1/images/{}/tag", a.image),
            json(json!({"name": "default"})),
            NotFound("image_not_found"),
        ),
        // Templates: A's is `a-only`; B sees none, cannot read, rebuild or
        // delete it, and cannot build one from A's image (by digest).
        ("GET", "/v1/templates") => (path, None, Lacks("a-only".into())),
        ("GET", "/v1/templates/{name}")
        | ("DELETE", "/v1/templates/{name}")
        | ("POST", "/v1/templates/{name}/rebuild") => (
            template.replace("{name}", "a-only"),
            None,
            NotFound("template_not_found"),
        ),
        ("POST", "/v1/templates") => (
            path,
            json(json!({"name": "b-steal", "image": a.image})),
            NotFound("image_not_found"),
        ),
        ("POST", "/v1/sandboxes/{id}/image") => {
            (path, json(json!({"name": "stolen"})), sandbox_nf)
        }
        // B writes and deletes its own secret of the same name; A's is checked afterwards.
        ("PUT", "/v1/secrets/{name}") => (path, json(json!({"value": "b-value"})), Status(200)),
        ("DELETE", "/v1/secrets/{name}") => (path, None, Status(204)),
        ("GET", "/v2/snapshots/{id}") | ("DELETE", "/v2/snapshots/{id}") => {
            (path, None, NotFound("sandbox_snapshot_not_found"))
        }
        ("POST", "/v2/sandboxes/{id}/exec") => (
            path,
            json(json!({"command": ["touch", "/tmp/pwned"], "timeout": "5000ms"})),
            sandbox_nf,
        ),
        ("POST", "/v2/sandboxes/{id}/processes") => (
            path,
            json(json!({"command": ["touch", "/tmp/pwned"]})),
            sandbox_nf,
        ),
        ("POST", "/v2/sandboxes/{id}/processes/{pid}/signals") => (
            path,
            json(json!({"signal": 9, "includeChildren": true})),
            sandbox_nf,
        ),
        ("POST", "/v2/sandboxes/{id}/processes/{pid}/wait") => {
            (format!("{path}?timeout=1000ms"), None, sandbox_nf)
        }
        ("POST", "/v2/sandboxes/{id}/snapshots") => {
            (path, json(json!({"name": "b-steal"})), sandbox_nf)
        }
        ("GET", "/v2/sandboxes/{id}/files") => (format!("{path}?path=/tmp/a.txt"), None, sandbox_nf),
        ("PUT", "/v2/sandboxes/{id}/files") => (
            format!("{path}?path=/tmp/a.txt"),
            Some(b"pwned".to_vec()),
            sandbox_nf,
        ),
        ("GET", "/v1/sandboxes/{id}/fs/stat") | ("GET", "/v1/sandboxes/{id}/fs/list") => {
            (format!("{path}?path=/tmp"), None, sandbox_nf)
        }
        ("POST", "/v1/sandboxes/{id}/fs/mkdir") => {
            (format!("{path}?path=/tmp/pwned-dir"), None, sandbox_nf)
        }
        ("POST", "/v1/sandboxes/{id}/fs/remove") => {
            (format!("{path}?path=/tmp/a.txt"), None, sandbox_nf)
        }
        ("PUT", "/v1/sandboxes/{id}/network") => {
            (path, json(json!({"mode": "public"})), sandbox_nf)
        }
        ("PUT", "/v1/sandboxes/{id}/preview") => {
            (path, json(json!({"public": true})), sandbox_nf)
        }
        ("POST", "/v1/sandboxes/{id}/fs/rename") => (
            path,
            json(json!({"from": "/tmp/a.txt", "to": "/tmp/b.txt"})),
            sandbox_nf,
        ),
        ("GET", "/v2/sandboxes/{id}")
        | ("DELETE", "/v2/sandboxes/{id}")
        | ("GET", "/v2/sandboxes/{id}/logs")
        | ("GET", "/v2/sandboxes/{id}/processes")
        | ("GET", "/v2/sandboxes/{id}/processes/{pid}")
        | ("GET", "/v2/sandboxes/{id}/processes/{pid}/output")
        | ("GET", "/v2/sandboxes/{id}/processes/{pid}/output/stream")
        | ("POST", "/v2/sandboxes/{id}/pause")
        | ("POST", "/v2/sandboxes/{id}/resume")
        | ("GET", "/v1/sandboxes/{id}")
        | ("GET", "/v1/sandboxes/{id}/metrics")
        | ("GET", "/v1/sandboxes/{id}/preview")
        | ("DELETE", "/v1/sandboxes/{id}/preview")
        // A WebSocket handshake (the runner sends the upgrade headers).
        | ("GET", "/v1/sandboxes/{id}/terminal") => (path, None, sandbox_nf),
        // Connect: B's namespace is its own; A's package, build, connection and run do not exist.
        ("GET", "/v1/connect/packages") => (path, None, Lacks(a.package.clone())),
        ("POST", "/v1/connect/packages") => (
            path,
            Some(example_tarball("connector-deps")),
            Status(201),
        ),
        ("GET", "/v1/connect/packages/{package}/versions")
        | ("GET", "/v1/connect/packages/{package}/versions/{version}")
        | ("DELETE", "/v1/connect/packages/{package}/versions/{version}")
        | ("GET", "/v1/connect/packages/{package}/versions/{version}/builds")
        | ("POST", "/v1/connect/packages/{package}/versions/{version}/builds") => {
            (path, None, NotFound("connect_package_not_found"))
        }
        ("GET", "/v1/connect/builds/{buildId}") => {
            (path, None, NotFound("connect_build_not_found"))
        }
        ("GET", "/v1/connect/connections") => (path, None, Lacks(a.connection.clone())),
        ("POST", "/v1/connect/connections") => (
            path,
            json(json!({
                "name": "stolen", "package": a.package, "version": "1.0.0",
                "origin": "https://api.example.com",
                "credentials": {"type": "apiKey", "key": "b-key-1234"},
            })),
            NotFound("connect_package_not_found"),
        ),
        ("PATCH", "/v1/connect/connections/{connectionId}") => (
            path,
            json(json!({"name": "stolen", "status": "disabled"})),
            NotFound("connect_connection_not_found"),
        ),
        ("POST", "/v1/connect/connections/{connectionId}/oauth/start") => (
            path,
            json(json!({"redirectUri": "https://b.example.com/cb"})),
            NotFound("connect_connection_not_found"),
        ),
        ("POST", "/v1/connect/oauth/callback") => (
            path,
            json(json!({"state": "A_STATE", "code": "c"})),
            NotFound("connect_oauth_state_not_found"),
        ),
        ("GET", "/v1/connect/connections/{connectionId}")
        | ("DELETE", "/v1/connect/connections/{connectionId}")
        | ("POST", "/v1/connect/connections/{connectionId}/test")
        | ("POST", "/v1/connect/connections/{connectionId}/syncs/{sync}/runs")
        | ("GET", "/v1/connect/connections/{connectionId}/runs")
        | ("GET", "/v1/connect/connections/{connectionId}/logs")
        | ("GET", "/v1/connect/connections/{connectionId}/syncs/{sync}/records")
        | ("GET", "/v1/connect/connections/{connectionId}/syncs/{sync}/checkpoint")
        | ("POST", "/v1/connect/connections/{connectionId}/webhooks")
        | ("GET", "/v1/connect/connections/{connectionId}/deliveries") => {
            (path, None, NotFound("connect_connection_not_found"))
        }
        ("GET", "/v1/connect/connections/{connectionId}/deliveries/{deliveryId}") => {
            (path, None, NotFound("connect_delivery_not_found"))
        }
        // Unauthenticated: the token is the credential, and B's key adds nothing.
        ("POST", "/v1/connect/webhooks/{token}") => {
            (path, None, NotFound("connect_webhook_not_found"))
        }
        ("GET", "/v1/connect/runs/{runId}") | ("GET", "/v1/connect/runs/{runId}/logs") => {
            (path, None, NotFound("connect_run_not_found"))
        }
        _ => panic!(
            "no cross-tenant case for {method} {template}: add one to crates/daemon/tests/tenants.rs"
        ),
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn no_route_lets_one_tenant_reach_another() {
    let d = Daemon::start(&["--signing-key", LEGACY_KEY]).await;
    let _leftovers = KillLeftovers::of(&d);
    let key_a = d.create_key("alpha", None);
    let key_b = d.create_key("beta", Some("production"));
    let a = Caller::new(&d, &key_a);
    let b = Caller::new(&d, &key_b);

    // A's resources: a secret, a sandbox using it, a file, a process, a snapshot, an idempotent exec.
    let (status, put) = a
        .call(
            "PUT",
            "/v1/secrets/A_ONLY",
            Some(json!({"value": "a-value"})),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    let sandbox = a
        .create(json!({"name": "shared", "vcpu": 1, "memoryMb": 1024, "secrets": ["A_ONLY"]}))
        .await;
    let (status, up) = a
        .raw(
            "PUT",
            &format!("/v2/sandboxes/{sandbox}/files?path=/tmp/a.txt"),
            Some(b"a-data".to_vec()),
            &[("content-type", "application/octet-stream")],
        )
        .await;
    assert_eq!(status, 200, "{up}");
    let (status, p) = a
        .call(
            "POST",
            &format!("/v2/sandboxes/{sandbox}/processes"),
            Some(json!({"command": ["sleep", "300"]})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let process = p["data"]["id"].as_str().unwrap().to_string();
    let (status, s) = a
        .call(
            "POST",
            &format!("/v2/sandboxes/{sandbox}/snapshots"),
            Some(json!({"name": "snap-a"})),
        )
        .await;
    assert!(status == 201 || status == 202, "{s}");
    let snapshot = s["data"]["id"].as_str().unwrap().to_string();
    for _ in 0..300 {
        let (_, s) = a
            .call("GET", &format!("/v2/snapshots/{snapshot}"), None)
            .await;
        if s["data"]["status"] == "READY" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, first) = a
        .raw(
            "POST",
            &format!("/v2/sandboxes/{sandbox}/exec"),
            Some(
                json!({"command": ["echo", "from-a"]})
                    .to_string()
                    .into_bytes(),
            ),
            &[("idempotency-key", "shared-key")],
        )
        .await;
    assert_eq!(status, 200, "{first}");
    // A's Connect resources: a built package, a connection and a run.
    let (status, up) = a
        .raw(
            "POST",
            "/v1/connect/packages",
            Some(example_tarball("connector-items")),
            &[("content-type", "application/gzip")],
        )
        .await;
    assert_eq!(status, 201, "{up}");
    let (status, started) = a
        .call(
            "POST",
            "/v1/connect/packages/connector-items/versions/1.0.0/builds",
            None,
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let build = started["data"]["id"].as_str().unwrap().to_string();
    for _ in 0..1200 {
        let (_, got) = a
            .call("GET", &format!("/v1/connect/builds/{build}"), None)
            .await;
        if got["data"]["status"] == "succeeded" || got["data"]["status"] == "failed" {
            assert_eq!(got["data"]["status"], "succeeded", "{got}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, c) = a
        .call(
            "POST",
            "/v1/connect/connections",
            Some(json!({
                "name": "a-conn", "package": "connector-items", "version": "1.0.0",
                "origin": "https://api.example.com",
                "credentials": {"type": "apiKey", "key": "a-key-1234"},
            })),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    let connection = c["data"]["id"].as_str().unwrap().to_string();
    let (status, r) = a
        .call(
            "POST",
            &format!("/v1/connect/connections/{connection}/syncs/items/runs"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{r}");
    let run = r["data"]["id"].as_str().unwrap().to_string();
    let (status, img) = a
        .raw(
            "POST",
            "/v1/images?name=a-only&tag=1",
            Some(common::oci::tiny_image("a")),
            &[("content-type", "application/x-tar")],
        )
        .await;
    assert_eq!(status, 201, "{img}");
    let a_image = img["data"]["digest"].as_str().unwrap().to_string();
    // A's template (of the default image: its snapshot is A's too).
    let (status, t) = a
        .call(
            "POST",
            "/v1/templates?wait=true",
            Some(json!({"name": "a-only", "startCommand": "echo a > /tmp/t"})),
        )
        .await;
    assert_eq!(
        (status, t["data"]["status"].as_str()),
        (200, Some("READY")),
        "{t}"
    );
    let a_template_snapshot = t["data"]["snapshotId"].as_str().unwrap().to_string();
    let fixture = Fixture {
        sandbox: sandbox.clone(),
        process: process.clone(),
        snapshot: snapshot.clone(),
        package: "connector-items".into(),
        build,
        connection: connection.clone(),
        run,
        image: a_image.clone(),
    };

    let (status, v) = a
        .call(
            "POST",
            "/v1/volumes",
            Some(json!({"name": "A_ONLY", "sizeMb": 16})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let a_volume = v["data"]["id"].as_str().unwrap().to_string();

    // Names are per tenant: B gets its own sandbox called "shared".
    let b_shared = b
        .create(json!({"name": "shared", "vcpu": 1, "memoryMb": 1024}))
        .await;
    assert_ne!(b_shared, sandbox);
    // A's secret does not exist for B.
    assert_error(
        &b.call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "b-secret", "vcpu": 1, "memoryMb": 1024, "secrets": ["A_ONLY"]})),
        )
        .await,
        400,
        "invalid_field_format",
    );

    // A's volume does not exist for B.
    assert_error(
        &b.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "b-vol", "vcpu": 1, "memoryMb": 1024,
                        "volumes": [{"name": "A_ONLY", "path": "/data"}]})),
        )
        .await,
        404,
        "volume_not_found",
    );

    // A's image does not exist for B, by name or by digest.
    for image in ["a-only:1", a_image.as_str()] {
        assert_error(
            &b.call(
                "POST",
                "/v1/sandboxes",
                Some(json!({"name": "b-img", "vcpu": 1, "memoryMb": 1024, "image": image})),
            )
            .await,
            404,
            "image_not_found",
        );
    }

    // A's template does not exist for B: not to create from, nor through its snapshot.
    assert_error(
        &b.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "b-tpl", "template": "a-only"})),
        )
        .await,
        404,
        "template_not_found",
    );
    assert_error(
        &b.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "b-tpl", "snapshotId": a_template_snapshot})),
        )
        .await,
        404,
        "sandbox_snapshot_not_found",
    );

    // Every route: reads first, so that B's own writes cannot mask a leak.
    let mut routes = spec_routes();
    assert!(
        routes.len() >= 30,
        "only {} routes in the spec",
        routes.len()
    );
    routes.sort_by_key(|(m, _)| m != "GET");
    for (method, template) in &routes {
        let (path, body, expect) = case(method, template, &fixture);
        let content_type = if method == "PUT" && template.ends_with("/files") {
            "application/octet-stream"
        } else if method == "POST" && template == "/v1/connect/packages" {
            "application/gzip"
        } else if method == "POST" && (template == "/v1/images" || template == "/v1/images/build") {
            "application/x-tar"
        } else {
            "application/json"
        };
        let mut headers = vec![
            ("content-type", content_type),
            ("idempotency-key", "shared-key"),
        ];
        if template.ends_with("/terminal") {
            headers.extend([
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-version", "13"),
            ]);
        }
        let got = b.raw(method, &path, body, &headers).await;
        let what = format!("B: {method} {path}");
        match &expect {
            Expect::NotFound(code) => {
                assert_eq!(got.0, 404, "{what}: {}", got.1);
                assert_eq!(got.1["errors"][0]["code"], *code, "{what}: {}", got.1);
            }
            Expect::Lacks(marker) => {
                assert_eq!(got.0, 200, "{what}: {}", got.1);
                assert!(
                    !got.1.to_string().contains(marker.as_str()),
                    "{what} leaks: {}",
                    got.1
                );
            }
            Expect::Status(s) => assert_eq!(got.0, *s, "{what}: {}", got.1),
            Expect::NoLeak(marker) => {
                assert!(got.0 < 500, "{what}: {}", got.1);
                assert!(
                    !got.1.to_string().contains(marker.as_str()),
                    "{what} leaks: {}",
                    got.1
                );
            }
        }
        assert_ne!(got.1, first, "{what} replayed A's idempotent exec");
    }

    // A's resources are unchanged.
    let (status, s) = a
        .call("GET", &format!("/v2/sandboxes/{sandbox}"), None)
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["data"]["status"], "RUNNING");
    let (_, p) = a
        .call(
            "GET",
            &format!("/v2/sandboxes/{sandbox}/processes/{process}"),
            None,
        )
        .await;
    assert_eq!(p["data"]["state"], "RUNNING", "{p}");
    let (code, out) = a
        .sh(
            &sandbox,
            "cat /tmp/a.txt; test -e /tmp/pwned || test -e /tmp/pwned-dir || test -e /tmp/b.txt; echo \" $?\"",
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "a-data 1\n"));
    let (_, snap) = a
        .call("GET", &format!("/v2/snapshots/{snapshot}"), None)
        .await;
    assert_eq!(snap["data"]["status"], "READY", "{snap}");
    let (_, list) = a.call("GET", "/v2/snapshots", None).await;
    assert!(!list.to_string().contains("b-steal"), "{list}");
    // A's connection is unchanged and A sees none of B's packages.
    let (status, c) = a
        .call(
            "GET",
            &format!("/v1/connect/connections/{connection}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(
        (c["data"]["name"].clone(), c["data"]["status"].clone()),
        (json!("a-conn"), json!("active"))
    );
    let (_, packages) = a.call("GET", "/v1/connect/packages", None).await;
    assert!(
        !packages.to_string().contains("connector-deps"),
        "{packages}"
    );
    let (_, secrets) = a.call("GET", "/v1/secrets", None).await;
    assert!(secrets.to_string().contains("A_ONLY"), "{secrets}");
    // A's volume survived B's create and delete of the same name.
    let (status, v) = a.call("GET", "/v1/volumes/A_ONLY", None).await;
    assert_eq!(
        (status, v["data"]["id"].as_str()),
        (200, Some(a_volume.as_str())),
        "{v}"
    );
    // A's image survived B's import and delete of the same name.
    let (status, img) = a.call("GET", "/v1/images/a-only:1", None).await;
    assert_eq!(
        (status, img["data"]["digest"].as_str()),
        (200, Some(a_image.as_str())),
        "{img}"
    );
    // A's template survived B's delete and rebuild of the name.
    let (status, t) = a.call("GET", "/v1/templates/a-only", None).await;
    assert_eq!(
        (status, t["data"]["snapshotId"].as_str()),
        (200, Some(a_template_snapshot.as_str())),
        "{t}"
    );
    // A's secret value survived B's put and delete of the same name.
    let check = a
        .create(json!({"name": "a-check", "vcpu": 1, "memoryMb": 1024, "secrets": ["A_ONLY"]}))
        .await;
    assert_eq!(a.sh(&check, "printf %s \"$A_ONLY\"").await.1, "a-value");
    // B's own sandbox of the same name is B's, and A's name still resolves to A's.
    let (_, b_list) = b.call("GET", "/v2/sandboxes", None).await;
    assert!(b_list.to_string().contains(&b_shared));

    // Environments: the same workspace's other environment sees nothing of production.
    let staging = a.with_env("staging");
    assert_error(
        &staging
            .call("GET", &format!("/v2/sandboxes/{sandbox}"), None)
            .await,
        404,
        "sandbox_not_found",
    );
    let (status, list) = staging.call("GET", "/v2/sandboxes", None).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains(&sandbox), "{list}");
    // A key bound to an environment refuses another one.
    assert_error(
        &b.with_env("staging")
            .call("GET", "/v2/sandboxes", None)
            .await,
        401,
        "invalid_api_key",
    );
    // The configured key is the default workspace: it sees neither tenant.
    let legacy = Caller::new(&d, LEGACY_KEY);
    assert_error(
        &legacy
            .call("GET", &format!("/v2/sandboxes/{sandbox}"), None)
            .await,
        404,
        "sandbox_not_found",
    );

    // Unknown, missing and revoked keys get 401.
    let unknown = Caller::new(&d, "signkey-prod-00112233");
    assert_error(
        &unknown.call("GET", "/v2/sandboxes", None).await,
        401,
        "invalid_api_key",
    );
    assert_error(
        &d.call("GET", "/v2/sandboxes", None).await,
        401,
        "authorization_header_missing",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbxd"))
        .args(["keys", "list", "--data-dir"])
        .arg(d.data_dir())
        .output()
        .unwrap();
    let listing = String::from_utf8(out.stdout).unwrap();
    assert!(!listing.contains(&key_b[12..]), "keys list shows a secret");
    let b_id = listing
        .lines()
        .find(|l| l.contains("\tbeta\t"))
        .and_then(|l| l.split('\t').next())
        .expect("beta's key in keys list")
        .to_string();
    let revoked = std::process::Command::new(env!("CARGO_BIN_EXE_sbxd"))
        .args(["keys", "revoke", &b_id, "--data-dir"])
        .arg(d.data_dir())
        .status()
        .unwrap();
    assert!(revoked.success());
    assert_error(
        &b.call("GET", "/v2/sandboxes", None).await,
        401,
        "invalid_api_key",
    );
    assert_eq!(a.call("GET", "/v2/sandboxes", None).await.0, 200);
}
