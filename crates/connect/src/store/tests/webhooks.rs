//! Webhook tokens, settings and the inbox: the same semantics on both backends.

use super::{on_both_backends, Fixture};
use crate::commit::{CommitError, CommitTarget};
use crate::model::{DeliveryStatus, FailureCategory, SignatureScheme, SyncMode};
use crate::spool::SpoolWriter;
use crate::store::{DeliveryInsert, NewDelivery, WebhookSettings};
use chrono::Utc;

fn settings() -> WebhookSettings {
    WebhookSettings {
        scheme: SignatureScheme::Standard,
        signature_header: None,
        signature_prefix: None,
        id_header: None,
        secret: vec![1, 2, 3],
    }
}

fn delivery(id: &str, sender: &str) -> NewDelivery {
    NewDelivery {
        id: id.into(),
        connection_id: "c1".into(),
        webhook: "events".into(),
        sender_id: sender.into(),
        body: br#"{"a":1}"#.to_vec(),
        headers: "{}".into(),
    }
}

fn stored(r: DeliveryInsert) -> crate::model::Delivery {
    match r {
        DeliveryInsert::Stored(d) => d,
        other => panic!("not stored: {other:?}"),
    }
}

fn commit(f: &Fixture, delivery: &str, n: usize) -> Result<u64, CommitError> {
    let mut w = SpoolWriter::create(&f.spool_path).expect("spool");
    for i in 0..n {
        w.append_record(None, &format!("{{\"i\":{i}}}"))
            .expect("record");
    }
    let target = CommitTarget {
        workspace: "ws",
        connection_id: "c1",
        sync: "events",
        mode: SyncMode::Append,
        run_id: None,
        delivery: Some(delivery),
    };
    Ok(f.store.commit(target, w.finish().expect("finish"))?.records)
}

pub(super) fn tokens_open_their_webhook_and_settings_round_trip(f: &Fixture) {
    let s = &f.store;
    let tokens = [
        ("events".to_string(), "h1".to_string()),
        ("raw".to_string(), "h2".to_string()),
    ];
    s.set_webhooks("ws", "c1", &settings(), &tokens)
        .expect("set");
    assert_eq!(
        s.webhook_settings("ws", "c1").expect("get"),
        Some(settings())
    );
    assert_eq!(s.webhook_settings("ws", "c2").expect("get"), None);
    let t = s.find_webhook_token("h1").expect("find").expect("known");
    assert_eq!(
        (
            t.workspace.as_str(),
            t.connection_id.as_str(),
            t.webhook.as_str()
        ),
        ("ws", "c1", "events")
    );
    // A rotation replaces the webhook's token: the old one opens nothing.
    let hmac = WebhookSettings {
        scheme: SignatureScheme::HmacSha256,
        signature_header: Some("x-hub-signature-256".into()),
        signature_prefix: Some("sha256=".into()),
        id_header: Some("x-github-delivery".into()),
        secret: vec![9],
    };
    s.set_webhooks(
        "ws",
        "c1",
        &hmac,
        &[("events".to_string(), "h3".to_string())],
    )
    .expect("rotate");
    assert!(s.find_webhook_token("h1").expect("find").is_none());
    assert!(s.find_webhook_token("h3").expect("find").is_some());
    assert!(
        s.find_webhook_token("h2").expect("find").is_some(),
        "raw kept its URL"
    );
    assert_eq!(s.webhook_settings("ws", "c1").expect("get"), Some(hmac));
    assert_eq!(
        s.webhook_names("ws", "c1").expect("names"),
        vec!["events", "raw"]
    );
}

pub(super) fn duplicates_are_dropped_and_the_inbox_is_bounded(f: &Fixture) {
    let s = &f.store;
    let d1 = stored(
        s.insert_delivery("ws", &delivery("d1", "evt-1"), 2)
            .expect("insert"),
    );
    assert_eq!(d1.status, DeliveryStatus::Pending);
    match s
        .insert_delivery("ws", &delivery("d1b", "evt-1"), 2)
        .expect("again")
    {
        DeliveryInsert::Duplicate(d) => assert_eq!(d.id, "d1"),
        other => panic!("{other:?}"),
    }
    // Another workspace's sender id is its own.
    stored(
        s.insert_delivery("other", &delivery("o1", "evt-1"), 2)
            .expect("other ws"),
    );
    stored(
        s.insert_delivery("ws", &delivery("d2", "evt-2"), 2)
            .expect("second"),
    );
    assert_eq!(
        s.insert_delivery("ws", &delivery("d3", "evt-3"), 2)
            .expect("full"),
        DeliveryInsert::InboxFull
    );
    assert_eq!(s.pending_deliveries("ws", "c1").expect("count"), 2);
    let page = s.list_deliveries("ws", "c1", None, None, 10).expect("list");
    assert_eq!(
        page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["d2", "d1"]
    );
    let after = s
        .list_deliveries("ws", "c1", None, Some("d2"), 10)
        .expect("page 2");
    assert_eq!(after.len(), 1);
    assert!(
        s.get_delivery("other", "d1").is_err(),
        "scoped by workspace"
    );
}

