//! The all-or-nothing commit: the same semantics on both backends.

use super::{on_both_backends, Fixture};
use crate::commit::{CommitError, CommitTarget};
use crate::model::SyncMode;
use crate::spool::{Spool, SpoolWriter};
use serde_json::json;

fn spool(
    f: &Fixture,
    records: &[(Option<&str>, serde_json::Value)],
    checkpoint: Option<serde_json::Value>,
) -> Spool {
    let mut w = SpoolWriter::create(&f.spool_path).expect("create");
    for (k, v) in records {
        w.append_record(*k, &v.to_string()).expect("record");
    }
    if let Some(c) = checkpoint {
        w.append_checkpoint(&c.to_string()).expect("checkpoint");
    }
    w.finish().expect("finish")
}

fn target(mode: SyncMode) -> CommitTarget<'static> {
    CommitTarget {
        workspace: "ws",
        connection_id: "c1",
        sync: "items",
        mode,
        run_id: None,
        delivery: None,
    }
}

fn data(f: &Fixture) -> Vec<serde_json::Value> {
    f.store
        .read_records("ws", "c1", "items", None, 1000)
        .expect("read")
        .into_iter()
        .map(|r| r.data)
        .collect()
}

on_both_backends!(
    append_inserts_and_keeps_last_checkpoint,
    merge_upserts_by_key,
    merge_record_without_key_writes_nothing,
    replace_swaps_dataset_and_failure_keeps_old,
    merge_across_chunks_keeps_the_last_record_of_each_key,
    merge_records_are_found_by_key,
);

pub(super) fn append_inserts_and_keeps_last_checkpoint(f: &Fixture) {
    let recs: Vec<_> = (0..150).map(|i| (None, json!({"i": i}))).collect();
    let s = spool(f, &recs, Some(json!({"page": 2})));
    let stats = f.store.commit(target(SyncMode::Append), s).expect("commit");
    assert_eq!(stats.records, 150);
    assert!(!f.spool_path.exists(), "spool deleted after commit");
    let s = spool(f, &[(None, json!({"i": 150}))], None);
    f.store.commit(target(SyncMode::Append), s).expect("commit");
    let got = data(f);
    assert_eq!(got.len(), 151);
    assert_eq!(got[0], json!({"i": 0}));
    assert_eq!(got[150], json!({"i": 150}));
    // A run without a checkpoint keeps the committed one.
    assert_eq!(
        f.store.get_checkpoint("ws", "c1", "items").expect("cp"),
        Some(json!({"page": 2}))
    );
    // Pagination by seq.
    let page = f
        .store
        .read_records("ws", "c1", "items", None, 100)
        .expect("page");
    let rest = f
        .store
        .read_records("ws", "c1", "items", page.last().map(|r| r.seq), 100)
        .expect("page");
    assert_eq!(page.len() + rest.len(), 151);
    assert_eq!(rest[0].data, json!({"i": 100}));
    // Tenancy: another workspace sees nothing.
    assert!(f
        .store
        .read_records("other", "c1", "items", None, 10)
        .expect("read")
        .is_empty());
}

pub(super) fn merge_upserts_by_key(f: &Fixture) {
    let s = spool(
        f,
        &[
            (Some("1"), json!({"id": 1, "v": "a"})),
            (Some("2"), json!({"id": 2, "v": "a"})),
        ],
        Some(json!({"c": 1})),
    );
    f.store.commit(target(SyncMode::Merge), s).expect("commit");
    let s = spool(
        f,
        &[
            (Some("2"), json!({"id": 2, "v": "b"})),
            (Some("3"), json!({"id": 3, "v": "b"})),
            (Some("3"), json!({"id": 3, "v": "c"})),
        ],
        Some(json!({"c": 2})),
    );
    let stats = f.store.commit(target(SyncMode::Merge), s).expect("commit");
    assert_eq!(stats.records, 3);
    assert_eq!(
        data(f),
        vec![
            json!({"id": 1, "v": "a"}),
            json!({"id": 2, "v": "b"}),
            json!({"id": 3, "v": "c"})
        ]
    );
    assert_eq!(
        f.store.get_checkpoint("ws", "c1", "items").expect("cp"),
        Some(json!({"c": 2}))
    );
}

pub(super) fn merge_records_are_found_by_key(f: &Fixture) {
    let s = spool(
        f,
        &[
            (Some("1"), json!({"id": 1, "v": "a"})),
            (Some("[2,\"x\"]"), json!({"id": 2, "v": "a"})),
        ],
        None,
    );
    f.store.commit(target(SyncMode::Merge), s).expect("commit");
    let s = spool(f, &[(Some("1"), json!({"id": 1, "v": "b"}))], None);
    f.store.commit(target(SyncMode::Merge), s).expect("commit");
    // The newest record of the key, with its new seq.
    let one = f
        .store
        .find_record("ws", "c1", "items", "1")
        .expect("find")
        .expect("key 1");
    assert_eq!(one.data, json!({"id": 1, "v": "b"}));
    assert_eq!(one.key.as_deref(), Some("1"));
    let last = f
        .store
        .read_records("ws", "c1", "items", None, 10)
        .expect("read");
    assert_eq!(last.last().map(|r| r.seq), Some(one.seq));
    // A composite key is its JSON array text.
    let two = f
        .store
        .find_record("ws", "c1", "items", "[2,\"x\"]")
        .expect("find");
    assert_eq!(two.map(|r| r.data), Some(json!({"id": 2, "v": "a"})));
    // No such key, another sync, another workspace: nothing.
    for (ws, sync, key) in [
        ("ws", "items", "3"),
        ("ws", "other", "1"),
        ("other", "items", "1"),
    ] {
        assert!(
            f.store
                .find_record(ws, "c1", sync, key)
                .expect("find")
                .is_none(),
            "{ws}/{sync}/{key}"
        );
    }
    // Append records carry no key: a key filter never matches them.
    let s = spool(f, &[(None, json!({"id": 9}))], None);
    let mut t = target(SyncMode::Append);
    t.sync = "log";
    f.store.commit(t, s).expect("commit");
    assert!(f
        .store
        .find_record("ws", "c1", "log", "9")
        .expect("find")
        .is_none());
}

