//! Volume behaviours: names unique per tenant, read back as written, listed
//! per tenant, mounts recorded per sandbox and deleted with their volume.

use super::{at, Other};
use sbx_store::{Store, VolumeMountRecord, VolumeRecord};
use uuid::Uuid;

fn volume(workspace: &str, name: &str) -> VolumeRecord {
    VolumeRecord {
        id: Uuid::new_v4(),
        workspace: workspace.into(),
        name: name.into(),
        kind: "local".into(),
        size_mb: 64,
        node_id: "node-a".into(),
        created_at: at(1_700_000_000_123),
    }
}

pub fn volumes_are_unique_per_tenant_listed_and_deleted_with_their_mounts(
    store: &dyn Store,
    _other: Other,
) {
    let a = volume("acme/production", "data");
    assert!(store.insert_volume(&a).unwrap());
    // The same name in the same tenant is refused and changes nothing.
    let dup = volume("acme/production", "data");
    assert!(!store.insert_volume(&dup).unwrap());
    assert_eq!(store.get_volume(dup.id).unwrap(), None);
    // Another tenant may use the name.
    let b = volume("globex/production", "data");
    assert!(store.insert_volume(&b).unwrap());
    assert_eq!(store.get_volume(a.id).unwrap(), Some(a.clone()));
    assert_eq!(
        store.volume_named("acme/production", "data").unwrap(),
        Some(a.clone())
    );
    assert_eq!(
        store.volume_named("acme/production", "other").unwrap(),
        None
    );
    assert_eq!(
        store.list_volumes(Some("acme/production")).unwrap(),
        vec![a.clone()]
    );
    assert_eq!(store.list_volumes(None).unwrap().len(), 2);

    let sandbox = Uuid::new_v4();
    let mounts = vec![
        VolumeMountRecord {
            sandbox_id: sandbox,
            volume_id: a.id,
            path: "/data".into(),
            read_only: false,
        },
        VolumeMountRecord {
            sandbox_id: sandbox,
            volume_id: a.id,
            path: "/ro".into(),
            read_only: true,
        },
    ];
    store.put_volume_mounts(&mounts).unwrap();
    // Putting the same rows again is a no-op, not a conflict.
    store.put_volume_mounts(&mounts).unwrap();
    assert_eq!(store.sandbox_mounts(sandbox).unwrap(), mounts);
    assert_eq!(store.volume_mounts(a.id).unwrap(), mounts);
    assert!(store.volume_mounts(b.id).unwrap().is_empty());
    assert!(store.sandbox_mounts(Uuid::new_v4()).unwrap().is_empty());

    assert!(store.delete_volume(a.id).unwrap());
    assert!(!store.delete_volume(a.id).unwrap());
    assert!(store.sandbox_mounts(sandbox).unwrap().is_empty());
    assert_eq!(store.get_volume(a.id).unwrap(), None);
    // Its name is free again.
    assert!(store
        .insert_volume(&volume("acme/production", "data"))
        .unwrap());
}
