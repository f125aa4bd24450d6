//! `copy_store` (sbxd migrate-store): a populated SQLite store into each backend.

use crate::behaviours::{at, key, record, snapshot, Other};
use chrono::Duration;
use sbx_api_types::SandboxStatus;
use sbx_store::{copy_store, Copied, SecretRecord, SnapshotStatus, SqliteStore, Store, StoreError};

/// A source store with a bit of everything; returns it.
fn populated() -> SqliteStore {
    let src = SqliteStore::in_memory().expect("in-memory SQLite");
    src.create_api_key(&key("digest-1")).expect("key");
    let mut revoked = key("digest-2");
    revoked.revoked_at = Some(at(9_000));
    src.create_api_key(&revoked).expect("key");
    // An old sandbox named "web" ended, and a new "web" holds the name now.
    let mut old = record("web", 1_000);
    src.create_sandbox(&old).expect("create");
    old.status = SandboxStatus::Terminated;
    old.ended_at = Some(at(2_000));
    src.update_sandbox(&mut old).expect("terminate");
    let mut web = record("web", 3_000);
    web.status = SandboxStatus::Running;
    web.started_at = Some(at(3_100));
    web.running_since = Some(at(3_100));
    src.create_sandbox(&web).expect("create");
    let mut paused = record("paused", 4_000);
    paused.status = SandboxStatus::Paused;
    paused.active_ms = 1_234;
    src.create_sandbox(&paused).expect("create");
    // An earlier snapshot of the same name, deleted before the live one was taken.
    let mut gone = snapshot("default", Some("base"), at(4_500));
    src.create_snapshot(&gone, at(4_500), 0).expect("snapshot");
    gone.status = SnapshotStatus::Deleted;
    src.update_snapshot(&mut gone).expect("deleted");
    let now = at(5_000);
    let mut ready = snapshot("default", Some("base"), now);
    ready.source_sandbox = web.id;
    assert!(matches!(
        src.create_snapshot(&ready, now, 0).expect("snapshot"),
        sbx_store::SnapshotCreateOutcome::Created
    ));
    ready.status = SnapshotStatus::Ready;
    ready.stored_bytes = 4096;
    ready.expires_at = now + Duration::days(7);
    src.update_snapshot(&mut ready).expect("ready");
    src.put_secret(&SecretRecord {
        workspace: "default".into(),
        name: "TOKEN".into(),
        nonce: vec![1; 12],
        ciphertext: vec![2; 40],
        created_at: at(6_000),
        updated_at: at(6_000),
    })
    .expect("secret");
    src.create_e2b_record(&sbx_store::E2bRecord {
        sandbox_id: web.id,
        workspace: "default".into(),
        template_id: "base".into(),
        metadata: [("team".to_string(), "x".to_string())].into(),
        end_at: at(9_000),
        auto_pause: true,
        envd_access_token: "envd-token".into(),
        allow_internet_access: true,
        allow_public_traffic: false,
        traffic_access_token: Some("traffic-token".into()),
        generation: 0,
    })
    .expect("e2b record");
    src.put_preview(&sbx_store::PreviewRecord {
        sandbox_id: web.id,
        workspace: "default".into(),
        token: Some("preview-token".into()),
    })
    .expect("preview row");
    let volume = sbx_store::VolumeRecord {
        id: uuid::Uuid::new_v4(),
        workspace: "default".into(),
        name: "data".into(),
        kind: "local".into(),
        size_mb: 64,
        node_id: "node-a".into(),
        created_at: at(3_000),
    };
    assert!(src.insert_volume(&volume).expect("volume row"));
    src.put_volume_mounts(&[sbx_store::VolumeMountRecord {
        sandbox_id: web.id,
        volume_id: volume.id,
        path: "/data".into(),
        read_only: true,
    }])
    .expect("mount row");
    src.put_image(&sbx_store::ImageRecord {
        workspace: "default".into(),
        name: "py".into(),
        tag: "1".into(),
        digest: format!("sha256:{}", "a".repeat(64)),
        size_bytes: 1024,
        origin: "import".into(),
        config: "{}".into(),
        node_id: "node-a".into(),
        created_at: at(4_000),
    })
    .expect("image row");
    src.create_template(&sbx_store::TemplateRecord {
        workspace: "default".into(),
        name: "web".into(),
        spec: "{}".into(),
        status: "READY".into(),
        error: None,
        image_ref: "default".into(),
        snapshot_id: Some(uuid::Uuid::new_v4()),
        generation: 0,
        created_at: at(5_000),
        updated_at: at(5_000),
    })
    .expect("template row");
    src
}