pub(super) fn merge_record_without_key_writes_nothing(f: &Fixture) {
    let s = spool(f, &[(Some("1"), json!({"id": 1}))], Some(json!({"c": 1})));
    f.store.commit(target(SyncMode::Merge), s).expect("commit");
    let s = spool(
        f,
        &[(Some("2"), json!({"id": 2})), (None, json!({"x": 1}))],
        Some(json!({"c": 2})),
    );
    let err = f
        .store
        .commit(target(SyncMode::Merge), s)
        .expect_err("missing key");
    assert!(matches!(err, CommitError::MissingKey));
    assert!(!f.spool_path.exists(), "spool deleted after failure");
    assert_eq!(data(f), vec![json!({"id": 1})]);
    assert_eq!(
        f.store.get_checkpoint("ws", "c1", "items").expect("cp"),
        Some(json!({"c": 1}))
    );
}

pub(super) fn replace_swaps_dataset_and_failure_keeps_old(f: &Fixture) {
    let s = spool(f, &[(None, json!({"n": 1})), (None, json!({"n": 2}))], None);
    f.store
        .commit(target(SyncMode::Replace), s)
        .expect("commit");
    // Another sync of the same connection is untouched by a replace.
    let other = CommitTarget {
        sync: "other",
        ..target(SyncMode::Append)
    };
    let s = spool(f, &[(None, json!({"o": 1}))], None);
    f.store.commit(other, s).expect("commit");
    let s = spool(f, &[(None, json!({"n": 3}))], Some(json!({"v": 1})));
    f.store
        .commit(target(SyncMode::Replace), s)
        .expect("commit");
    assert_eq!(data(f), vec![json!({"n": 3})]);
    assert_eq!(
        f.store.count_records("ws", "c1", "other").expect("count"),
        1
    );
    // A damaged spool fails mid-way: the transaction rolls back, old data stays.
    let s = spool(f, &[(None, json!({"n": 4}))], Some(json!({"v": 2})));
    let mut bytes = std::fs::read(&f.spool_path).expect("read");
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&f.spool_path, &bytes).expect("write");
    assert!(f.store.commit(target(SyncMode::Replace), s).is_err());
    assert_eq!(data(f), vec![json!({"n": 3})]);
    assert_eq!(
        f.store.get_checkpoint("ws", "c1", "items").expect("cp"),
        Some(json!({"v": 1}))
    );
}

/// Keys repeated within and across the backends' insert chunks: each key ends with its
/// last record, and records read back in the order of those last records.
pub(super) fn merge_across_chunks_keeps_the_last_record_of_each_key(f: &Fixture) {
    let recs: Vec<(String, serde_json::Value)> = (0..2500)
        .map(|i| ((i % 700).to_string(), json!({"k": i % 700, "i": i})))
        .collect();
    let borrowed: Vec<(Option<&str>, serde_json::Value)> = recs
        .iter()
        .map(|(k, v)| (Some(k.as_str()), v.clone()))
        .collect();
    let s = spool(f, &borrowed[..1200], None);
    f.store.commit(target(SyncMode::Merge), s).expect("commit");
    let s = spool(f, &borrowed[1200..], Some(json!({"done": true})));
    let stats = f.store.commit(target(SyncMode::Merge), s).expect("commit");
    assert_eq!(stats.records, 1300);
    let want: Vec<serde_json::Value> = (1800..2500)
        .map(|i| json!({"k": i % 700, "i": i}))
        .collect();
    assert_eq!(data(f), want);
    let rows = f
        .store
        .read_records("ws", "c1", "items", None, 1000)
        .expect("read");
    assert_eq!(rows[0].key.as_deref(), Some("400"));
    assert!(rows.windows(2).all(|w| w[0].seq < w[1].seq));
}

/// 1,000,000 small records through spool + commit; prints records/s, and checks `min_rate`
/// (SQLite's target: 50,000/s; PostgreSQL's depends on the server, so it is only shown).
fn bench_commit_one_million_records(f: &Fixture, min_rate: Option<f64>) {
    let n = 1_000_000u64;
    let start = std::time::Instant::now();
    let mut w = SpoolWriter::create(&f.spool_path).expect("create");
    for i in 0..n {
        w.append_record(
            None,
            &format!(r#"{{"id":{i},"name":"item {i}","ok":true}}"#),
        )
        .expect("record");
    }
    let s = w.finish().expect("finish");
    let spooled = start.elapsed();
    let stats = f.store.commit(target(SyncMode::Append), s).expect("commit");
    let total = start.elapsed();
    assert_eq!(stats.records, n);
    let rate = n as f64 / total.as_secs_f64();
    println!("spool {spooled:?}, spool+commit {total:?}: {rate:.0} records/s");
    if let Some(min) = min_rate {
        assert!(rate >= min, "commit rate {rate:.0}/s below {min:.0}/s");
    }
}

#[test]
#[ignore = "benchmark; run with --ignored --nocapture (release recommended)"]
fn bench_commit_one_million_records_sqlite() {
    bench_commit_one_million_records(&super::sqlite(), Some(50_000.0));
}

#[test]
#[ignore = "benchmark; run with --ignored --nocapture (release recommended)"]
fn bench_commit_one_million_records_postgres() {
    if let Some(f) = super::postgres() {
        bench_commit_one_million_records(&f, None);
    }
}
