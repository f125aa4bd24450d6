//! Measures runsc on this machine through the wrapper (see NOTES.md).
//!
//! `cargo run -p sbx-runsc --example probe -- ROOTFS WORKDIR [RUNS]`
//! (as root). Containers are named `runsc-probe-*`, live under
//! `WORKDIR/state` and use cgroups under `/runsc-probe`; all are deleted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sbx_runsc::oci::SpecBuilder;
use sbx_runsc::{
    CheckpointOptions, ExecOptions, GlobalOptions, ProcessIo, RestoreOptions, RunOptions, Runsc,
    Status,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const PID1: &str = "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 1; done";

struct Probe {
    rs: Runsc,
    rootfs: PathBuf,
    work: PathBuf,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summary(name: &str, v: &[f64]) {
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    let max = v.iter().cloned().fold(0.0, f64::max);
    println!(
        "{name}: median {:.1} ms, min {:.1}, max {:.1} (n={})",
        median(v.to_vec()),
        min,
        max,
        v.len()
    );
}

impl Probe {
    fn bundle(&self, id: &str, mem: u64) -> Res<PathBuf> {
        let dir = self.work.join("bundles").join(id);
        let hostbin = self.work.join("hostbin");
        let hostfile = self.work.join("hostfile.txt");
        SpecBuilder::new(&self.rootfs)
            .args(["/bin/sh", "-c", PID1])
            .hostname(id)
            .bind_mount(&hostbin, "/.sbx/bin", true)
            .bind_mount(&hostfile, "/etc/sbx-hostfile", true)
            .memory_limit(mem)
            .vcpus(1)
            .pids_limit(256)
            .cgroups_path(format!("/runsc-probe/{id}"))
            .write_bundle(&dir)?;
        Ok(dir)
    }

    fn run_opts(&self, id: &str, bundle: PathBuf) -> RunOptions {
        RunOptions {
            bundle,
            io: ProcessIo::console_log(self.work.join(format!("{id}.console.log"))),
            overlay2: Some(format!("root:dir={}", self.overlay(id).display())),
            ..Default::default()
        }
    }

    fn overlay(&self, id: &str) -> PathBuf {
        let p = self.work.join("overlay").join(id);
        let _ = std::fs::create_dir_all(&p);
        p
    }

    async fn sh(&self, id: &str, script: &str) -> Res<String> {
        let out = self
            .rs
            .exec(
                id,
                &ExecOptions {
                    argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
                    ..Default::default()
                },
            )
            .await?;
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            s.push_str(&format!(" [{}]", out.status));
        }
        Ok(s.trim().to_string())
    }

    async fn start(&self, id: &str, mem: u64) -> Res<Duration> {
        let b = self.bundle(id, mem)?;
        let t = Instant::now();
        self.rs.run(id, &self.run_opts(id, b)).await?;
        let d = t.elapsed();
        let st = self.rs.state(id).await?;
        assert_eq!(st.status, Status::Running, "{st:?}");
        Ok(d)
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("<{e}>"))
}

fn du(p: &Path) -> String {
    let out = std::process::Command::new("du").arg("-sk").arg(p).output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(e) => e.to_string(),
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let rootfs = PathBuf::from(args.get(1).ok_or("usage: probe ROOTFS WORKDIR [RUNS]")?);
    let work = PathBuf::from(args.get(2).ok_or("usage: probe ROOTFS WORKDIR [RUNS]")?);
    let runs: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
    std::fs::create_dir_all(work.join("hostbin"))?;
    std::fs::write(work.join("hostbin/hello.txt"), "from host dir\n")?;
    std::fs::write(work.join("hostfile.txt"), "from host file\n")?;
    let rs = Runsc::new("/usr/bin/runsc", work.join("state")).with_global(GlobalOptions {
        ..Default::default()
    });
    let p = Probe { rs, rootfs, work };
    let mib = 1024 * 1024;

    // 1. run latency + exec latency
    let mut run_ms = Vec::new();
    let mut del_ms = Vec::new();
    for i in 0..runs {
        let id = format!("runsc-probe-run{i}");
        run_ms.push(ms(p.start(&id, 512 * mib).await?));
        if i == 0 {
            let exec_opts = ExecOptions {
                argv: vec!["/bin/true".into()],
                ..Default::default()
            };
            let mut ex = Vec::new();
            for _ in 0..runs {
                let t = Instant::now();
                let out = p.rs.exec(&id, &exec_opts).await?;
                ex.push(ms(t.elapsed()));
                assert!(out.status.success());
            }
            summary("exec /bin/true", &ex);
            let t = Instant::now();
            let py = p.sh(&id, "python3 -c 'print(6*7)'").await?;
            println!("exec python3 print: {py} in {:.1} ms", ms(t.elapsed()));
            let t = Instant::now();
            let node = p.sh(&id, "node -e 'console.log(process.version)'").await?;
            println!("exec node -e: {node} in {:.1} ms", ms(t.elapsed()));

            // 2. cgroups
            let cg = Path::new("/sys/fs/cgroup");
            let rel = format!("runsc-probe/{id}");
            println!(
                "cgroup memory.limit_in_bytes={} cpu.cfs_quota_us={} cpu.cfs_period_us={} pids.max={}",
                read(&cg.join("memory").join(&rel).join("memory.limit_in_bytes")),
                read(&cg.join("cpu").join(&rel).join("cpu.cfs_quota_us")),
                read(&cg.join("cpu").join(&rel).join("cpu.cfs_period_us")),
                read(&cg.join("pids").join(&rel).join("pids.max")),
            );
            println!(
                "cgroup v1 memory tasks: {}",
                read(&cg.join("memory").join(&rel).join("tasks"))
                    .lines()
                    .count()
            );
            println!(
                "unified (v2) dir exists: {}",
                cg.join("unified").join(&rel).exists()
            );

            // 5. bind mounts + overlay on disk
            println!(
                "ro dir: {}",
                p.sh(&id, "cat /.sbx/bin/hello.txt; touch /.sbx/bin/x")
                    .await?
            );
            println!(
                "ro file: {}",
                p.sh(&id, "cat /etc/sbx-hostfile; echo y >> /etc/sbx-hostfile")
                    .await?
            );
            let ov = p.overlay(&id);
            let mem_before = read(&cg.join("memory").join(&rel).join("memory.usage_in_bytes"));
            let du_before = du(&ov);
            let w = p
                .sh(
                    &id,
                    "dd if=/dev/urandom of=/root/big bs=1M count=100 2>&1 | tail -1; sync",
                )
                .await?;
            println!("write 100MB: {w}");
            println!(
                "overlay dir du before {du_before} after {}; memory.usage_in_bytes before {mem_before} after {}",
                du(&ov),
                read(&cg.join("memory").join(&rel).join("memory.usage_in_bytes"))
            );
            println!(
                "overlay dir listing: {:?}",
                std::fs::read_dir(&ov)?
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name())
                    .collect::<Vec<_>>()
            );
            println!(
                "host root unchanged: {}",
                !p.rootfs.join("root/big").exists()
            );
        }
    }
    summary("run --detach to running", &run_ms);
    for i in 0..runs {
        let id = format!("runsc-probe-run{i}");
        let t = Instant::now();
        p.rs.delete(&id, true).await?;
        del_ms.push(ms(t.elapsed()));
    }
    summary("delete --force (running)", &del_ms);

    // 4. pause / resume
    let id = "runsc-probe-pause";
    p.start(id, 512 * mib).await?;
    let (mut pa, mut re) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        p.rs.pause(id).await?;
        pa.push(ms(t.elapsed()));
        assert_eq!(p.rs.state(id).await?.status, Status::Paused);
        let t = Instant::now();
        p.rs.resume(id).await?;
        re.push(ms(t.elapsed()));
    }
    summary("pause", &pa);
    summary("resume", &re);
    p.rs.delete(id, true).await?;

    // 3. checkpoint --leave-running + restore into a new id
    let a = "runsc-probe-ckpt";
    p.start(a, 512 * mib).await?;
    p.sh(a, "echo before-checkpoint > /root/marker").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (label, setup) in [
        ("tiny", ""),
        (
            "50MB written",
            "dd if=/dev/urandom of=/root/f50 bs=1M count=50 2>/dev/null; md5sum /root/f50",
        ),
    ] {
        if !setup.is_empty() {
            println!("setup: {}", p.sh(a, setup).await?);
        }
        let img = p.work.join(format!("image-{}", label.replace(' ', "-")));
        let _ = std::fs::remove_dir_all(&img);
        let mut cks = Vec::new();
        for k in 0..3 {
            let _ = std::fs::remove_dir_all(&img);
            let t = Instant::now();
            p.rs.checkpoint(
                a,
                &CheckpointOptions {
                    image_path: img.clone(),
                    leave_running: true,
                    compression: None,
                },
            )
            .await?;
            cks.push(ms(t.elapsed()));
            if k == 0 {
                println!("image ({label}) size: {}", du(&img));
            }
        }
        summary(&format!("checkpoint --leave-running ({label})"), &cks);
        println!(
            "source state after checkpoint: {:?}",
            p.rs.state(a).await?.status
        );
        let mut rest = Vec::new();
        for k in 0..3 {
            let b = format!("runsc-probe-clone{k}");
            let bundle = p.bundle(&b, 512 * mib)?;
            let ro = p.run_opts(&b, bundle.clone());
            let t = Instant::now();
            p.rs.restore(
                &b,
                &RestoreOptions {
                    bundle,
                    image_path: img.clone(),
                    detach: true,
                    io: ro.io,
                    overlay2: ro.overlay2,
                    ..Default::default()
                },
            )
            .await?;
            rest.push(ms(t.elapsed()));
            if k == 0 {
                println!("clone state: {:?}", p.rs.state(&b).await?.status);
                let c1 = p.sh(&b, "cat /tmp/counter").await?;
                tokio::time::sleep(Duration::from_millis(2100)).await;
                println!(
                    "clone marker: {} | counter {} -> {} | hostname {} | source counter {}",
                    p.sh(&b, "cat /root/marker").await?,
                    c1,
                    p.sh(&b, "cat /tmp/counter").await?,
                    p.sh(&b, "hostname").await?,
                    p.sh(a, "cat /tmp/counter").await?,
                );
                if !setup.is_empty() {
                    println!("clone md5: {}", p.sh(&b, "md5sum /root/f50").await?);
                }
                println!(
                    "clone ro dir: {}",
                    p.sh(&b, "cat /.sbx/bin/hello.txt").await?
                );
                println!("clone overlay dir du: {}", du(&p.overlay(&b)));
            }
            p.rs.delete(&b, true).await?;
        }
        summary(&format!("restore --detach new id ({label})"), &rest);
    }
    p.rs.delete(a, true).await?;

    // 2b. memory limit enforcement
    let m = "runsc-probe-mem";
    p.start(m, 256 * mib).await?;
    let r = p
        .sh(
            m,
            "python3 -c 'b=bytearray(400<<20); print(\"allocated\", len(b))'",
        )
        .await;
    println!("400MB alloc in 256MiB sandbox: {r:?}");
    println!("state after: {:?}", p.rs.state(m).await.map(|s| s.status));
    let rel = "runsc-probe/runsc-probe-mem";
    println!(
        "memory.failcnt={} max_usage={} oom_control={:?}",
        read(
            &Path::new("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.failcnt")
        ),
        read(
            &Path::new("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.max_usage_in_bytes")
        ),
        read(
            &Path::new("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.oom_control")
        ),
    );
    p.rs.delete(m, true).await?;

    // 2c. pids limit
    let pl = "runsc-probe-pids";
    p.start(pl, 512 * mib).await?;
    let r = p
        .sh(
            pl,
            "n=0; for i in $(seq 1 400); do sleep 30 & n=$((n+1)); done; echo started $n; sleep 1; ps -e | wc -l",
        )
        .await;
    println!("400 background sleeps with pids.limit 256: {r:?}");
    println!(
        "host pids.current={}",
        read(
            &Path::new("/sys/fs/cgroup/pids/runsc-probe")
                .join(pl)
                .join("pids.current")
        )
    );
    p.rs.delete(pl, true).await?;

    // 2d. --ignore-cgroups
    let mut g = p.rs.global.clone();
    g.ignore_cgroups = true;
    let ig = Probe {
        rs: p.rs.clone().with_global(g),
        rootfs: p.rootfs.clone(),
        work: p.work.clone(),
    };
    let id = "runsc-probe-nocg";
    let d = ig.start(id, 256 * mib).await?;
    println!(
        "--ignore-cgroups: run {:.1} ms, memory cgroup dir exists: {}",
        ms(d),
        Path::new("/sys/fs/cgroup/memory/runsc-probe")
            .join(id)
            .exists()
    );
    let r = ig
        .sh(
            id,
            "python3 -c 'b=bytearray(400<<20); print(\"allocated\", len(b))'",
        )
        .await;
    println!("--ignore-cgroups 400MB alloc with 256MiB limit: {r:?}");
    ig.rs.delete(id, true).await?;

    println!("left in root: {:?}", p.rs.list().await?);
    Ok(())
}
