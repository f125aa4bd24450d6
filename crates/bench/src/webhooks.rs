//! The `webhook-deliveries` row: how fast sbxd accepts webhook deliveries (a `202` only
//! once the delivery is durably stored in the inbox) and how fast they are processed end
//! to end (one job sandbox per delivery, records committed), with the example package
//! `connector-webhooks` (its `events` webhook merges one record per event).
//!
//! The deliveries go to several connections at once, each within its rate limit's burst
//! (10/s, bursts of 50 by default): the bench measures the server, not the limiter.

use crate::stats::{Kind, Row, Side, Target};
use crate::Bench;
use anyhow::{bail, Result};
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

/// The example package with webhooks.
const PACKAGE: &str = "connector-webhooks";
/// Connections the deliveries are spread over.
const CONNECTIONS: usize = 4;
/// Deliveries per connection: under the default burst of 50, so none is refused.
const PER_CONNECTION: usize = 40;
/// Events (records) per delivery.
const EVENTS: usize = 10;
/// Senders posting at once.
const SENDERS: usize = 8;
/// Longest wait for every delivery to be processed.
const PROCESS_WAIT: Duration = Duration::from_secs(900);

/// What one measurement found.
struct Measured {
    /// Each delivery's time to its `202`, ms.
    accept_ms: Vec<f64>,
    accept_secs: f64,
    process_secs: f64,
    records: u64,
}

impl Bench {
    /// The `webhook-deliveries` row (sbx only: runsc has no webhooks).
    pub(crate) async fn webhooks(&mut self) {
        let mut row = Row::new("webhook-deliveries", Kind::Latency, Target::None);
        let mut conns = Vec::new();
        match self.webhooks_measure(&mut conns).await {
            Ok(m) => {
                let n = (CONNECTIONS * PER_CONNECTION) as f64;
                let accepted = n / m.accept_secs;
                let processed = n / m.process_secs;
                row.sbx.ms = m.accept_ms;
                row.raw = Side::skipped(format!(
                    "sbx only: {accepted:.0} deliveries/s accepted, {processed:.1}/s processed end to end"
                ));
                self.notes.push(format!(
                    "`webhook-deliveries`: {n} deliveries of {EVENTS} events each (scheme `none`, \
                     an `X-Delivery` id) to {CONNECTIONS} connections of `{PACKAGE}` at once, \
                     {SENDERS} senders. The cells are each delivery's time to its `202` (stored \
                     durably in the inbox first): all were accepted in {:.2} s, **{accepted:.0} \
                     deliveries/s**. Processed end to end (one fresh job sandbox per delivery, at \
                     most 4 at a time, records and the delivery's status committed in one \
                     transaction): all committed {:.1} s after the first was sent, **{processed:.1} \
                     deliveries/s**, {:.0} records/s ({} records).",
                    m.accept_secs,
                    m.process_secs,
                    m.records as f64 / m.process_secs,
                    m.records
                ));
            }
            Err(e) => {
                eprintln!("  ! webhooks: {e:#}");
                row.sbx.fail(&e);
                row.raw = Side::skipped("sbx only");
            }
        }
        for c in conns {
            let path = format!("/v1/connect/connections/{c}");
            let _ = self.api.call(Method::DELETE, &path, None).await;
        }
        self.put("webhook-deliveries", row);
    }

    async fn webhooks_measure(&self, conns: &mut Vec<String>) -> Result<Measured> {
        eprintln!("[webhooks] package, build, {CONNECTIONS} connections");
        let version = format!("1.0.0-bench.{}", self.tag);
        self.upload_and_build(PACKAGE, &version).await?;
        let mut urls = Vec::new();
        for i in 0..CONNECTIONS {
            let body = json!({
                "name": format!("bench-{}-hooks-{i}", self.tag),
                "package": PACKAGE,
                "version": version,
                "origin": "https://example.invalid",
                "credentials": {"type": "apiKey", "key": "bench-key"},
            });
            let id = self
                .api
                .call(Method::POST, "/v1/connect/connections", Some(body))
                .await?
                .data_str("id")?;
            conns.push(id.clone());
            let setup = self
                .api
                .call(
                    Method::POST,
                    &format!("/v1/connect/connections/{id}/webhooks"),
                    Some(json!({"signature": {"scheme": "none", "idHeader": "X-Delivery"}})),
                )
                .await?;
            let path = setup.body["data"]["webhooks"]
                .as_array()
                .and_then(|w| w.iter().find(|w| w["name"] == "events"))
                .and_then(|w| w["path"].as_str())
                .map(str::to_string);
            match path {
                Some(p) => urls.push(p),
                None => bail!("no delivery URL for events: {}", setup.body),
            }
        }

        let n = CONNECTIONS * PER_CONNECTION;
        eprintln!("[webhooks] {n} deliveries, {SENDERS} senders");
        let started = Instant::now();
        let sends = (0..n).map(|i| {
            let url = urls[i % CONNECTIONS].clone();
            let events: Vec<_> = (0..EVENTS)
                .map(|e| json!({"id": i * EVENTS + e, "n": "bench"}))
                .collect();
            let body = Bytes::from(json!({ "events": events }).to_string());
            let id = format!("bench-{}-{i}", self.tag);
            async move {
                let headers = [
                    ("content-type", "application/json"),
                    ("x-delivery", id.as_str()),
                ];
                let (status, took) = self.api.post_raw(&url, &headers, body).await?;
                if status.as_u16() != 202 {
                    bail!("delivery {id}: HTTP {status}, not 202");
                }
                Ok(took.as_secs_f64() * 1000.0)
            }
        });
        let answers: Vec<Result<f64>> = stream::iter(sends)
            .buffer_unordered(SENDERS)
            .collect()
            .await;
        let accept_secs = started.elapsed().as_secs_f64();
        let accept_ms = answers.into_iter().collect::<Result<Vec<f64>>>()?;

        eprintln!("[webhooks] waiting until every delivery is committed");
        let deadline = started + PROCESS_WAIT;
        let (records, process_secs) = loop {
            let mut committed = 0usize;
            let mut records = 0u64;
            for c in conns.iter() {
                let path = format!("/v1/connect/connections/{c}/deliveries?limit=1000");
                let list = self.api.call(Method::GET, &path, None).await?.body["data"].clone();
                for d in list.as_array().into_iter().flatten() {
                    match d["status"].as_str() {
                        Some("committed") => {
                            committed += 1;
                            records += d["recordsCommitted"].as_u64().unwrap_or(0);
                        }
                        Some("failed") => bail!("a delivery failed: {d}"),
                        _ => {}
                    }
                }
            }
            if committed == n {
                break (records, started.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                bail!("{committed}/{n} deliveries committed after {PROCESS_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if records != (n * EVENTS) as u64 {
            bail!("{records} records committed, not {}", n * EVENTS);
        }
        Ok(Measured {
            accept_ms,
            accept_secs,
            process_secs,
            records,
        })
    }
}
