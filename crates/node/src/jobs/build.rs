//! Build sandboxes: `npm ci --ignore-scripts` in the package directory (mounted read-write
//! at `/src`) with the npm registry as the only reachable host.

use super::memory::{tmp_bytes, watch_memory};
use super::{remove, GvisorJobs, JobsError};
use crate::runtime::{AgentCallError, AgentConn, JobOptions};
use sbx_agent_proto::{AgentErrorCode, CommandSpec, Reply, Request};
use sbx_api_types::{AllowRule, NetworkMode, NetworkPolicy};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Largest build output read back from the sandbox (the Connect runtime keeps a tail of it).
const MAX_BUILD_OUTPUT: u64 = 4 * 1024 * 1024;
/// Where the package is mounted in a build sandbox.
const SOURCE_MOUNT: &str = "/src";
/// Where `--npm-ca-file` is mounted in a build sandbox.
const CA_MOUNT: &str = "/etc/sbx-npm-ca.pem";
/// The in-sandbox HTTP proxy npm goes through.
const PROXY: &str = "http://127.0.0.1:3128";

/// A build to run.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    /// Build id, for the logs.
    pub build_id: String,
    /// Host directory holding the unpacked package (package.json, package-lock.json, code);
    /// mounted read-write at `/src`. After `npm ci --ignore-scripts` there it is the artifact.
    pub package_dir: PathBuf,
    /// Memory budget, MiB.
    pub memory_mib: u64,
    /// Time budget.
    pub time_budget: Duration,
}

/// How a build went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOutcome {
    /// Whether `npm ci --ignore-scripts` exited 0.
    pub success: bool,
    /// Its output (at most 4 MiB of it read back) and the reason of a failure.
    pub log: String,
}

/// Host and port of the registry URL.
pub(super) fn registry_host(registry: &str) -> Result<(String, u16), JobsError> {
    let bad = || JobsError::Registry(registry.to_string());
    let url = url::Url::parse(registry).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad());
    }
    let host = url.host_str().ok_or_else(bad)?;
    let port = url.port_or_known_default().ok_or_else(bad)?;
    Ok((crate::network::policy::normalize_host(host), port))
}

/// The addresses the registry host resolves to now (allowed whatever their class).
async fn registry_addresses(host: &str, port: u16) -> Vec<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![ip];
    }
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(Duration::from_secs(5), lookup).await {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    }
}

