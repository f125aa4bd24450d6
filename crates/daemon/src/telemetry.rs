//! Logs and traces: the log format on stderr (`--log-format text|json`,
//! filtered by `SBX_LOG`) and, with `--otlp-endpoint`, the export of spans to an
//! OpenTelemetry collector over OTLP/HTTP (protobuf).
//!
//! Spans: one per HTTP request (`request`, with `request_id`, `method`, `path`
//! and the response `status`), and one per long sandbox operation
//! (`sandbox.boot`, `sandbox.checkpoint`, `sandbox.restore`,
//! `sandbox.teardown`, with `sandbox_id`), children of the request that caused
//! them. Export filters on its own (`SBX_OTLP_FILTER`, default `info` for sbx's
//! crates), so `SBX_LOG=warn` quietens the logs without emptying the traces.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// How long one export request may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to go out.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of setting up logging and tracing.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `--otlp-endpoint` is not an http(s) URL.
    #[error(
        "--otlp-endpoint {0:?}: expected an http:// or https:// URL, e.g. http://127.0.0.1:4318"
    )]
    BadEndpoint(String),
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A filter in `SBX_LOG` or `SBX_OTLP_FILTER` does not parse.
    #[error("{var}: {error}")]
    BadFilter {
        /// The variable.
        var: &'static str,
        /// Why.
        error: String,
    },
    /// A global subscriber was installed already.
    #[error("logging was set up twice: {0}")]
    Init(String),
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event (`timestamp`, `level`, `message`, `target`,
    /// the event's fields, and the spans it is in).
    Json,
}

/// The logging and tracing flags of sbxd.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TelemetryArgs {
    /// Log line format on stderr: text or json (one JSON object per line).
    #[arg(long, env = "SBX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export spans (requests, sandbox boots, checkpoints, restores, teardowns) to
    /// this OpenTelemetry collector over OTLP/HTTP with protobuf, e.g.
    /// http://127.0.0.1:4318 (`/v1/traces` is added when the URL has no path).
    /// Off by default.
    #[arg(long, env = "SBX_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

/// Held until sbxd exits: [`Telemetry::shutdown`] sends the spans still queued.
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still queued and stops the exporter (at most a few seconds).
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The SDK's batch processor blocks while it flushes; its exports run on
        // this runtime (see `ReqwestClient`), so wait off the async workers.
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("sbxd: flushing the OTLP exporter: {e}"),
            Err(e) => eprintln!("sbxd: flushing the OTLP exporter: {e}"),
        }
    }
}

/// Installs the global subscriber: logs on stderr in `format`, filtered by
/// `SBX_LOG` (default `info`); with an endpoint, spans exported over OTLP.
/// Call inside the tokio runtime (exports run on it).
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> Result<Telemetry, TelemetryError> {
    let log_filter = env_filter("SBX_LOG", "info")?;
    // Logs go to stderr: stdout carries what sbxd's commands print (a new key).
    // Colours only on a terminal: journald and log files get plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    }
    .with_filter(log_filter);
    let endpoint = otlp_endpoint.map(str::trim).filter(|e| !e.is_empty());
    let (provider, traces) = match endpoint {
        Some(endpoint) => {
            let provider = provider(&traces_url(endpoint)?)?;
            let tracer = provider.tracer("sbxd");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(env_filter("SBX_OTLP_FILTER", SBX_CRATES_INFO)?);
            (Some(provider), Some(layer))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| TelemetryError::Init(e.to_string()))?;
    Ok(Telemetry { provider })
}

/// sbx's own crates at `info`, nothing else: the exporter's HTTP client must not
/// trace its own exports.
const SBX_CRATES_INFO: &str =
    "off,sbxd=info,sbx_daemon=info,sbx_node=info,sbx_runsc=info,sbx_store=info,sbx_connect=info";

fn env_filter(
    var: &'static str,
    default: &str,
) -> Result<tracing_subscriber::EnvFilter, TelemetryError> {
    let value = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    tracing_subscriber::EnvFilter::builder()
        .parse(value.as_deref().unwrap_or(default))
        .map_err(|e| TelemetryError::BadFilter {
            var,
            error: e.to_string(),
        })
}

/// The traces URL of `--otlp-endpoint`: as given when it has a path, else
/// with the OTLP/HTTP default path `/v1/traces`.
pub fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let bad = || TelemetryError::BadEndpoint(endpoint.to_string());
    let has_path = url_has_path(endpoint).ok_or_else(bad)?;
    Ok(if has_path {
        endpoint.to_string()
    } else {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    })
}

/// Whether the http(s) URL `endpoint` has a path; `None` when it is no such URL.
fn url_has_path(endpoint: &str) -> Option<bool> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty()
        || host.contains(char::is_whitespace)
        || endpoint.parse::<http::Uri>().is_err()
    {
        return None;
    }
    Some(!path.trim_end_matches('/').is_empty())
}

/// The tracer provider: spans batched and posted to `url` as OTLP protobuf.
fn provider(url: &str) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, TelemetryError> {
    let client = ReqwestClient {
        client: reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?,
        runtime: tokio::runtime::Handle::current(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(client)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("sbxd")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The OTLP exporter's HTTP client: the workspace's reqwest, driven on sbxd's
/// tokio runtime. The SDK's batch processor exports from a thread of its own
/// (no reactor there), so each request is spawned onto the runtime and awaited.
#[derive(Debug)]
struct ReqwestClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ReqwestClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut req = client
                .request(parts.method, parts.uri.to_string())
                .body(body);
            for (name, value) in &parts.headers {
                req = req.header(name, value);
            }
            let resp = req.send().await?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut resp = opentelemetry_http::Response::builder().status(status);
        if let Some(h) = resp.headers_mut() {
            *h = headers;
        }
        Ok(resp.body(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_the_traces_path_when_they_have_none() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example.com/").unwrap(),
            "https://otel.example.com/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/custom/traces").unwrap(),
            "http://c:4318/custom/traces"
        );
        for bad in ["", "127.0.0.1:4318", "ftp://x", "http://", "http:// x/"] {
            assert!(traces_url(bad).is_err(), "{bad:?}");
        }
    }
}
