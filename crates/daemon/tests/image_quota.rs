//! The per-tenant image storage quota (`--image-quota-mb`) on a real sbxd.
//!
//! With a 1 MiB quota and images of 600 KiB: the first import fits, the same
//! content under a second name costs nothing, other content is `403
//! image_quota_exceeded` with nothing stored (its unpacked root filesystem is
//! swept), moving a name off content that another name still holds does not
//! free it, and moving the last name does (the old content is swept). Another
//! tenant has its own quota. The list answers `usageBytes` and `quotaBytes`.

mod common;

use common::oci::{image_dirs, layer, oci_layout, Entry};
use common::{assert_error, Daemon, KillLeftovers};
use sbx_api_types::signing_key::hashed_signing_key;
use serde_json::{json, Value};

/// An image of one 600 KiB file whose bytes depend on `seed`.
fn image(seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..600 * 1024u32)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    oci_layout(&[layer(&[Entry::File("blob", data, 0o644)])], json!({}))
}

async fn import(d: &Daemon, name_tag: &str, archive: Vec<u8>, key: Option<&str>) -> (u16, Value) {
    let (name, tag) = name_tag.split_once(':').unwrap();
    let auth = key.map(|k| format!("Bearer {}", hashed_signing_key(k)));
    let mut headers = vec![("content-type", "application/x-tar")];
    if let Some(a) = auth.as_deref() {
        headers.push(("authorization", a));
    }
    d.call_with(
        "POST",
        &format!("/v1/images?name={name}&tag={tag}"),
        Some(archive),
        &headers,
    )
    .await
}

/// `name:tag` of every listed image, with the usage figures.
async fn listing(d: &Daemon) -> (Vec<String>, u64, u64) {
    let (status, list) = d.call("GET", "/v1/images", None).await;
    assert_eq!(status, 200, "{list}");
    let names = list["data"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}:{}",
                i["name"].as_str().unwrap(),
                i["tag"].as_str().unwrap()
            )
        })
        .collect();
    (
        names,
        list["data"]["usageBytes"].as_u64().unwrap(),
        list["data"]["quotaBytes"].as_u64().unwrap(),
    )
}

fn hex(v: &Value) -> String {
    v["data"]["digest"].as_str().unwrap()["sha256:".len()..].to_string()
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_tenants_images_stay_within_its_quota_and_refusals_store_nothing() {
    let d = Daemon::start(&["--image-quota-mb", "1"]).await;
    let _leftovers = KillLeftovers::of(&d);
    let (status, a) = import(&d, "a:1", image(1), None).await;
    assert_eq!(status, 201, "{a}");
    let size = a["data"]["sizeBytes"].as_u64().unwrap();
    assert_eq!(size, 600 * 1024, "{a}");
    assert_eq!(
        listing(&d).await,
        (
            vec!["default:latest".into(), "a:1".into()],
            size,
            1024 * 1024
        )
    );

    // The same content under a second name costs nothing.
    let (status, again) = import(&d, "a:again", image(1), None).await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(listing(&d).await.1, size);

    // Other content would take 1.2 MiB: refused, nothing named or left on disk.
    let refused = import(&d, "b:1", image(2), None).await;
    assert_error(&refused, 403, "image_quota_exceeded");
    let message = refused.1["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("quota"), "{refused:?}");
    let (names, used, _) = listing(&d).await;
    assert_eq!(names, ["default:latest", "a:1", "a:again"]);
    assert_eq!(used, size);
    assert_eq!(image_dirs(&d), [hex(&a)]);

    // Moving a:1 to new content while a:again holds the old: still 1.2 MiB.
    let refused = import(&d, "a:1", image(2), None).await;
    assert_error(&refused, 403, "image_quota_exceeded");
    assert_eq!(image_dirs(&d), [hex(&a)]);
    let (status, got) = d.call("GET", "/v1/images/a:1", None).await;
    assert_eq!((status, hex(&got)), (200, hex(&a)), "a:1 unchanged");

    // Once a:1 is the old content's last name, moving it frees that content.
    assert_eq!(d.call("DELETE", "/v1/images/a:again", None).await.0, 204);
    let (status, moved) = import(&d, "a:1", image(2), None).await;
    assert_eq!(status, 201, "{moved}");
    assert_ne!(hex(&moved), hex(&a));
    assert_eq!(image_dirs(&d), [hex(&moved)], "the old content is swept");
    assert_eq!(listing(&d).await.1, size);

    // Another tenant has its own quota.
    let other = d.create_key("ws-quota-other", None);
    let (status, theirs) = import(&d, "b:1", image(3), Some(&other)).await;
    assert_eq!(status, 201, "{theirs}");
    let (names, used, _) = listing(&d).await;
    assert_eq!(
        (names, used),
        (vec!["default:latest".into(), "a:1".into()], size)
    );
}
