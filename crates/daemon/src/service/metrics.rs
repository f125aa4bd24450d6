//! `GET /metrics`: who may scrape, and the exposition with the gauges read at scrape time.
//!
//! The counters and histograms are recorded where things happen (sbx-runsc, the agent
//! client, the egress broker, the store, the HTTP layer); the gauges that describe the
//! node now (sandboxes by state and shape, warm-pool members) are read here, so they
//! never drift from the store. Each node answers for itself: nothing is forwarded.

use super::Service;
use sbx_api_types::SandboxStatus;
use std::collections::BTreeMap;

/// Why a scrape was refused.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Outside dev mode without `--metrics-token-file`: nobody may scrape.
    #[error("metrics scraping is off: start sbxd with --metrics-token-file to allow it outside dev mode")]
    NoToken,
    /// No `Authorization` header.
    #[error("/metrics needs an Authorization: Bearer <metrics token> header")]
    Missing,
    /// A header that is not the metrics token.
    #[error("the Authorization header does not carry the metrics token")]
    Wrong,
}

/// Serialises scrapes: each replaces the scrape-time gauges before encoding.
static SCRAPE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Service {
    /// The node's metrics in the OpenMetrics text format, for a scraper showing `authorization`.
    pub async fn scrape(&self, authorization: Option<&str>) -> Result<String, MetricsError> {
        self.check_scraper(authorization)?;
        let _one = SCRAPE.lock().await;
        let metrics = sbx_metrics::global();
        match self
            .store
            .sandboxes_in_status(Some(&self.config.node.id), &SandboxStatus::ACTIVE)
            .await
        {
            Ok(records) => {
                let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
                for r in records {
                    let key = (
                        r.status.as_str().to_ascii_lowercase(),
                        format!("{}x{}", r.vcpu, r.memory_mb),
                    );
                    *counts.entry(key).or_default() += 1;
                }
                metrics.set_sandboxes(counts.into_iter().map(|((s, sh), n)| (s, sh, n)));
            }
            // The last counts stay; the store's error counter shows the failure.
            Err(e) => tracing::warn!(error = %e, "metrics: reading this node's sandboxes"),
        }
        metrics.set_asleep(self.asleep_count() as i64);
        metrics.set_warm_pool(
            self.pool_status()
                .into_iter()
                .map(|s| (s.shape, s.ready as i64)),
        );
        Ok(metrics.encode())
    }

    /// Dev mode (loopback only) scrapes freely; otherwise the metrics token is needed.
    fn check_scraper(&self, authorization: Option<&str>) -> Result<(), MetricsError> {
        if self.config.dev {
            return Ok(());
        }
        let Some(token) = &self.config.http.metrics_token else {
            return Err(MetricsError::NoToken);
        };
        let shown = authorization.ok_or(MetricsError::Missing)?;
        let shown = shown
            .strip_prefix("Bearer ")
            .map(str::trim)
            .ok_or(MetricsError::Wrong)?;
        if token.matches(shown.as_bytes()) {
            Ok(())
        } else {
            Err(MetricsError::Wrong)
        }
    }
}

/// Records the build info metric: this sbxd's version and `runsc --version`'s first line.
pub fn record_build_info(runsc: &std::path::Path) {
    let runsc_version = std::process::Command::new(runsc)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim().trim_start_matches("runsc version ").to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    sbx_metrics::global().set_build_info(env!("CARGO_PKG_VERSION"), &runsc_version);
}
