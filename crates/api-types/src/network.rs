//! Network egress policies (`network` of `POST /v1/sandboxes`, shown by `GET /v1/sandboxes/{id}`).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// Which outbound connections a sandbox may open (through its in-sandbox proxies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// No network: no proxy inside, loopback only.
    #[default]
    None,
    /// Outbound TCP to public addresses, any port.
    Public,
    /// Outbound TCP to public addresses on port 443 only; the stream must start with TLS.
    HttpsOnly,
    /// Only what `allow` lists (still public addresses only).
    Allowlist,
}

impl NetworkMode {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Public => "public",
            NetworkMode::HttpsOnly => "https-only",
            NetworkMode::Allowlist => "allowlist",
        }
    }

    /// Parses the wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => NetworkMode::None,
            "public" => NetworkMode::Public,
            "https-only" => NetworkMode::HttpsOnly,
            "allowlist" => NetworkMode::Allowlist,
            _ => return None,
        })
    }
}

/// One allowlist entry: a hostname or a CIDR, optionally restricted to ports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowRule {
    /// Hostname as the client names it (`example.com`, or `*.example.com` for subdomains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Address range the destination must resolve into (`1.2.3.0/24`, `2001:db8::/32`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Allowed destination ports; absent means any port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<u16>>,
}

/// A sandbox's egress policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicy {
    /// The mode.
    pub mode: NetworkMode,
    /// Entries of an `allowlist` policy (must be empty for other modes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<AllowRule>,
}

/// Most allowlist entries a policy may have.
pub const MAX_ALLOW_RULES: usize = 256;

impl NetworkPolicy {
    /// A policy with just a mode.
    pub fn mode(mode: NetworkMode) -> Self {
        NetworkPolicy {
            mode,
            allow: Vec::new(),
        }
    }

    /// Checks the policy and normalises it: hostnames lowercase without a trailing dot,
    /// CIDRs masked, and ports and entries sorted without repeats (an allowlist is a set, so
    /// two creates that list the same entries in another order have the same configuration).
    pub fn validate(mut self) -> Result<Self, String> {
        if self.mode != NetworkMode::Allowlist && !self.allow.is_empty() {
            return Err("allow is only valid with mode \"allowlist\"".into());
        }
        if self.mode == NetworkMode::Allowlist && self.allow.is_empty() {
            return Err("mode \"allowlist\" needs at least one allow entry".into());
        }
        if self.allow.len() > MAX_ALLOW_RULES {
            return Err(format!("at most {MAX_ALLOW_RULES} allow entries"));
        }
        for (i, rule) in self.allow.iter_mut().enumerate() {
            match (&rule.host, &rule.cidr) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(format!("allow[{i}]: give exactly one of host or cidr"))
                }
                _ => {}
            }
            if let Some(h) = &rule.host {
                let h = h.trim_end_matches('.').to_ascii_lowercase();
                let bare = h.strip_prefix("*.").unwrap_or(&h);
                let ok = !bare.is_empty()
                    && bare.len() <= 253
                    && bare.split('.').all(|l| {
                        !l.is_empty()
                            && l.len() <= 63
                            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !ok {
                    return Err(format!("allow[{i}].host: not a hostname"));
                }
                rule.host = Some(h);
            }
            if let Some(c) = &rule.cidr {
                let (ip, prefix) = parse_cidr(c).ok_or(format!("allow[{i}].cidr: not a CIDR"))?;
                rule.cidr = Some(format!("{ip}/{prefix}"));
            }
            if let Some(p) = &mut rule.ports {
                if p.is_empty() || p.contains(&0) {
                    return Err(format!("allow[{i}].ports: 1-65535, at least one"));
                }
                p.sort_unstable();
                p.dedup();
            }
        }
        self.allow.sort();
        self.allow.dedup();
        Ok(self)
    }
}

/// Parses `addr/prefix` (a bare address means a single host); the address is
/// masked to the prefix.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.trim().parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = match prefix {
        Some(p) => p.trim().parse().ok().filter(|p| *p <= max)?,
        None => max,
    };
    Some((mask(ip, prefix), prefix))
}

/// `ip` with all bits past `prefix` cleared.
pub fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

/// Policy and decision counters shown by `GET /v1/sandboxes/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The policy in force.
    pub policy: NetworkPolicy,
    /// Connections allowed and dialled since the sandbox (or sbxd) started.
    pub allowed: u64,
    /// Connections refused by the policy.
    pub denied: u64,
    /// Connections allowed by the policy whose dial failed.
    pub failed: u64,
    /// The most recent refusals, newest last (at most 16).
    pub recent_denials: Vec<NetworkDenial>,
}

/// One refused connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDenial {
    /// Host as the sandbox named it.
    pub host: String,
    /// Destination port.
    pub port: u16,
    /// Why (`loopback`, `private`, `link-local`, `port`, `not-allowlisted`...).
    pub reason: String,
    /// When, RFC 3339.
    pub at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_json_and_validation() {
        let p: NetworkPolicy = serde_json::from_str(
            r#"{"mode":"allowlist","allow":[{"host":"Example.COM."},{"cidr":"1.2.3.4/24","ports":[443]}]}"#,
        )
        .unwrap();
        let p = p.validate().unwrap();
        assert!(p
            .allow
            .iter()
            .any(|r| r.host.as_deref() == Some("example.com")));
        assert!(p
            .allow
            .iter()
            .any(|r| r.cidr.as_deref() == Some("1.2.3.0/24")));
        let hs: NetworkPolicy = serde_json::from_str(r#"{"mode":"https-only"}"#).unwrap();
        assert_eq!(hs.mode, NetworkMode::HttpsOnly);
        assert!(NetworkPolicy::mode(NetworkMode::Allowlist)
            .validate()
            .is_err());
        let bad: NetworkPolicy =
            serde_json::from_str(r#"{"mode":"allowlist","allow":[{"cidr":"1.2.3.4/33"}]}"#)
                .unwrap();
        assert!(bad.validate().is_err());
        assert!(serde_json::from_str::<NetworkPolicy>(r#"{"mode":"open"}"#).is_err());
    }

    #[test]
    fn allowlists_are_sets() {
        let parse = |json: &str| {
            serde_json::from_str::<NetworkPolicy>(json)
                .unwrap()
                .validate()
                .unwrap()
        };
        let a = parse(
            r#"{"mode":"allowlist","allow":[{"host":"a.com","ports":[443,80]},{"cidr":"10.0.0.0/8"}]}"#,
        );
        let b = parse(
            r#"{"mode":"allowlist","allow":[{"cidr":"10.0.0.0/8"},{"host":"A.com.","ports":[80,443,80]},{"cidr":"10.1.2.3/8"}]}"#,
        );
        assert_eq!(a, b);
        assert_eq!(a.allow.len(), 2);
    }
}
