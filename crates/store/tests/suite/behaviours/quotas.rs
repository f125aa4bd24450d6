//! Workspace quotas: what a workspace's active sandboxes may hold together,
//! decided by the store at the insert.

use super::{race, record, Other};
use sbx_api_types::SandboxStatus;
use sbx_store::{CreateOutcome, SandboxRecord, Store, WorkspaceQuota, WorkspaceUsage};

fn in_workspace(workspace: &str, name: &str, vcpu: u32, memory_mb: u32) -> SandboxRecord {
    SandboxRecord {
        workspace: workspace.into(),
        vcpu,
        memory_mb,
        ..record(name, 0)
    }
}

pub fn a_workspace_quota_counts_its_active_sandboxes_only(store: &dyn Store, _: Other) {
    let quota = WorkspaceQuota {
        sandboxes: 3,
        vcpus: 4,
        memory_mb: 6144,
    };
    let create = |r: &SandboxRecord| store.create_sandbox_within(r, &quota).unwrap();
    let a = in_workspace("ws", "a", 2, 2048);
    assert_eq!(create(&a), CreateOutcome::Created);
    assert_eq!(
        create(&in_workspace("ws", "b", 1, 1024)),
        CreateOutcome::Created
    );
    // 2 + 1 + 2 vCPUs > 4.
    let used = WorkspaceUsage {
        sandboxes: 2,
        vcpus: 3,
        memory_mb: 3072,
    };
    assert_eq!(
        create(&in_workspace("ws", "c", 2, 1024)),
        CreateOutcome::QuotaReached(used)
    );
    // 3072 + 4096 MiB > 6144.
    assert_eq!(
        create(&in_workspace("ws", "c", 1, 4096)),
        CreateOutcome::QuotaReached(used)
    );
    // A repeated create finds its sandbox even at the quota.
    match create(&in_workspace("ws", "a", 2, 2048)) {
        CreateOutcome::NameHeld(h) => assert_eq!(h.id, a.id),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        create(&in_workspace("ws", "c", 1, 1024)),
        CreateOutcome::Created
    );
    // Three sandboxes: the count is full though vCPUs and memory are not.
    assert_eq!(
        create(&in_workspace("ws", "d", 0, 0)),
        CreateOutcome::QuotaReached(WorkspaceUsage {
            sandboxes: 3,
            vcpus: 4,
            memory_mb: 4096,
        })
    );
    // Other workspaces, and creates without a quota, are not affected.
    assert_eq!(
        create(&in_workspace("other", "a", 4, 4096)),
        CreateOutcome::Created
    );
    assert_eq!(
        store
            .create_sandbox(&in_workspace("ws", "free", 4, 8192))
            .unwrap(),
        CreateOutcome::Created
    );
    // Ended sandboxes give their share back.
    for name in ["a", "free"] {
        let mut r = store.active_sandbox_named("ws", name).unwrap().unwrap();
        r.status = SandboxStatus::Terminated;
        store.update_sandbox(&mut r).unwrap();
    }
    assert_eq!(
        create(&in_workspace("ws", "e", 2, 2048)),
        CreateOutcome::Created
    );
    let ws: Vec<_> = store
        .list_sandboxes("ws", 50, None)
        .unwrap()
        .into_iter()
        .filter(|s| s.status.is_active())
        .map(|s| s.name)
        .collect();
    assert_eq!(ws.len(), 3, "{ws:?}");
}

pub fn concurrent_creates_keep_a_workspace_quota(store: &dyn Store, other: Other) {
    let quota = WorkspaceQuota {
        sandboxes: 3,
        ..WorkspaceQuota::default()
    };
    let outcomes = race(other, 6, move |s, i| {
        s.create_sandbox_within(&in_workspace("ws", &format!("r{i}"), 1, 1024), &quota)
            .expect("create")
    });
    let created = outcomes
        .iter()
        .filter(|o| **o == CreateOutcome::Created)
        .count();
    assert_eq!(created, 3, "{outcomes:?}");
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, CreateOutcome::Created | CreateOutcome::QuotaReached(_))));
    let active = store
        .list_sandboxes("ws", 50, None)
        .unwrap()
        .into_iter()
        .filter(|s| s.status.is_active())
        .count();
    assert_eq!(active, 3);
}
