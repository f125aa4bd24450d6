//! `cleanup` against the fake `runsc` and a fake cgroup tree.

mod common;

use common::Fake;
use sbx_runsc::cleanup::{cleanup, CgroupCleanup};

#[tokio::test]
async fn cleanup_deletes_only_matching_containers() {
    let f = Fake::new();
    f.container("sbx-a");
    f.container("other");
    f.container("sbx-b");
    f.respond(
        "list",
        "stdout",
        r#"[{"id":"sbx-a","status":"stopped","pid":-1},
            {"id":"other","status":"running","pid":5},
            {"id":"sbx-b","status":"running","pid":6}]"#,
    );
    let cg = tempfile::tempdir().expect("tempdir");
    std::fs::write(cg.path().join("cgroup.controllers"), "").expect("v2 marker");
    for d in ["sbx/sbx-a", "sbx/sbx-zombie", "sbx/keep"] {
        std::fs::create_dir_all(cg.path().join(d)).expect("mkdir");
    }
    let cgc = CgroupCleanup {
        mount: cg.path().to_path_buf(),
        parent: "/sbx".into(),
    };
    let report = cleanup(&f.runsc, |id| id.starts_with("sbx-"), Some(&cgc))
        .await
        .expect("cleanup");
    assert_eq!(report.deleted, vec!["sbx-a", "sbx-b"]);
    assert!(report.failed.is_empty());
    assert_eq!(report.cgroups_removed.len(), 2);
    assert!(cg.path().join("sbx/keep").exists());
    assert!(!cg.path().join("sbx/sbx-zombie").exists());
    assert_eq!(
        f.calls(),
        vec![
            f.expect(&["list", "--format=json"]),
            f.expect(&["delete", "--force", "sbx-a"]),
            f.expect(&["delete", "--force", "sbx-b"]),
        ]
    );
}

#[tokio::test]
async fn cleanup_reports_failed_deletes() {
    let f = Fake::new();
    f.container("sbx-a");
    f.respond(
        "list",
        "stdout",
        r#"[{"id":"sbx-a","status":"running","pid":3}]"#,
    );
    f.respond(
        "delete",
        "stderr",
        "waiting sandbox stop: context deadline exceeded\n",
    );
    f.respond("delete", "exit", "128");
    let report = cleanup(&f.runsc, |_| true, None).await.expect("cleanup");
    assert!(report.deleted.is_empty());
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.contains("context deadline exceeded"));
}
