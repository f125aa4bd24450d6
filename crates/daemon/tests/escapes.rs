//! Escape attempts from inside a sandbox (through exec, as untrusted code
//! would run them) and leaks through the API. Every attempt must fail or stay
//! confined to the sandbox; see docs/threat-model.md for the layer that stops
//! each one.

mod common;

use common::{b64, Daemon};
use serde_json::{json, Value};

/// Runs `sh -c script` in the sandbox; returns (exitCode, stdout, stderr).
async fn sh(d: &Daemon, id: &str, script: &str) -> (i64, String, String) {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(json!({"command": ["sh", "-c", script], "timeout": "60000ms"})),
        )
        .await;
    assert_eq!(status, 200, "exec {script:?}: {body}");
    let data = &body["data"];
    (
        data["exitCode"].as_i64().unwrap(),
        b64(&data["stdout"]),
        b64(&data["stderr"]),
    )
}

fn unique(tag: &str) -> String {
    format!(
        "sbx-escape-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// A file on the host that removes itself.
struct HostFile(std::path::PathBuf);
impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn host_files_stay_out_of_reach() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("files").await;
    let name = unique("host");
    let secret = format!("host-content-{name}");
    let marker = HostFile(std::path::Path::new("/var/tmp").join(&name));
    std::fs::write(&marker.0, &secret).unwrap();

    // By absolute path: not there (the guest sees only its own root).
    let (code, out, err) = sh(&d, &id, &format!("cat /var/tmp/{name}")).await;
    assert_ne!(code, 0, "host file readable inside: {out}");
    assert!(!out.contains(&secret));
    assert!(err.contains("No such file"), "{err}");
    // Nor anywhere else in the guest (the data dir, the image dir, /proc).
    let (_, found, _) = sh(
        &d,
        &id,
        &format!("find / \\( -path /proc -o -path /sys \\) -prune -o -name '{name}' -print 2>/dev/null; grep -rl '{secret}' /var /tmp /root 2>/dev/null; true"),
    )
    .await;
    assert!(found.trim().is_empty(), "host marker visible: {found}");

    // Through the file API and a guest symlink: paths resolve inside the guest.
    sh(&d, &id, &format!("ln -s /var/tmp/{name} /tmp/link")).await;
    let r = d
        .http
        .get(d.url(&format!("/v2/sandboxes/{id}/files?path=/tmp/link")))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains(&secret));
    // `..` in API paths is refused or stays inside.
    let (status, body) = d
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/fs/stat?path=/tmp/../../var/tmp/{name}"),
            None,
        )
        .await;
    assert!(status == 400 || status == 404, "{status} {body}");

    // The agent binary is bound read-only, and the host copy never changes.
    let agent =
        std::path::Path::new(&std::env::var("SBX_TEST_AGENT_DIR").unwrap()).join("sbx-agent");
    let before = std::fs::read(&agent).unwrap();
    let (code, _, err) = sh(
        &d,
        &id,
        "echo x >> /.sbx/sbx-agent || exit 1; rm -f /.sbx/sbx-agent || exit 2",
    )
    .await;
    assert_ne!(code, 0, "agent binary writable inside: {err}");
    assert_eq!(
        std::fs::read(&agent).unwrap(),
        before,
        "host agent binary changed"
    );

    // Writes to image paths stay in the sandbox's overlay, never the shared rootfs.
    let (code, _, err) = sh(
        &d,
        &id,
        &format!("echo x > /usr/local/{name} && echo y >> /etc/passwd"),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let rootfs = std::path::PathBuf::from(std::env::var("SBX_TEST_IMAGE_ROOTFS").unwrap());
    assert!(
        !rootfs.join("usr/local").join(&name).exists(),
        "write reached the shared image"
    );
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        !passwd.ends_with("y\n"),
        "write reached the shared image's /etc/passwd"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn host_processes_devices_and_kernel_are_hidden() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("procs").await;
    let sbxd = d.sbxd_pid().unwrap();

    // /proc lists only the sandbox's own few processes, none of the host's.
    let (_, pids, _) = sh(&d, &id, "ls /proc | grep '^[0-9]*$'").await;
    let pids: Vec<u32> = pids.lines().filter_map(|l| l.parse().ok()).collect();
    println!("guest pids: {pids:?}");
    assert!(pids.contains(&1));
    assert!(pids.len() < 20, "too many processes visible: {pids:?}");
    let (_, cmdlines, _) = sh(
        &d,
        &id,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
    )
    .await;
    for needle in ["sbxd", "runsc", "cargo", &d.data_dir().to_string_lossy()] {
        assert!(
            !cmdlines.contains(needle),
            "host process {needle:?} visible:\n{cmdlines}"
        );
    }
    let (_, own, _) = sh(
        &d,
        &id,
        &format!("tr '\\0' ' ' < /proc/{sbxd}/cmdline 2>/dev/null; true"),
    )
    .await;
    assert!(
        !own.contains("sbxd"),
        "sbxd's pid {sbxd} readable inside: {own}"
    );

    // /dev has no block devices (no host disks), and no host-only character devices.
    let (_, dev, _) = sh(&d, &id, "ls -la /dev").await;
    let (_, blocks, _) = sh(&d, &id, "find /dev -type b 2>/dev/null").await;
    assert!(
        blocks.trim().is_empty(),
        "block devices inside: {blocks}\n{dev}"
    );
    for host_only in [
        "/dev/mem",
        "/dev/kmem",
        "/dev/port",
        "/dev/kvm",
        "/dev/sda",
        "/dev/vda",
    ] {
        let (code, _, _) = sh(&d, &id, &format!("test -e {host_only}")).await;
        assert_ne!(code, 0, "{host_only} exists inside:\n{dev}");
    }

    // The kernel is gVisor's, not the host's.
    let host_release = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .unwrap();
    let host_release = String::from_utf8_lossy(&host_release.stdout)
        .trim()
        .to_string();
    let (_, guest_release, _) = sh(&d, &id, "uname -r").await;
    let (_, dmesg, _) = sh(&d, &id, "dmesg 2>&1 | head -5; cat /proc/version").await;
    println!(
        "host kernel {host_release}; guest uname -r {}; dmesg/version:\n{dmesg}",
        guest_release.trim()
    );
    assert_ne!(
        guest_release.trim(),
        host_release,
        "guest sees the host kernel release"
    );
    assert!(
        dmesg.contains("gVisor"),
        "dmesg does not show gVisor: {dmesg}"
    );
    let (_, modules, _) = sh(
        &d,
        &id,
        "cat /proc/modules 2>&1; ls /lib/modules 2>&1; true",
    )
    .await;
    assert!(
        !modules.contains(&host_release),
        "host modules visible: {modules}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn privileged_operations_fail_or_stay_confined() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("priv").await;
    let name = unique("mnt");

    // mount: refused, or a guest-only tmpfs that never shows on the host.
    let (code, out, err) = sh(
        &d,
        &id,
        &format!(
            "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x && echo mounted && touch /mnt/x/{name}"
        ),
    )
    .await;
    println!("mount tmpfs → exit {code} {out}{err}");
    if code == 0 {
        assert!(!std::path::Path::new("/mnt/x").join(&name).exists());
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        assert!(
            !mounts.contains("/mnt/x"),
            "guest mount visible on the host"
        );
    }
    // Remounting the root or mounting the host's /proc-like filesystems gives nothing of the host.
    let (code, out, err) = sh(
        &d,
        &id,
        "mount -t proc proc /mnt/x 2>&1 && ls /mnt/x | grep -c '^[0-9]'",
    )
    .await;
    println!("mount proc → exit {code} {out}{err}");
    if code == 0 {
        assert!(
            out.trim().parse::<u32>().unwrap_or(0) < 20,
            "host /proc mounted: {out}"
        );
    }

    // Kernel modules: no insmod target, modprobe path not writable, init_module refused.
    let (code, out, err) = sh(&d, &id, "echo /tmp/evil > /proc/sys/kernel/modprobe").await;
    assert_ne!(code, 0, "/proc/sys/kernel/modprobe writable: {out}{err}");
    // (The host kernel may have no module support at all: then there is no file.)
    let host_modprobe = std::fs::read_to_string("/proc/sys/kernel/modprobe").unwrap_or_default();
    assert!(!host_modprobe.contains("/tmp/evil"));
    let (code, out, err) = sh(
        &d,
        &id,
        "if [ -x /sbin/insmod ]; then /sbin/insmod /tmp/none.ko; else echo no-insmod; exit 1; fi",
    )
    .await;
    assert_ne!(code, 0, "insmod succeeded: {out}{err}");
    let (code, out, err) = sh(
        &d,
        &id,
        "python3 -c 'import ctypes,os; libc=ctypes.CDLL(None, use_errno=True); r=libc.syscall(175, None, 0, b\"\"); e=ctypes.get_errno(); r2=libc.syscall(313, 0, b\"\", 0); e2=ctypes.get_errno(); print(r, os.strerror(e), r2, os.strerror(e2))'",
    )
    .await;
    println!("init_module/finit_module → {out}{err}");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("-1 ") && out.contains(" -1 "),
        "module syscall succeeded: {out}"
    );

    // Raw sockets: refused, or there is no interface but loopback to use them on.
    let (code, out, err) = sh(
        &d,
        &id,
        r#"python3 - <<'PY'
import socket
for fam, kind, proto in [(socket.AF_PACKET, socket.SOCK_RAW, 0x0300), (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)]:
    try:
        s = socket.socket(fam, kind, proto)
        print("opened", fam, kind)
        s.close()
    except OSError as e:
        print("refused", fam, e.errno)
print("ifaces", sorted(n for _, n in socket.if_nameindex()))
PY"#,
    )
    .await;
    println!("raw sockets → {out}{err}");
    assert_eq!(code, 0, "{err}");
    if out.contains("opened") {
        let ifaces = out.lines().find(|l| l.starts_with("ifaces")).unwrap();
        assert_eq!(
            ifaces, "ifaces ['lo']",
            "raw socket with a real interface: {out}"
        );
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sbxd_and_host_services_are_unreachable() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("net").await;
    let port = d.port;
    // Plain TCP to the daemon's port: the guest's own loopback has nothing there.
    let (code, out, err) = sh(
        &d,
        &id,
        &format!(
            "python3 -c 'import socket; s=socket.socket(); s.settimeout(5)\ntry:\n s.connect((\"127.0.0.1\", {port})); print(\"connected\")\nexcept OSError as e: print(\"failed\", type(e).__name__)'"
        ),
    )
    .await;
    println!("connect 127.0.0.1:{port} → {out}{err}");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("failed ConnectionRefusedError"), "{out}");
    // Through whatever proxy the environment offers (curl honours *_PROXY):
    // the daemon's API must not answer.
    let (code, out, err) = sh(
        &d,
        &id,
        &format!("curl -sS -m 10 http://127.0.0.1:{port}/healthz; echo; curl -sS -m 10 http://localhost:{port}/v2/sandboxes"),
    )
    .await;
    println!("curl sbxd → exit {code}: {out}{err}");
    assert!(
        !out.contains("ok") && !out.contains("\"data\""),
        "sbxd reachable from inside: {out}"
    );
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn sandboxes_cannot_see_each_other() {
    let d = Daemon::start(&[]).await;
    let a = d.create_running("a").await;
    let b = d.create_running("b").await;
    let name = unique("xsb");
    let (code, _, err) = sh(
        &d,
        &a,
        &format!("echo {name} > /tmp/{name}; echo {name} > /root/{name}; echo {name} > /usr/local/{name}; (exec -a sleeper-{name} sleep 600 &) ; true"),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (_, found, _) = sh(
        &d,
        &b,
        &format!("find / \\( -path /proc -o -path /sys \\) -prune -o -name '{name}' -print 2>/dev/null; true"),
    )
    .await;
    assert!(found.trim().is_empty(), "B sees A's files: {found}");
    let (_, cmdlines, _) = sh(
        &d,
        &b,
        "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '",
    )
    .await;
    assert!(
        !cmdlines.contains(&name),
        "B sees A's processes: {cmdlines}"
    );
    // A still has them (the test is not vacuous).
    let (_, own, _) = sh(
        &d,
        &a,
        &format!("cat /tmp/{name}; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"),
    )
    .await;
    assert!(own.contains(&format!("{name}\n")), "{own}");
    // B killing every process it can see leaves A's alone.
    // (The exec itself dies with everything else, so its answer is not checked.)
    let _ = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{b}/exec"),
            Some(json!({"command": ["sh", "-c", "kill -9 -1"], "timeout": "5000ms"})),
        )
        .await;
    let (_, still, _) = sh(
        &d,
        &a,
        &format!("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c sleeper-{name}"),
    )
    .await;
    assert_eq!(still.trim(), "1", "A's process is gone");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn secret_values_never_appear_in_api_responses() {
    let d = Daemon::start(&[]).await;
    let value = unique("secret-value");
    let (status, put) = d
        .call(
            "PUT",
            "/v1/secrets/ESCAPE_TOKEN",
            Some(json!({"value": value})),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    let (status, created) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "sec", "vcpu": 1, "memoryMb": 1024, "secrets": ["ESCAPE_TOKEN"]})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert!(!created.to_string().contains(&value));
    let id = created["data"]["id"].as_str().unwrap().to_string();
    // Inside, the value is there (so the checks below are not vacuous)...
    let (_, inside, _) = sh(&d, &id, "printf %s \"$ESCAPE_TOKEN\"").await;
    assert_eq!(inside, value);
    // ...and a process that prints it does so through its own output only.
    let (_, p) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/processes"),
            Some(json!({"command": ["sh", "-c", "sleep 600"]})),
        )
        .await;
    let pid = p["data"]["id"].as_str().unwrap().to_string();
    let (status, snap) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/snapshots"),
            Some(json!({"name": "sec-snap"})),
        )
        .await;
    assert!(status == 201 || status == 202, "{snap}");
    let sid = snap["data"]["id"].as_str().unwrap().to_string();
    // A conflicting create and a bad secret name: error messages must not echo values.
    let (_, conflict) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "sec", "vcpu": 2, "memoryMb": 2048, "secrets": ["ESCAPE_TOKEN"]})),
        )
        .await;
    assert!(!conflict.to_string().contains(&value));
    let (_, bad) = d
        .call(
            "PUT",
            "/v1/secrets/ESCAPE_TOKEN",
            Some(json!({"value": value, "extra": 1})),
        )
        .await;
    assert!(!bad.to_string().contains(&value), "{bad}");

    let paths = [
        "/v2/sandboxes".to_string(),
        format!("/v2/sandboxes/{id}"),
        format!("/v1/sandboxes/{id}"),
        format!("/v2/sandboxes/{id}/processes"),
        format!("/v2/sandboxes/{id}/processes/{pid}"),
        format!("/v2/sandboxes/{id}/logs?follow=false"),
        "/v2/snapshots".to_string(),
        format!("/v2/snapshots/{sid}"),
        "/v1/secrets".to_string(),
        "/v1/secrets/ESCAPE_TOKEN".to_string(),
        "/healthz".to_string(),
    ];
    for path in &paths {
        let r = d.http.get(d.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        let headers = format!("{:?}", r.headers());
        let body = r.text().await.unwrap();
        assert!(
            !body.contains(&value) && !headers.contains(&value),
            "GET {path} ({status}) shows the secret value"
        );
        // Base64 of the value would be a leak too (exec/output payloads are base64).
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&value);
        assert!(
            !body.contains(&encoded[..encoded.len() - 4]),
            "GET {path} shows it in base64"
        );
    }
    // The secret list names it but never carries a value field.
    let (_, list) = d.call("GET", "/v1/secrets", None).await;
    let item = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "ESCAPE_TOKEN")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(item.is_object(), "{list}");
    assert!(item.get("value").is_none(), "{item}");
}
