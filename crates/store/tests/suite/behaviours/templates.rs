//! Template behaviours: names unique per tenant, read back as written,
//! listed per tenant, updated only at the generation read (compare-and-set),
//! deleted at a generation; the template of a sandbox recorded and read.

use super::{at, Other};
use sbx_store::{Store, TemplateRecord};
use uuid::Uuid;

fn template(workspace: &str, name: &str) -> TemplateRecord {
    TemplateRecord {
        workspace: workspace.into(),
        name: name.into(),
        spec: r#"{"image":"py:1"}"#.into(),
        status: "BUILDING".into(),
        error: None,
        image_ref: "py:1".into(),
        snapshot_id: None,
        generation: 0,
        created_at: at(1_700_000_000_123),
        updated_at: at(1_700_000_000_123),
    }
}

pub fn templates_are_unique_per_tenant_compare_and_set_and_deleted(
    store: &dyn Store,
    other: Other,
) {
    let a = template("acme/production", "web");
    assert!(store.create_template(&a).unwrap());
    assert!(!store.create_template(&a).unwrap(), "the name is held");
    let b = template("globex/production", "web");
    assert!(store.create_template(&b).unwrap(), "another tenant's name");
    assert_eq!(
        store.get_template("acme/production", "web").unwrap(),
        Some(a.clone())
    );
    assert_eq!(store.get_template("acme/production", "api").unwrap(), None);
    assert_eq!(
        store.list_templates(Some("acme/production")).unwrap(),
        vec![a.clone()]
    );
    assert_eq!(store.list_templates(None).unwrap(), vec![a.clone(), b]);

    // BUILDING -> READY at generation 0 wins once; a second writer that read
    // generation 0 loses and changes nothing.
    let snap = Uuid::new_v4();
    let ready = TemplateRecord {
        status: "READY".into(),
        snapshot_id: Some(snap),
        image_ref: format!("py:1@sha256:{}", "1".repeat(64)),
        updated_at: at(1_700_000_001_000),
        ..a.clone()
    };
    assert!(store.update_template(&ready).unwrap());
    let failed = TemplateRecord {
        status: "FAILED".into(),
        error: Some("start command exited 3".into()),
        ..a.clone()
    };
    assert!(
        !other().update_template(&failed).unwrap(),
        "stale generation"
    );
    let stored = other().get_template("acme/production", "web").unwrap();
    assert_eq!(
        stored,
        Some(TemplateRecord {
            generation: 1,
            ..ready.clone()
        })
    );

    // Delete at a stale generation does nothing; at the current one, removes.
    assert!(!store.delete_template("acme/production", "web", 0).unwrap());
    assert!(store.delete_template("acme/production", "web", 1).unwrap());
    assert_eq!(store.get_template("acme/production", "web").unwrap(), None);
    assert!(!store.update_template(&ready).unwrap(), "gone");

    let sandbox = Uuid::new_v4();
    assert_eq!(store.sandbox_template(sandbox).unwrap(), None);
    store.set_sandbox_template(sandbox, "web").unwrap();
    assert_eq!(
        other().sandbox_template(sandbox).unwrap().as_deref(),
        Some("web")
    );
}
