//! `sbx create --network/--allow`: parsing the egress policy flags.

use sbx_client::api::{AllowRule, NetworkMode, NetworkPolicy};

/// Help text of the network flags (shown after `sbx create --help`).
pub const HELP: &str = "\
Network egress (sent as the `network` policy of POST /v1/sandboxes):
  --network none        no network at all (loopback only)
  --network public      outbound TCP to public addresses, any port
  --network https-only  public addresses, port 443, TLS only
  --allow RULE          allowlist entry (repeatable; implies allowlist mode):
                          host=NAME[:PORT[,PORT...]]    e.g. host=example.com:443
                          host=*.NAME[:PORTS]           NAME's subdomains
                          cidr=ADDR/LEN[:PORT[,PORT...]] e.g. cidr=1.2.3.0/24:80,443
                          (IPv6: cidr=2001:db8::/32:443; no ports means any port)
Without --network or --allow the sandbox gets the server's default policy (POST /v2/sandboxes).";

/// Parses a `--network` mode.
pub fn parse_mode(s: &str) -> Result<NetworkMode, String> {
    NetworkMode::parse(s.trim()).ok_or_else(|| {
        format!("{s:?}: expected none, public, https-only or allowlist (see --allow)")
    })
}

/// Parses `PORT[,PORT...]`.
fn parse_ports(s: &str) -> Result<Vec<u16>, String> {
    s.split(',')
        .map(|p| match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{p:?}: not a port (1-65535)")),
        })
        .collect()
}

/// Parses one `--allow` entry: `host=NAME[:PORTS]` or `cidr=ADDR[/LEN][:PORTS]`.
pub fn parse_allow(s: &str) -> Result<AllowRule, String> {
    let bad = || format!("{s:?}: expected host=NAME[:PORT,...] or cidr=ADDR/LEN[:PORT,...]");
    let (kind, value) = s.split_once('=').ok_or_else(bad)?;
    let mut rule = AllowRule::default();
    match kind.trim() {
        "host" => {
            let (host, ports) = match value.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (value, None),
            };
            rule.host = Some(host.trim().to_string());
            rule.ports = ports.map(parse_ports).transpose()?;
        }
        "cidr" => {
            // Ports follow the prefix length (`/24:443`), or a bare IPv4 address (`1.2.3.4:443`).
            let (addr, ports) = match value.split_once('/') {
                Some((a, rest)) => match rest.split_once(':') {
                    Some((len, p)) => (format!("{a}/{len}"), Some(p)),
                    None => (value.to_string(), None),
                },
                None if value.matches(':').count() == 1 => {
                    let (a, p) = value.split_once(':').ok_or_else(bad)?;
                    (a.to_string(), Some(p))
                }
                None => (value.to_string(), None),
            };
            rule.cidr = Some(addr.trim().to_string());
            rule.ports = ports.map(parse_ports).transpose()?;
        }
        _ => return Err(bad()),
    }
    Ok(rule)
}

/// The policy the flags ask for; `None` when no network flag was given.
pub fn policy(
    mode: Option<NetworkMode>,
    allow: Vec<AllowRule>,
) -> Result<Option<NetworkPolicy>, String> {
    let mode = match (mode, allow.is_empty()) {
        (None, true) => return Ok(None),
        (None, false) | (Some(NetworkMode::Allowlist), _) => NetworkMode::Allowlist,
        (Some(m), true) => m,
        (Some(m), false) => {
            return Err(format!(
                "--allow needs allowlist mode, not --network {}",
                m.as_str()
            ))
        }
    };
    NetworkPolicy { mode, allow }
        .validate()
        .map(Some)
        .map_err(|e| format!("network policy: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str, ports: Option<Vec<u16>>) -> AllowRule {
        AllowRule {
            host: Some(h.into()),
            cidr: None,
            ports,
        }
    }

    fn cidr(c: &str, ports: Option<Vec<u16>>) -> AllowRule {
        AllowRule {
            host: None,
            cidr: Some(c.into()),
            ports,
        }
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("none").unwrap(), NetworkMode::None);
        assert_eq!(parse_mode("public").unwrap(), NetworkMode::Public);
        assert_eq!(parse_mode("https-only").unwrap(), NetworkMode::HttpsOnly);
        assert_eq!(parse_mode("allowlist").unwrap(), NetworkMode::Allowlist);
        assert!(parse_mode("open").is_err());
    }

    #[test]
    fn allow_rules() {
        assert_eq!(
            parse_allow("host=example.com:443").unwrap(),
            host("example.com", Some(vec![443]))
        );
        assert_eq!(
            parse_allow("host=*.example.com").unwrap(),
            host("*.example.com", None)
        );
        assert_eq!(
            parse_allow("cidr=1.2.3.0/24:80,443").unwrap(),
            cidr("1.2.3.0/24", Some(vec![80, 443]))
        );
        assert_eq!(
            parse_allow("cidr=1.2.3.4:22").unwrap(),
            cidr("1.2.3.4", Some(vec![22]))
        );
        assert_eq!(
            parse_allow("cidr=2001:db8::/32:443").unwrap(),
            cidr("2001:db8::/32", Some(vec![443]))
        );
        assert_eq!(
            parse_allow("cidr=2001:db8::1").unwrap(),
            cidr("2001:db8::1", None)
        );
        for bad in [
            "example.com",
            "ip=1.2.3.4",
            "host=a.com:0",
            "host=a.com:http",
            "cidr=1.2.3.0/24:70000",
            "host=a.com:",
        ] {
            assert!(parse_allow(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn policies() {
        assert_eq!(policy(None, vec![]).unwrap(), None);
        assert_eq!(
            policy(Some(NetworkMode::Public), vec![]).unwrap(),
            Some(NetworkPolicy::mode(NetworkMode::Public))
        );
        let p = policy(None, vec![host("Example.COM", Some(vec![443]))])
            .unwrap()
            .unwrap();
        assert_eq!(p.mode, NetworkMode::Allowlist);
        assert_eq!(p.allow[0].host.as_deref(), Some("example.com"));
        let p = policy(Some(NetworkMode::Allowlist), vec![cidr("1.2.3.4/24", None)])
            .unwrap()
            .unwrap();
        assert_eq!(p.allow[0].cidr.as_deref(), Some("1.2.3.0/24"));
        assert!(policy(Some(NetworkMode::Allowlist), vec![]).is_err());
        assert!(policy(Some(NetworkMode::Public), vec![host("a.com", None)]).is_err());
        assert!(policy(None, vec![cidr("1.2.3.0/33", None)]).is_err());
        assert!(policy(None, vec![host("bad host", None)]).is_err());
    }
}