/// What a row compares as across stores: everything but the generation.
fn same<T: Clone + PartialEq + std::fmt::Debug>(a: &T, b: &T, strip: impl Fn(&mut T)) {
    let (mut a, mut b) = (a.clone(), b.clone());
    strip(&mut a);
    strip(&mut b);
    assert_eq!(a, b);
}

pub fn copy_store_moves_every_row_and_finishes_an_interrupted_copy(target: &dyn Store, _: Other) {
    let src = populated();
    let report = copy_store(&src, target).expect("copy");
    let all = |n| Copied {
        copied: n,
        present: 0,
    };
    assert_eq!(report.api_keys, all(2));
    assert_eq!(report.sandboxes, all(3));
    assert_eq!(report.snapshots, all(2));
    assert_eq!(report.secrets, all(1));
    assert_eq!(report.e2b_records, all(1));
    assert_eq!(report.previews, all(1));
    assert_eq!(report.volumes, all(1));
    assert_eq!(report.volume_mounts, all(1));
    assert_eq!(report.images, all(1));
    assert_eq!(report.templates, all(1));

    let statuses = [
        SandboxStatus::Running,
        SandboxStatus::Paused,
        SandboxStatus::Terminated,
    ];
    let mut from = src.sandboxes_in_status(None, &statuses).expect("read");
    let mut to = target.sandboxes_in_status(None, &statuses).expect("read");
    from.sort_by_key(|r| r.id);
    to.sort_by_key(|r| r.id);
    assert_eq!(from.len(), to.len());
    for (a, b) in from.iter().zip(&to) {
        same(a, b, |r| r.generation = 0);
    }
    // The active "web" holds its name in the target too.
    let holder = target
        .active_sandbox_named("default", "web")
        .expect("read")
        .expect("held");
    assert_eq!(holder.status, SandboxStatus::Running);
    let snaps = [SnapshotStatus::Ready, SnapshotStatus::Deleted];
    let mut from = src.snapshots_in_status(&snaps).expect("read");
    let mut to = target.snapshots_in_status(&snaps).expect("read");
    from.sort_by_key(|r| r.id);
    to.sort_by_key(|r| r.id);
    assert_eq!(from.len(), 2);
    for (a, b) in from.iter().zip(&to) {
        same(a, b, |r| r.generation = 0);
    }
    assert_eq!(
        target.get_secret("default", "TOKEN").expect("read"),
        src.get_secret("default", "TOKEN").expect("read")
    );
    let mut keys = target.list_api_keys().expect("keys");
    let mut want = src.list_api_keys().expect("keys");
    keys.sort_by_key(|k| k.id);
    want.sort_by_key(|k| k.id);
    assert_eq!(keys, want);
    let e2b = |s: &dyn Store| s.list_e2b_records(None, &Default::default()).expect("e2b");
    assert_eq!(e2b(target), e2b(&src));
    assert_eq!(
        target.list_previews().unwrap(),
        src.list_previews().unwrap()
    );
    assert_eq!(
        target.list_images(None).unwrap(),
        src.list_images(None).unwrap()
    );
    assert_eq!(
        target.list_templates(None).unwrap(),
        src.list_templates(None).unwrap()
    );
    let volumes = src.list_volumes(None).unwrap();
    assert_eq!(target.list_volumes(None).unwrap(), volumes);
    assert_eq!(
        target.volume_mounts(volumes[0].id).unwrap(),
        src.volume_mounts(volumes[0].id).unwrap()
    );

    // Run again (as after a copy interrupted half-way): nothing is written twice.
    let again = copy_store(&src, target).expect("copy again");
    let none = |n| Copied {
        copied: 0,
        present: n,
    };
    assert_eq!(again.api_keys, none(2));
    assert_eq!(again.sandboxes, none(3));
    assert_eq!(again.snapshots, none(2));
    assert_eq!(again.secrets, none(1));
    assert_eq!(again.e2b_records, none(1));
    assert_eq!(again.previews, none(1));
    assert_eq!(again.volumes, none(1));
    assert_eq!(again.volume_mounts, none(1));
    assert_eq!(again.images, none(1));
    assert_eq!(again.templates, none(1));

    // A target that has an active sandbox of the same name is refused, not merged.
    let other = populated();
    match copy_store(&other, target) {
        Err(StoreError::Conflict(why)) => {
            assert!(why.to_string().contains("empty database"), "{why}")
        }
        got => panic!("a clashing copy must be refused: {got:?}"),
    }
}
