//! E2B control-plane wire types (contract §2.3) and their parsing into the
//! service's typed requests. JSON names are exactly the SDKs' (`templateID`,
//! snake_case `allow_internet_access` inside a camelCase body, …). Unknown
//! fields are ignored: newer SDKs add fields, and refusing them would break them.

use super::E2bApiError;
use crate::service::e2b::{CreateSpec, E2bSandbox, E2bState, ListFilter, CLIENT_ID, ENVD_VERSION};
use crate::service::Snapshot;
use chrono::{DateTime, SecondsFormat, Utc};
use sbx_api_types::{AllowRule, NetworkMode, NetworkPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `NewSandboxV2`, the body of `POST /v2/sandboxes`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<Network>,
    auto_pause: Option<bool>,
    auto_resume: Option<AutoResume>,
    mcp: Option<serde_json::Value>,
    iam: Option<serde_json::Value>,
    volume_mounts: Option<Vec<serde_json::Value>>,
    /// Deprecated and not sent by current SDKs; every sandbox gets an envd access token.
    #[allow(dead_code)]
    secure: Option<bool>,
}

/// The `network` object of a create.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Network {
    allow_out: Option<Vec<String>>,
    deny_out: Option<Vec<String>>,
    rules: Option<serde_json::Value>,
    egress_proxy: Option<serde_json::Value>,
    dns_servers: Option<Vec<String>>,
    /// Preview URLs public (default) or behind the traffic access token.
    allow_public_traffic: Option<bool>,
    /// Inbound host rewriting: no inbound yet, nothing to rewrite.
    #[allow(dead_code)]
    mask_request_host: Option<String>,
}

/// Body of `PUT /sandboxes/{id}/network`: the create's `network` keys at the
/// top level plus `allow_internet_access`; an omitted key clears its setting.
#[derive(Debug, Default, Deserialize)]
pub struct NetworkUpdate {
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(flatten)]
    network: Network,
}

impl NetworkUpdate {
    /// The new policy (`None`: the server's default, as for a create without
    /// network settings); what sbx cannot express is refused (400).
    pub fn into_policy(self) -> Result<Option<NetworkPolicy>, E2bApiError> {
        network_policy(self.allow_internet_access, Some(self.network))
    }
}

#[derive(Debug, Default, Deserialize)]
struct AutoResume {
    enabled: Option<bool>,
}

/// A JSON null is "not sent".
fn present(v: &Option<serde_json::Value>) -> bool {
    v.as_ref().is_some_and(|v| !v.is_null())
}

impl NewSandbox {
    /// Checks the request and turns it into the service's create spec. Features
    /// sbx cannot honour are refused (400) rather than silently dropped.
    pub fn into_spec(self) -> Result<CreateSpec, E2bApiError> {
        if present(&self.mcp) {
            return Err(unsupported("mcp"));
        }
        if present(&self.iam) {
            return Err(unsupported("iam"));
        }
        if self.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(unsupported("volumeMounts"));
        }
        if self.auto_resume.and_then(|a| a.enabled) == Some(true) {
            return Err(unsupported("autoResume"));
        }
        let allow_public_traffic = self
            .network
            .as_ref()
            .and_then(|n| n.allow_public_traffic)
            .unwrap_or(true);
        let network = network_policy(self.allow_internet_access, self.network)?;
        Ok(CreateSpec {
            template_id: self.template_id.unwrap_or_default(),
            timeout_secs: self.timeout,
            metadata: self.metadata.unwrap_or_default(),
            env_vars: self.env_vars.unwrap_or_default(),
            auto_pause: self.auto_pause.unwrap_or(false),
            network,
            allow_public_traffic,
        })
    }
}

fn unsupported(field: &str) -> E2bApiError {
    E2bApiError::bad_request(format!("{field}: not supported by sbx"))
}

