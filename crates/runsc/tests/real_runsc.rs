//! Against the real runsc (root, gVisor, the default image). Ignored and
//! gated: `SBX_RUNSC_IT=1 cargo test -p sbx-runsc -- --ignored`.
//! The image rootfs is `SBX_RUNSC_ROOTFS`, else `SBX_TEST_IMAGE_ROOTFS` (set
//! by `scripts/test` to the image `scripts/up` built).

use std::path::PathBuf;

use sbx_runsc::cleanup::{cleanup, CgroupCleanup};
use sbx_runsc::oci::SpecBuilder;
use sbx_runsc::{
    overlay2_root_dir, CheckpointOptions, ExecOptions, ProcessIo, RestoreOptions, RunOptions,
    Runsc, Status, DEFAULT_BINARY,
};

const CGROUP_PARENT: &str = "/runsc-probe";

/// Deletes the test's containers even when an assertion panics.
struct DeleteOnDrop {
    root: PathBuf,
    ids: Vec<String>,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        for id in &self.ids {
            let _ = std::process::Command::new(DEFAULT_BINARY)
                .arg(format!("--root={}", self.root.display()))
                .args(["delete", "--force", id])
                .status();
        }
    }
}

fn enabled() -> bool {
    std::env::var("SBX_RUNSC_IT").is_ok_and(|v| v == "1")
}

fn bundle(work: &std::path::Path, rootfs: &PathBuf, id: &str) -> PathBuf {
    let dir = work.join("bundles").join(id);
    SpecBuilder::new(rootfs)
        .args(["/bin/sleep", "infinity"])
        .hostname(id)
        .bind_mount(work.join("hostbin"), "/.sbx/bin", true)
        .memory_limit(512 << 20)
        .vcpus(1)
        .pids_limit(1024)
        .cgroups_path(format!("{CGROUP_PARENT}/{id}"))
        .write_bundle(&dir)
        .expect("write bundle");
    dir
}

fn run_opts(work: &std::path::Path, id: &str, bundle: PathBuf) -> RunOptions {
    let ov = work.join("overlay").join(id);
    std::fs::create_dir_all(&ov).expect("overlay dir");
    RunOptions {
        bundle,
        io: ProcessIo::console_log(work.join(format!("{id}.log"))),
        overlay2: Some(overlay2_root_dir(&ov)),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs root and runsc; set SBX_RUNSC_IT=1"]
async fn real_runsc_lifecycle() {
    if !enabled() {
        eprintln!("SBX_RUNSC_IT != 1: skipped");
        return;
    }
    let rootfs = PathBuf::from(
        std::env::var("SBX_RUNSC_ROOTFS")
            .or_else(|_| std::env::var("SBX_TEST_IMAGE_ROOTFS"))
            .expect("SBX_RUNSC_ROOTFS or SBX_TEST_IMAGE_ROOTFS names the image rootfs"),
    );
    assert!(
        rootfs.join("bin/sh").exists(),
        "no image at {}",
        rootfs.display()
    );
    let work = tempfile::tempdir().expect("tempdir");
    let w = work.path();
    std::fs::create_dir_all(w.join("hostbin")).expect("hostbin");
    std::fs::write(w.join("hostbin/hello"), "hello from host\n").expect("hello");
    let rs = Runsc::new(DEFAULT_BINARY, w.join("state"));
    // Neither id is a prefix of the other: runsc matches ids by prefix.
    let id = format!("runsc-probe-it-main-{}", std::process::id());
    let clone = format!("runsc-probe-it-clon-{}", std::process::id());
    let _guard = DeleteOnDrop {
        root: rs.root.clone(),
        ids: vec![id.clone(), clone.clone()],
    };

    rs.run(&id, &run_opts(w, &id, bundle(w, &rootfs, &id)))
        .await
        .expect("run");
    let st = rs.state(&id).await.expect("state");
    assert_eq!(st.status, Status::Running);
    assert!(st.pid > 0);
    assert!(rs.list().await.expect("list").iter().any(|c| c.id == id));

    let echo = ExecOptions {
        argv: vec!["echo".into(), "hi".into()],
        ..Default::default()
    };
    let out = rs.exec(&id, &echo).await.expect("exec");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"hi\n");
    let cat = ExecOptions {
        argv: vec!["cat".into(), "/.sbx/bin/hello".into()],
        ..Default::default()
    };
    assert_eq!(
        rs.exec(&id, &cat).await.expect("cat").stdout,
        b"hello from host\n"
    );

    rs.pause(&id).await.expect("pause");
    assert_eq!(rs.state(&id).await.expect("state").status, Status::Paused);
    rs.resume(&id).await.expect("resume");

    let img = w.join("image");
    let write = ExecOptions {
        argv: vec!["sh".into(), "-c".into(), "echo kept > /root/marker".into()],
        ..Default::default()
    };
    assert!(rs.exec(&id, &write).await.expect("write").status.success());
    rs.checkpoint(
        &id,
        &CheckpointOptions {
            image_path: img.clone(),
            leave_running: true,
            compression: None,
        },
    )
    .await
    .expect("checkpoint");
    let ro = run_opts(w, &clone, bundle(w, &rootfs, &clone));
    rs.restore(
        &clone,
        &RestoreOptions {
            bundle: ro.bundle,
            image_path: img,
            detach: true,
            io: ro.io,
            overlay2: ro.overlay2,
            ..Default::default()
        },
    )
    .await
    .expect("restore");
    let marker = ExecOptions {
        argv: vec!["cat".into(), "/root/marker".into()],
        ..Default::default()
    };
    assert_eq!(
        rs.exec(&clone, &marker).await.expect("cat").stdout,
        b"kept\n"
    );

    rs.delete(&id, true).await.expect("delete");
    let err = rs.state(&id).await.expect_err("deleted");
    assert!(err.is_not_found(), "{err:?}");
    rs.delete(&id, true)
        .await
        .expect("delete --force is idempotent");

    let report = cleanup(
        &rs,
        |c| c.starts_with("runsc-probe-it-"),
        Some(&CgroupCleanup::new(CGROUP_PARENT)),
    )
    .await
    .expect("cleanup");
    assert_eq!(report.deleted, vec![clone.clone()]);
    assert!(rs.list().await.expect("list").is_empty());
}
