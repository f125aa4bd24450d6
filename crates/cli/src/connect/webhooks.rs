//! `sbx connect deliveries` and `sbx connect webhooks`: a connection's webhook deliveries,
//! and its delivery URLs and signing secret.

use crate::util::table;
use sbx_client::Client;
use serde_json::{json, Value};

/// The body of a webhook setup.
pub fn setup_request(
    scheme: &str,
    header: Option<String>,
    id_header: Option<String>,
    rotate_urls: bool,
) -> Value {
    let mut signature = json!({"scheme": scheme});
    if let Some(h) = header {
        signature["header"] = json!(h);
    }
    if let Some(h) = id_header {
        signature["idHeader"] = json!(h);
    }
    json!({"signature": signature, "rotateUrls": rotate_urls})
}

/// Makes the URLs and the secret; prints them (the only time they are shown).
pub async fn setup(c: &Client, connection: &str, req: &Value) -> anyhow::Result<u8> {
    let out = c.connect_setup_webhooks(connection, req).await?;
    let base = c.base_url().as_str().trim_end_matches('/').to_string();
    for w in out["webhooks"].as_array().into_iter().flatten() {
        let name = w["name"].as_str().unwrap_or("-");
        match w["path"].as_str() {
            Some(path) => println!("{name}\t{base}{path}"),
            None => println!("{name}\t(URL unchanged)"),
        }
    }
    println!("scheme\t{}", out["scheme"].as_str().unwrap_or("-"));
    if let Some(secret) = out["secret"].as_str() {
        println!("secret\t{secret}");
        eprintln!("the URLs and the secret are shown only now: store them with the sender");
    }
    Ok(0)
}

/// Prints one page of a connection's deliveries as a table.
pub async fn deliveries(
    c: &Client,
    connection: &str,
    status: Option<&str>,
    limit: u32,
) -> anyhow::Result<u8> {
    let (items, _) = c
        .connect_deliveries(connection, status, Some(limit.clamp(1, 1000)), None)
        .await?;
    let rows: Vec<Vec<String>> = items
        .into_iter()
        .map(|d| {
            vec![
                d.id,
                d.webhook,
                d.sender_id,
                d.status,
                d.received_at,
                d.attempts.to_string(),
                d.records_committed.to_string(),
                d.failure_category.unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "WEBHOOK", "DELIVERY", "STATUS", "RECEIVED", "ATTEMPTS", "RECORDS", "FAILURE"],
            &rows
        )
    );
    Ok(0)
}