/// The egress policy of `allow_internet_access` and `network`:
/// * nothing: the server's default (the internet);
/// * `allow_internet_access: false`: no network;
/// * `allowOut` with `denyOut: ["0.0.0.0/0"]` (or with no internet access): an
///   allowlist of those hosts and CIDRs.
///
/// Other deny lists, rules, egress proxies and DNS servers cannot be expressed
/// by sbx policies and are refused.
fn network_policy(
    allow_internet: Option<bool>,
    network: Option<Network>,
) -> Result<Option<NetworkPolicy>, E2bApiError> {
    let network = network.unwrap_or_default();
    if present(&network.rules) {
        return Err(unsupported("network.rules"));
    }
    if present(&network.egress_proxy) {
        return Err(unsupported("network.egressProxy"));
    }
    if network.dns_servers.as_ref().is_some_and(|d| !d.is_empty()) {
        return Err(unsupported("network.dnsServers"));
    }
    let allow = network.allow_out.unwrap_or_default();
    let deny = network.deny_out.unwrap_or_default();
    let deny_all = match deny.as_slice() {
        [] => allow_internet == Some(false),
        [only] if only == "0.0.0.0/0" => true,
        _ => return Err(E2bApiError::bad_request(
            "network.denyOut: sbx supports only [\"0.0.0.0/0\"] (deny everything not in allowOut)",
        )),
    };
    if !allow.is_empty() && !deny_all {
        return Err(E2bApiError::bad_request(
            "network.allowOut: only meaningful with denyOut [\"0.0.0.0/0\"] or allow_internet_access false",
        ));
    }
    if !deny_all {
        return Ok(None);
    }
    if allow.is_empty() {
        return Ok(Some(NetworkPolicy::mode(NetworkMode::None)));
    }
    let rules = allow
        .into_iter()
        .map(|entry| {
            let is_cidr = entry.contains('/') || entry.parse::<std::net::IpAddr>().is_ok();
            if is_cidr {
                let cidr = if entry.contains('/') {
                    entry
                } else if entry.contains(':') {
                    format!("{entry}/128")
                } else {
                    format!("{entry}/32")
                };
                AllowRule {
                    host: None,
                    cidr: Some(cidr),
                    ports: None,
                }
            } else {
                AllowRule {
                    host: Some(entry),
                    cidr: None,
                    ports: None,
                }
            }
        })
        .collect();
    NetworkPolicy {
        mode: NetworkMode::Allowlist,
        allow: rules,
    }
    .validate()
    .map(Some)
    .map_err(|reason| E2bApiError::bad_request(format!("network.allowOut: {reason}")))
}

/// Body of `POST /v2/sandboxes/{id}/connect` and `POST /sandboxes/{id}/fork`.
#[derive(Debug, Default, Deserialize)]
pub struct ConnectBody {
    /// Seconds.
    pub timeout: Option<u64>,
    /// `false` (reboot instead of keeping memory) is not offered: sbx always resumes with memory.
    pub memory: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Default, Deserialize)]
pub struct TimeoutBody {
    /// Seconds (required).
    pub timeout: Option<u64>,
}

/// Body of `POST /sandboxes/{id}/pause` (both fields are accepted; sbx always keeps memory).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseBody {
    #[allow(dead_code)]
    memory: Option<bool>,
    #[allow(dead_code)]
    require_healthy_guest: Option<bool>,
}

/// Body of `POST /sandboxes/{id}/snapshots`.
#[derive(Debug, Default, Deserialize)]
pub struct SnapshotBody {
    /// Optional name.
    pub name: Option<String>,
    #[allow(dead_code)]
    memory: Option<bool>,
}

/// Query of `GET /v2/sandboxes`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    metadata: Option<String>,
    state: Option<String>,
    started_after: Option<String>,
    template: Option<String>,
    order: Option<String>,
    limit: Option<String>,
    next_token: Option<String>,
}

/// Default and largest page of lists.
pub const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

impl ListQuery {
    /// The filter, the page size and the token.
    pub fn parse(self) -> Result<(ListFilter, u32, Option<String>), E2bApiError> {
        if self.order.as_deref().is_some_and(|o| o != "desc") {
            return Err(E2bApiError::bad_request(
                "order: sbx lists newest first only (\"desc\")",
            ));
        }
        let mut states = Vec::new();
        for s in self.state.iter().flat_map(|s| s.split(',')) {
            states.push(match s.trim() {
                "running" => E2bState::Running,
                "paused" => E2bState::Paused,
                other => {
                    return Err(E2bApiError::bad_request(format!(
                        "state: {other:?} is not running or paused"
                    )))
                }
            });
        }
        let started_after = self
            .started_after
            .map(|t| {
                DateTime::parse_from_rfc3339(&t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| E2bApiError::bad_request("startedAfter: not an RFC 3339 time"))
            })
            .transpose()?;
        let filter = ListFilter {
            metadata: match self.metadata {
                Some(m) => parse_metadata_filter(&m)?,
                None => BTreeMap::new(),
            },
            states,
            started_after,
            template: self.template.filter(|t| !t.is_empty()),
        };
        let limit = parse_limit(self.limit.as_deref())?;
        Ok((filter, limit, self.next_token.filter(|t| !t.is_empty())))
    }
}

