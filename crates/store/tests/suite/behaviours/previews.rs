//! Preview-access behaviours: a row per sandbox, replaced by a second put,
//! read back as written, deleted once, listed by sandbox id.

use super::{record, Other};
use sbx_store::{PreviewRecord, Store};

pub fn preview_rows_are_put_replaced_listed_and_deleted(store: &dyn Store, _other: Other) {
    let a = record("a", 1_000);
    let b = record("b", 2_000);
    for s in [&a, &b] {
        store.create_sandbox(s).unwrap();
    }
    assert_eq!(store.get_preview(a.id).unwrap(), None);
    let public = PreviewRecord {
        sandbox_id: a.id,
        workspace: a.workspace.clone(),
        token: None,
    };
    store.put_preview(&public).unwrap();
    assert_eq!(store.get_preview(a.id).unwrap(), Some(public.clone()));
    // A second put replaces the row (a public preview gets a token).
    let locked = PreviewRecord {
        token: Some("t".repeat(64)),
        ..public
    };
    store.put_preview(&locked).unwrap();
    assert_eq!(store.get_preview(a.id).unwrap(), Some(locked.clone()));
    let other = PreviewRecord {
        sandbox_id: b.id,
        workspace: b.workspace.clone(),
        token: None,
    };
    store.put_preview(&other).unwrap();
    let mut want = vec![locked, other];
    want.sort_by_key(|r| r.sandbox_id.to_string());
    let mut listed = store.list_previews().unwrap();
    listed.sort_by_key(|r| r.sandbox_id.to_string());
    assert_eq!(listed, want);
    // A row outlives nothing: once its sandbox ended, the sweep deletes it.
    let mut ended = store.get_sandbox(b.id).unwrap().unwrap();
    ended.status = sbx_api_types::SandboxStatus::Terminated;
    ended.ended_at = Some(super::at(3_000));
    store.update_sandbox(&mut ended).unwrap();
    assert_eq!(store.delete_ended_previews().unwrap(), 1);
    assert_eq!(store.delete_ended_previews().unwrap(), 0);
    assert_eq!(store.get_preview(b.id).unwrap(), None);
    assert!(store.get_preview(a.id).unwrap().is_some());
    assert!(store.delete_preview(a.id).unwrap());
    assert!(!store.delete_preview(a.id).unwrap());
    assert_eq!(store.get_preview(a.id).unwrap(), None);
    assert!(store.list_previews().unwrap().is_empty());
}
