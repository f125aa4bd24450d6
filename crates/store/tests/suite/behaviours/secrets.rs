//! Secret behaviours of key rotation: listing every workspace's secrets and the
//! compare-and-set replacement of one secret's ciphertext.

use super::{at, Other};
use sbx_store::{SecretRecord, Store};

fn secret(workspace: &str, name: &str, byte: u8) -> SecretRecord {
    SecretRecord {
        workspace: workspace.into(),
        name: name.into(),
        nonce: vec![byte; 12],
        ciphertext: vec![byte, 0, 255],
        created_at: at(10),
        updated_at: at(20),
    }
}

pub fn every_secret_of_every_workspace_is_listed_in_order(store: &dyn Store, _: Other) {
    assert!(store.list_all_secrets().unwrap().is_empty());
    store.put_secret(&secret("b/production", "X", 1)).unwrap();
    store.put_secret(&secret("a/staging", "b", 2)).unwrap();
    store.put_secret(&secret("a/staging", "B", 3)).unwrap();
    store.put_secret(&secret("a/production", "Z", 4)).unwrap();
    let all = store.list_all_secrets().unwrap();
    let keys: Vec<(&str, &str)> = all
        .iter()
        .map(|s| (s.workspace.as_str(), s.name.as_str()))
        .collect();
    // Byte order on both backends, as list_secrets sorts names.
    assert_eq!(
        keys,
        vec![
            ("a/production", "Z"),
            ("a/staging", "B"),
            ("a/staging", "b"),
            ("b/production", "X")
        ]
    );
    assert_eq!(
        all[0],
        secret("a/production", "Z", 4),
        "every field is read"
    );
    store.delete_secret("a/staging", "b").unwrap();
    assert_eq!(store.list_all_secrets().unwrap().len(), 3);
}

pub fn ciphertext_replacement_is_compare_and_set(store: &dyn Store, other: Other) {
    let old = secret("ws/production", "TOKEN", 1);
    store.put_secret(&old).unwrap();
    store.put_secret(&secret("ws/staging", "TOKEN", 1)).unwrap();
    // The row still holds `old`: replaced, times kept, other rows untouched.
    assert!(store
        .replace_secret_ciphertext(&old, &[7; 25], &[7, 7, 7, 7])
        .unwrap());
    let got = other()
        .get_secret("ws/production", "TOKEN")
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.nonce.as_slice(), got.ciphertext.as_slice()),
        (&[7u8; 25][..], &[7u8, 7, 7, 7][..])
    );
    assert_eq!((got.created_at, got.updated_at), (at(10), at(20)));
    assert_eq!(
        store.get_secret("ws/staging", "TOKEN").unwrap().unwrap(),
        secret("ws/staging", "TOKEN", 1)
    );
    // A second replacement from the same stale read changes nothing.
    assert!(!store
        .replace_secret_ciphertext(&old, &[8; 25], &[8])
        .unwrap());
    assert_eq!(
        store.get_secret("ws/production", "TOKEN").unwrap().unwrap(),
        got
    );
    // A value written meanwhile (same nonce, other ciphertext) is not overwritten.
    let mut changed = got.clone();
    changed.ciphertext = vec![9, 9];
    other().put_secret(&changed).unwrap();
    assert!(!store
        .replace_secret_ciphertext(&got, &[8; 25], &[8])
        .unwrap());
    assert_eq!(
        store
            .get_secret("ws/production", "TOKEN")
            .unwrap()
            .unwrap()
            .ciphertext,
        vec![9, 9]
    );
    // A deleted secret is not brought back.
    store.delete_secret("ws/production", "TOKEN").unwrap();
    assert!(!store
        .replace_secret_ciphertext(&changed, &[8; 25], &[8])
        .unwrap());
    assert!(store
        .get_secret("ws/production", "TOKEN")
        .unwrap()
        .is_none());
}