/// A page size: 1 to 1000, default 100.
pub fn parse_limit(raw: Option<&str>) -> Result<u32, E2bApiError> {
    match raw {
        None | Some("") => Ok(DEFAULT_LIMIT),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(E2bApiError::bad_request(format!(
                "limit: must be an integer from 1 to {MAX_LIMIT}"
            ))),
        },
    }
}

/// The `metadata` list filter (§2.4): the query value (decoded once already) is
/// percent-decoded once more, split on `&` and `=`, and each key and value is
/// percent-decoded once more (what upstream does).
pub fn parse_metadata_filter(raw: &str) -> Result<BTreeMap<String, String>, E2bApiError> {
    let bad = || E2bApiError::bad_request("metadata: expected URL-encoded key=value pairs");
    let once = percent_decode(raw).ok_or_else(bad)?;
    let mut out = BTreeMap::new();
    for pair in once.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(bad)?;
        let k = percent_decode(k).ok_or_else(bad)?;
        let v = percent_decode(v).ok_or_else(bad)?;
        if k.is_empty() {
            return Err(bad());
        }
        out.insert(k, v);
    }
    Ok(out)
}

/// Decodes `%XX` escapes (no `+` rule); `None` for a broken escape or non-UTF-8 result.
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Query of `GET /snapshots`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotQuery {
    /// Only snapshots of this sandbox.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: Option<String>,
    /// Only snapshots with this name.
    pub name: Option<String>,
    /// Page size.
    pub limit: Option<String>,
    /// Token from `x-next-token`.
    pub next_token: Option<String>,
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `Sandbox`: the answer of create and connect.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxOut {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(rename = "clientID")]
    client_id: &'static str,
    envd_version: &'static str,
    envd_access_token: String,
    traffic_access_token: Option<String>,
    /// `--e2b-domain`, else null: the SDK then uses its own `E2B_DOMAIN`/`E2B_SANDBOX_URL` (§1.3).
    domain: Option<String>,
    alias: Option<String>,
}

impl From<&E2bSandbox> for SandboxOut {
    fn from(s: &E2bSandbox) -> Self {
        SandboxOut {
            template_id: s.record.template_id.clone(),
            sandbox_id: s.sandbox.id.to_string(),
            client_id: CLIENT_ID,
            envd_version: ENVD_VERSION,
            envd_access_token: s.record.envd_access_token.clone(),
            traffic_access_token: s.record.traffic_access_token.clone(),
            domain: s.domain.clone(),
            alias: alias(&s.record.template_id),
        }
    }
}

/// The template id as an alias, unless it is a snapshot id.
fn alias(template: &str) -> Option<String> {
    uuid::Uuid::parse_str(template)
        .is_err()
        .then(|| template.to_string())
}

/// `SandboxDetail` (`GET /sandboxes/{id}`) and `ListedSandbox` (list items): one type,
/// the list items just carry a few optional fields more than needed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetailOut {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(rename = "clientID")]
    client_id: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    alias: Option<String>,
    started_at: String,
    end_at: String,
    envd_version: &'static str,
    cpu_count: u32,
    #[serde(rename = "memoryMB")]
    memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    disk_size_mb: u64,
    state: &'static str,
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    envd_access_token: Option<String>,
    domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allow_internet_access: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lifecycle: Option<Lifecycle>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Lifecycle {
    on_timeout: &'static str,
    auto_resume: bool,
}

