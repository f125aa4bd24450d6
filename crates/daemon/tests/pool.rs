//! Warm pool on real gVisor: assignment, environment/secrets/network of pooled
//! sandboxes, refill, no double assignment, restart, cold fallback, latency.

mod common;

use common::{Daemon, KillLeftovers};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Polls `GET /v1/pool` until the shape has `ready` members and none booting.
async fn wait_pool(d: &Daemon, shape: &str, ready: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = d.call("GET", "/v1/pool", None).await;
        assert_eq!(status, 200, "{body}");
        let s = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["shape"] == shape)
            .unwrap_or_else(|| panic!("no pool for {shape}: {body}"))
            .clone();
        assert!(
            s["ready"].as_u64().unwrap() + s["starting"].as_u64().unwrap()
                <= s["target"].as_u64().unwrap(),
            "pool over its size: {s}"
        );
        if s["ready"] == ready && s["starting"] == 0 {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "pool never reached {ready} ready: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn containers(d: &Daemon) -> BTreeSet<String> {
    d.runsc_containers().into_iter().collect()
}

async fn create(d: &Daemon, path: &str, body: Value) -> (u16, Value) {
    d.call("POST", path, Some(body)).await
}

async fn running_ids(d: &Daemon) -> BTreeSet<String> {
    d.list_all()
        .await
        .iter()
        .filter(|s| s["status"] == "RUNNING")
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

fn cid(id: &str) -> String {
    format!("sbx-{id}")
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn warm_pool_assigns_refills_survives_restart_and_falls_back_cold() {
    let mut d = Daemon::start(&["--warm-pool", "1x1024=2"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, health) = d.call("GET", "/healthz", None).await;
    assert_eq!((status, health), (200, json!("ok")));
    let st = wait_pool(&d, "1x1024", 2).await;
    assert_eq!(st["target"], 2);
    assert_eq!(
        (st["vcpu"].clone(), st["memoryMb"].clone()),
        (json!(1), json!(1024))
    );

    // Environment and a secret reach a pooled sandbox; default policy (public) brings the proxy env.
    let (status, body) = d
        .call(
            "PUT",
            "/v1/secrets/POOL_SECRET",
            Some(json!({"value": "s3cret"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let before = containers(&d);
    assert_eq!(before.len(), 2, "{before:?}");
    let assigned_at = std::time::Instant::now();
    let (status, body) = create(
        &d,
        "/v2/sandboxes",
        json!({"name": "warm-1", "vcpu": 1, "memoryMb": 1024,
               "environment": {"GREETING": "hi"}, "secrets": ["POOL_SECRET"]}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING");
    let id1 = body["data"]["id"].as_str().unwrap().to_string();
    assert!(before.contains(&cid(&id1)), "{id1} was not a pool member");
    // The pooled agent ran nothing before assignment.
    let (status, procs) = d
        .call("GET", &format!("/v2/sandboxes/{id1}/processes"), None)
        .await;
    assert_eq!(status, 200, "{procs}");
    assert_eq!(procs["data"], json!([]), "{procs}");
    let (code, out, _) = d
        .exec(
            &id1,
            &[
                "sh",
                "-c",
                "echo \"$GREETING $POOL_SECRET ${HTTP_PROXY:-noproxy}\"",
            ],
        )
        .await;
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "hi s3cret http://127.0.0.1:3128");
    let (status, detail) = d.call("GET", &format!("/v1/sandboxes/{id1}"), None).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["data"]["network"]["policy"]["mode"], "public");
    // The network service is up: the proxy hands a private destination to sbxd, which refuses it.
    let _ = d
        .exec(
            &id1,
            &[
                "sh",
                "-c",
                "curl -s -m 5 -o /dev/null http://10.255.255.1/; true",
            ],
        )
        .await;
    let (_, detail) = d.call("GET", &format!("/v1/sandboxes/{id1}"), None).await;
    let denied = detail["data"]["network"]["denied"].as_u64().unwrap();
    assert!(denied >= 1, "the broker saw no connection: {detail}");
    // Active runtime counts from assignment, not from the member's boot.
    // The server starts the clock after `assigned_at` and reads it before
    // `since_create` is taken; counting the member's boot (≥ 300 ms) breaks this.
    let active = detail["data"]["activeRuntimeMs"].as_u64().unwrap();
    let since_create = assigned_at.elapsed().as_millis() as u64;
    assert!(
        active <= since_create + 50,
        "active runtime {active} ms counts pool time ({since_create} ms since the create)"
    );

    // Refill, then a `none` policy sandbox from the pool: a different member, no proxy env.
    wait_pool(&d, "1x1024", 2).await;
    let before = containers(&d);
    let (status, body) = create(
        &d,
        "/v1/sandboxes",
        json!({"name": "warm-none", "vcpu": 1, "memoryMb": 1024, "network": {"mode": "none"}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING");
    let id2 = body["data"]["id"].as_str().unwrap().to_string();
    assert_ne!(id1, id2);
    assert!(before.contains(&cid(&id2)), "{id2} was not a pool member");
    let (_, out, _) = d
        .exec(
            &id2,
            &[
                "sh",
                "-c",
                "echo ${HTTP_PROXY:-noproxy} ${ALL_PROXY:-noproxy}",
            ],
        )
        .await;
    assert_eq!(out.trim(), "noproxy noproxy");
    let (_, detail) = d.call("GET", &format!("/v1/sandboxes/{id2}"), None).await;
    assert_eq!(detail["data"]["network"]["policy"]["mode"], "none");

    // Two concurrent creates never get the same member.
    wait_pool(&d, "1x1024", 2).await;
    let before = containers(&d);
    let (a, b) = tokio::join!(
        create(
            &d,
            "/v2/sandboxes",
            json!({"name": "conc-a", "vcpu": 1, "memoryMb": 1024})
        ),
        create(
            &d,
            "/v2/sandboxes",
            json!({"name": "conc-b", "vcpu": 1, "memoryMb": 1024})
        ),
    );
    assert_eq!(a.0, 201, "{}", a.1);
    assert_eq!(b.0, 201, "{}", b.1);
    let ida = a.1["data"]["id"].as_str().unwrap().to_string();
    let idb = b.1["data"]["id"].as_str().unwrap().to_string();
    assert_ne!(ida, idb);
    assert!(before.contains(&cid(&ida)) && before.contains(&cid(&idb)));
    for id in [&ida, &idb] {
        let (code, _, _) = d.exec(id, &["true"]).await;
        assert_eq!(code, 0);
    }

    // Same name and config: the same sandbox, and the pool is not consumed for good.
    let (status, again) = create(
        &d,
        "/v2/sandboxes",
        json!({"name": "conc-a", "vcpu": 1, "memoryMb": 1024}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"]["id"], ida.as_str());

    // A shape without a pool boots cold.
    let before = containers(&d);
    let (status, body) = create(
        &d,
        "/v2/sandboxes",
        json!({"name": "cold-1", "vcpu": 2, "memoryMb": 2048}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["status"], "RUNNING");
    let cold = body["data"]["id"].as_str().unwrap().to_string();
    assert!(!before.contains(&cid(&cold)));
    let (code, _, _) = d.exec(&cold, &["true"]).await;
    assert_eq!(code, 0);

    // A pooled sandbox is destroyed like any other.
    let (status, _) = d
        .call("DELETE", &format!("/v2/sandboxes/{id1}"), None)
        .await;
    assert!(status == 204 || status == 202);
    d.wait_status(&id1, "TERMINATED", Duration::from_secs(30))
        .await;

    // Every id is distinct.
    let all: Vec<_> = [&id1, &id2, &ida, &idb, &cold].into_iter().collect();
    let distinct: BTreeSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len());

    // kill -9 and restart: assigned sandboxes stay RUNNING; unassigned members are replaced.
    wait_pool(&d, "1x1024", 2).await;
    let running = running_ids(&d).await;
    assert_eq!(running.len(), 4, "{running:?}");
    let on_host = containers(&d);
    let members: BTreeSet<String> = on_host
        .iter()
        .filter(|c| !running.iter().any(|id| &cid(id) == *c))
        .cloned()
        .collect();
    assert_eq!(members.len(), 2, "host {on_host:?} running {running:?}");
    d.kill9();
    d.spawn().await;
    for id in &running {
        assert_eq!(
            d.assert_truthful(id, Duration::from_secs(30)).await,
            "RUNNING"
        );
    }
    wait_pool(&d, "1x1024", 2).await;
    let after = containers(&d);
    let want_running: BTreeSet<String> = running.iter().map(|id| cid(id)).collect();
    assert!(want_running.is_subset(&after), "{after:?}");
    let new_members: BTreeSet<String> = after.difference(&want_running).cloned().collect();
    assert_eq!(new_members.len(), 2, "leaked containers: {after:?}");
    assert!(
        new_members.is_disjoint(&members),
        "old pool members survived the restart: {new_members:?}"
    );
    assert_eq!(running_ids(&d).await, running);

    // After destroying everything only the pool is left.
    d.destroy_all(Duration::from_secs(60)).await;
    wait_pool(&d, "1x1024", 2).await;
    assert_eq!(containers(&d), new_members);
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn timed_creates(d: &Daemon, prefix: &str, n: usize, pooled: bool) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..n {
        if pooled {
            wait_pool(d, "1x1024", 2).await;
        }
        let t = Instant::now();
        let (status, body) = create(
            d,
            "/v2/sandboxes",
            json!({"name": format!("{prefix}-{i}"), "vcpu": 1, "memoryMb": 1024,
                   "environment": {"A": "1"}}),
        )
        .await;
        let took = t.elapsed();
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["data"]["status"], "RUNNING");
        times.push(took);
        let id = body["data"]["id"].as_str().unwrap();
        let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 204 || status == 202);
        d.wait_status(id, "TERMINATED", Duration::from_secs(30))
            .await;
    }
    times
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn warm_create_is_faster_than_cold() {
    const N: usize = 10;
    let warm = {
        let d = Daemon::start(&["--warm-pool", "1x1024=2"]).await;
        let _leftovers = KillLeftovers::of(&d);
        timed_creates(&d, "warm", N, true).await
    };
    let cold = {
        let d = Daemon::start(&[]).await;
        let _leftovers = KillLeftovers::of(&d);
        let (_, pool) = d.call("GET", "/v1/pool", None).await;
        assert_eq!(pool["data"], json!([]), "no pool by default");
        timed_creates(&d, "cold", N, false).await
    };
    let (w, c) = (p50(warm.clone()), p50(cold.clone()));
    println!(
        "create latency over {N}: warm p50 {w:?} (all {warm:?}); cold p50 {c:?} (all {cold:?})"
    );
    assert!(w < c, "warm p50 {w:?} is not faster than cold p50 {c:?}");
}

/// The default (`--warm-pool auto`): one member of the smallest shape
/// without any configuration; a create takes it and the pool refills; a
/// create that does not fit next to the member evicts it instead of being
/// refused; a miss makes its shape wanted.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn auto_pool_is_on_by_default_follows_demand_and_gives_way() {
    // 3 GiB for sandboxes: room for three 1 GiB sandboxes, and a quarter of
    // it (the auto pool's share) rounds up to one member.
    let d = Daemon::start(&["--warm-pool", "auto", "--capacity-memory-mb", "3072"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let st = wait_pool(&d, "1x1024", 1).await;
    assert_eq!(st["target"], 1, "{st}");
    let first = containers(&d);
    assert_eq!(first.len(), 1, "{first:?}");

    let (status, body) = create(
        &d,
        "/v2/sandboxes",
        json!({"name": "auto-1", "vcpu": 1, "memoryMb": 1024}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id1 = body["data"]["id"].as_str().unwrap().to_string();
    assert!(first.contains(&cid(&id1)), "the first create was not warm");
    wait_pool(&d, "1x1024", 1).await;
    let refilled: BTreeSet<String> = containers(&d)
        .into_iter()
        .filter(|c| *c != cid(&id1))
        .collect();
    assert_eq!(refilled.len(), 1, "{refilled:?}");

    // 1 GiB (auto-1) + 1 GiB (the member) + 2 GiB > 3 GiB: this create fits
    // only if the member gives way. Its shape had no member: a miss.
    let (status, body) = create(
        &d,
        "/v2/sandboxes",
        json!({"name": "auto-2", "vcpu": 1, "memoryMb": 2048}),
    )
    .await;
    assert_eq!(status, 201, "the pool member blocked a real create: {body}");
    assert_eq!(body["data"]["status"], "RUNNING", "{body}");
    let id2 = body["data"]["id"].as_str().unwrap().to_string();
    assert!(
        !refilled.contains(&cid(&id2)),
        "a 2 GiB create took a 1 GiB member"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while containers(&d).iter().any(|c| refilled.contains(c)) {
        assert!(
            Instant::now() < deadline,
            "the evicted member was never destroyed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, pool) = d.call("GET", "/v1/pool", None).await;
    let wanted: Vec<(String, u64)> = pool["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shape"].as_str().unwrap().to_string(),
                s["target"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        wanted.contains(&("1x2048".to_string(), 1)),
        "the missed shape is not wanted: {pool}"
    );
    // The node is full: no member boots until a sandbox ends.
    let ready: u64 = pool["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ready"].as_u64().unwrap() + s["starting"].as_u64().unwrap())
        .sum();
    assert_eq!(ready, 0, "a member booted on a full node: {pool}");
}
