//! `oci::SpecBuilder` output.

use serde_json::{json, Value};

use sbx_runsc::oci::{Spec, SpecBuilder, DEFAULT_PATH};

fn sbx_spec() -> SpecBuilder {
    SpecBuilder::new("/var/lib/sbx/images/default/rootfs")
        .args(["/.sbx/bin/sbx-agent", "init"])
        .hostname("sbx-1")
        .bind_mount("/var/lib/sbx/agent", "/.sbx/bin", true)
        .bind_mount("/etc/resolv.host", "/etc/resolv.conf", false)
        .memory_limit(2048 * 1024 * 1024)
        .vcpus(2)
        .pids_limit(4096)
        .cgroups_path("/sbx/sbx-1")
}

fn to_value(b: &SpecBuilder) -> Value {
    serde_json::to_value(b.build()).expect("serialize")
}

#[test]
fn root_is_writable_and_process_defaults() {
    let v = to_value(&sbx_spec());
    assert_eq!(
        v["root"],
        json!({"path": "/var/lib/sbx/images/default/rootfs", "readonly": false})
    );
    assert_eq!(v["process"]["args"], json!(["/.sbx/bin/sbx-agent", "init"]));
    assert_eq!(
        v["process"]["env"],
        json!([
            format!("PATH={DEFAULT_PATH}"),
            "HOME=/root",
            "LANG=C.UTF-8",
            "TERM=xterm"
        ])
    );
    assert_eq!(v["process"]["cwd"], "/");
    assert_eq!(v["process"]["terminal"], false);
    assert_eq!(v["process"]["user"], json!({"uid": 0, "gid": 0}));
    assert_eq!(v["hostname"], "sbx-1");
    assert!(v["ociVersion"]
        .as_str()
        .is_some_and(|s| s.starts_with("1.0")));
}

#[test]
fn resources_and_cgroups_path() {
    let v = to_value(&sbx_spec());
    assert_eq!(
        v["linux"]["resources"],
        json!({
            "memory": {"limit": 2147483648u64},
            "cpu": {"quota": 200000, "period": 100000},
            "pids": {"limit": 4096}
        })
    );
    assert_eq!(v["linux"]["cgroupsPath"], "/sbx/sbx-1");
    let ns: Vec<&str> = v["linux"]["namespaces"]
        .as_array()
        .expect("namespaces")
        .iter()
        .filter_map(|n| n["type"].as_str())
        .collect();
    assert_eq!(ns, ["pid", "ipc", "uts", "mount", "network"]);
}

#[test]
fn no_resources_unless_asked() {
    let v = to_value(&SpecBuilder::new("/r"));
    assert!(v["linux"].get("resources").is_none());
    assert!(v["linux"].get("cgroupsPath").is_none());
    let v = to_value(&SpecBuilder::new("/r").vcpus(1).cpu_period_us(50_000));
    assert_eq!(
        v["linux"]["resources"],
        json!({"cpu": {"quota": 50000, "period": 50000}})
    );
}

#[test]
fn standard_and_bind_mounts() {
    let v = to_value(&sbx_spec());
    let mounts = v["mounts"].as_array().expect("mounts");
    let dests: Vec<&str> = mounts
        .iter()
        .filter_map(|m| m["destination"].as_str())
        .collect();
    assert_eq!(
        dests,
        [
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/shm",
            "/sys",
            "/run",
            "/.sbx/bin",
            "/etc/resolv.conf"
        ]
    );
    let sys = &mounts[4];
    assert_eq!(sys["type"], "sysfs");
    assert!(sys["options"]
        .as_array()
        .expect("options")
        .contains(&json!("ro")));
    assert_eq!(mounts[5]["type"], "tmpfs");
    assert_eq!(
        mounts[6],
        json!({
            "destination": "/.sbx/bin",
            "type": "bind",
            "source": "/var/lib/sbx/agent",
            "options": ["rbind", "nosuid", "nodev", "ro"]
        })
    );
    assert_eq!(mounts[7]["options"][3], "rw");
}

#[test]
fn env_replaces_and_setters_apply() {
    let v = to_value(
        &SpecBuilder::new("/r")
            .env("PATH", "/bin")
            .env("NODE_USE_ENV_PROXY", "1")
            .cwd("/workspace")
            .user(1000, 1000)
            .root_readonly(true)
            .tmpfs("/tmp", Some(64 << 20))
            .nofile(1024)
            .capabilities(["CAP_KILL"])
            .namespace("network", Some("/run/netns/x".into()))
            .annotation("sbx.id", "sbx-1"),
    );
    assert_eq!(
        v["process"]["env"],
        json!([
            "HOME=/root",
            "LANG=C.UTF-8",
            "TERM=xterm",
            "PATH=/bin",
            "NODE_USE_ENV_PROXY=1"
        ])
    );
    assert_eq!(v["process"]["cwd"], "/workspace");
    assert_eq!(v["process"]["user"], json!({"uid": 1000, "gid": 1000}));
    assert_eq!(v["root"]["readonly"], true);
    assert_eq!(
        v["process"]["rlimits"],
        json!([{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}])
    );
    assert_eq!(
        v["process"]["capabilities"]["bounding"],
        json!(["CAP_KILL"])
    );
    let tmp = v["mounts"]
        .as_array()
        .and_then(|m| m.last())
        .expect("tmpfs mount");
    assert_eq!(tmp["destination"], "/tmp");
    assert!(tmp["options"]
        .as_array()
        .expect("options")
        .contains(&json!("size=67108864")));
    let net = v["linux"]["namespaces"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["type"] == "network"))
        .expect("network ns");
    assert_eq!(net["path"], "/run/netns/x");
    assert_eq!(v["annotations"]["sbx.id"], "sbx-1");
}

#[test]
fn write_bundle_is_atomic_and_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = dir.path().join("bundles/sbx-1");
    let b = sbx_spec();
    let path = b.write_bundle(&bundle).expect("write");
    assert_eq!(path, bundle.join("config.json"));
    let names: Vec<String> = std::fs::read_dir(&bundle)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["config.json"]);
    let back: Spec =
        serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("parse back");
    assert_eq!(back, b.build());
    // Overwrite in place.
    let path2 = SpecBuilder::new("/other")
        .write_bundle(&bundle)
        .expect("rewrite");
    let again: Value =
        serde_json::from_slice(&std::fs::read(&path2).expect("read")).expect("parse");
    assert_eq!(again["root"]["path"], "/other");
}