impl SandboxDetailOut {
    /// The detail of one sandbox (`with_secrets`: include the envd access token).
    pub fn new(s: &E2bSandbox, disk_mb: u64, detail: bool) -> Self {
        let started = s.sandbox.started_at.unwrap_or(s.sandbox.created_at);
        SandboxDetailOut {
            template_id: s.record.template_id.clone(),
            sandbox_id: s.sandbox.id.to_string(),
            client_id: CLIENT_ID,
            alias: alias(&s.record.template_id),
            started_at: time(started),
            end_at: time(s.record.end_at),
            envd_version: ENVD_VERSION,
            cpu_count: s.sandbox.vcpu,
            memory_mb: s.sandbox.memory_mb,
            disk_size_mb: disk_mb,
            state: s.state.as_str(),
            metadata: s.record.metadata.clone(),
            envd_access_token: detail.then(|| s.record.envd_access_token.clone()),
            domain: s.domain.clone(),
            allow_internet_access: detail.then_some(s.record.allow_internet_access),
            lifecycle: detail.then_some(Lifecycle {
                on_timeout: if s.record.auto_pause { "pause" } else { "kill" },
                auto_resume: false,
            }),
        }
    }
}

/// `SnapshotInfo`.
#[derive(Debug, Serialize)]
pub struct SnapshotOut {
    #[serde(rename = "snapshotID")]
    snapshot_id: String,
    names: Vec<String>,
}

impl From<&Snapshot> for SnapshotOut {
    fn from(s: &Snapshot) -> Self {
        SnapshotOut {
            snapshot_id: s.id.to_string(),
            names: s.name.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_filter_is_decoded_like_upstream() {
        // JS 2.51.0 for {"k": "v w"}: `metadata=k%3Dv%252520w`, decoded once by the query parser.
        let m = parse_metadata_filter("k=v%2520w").unwrap();
        assert_eq!(m.get("k").map(String::as_str), Some("v w"));
        let m = parse_metadata_filter("a%3Db%26c%3Dd").unwrap();
        assert_eq!(m.len(), 2);
        assert!(parse_metadata_filter("novalue").is_err());
        assert!(parse_metadata_filter("k=%zz").is_err());
    }

    #[test]
    fn network_updates_map_like_a_creates_network() {
        let update = |v: serde_json::Value| -> Result<Option<NetworkPolicy>, E2bApiError> {
            serde_json::from_value::<NetworkUpdate>(v)
                .expect("parses")
                .into_policy()
        };
        assert_eq!(update(serde_json::json!({})).expect("clear"), None);
        assert_eq!(
            update(serde_json::json!({"allow_internet_access": false})).expect("off"),
            Some(NetworkPolicy::mode(NetworkMode::None))
        );
        let allow = update(serde_json::json!({"allowOut": ["1.1.1.1", "api.example.com"], "denyOut": ["0.0.0.0/0"]}))
            .expect("allowlist")
            .expect("a policy");
        assert_eq!(allow.mode, NetworkMode::Allowlist);
        assert_eq!(allow.allow.len(), 2);
        assert!(update(serde_json::json!({"denyOut": ["10.0.0.0/8"]})).is_err());
        assert!(update(serde_json::json!({"dnsServers": ["1.1.1.1"]})).is_err());
    }

    #[test]
    fn network_maps_to_sbx_policies_or_is_refused() {
        let net = |v: serde_json::Value| -> Result<Option<NetworkPolicy>, E2bApiError> {
            let req: NewSandbox = serde_json::from_value(v).unwrap();
            req.into_spec().map(|s| s.network)
        };
        assert_eq!(net(serde_json::json!({})).unwrap(), None);
        assert_eq!(
            net(serde_json::json!({"allow_internet_access": false})).unwrap(),
            Some(NetworkPolicy::mode(NetworkMode::None))
        );
        let p = net(serde_json::json!({"network": {"allowOut": ["1.1.1.1", "example.com"], "denyOut": ["0.0.0.0/0"]}}))
            .unwrap()
            .unwrap();
        assert_eq!(p.mode, NetworkMode::Allowlist);
        assert_eq!(p.allow.len(), 2);
        assert!(net(serde_json::json!({"network": {"denyOut": ["10.0.0.0/8"]}})).is_err());
        assert!(net(serde_json::json!({"network": {"rules": {"a.com": []}}})).is_err());
        assert!(net(serde_json::json!({"mcp": {"x": 1}})).is_err());
        assert_eq!(net(serde_json::json!({"mcp": null})).unwrap(), None);
    }
}