pub(super) fn a_delivery_commits_once_with_its_records(f: &Fixture) {
    let s = &f.store;
    stored(
        s.insert_delivery("ws", &delivery("d1", "evt-1"), 10)
            .expect("insert"),
    );
    let now = Utc::now();
    let due = s.due_deliveries(now, 10).expect("due");
    assert_eq!(due, vec![("ws".to_string(), "d1".to_string())]);
    let lease = now + chrono::Duration::seconds(600);
    let job = s
        .claim_delivery("ws", "d1", "run-1", now, lease)
        .expect("claim")
        .expect("claimed");
    assert_eq!(job.body, br#"{"a":1}"#);
    assert_eq!(job.delivery.attempts, 1);
    // Leased: neither due nor claimable again until released.
    assert!(s.due_deliveries(now, 10).expect("due").is_empty());
    assert!(s
        .claim_delivery("ws", "d1", "run-2", now, lease)
        .expect("claim")
        .is_none());
    assert_eq!(
        s.release_deliveries(&["run-1".to_string()])
            .expect("release"),
        1
    );
    assert_eq!(s.due_deliveries(Utc::now(), 10).expect("due").len(), 1);

    assert_eq!(commit(f, "d1", 3).expect("commit"), 3);
    let d = s.get_delivery("ws", "d1").expect("get");
    assert_eq!(
        (d.status, d.records_committed),
        (DeliveryStatus::Committed, 3)
    );
    // A second commit of the same delivery writes nothing.
    assert!(matches!(commit(f, "d1", 2), Err(CommitError::Settled(_))));
    assert_eq!(s.count_records("ws", "c1", "events").expect("count"), 3);
    assert!(!s
        .fail_delivery("ws", "d1", FailureCategory::Platform, "x")
        .expect("fail"));
    assert!(s.due_deliveries(Utc::now(), 10).expect("due").is_empty());
}

pub(super) fn a_failed_delivery_commits_nothing_later(f: &Fixture) {
    let s = &f.store;
    stored(
        s.insert_delivery("ws", &delivery("d1", "evt-1"), 10)
            .expect("insert"),
    );
    assert!(s
        .fail_delivery("ws", "d1", FailureCategory::PackageError, "threw")
        .expect("fail"));
    let d = s.get_delivery("ws", "d1").expect("get");
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert_eq!(d.failure_category, Some(FailureCategory::PackageError));
    assert_eq!(d.failure_kind.as_deref(), Some("threw"));
    assert!(matches!(commit(f, "d1", 1), Err(CommitError::Settled(_))));
    assert_eq!(s.count_records("ws", "c1", "events").expect("count"), 0);
    let failed = s
        .list_deliveries("ws", "c1", Some(DeliveryStatus::Failed), None, 10)
        .expect("list");
    assert_eq!(failed.len(), 1);
    assert!(s
        .list_deliveries("ws", "c1", Some(DeliveryStatus::Pending), None, 10)
        .expect("list")
        .is_empty());
}

pub(super) fn webhook_secrets_are_listed_and_replaced_by_compare_and_set(f: &Fixture) {
    let s = &f.store;
    s.set_webhooks("ws", "c1", &settings(), &[]).expect("set");
    let none = WebhookSettings {
        scheme: SignatureScheme::None,
        secret: Vec::new(),
        ..settings()
    };
    s.set_webhooks("ws", "c2", &none, &[]).expect("set");
    // Scheme none has no secret to reseal.
    assert_eq!(
        s.webhook_secrets().expect("list"),
        vec![("ws".to_string(), "c1".to_string(), vec![1, 2, 3])]
    );
    assert!(!s
        .replace_webhook_secret("ws", "c1", &[9], &[4])
        .expect("stale"));
    assert!(s
        .replace_webhook_secret("ws", "c1", &[1, 2, 3], &[4])
        .expect("cas"));
    assert_eq!(
        s.webhook_settings("ws", "c1")
            .expect("get")
            .expect("set")
            .secret,
        vec![4]
    );
}

on_both_backends!(
    webhook_secrets_are_listed_and_replaced_by_compare_and_set,
    tokens_open_their_webhook_and_settings_round_trip,
    duplicates_are_dropped_and_the_inbox_is_bounded,
    a_delivery_commits_once_with_its_records,
    a_failed_delivery_commits_nothing_later,
);
