//! Image behaviours: `name:tag` unique per tenant and repointed by a put (which
//! returns the row it replaced), read back as written, listed per tenant,
//! found by digest across tenants, deleted.

use super::{at, Other};
use sbx_store::{ImageRecord, Store};

fn image(workspace: &str, name: &str, tag: &str, digest: &str) -> ImageRecord {
    ImageRecord {
        workspace: workspace.into(),
        name: name.into(),
        tag: tag.into(),
        digest: digest.into(),
        size_bytes: 4096,
        origin: "import".into(),
        config: r#"{"env":["A=1"]}"#.into(),
        node_id: "node-a".into(),
        created_at: at(1_700_000_000_123),
    }
}

pub fn images_are_named_per_tenant_repointed_found_by_digest_and_deleted(
    store: &dyn Store,
    _other: Other,
) {
    let d1 = format!("sha256:{}", "1".repeat(64));
    let d2 = format!("sha256:{}", "2".repeat(64));
    let a = image("acme/production", "py", "1", &d1);
    assert_eq!(store.put_image(&a).unwrap(), None);
    assert_eq!(
        store.get_image("acme/production", "py", "1").unwrap(),
        Some(a.clone())
    );
    // Another tenant's name for the same digest is its own row.
    let b = image("globex/production", "python", "latest", &d1);
    assert_eq!(store.put_image(&b).unwrap(), None);
    assert_eq!(
        store.get_image("globex/production", "py", "1").unwrap(),
        None
    );
    assert_eq!(
        store.images_with_digest(&d1).unwrap(),
        vec![a.clone(), b.clone()]
    );
    // Repointing a name returns what it named.
    let a2 = ImageRecord {
        origin: "sandbox".into(),
        ..image("acme/production", "py", "1", &d2)
    };
    assert_eq!(store.put_image(&a2).unwrap(), Some(a.clone()));
    assert_eq!(store.images_with_digest(&d1).unwrap(), vec![b.clone()]);
    assert_eq!(
        store.list_images(Some("acme/production")).unwrap(),
        vec![a2.clone()]
    );
    assert_eq!(store.list_images(None).unwrap().len(), 2);
    assert!(store.delete_image("acme/production", "py", "1").unwrap());
    assert!(!store.delete_image("acme/production", "py", "1").unwrap());
    assert!(store.images_with_digest(&d2).unwrap().is_empty());
    assert!(store
        .list_images(Some("acme/production"))
        .unwrap()
        .is_empty());
}