/// npm's environment: the registry, the proxy, a writable HOME and cache in `/tmp`, and
/// the extra roots when there are some.
fn npm_env(registry: &str, with_ca: bool) -> BTreeMap<String, String> {
    let ca: &[(&str, &str)] = if with_ca {
        &[
            ("NODE_EXTRA_CA_CERTS", CA_MOUNT),
            ("npm_config_cafile", CA_MOUNT),
        ]
    } else {
        &[]
    };
    [
        ("HOME", "/tmp"),
        ("npm_config_cache", "/tmp/.npm"),
        ("npm_config_registry", registry),
        ("npm_config_proxy", PROXY),
        ("npm_config_https_proxy", PROXY),
        ("npm_config_update_notifier", "false"),
        ("HTTP_PROXY", PROXY),
        ("HTTPS_PROXY", PROXY),
        ("http_proxy", PROXY),
        ("https_proxy", PROXY),
    ]
    .iter()
    .chain(ca)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Runs one build to its end; the sandbox is always removed.
pub(super) async fn run(jobs: &GvisorJobs, req: BuildRequest) -> Result<BuildOutcome, JobsError> {
    let begun = Instant::now();
    let (host, port) = registry_host(&jobs.config.npm_registry)?;
    let (reservation, memory_mb) = jobs.admit(req.memory_mib).await?;
    let id = Uuid::new_v4();
    let mut binds = vec![(req.package_dir.clone(), SOURCE_MOUNT.to_string(), false)];
    if let Some(ca) = &jobs.config.npm_ca_file {
        binds.push((ca.clone(), CA_MOUNT.to_string(), true));
    }
    let with_ca = jobs.config.npm_ca_file.is_some();
    let options = JobOptions {
        readonly_root: false,
        tmp_bytes: tmp_bytes(memory_mb),
        binds,
    };
    let conn = jobs.boot(id, memory_mb, options).await?;
    // npm at the memory limit can stall the sandbox instead of failing: stop it at the first
    // OOM kill, as for jobs, so the build fails at once and says why.
    let memory_hit = Arc::new(AtomicBool::new(false));
    let watchdog = tokio::spawn(watch_memory(jobs.runtime.clone(), id, memory_hit.clone()));
    let policy = NetworkPolicy {
        mode: NetworkMode::Allowlist,
        allow: vec![AllowRule {
            host: Some(host.clone()),
            ports: Some(vec![port]),
            ..AllowRule::default()
        }],
    };
    let trusted = registry_addresses(&host, port).await;
    let result = match jobs.network.serve_build(id, &policy, &trusted, &conn).await {
        Ok(()) => {
            let env = npm_env(&jobs.config.npm_registry, with_ca);
            Ok(npm_ci(&conn, env, req.time_budget).await)
        }
        Err(e) => Err(JobsError::Agent(e)),
    };
    watchdog.abort();
    let result = match result {
        Ok(out) if memory_hit.load(Ordering::SeqCst) => Ok(failed(
            out.log,
            &format!("sbx: the build sandbox reached its memory limit of {memory_mb} MiB and was stopped"),
        )),
        other => other,
    };
    conn.shutdown().await;
    remove(&jobs.runtime, &jobs.network, id).await;
    drop(reservation);
    if let Ok(out) = &result {
        tracing::info!(
            build = %req.build_id,
            success = out.success,
            ms = begun.elapsed().as_millis() as u64,
            "build sandbox finished"
        );
    }
    result
}

/// `npm ci --ignore-scripts` in `/src`, bounded by `budget`.
async fn npm_ci(conn: &AgentConn, env: BTreeMap<String, String>, budget: Duration) -> BuildOutcome {
    let argv = ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"];
    let exec = Request::Exec {
        command: CommandSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env,
            cwd: Some(SOURCE_MOUNT.into()),
        },
        timeout_ms: budget.as_millis() as u64,
        max_output_bytes: MAX_BUILD_OUTPUT,
    };
    let header = format!("$ {}\n", argv.join(" "));
    let answer = tokio::time::timeout(budget + Duration::from_secs(30), conn.call(exec)).await;
    match answer {
        Ok(Ok((
            Reply::Exec {
                exit_code,
                stdout_len,
                ..
            },
            payload,
        ))) => {
            let split = usize::try_from(stdout_len)
                .unwrap_or(usize::MAX)
                .min(payload.len());
            let (stdout, stderr) = payload.split_at(split);
            let mut log = header;
            log.push_str(&String::from_utf8_lossy(stdout));
            log.push_str(&String::from_utf8_lossy(stderr));
            if exit_code != 0 {
                log.push_str(&format!("\nnpm ci exited with code {exit_code}\n"));
            }
            BuildOutcome {
                success: exit_code == 0,
                log,
            }
        }
        Ok(Ok((other, _))) => failed(header, &format!("unexpected agent answer {other:?}")),
        Ok(Err(AgentCallError::Agent(e))) if e.code == AgentErrorCode::TimedOut => failed(
            header,
            &format!(
                "npm ci did not finish within the build time limit of {}s",
                budget.as_secs()
            ),
        ),
        Ok(Err(AgentCallError::Agent(e))) if e.code == AgentErrorCode::OutputTooLarge => failed(
            header,
            &format!("npm ci wrote more than {MAX_BUILD_OUTPUT} bytes of output"),
        ),
        Ok(Err(e)) => failed(header, &format!("npm ci could not run: {e}")),
        Err(_) => failed(
            header,
            &format!(
                "npm ci did not finish within the build time limit of {}s",
                budget.as_secs()
            ),
        ),
    }
}

fn failed(mut log: String, why: &str) -> BuildOutcome {
    log.push_str(why);
    log.push('\n');
    BuildOutcome {
        success: false,
        log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_urls() {
        assert_eq!(
            registry_host("https://registry.npmjs.org/").unwrap(),
            ("registry.npmjs.org".to_string(), 443)
        );
        assert_eq!(
            registry_host("http://Mirror.example:4873/npm/").unwrap(),
            ("mirror.example".to_string(), 4873)
        );
        assert!(registry_host("file:///tmp").is_err());
        assert!(registry_host("not a url").is_err());
        let env = npm_env("https://registry.npmjs.org/", false);
        assert_eq!(env["HOME"], "/tmp");
        assert_eq!(env["npm_config_https_proxy"], PROXY);
        assert!(!env.contains_key("NODE_EXTRA_CA_CERTS"));
        let env = npm_env("https://registry.npmjs.org/", true);
        assert_eq!(env["NODE_EXTRA_CA_CERTS"], CA_MOUNT);
    }
}
