//! Which destinations a policy allows: address classes, ports, allowlists.
//!
//! Always denied, whatever the policy: loopback, link-local (incl.
//! 169.254.169.254), multicast, broadcast, unspecified/"this network", the
//! host's own addresses; and, unless an operator marks the range public with
//! `--network-test-public-cidr` (tests only), every other block IANA's
//! special-purpose registries call not globally reachable (private, CGNAT,
//! benchmarking, ULA, ...; see [`super::special`], which also decodes the
//! IPv6 forms that embed an IPv4 address), and the networks the host's
//! interfaces are directly connected to (its LAN neighbours and gateway,
//! whatever their class). Documentation ranges (192.0.2/24, 198.51.100/24,
//! 203.0.113/24, 2001:db8::/32) count as public: this machine's package
//! registries resolve to one (DESIGN.md); `3fff::/20` does not.
//!
//! A Connect build sandbox's registry addresses are marked like test ranges
//! (`Network::serve_build`), so a registry on the host's own network stays
//! reachable for builds.

use super::special::carried_v4;
use sbx_api_types::network::{mask, parse_cidr};
use sbx_api_types::{NetworkMode, NetworkPolicy};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use super::special::{classify, classify_v4, classify_v6, Class};

/// A parsed CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub net: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix`.
    pub fn parse(s: &str) -> Option<Cidr> {
        parse_cidr(s).map(|(net, prefix)| Cidr { net, prefix })
    }

    /// Whether `ip` lies inside (an IPv4-mapped IPv6 address matches IPv4 ranges).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        ip.is_ipv4() == self.net.is_ipv4() && mask(ip, self.prefix) == self.net
    }
}

/// Host-wide facts the decision needs.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Ranges an operator marked public (tests only).
    pub test_public: Vec<Cidr>,
    /// The host's own addresses.
    pub own: HashSet<IpAddr>,
    /// The networks the host's interfaces are directly connected to.
    pub networks: Vec<Cidr>,
}

impl Facts {
    /// The facts as the host's interfaces are right now. Read at every
    /// decision, not once at start: addresses come and go while sbxd runs
    /// (DHCP, a new interface, the tests' veth pairs).
    pub fn current(test_public: &[Cidr]) -> Facts {
        let (own, networks) = host_interfaces();
        Facts {
            test_public: test_public.to_vec(),
            own,
            networks,
        }
    }
}

/// Whether the address may be dialled at all (any policy but `none`).
pub fn check_addr(facts: &Facts, ip: IpAddr) -> Result<(), &'static str> {
    let carried = match ip {
        IpAddr::V6(v6) => carried_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    let forms = || std::iter::once(ip).chain(carried);
    let class = classify(ip);
    if let Some(c) = class.filter(|c| !c.overridable) {
        return Err(c.reason);
    }
    if forms().any(|a| facts.own.contains(&a)) {
        return Err("host-address");
    }
    let marked = facts.test_public.iter().any(|n| n.contains(ip));
    match class {
        Some(c) if !marked => return Err(c.reason),
        _ => {}
    }
    // After the class: a private neighbour keeps its more telling reason. The
    // test ranges are on-link by construction (veth pairs), so marking wins.
    if !marked && forms().any(|a| facts.networks.iter().any(|n| n.contains(a))) {
        return Err("host-network");
    }
    Ok(())
}

fn host_matches(rule: &str, host: &str) -> bool {
    match rule.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
        None => rule == host,
    }
}

fn port_ok(ports: &Option<Vec<u16>>, port: u16) -> bool {
    ports.as_ref().is_none_or(|p| p.contains(&port))
}

/// Normalises a host as a client sent it: lowercase, no trailing dot, no brackets.
pub fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Checks that need no name resolution: the mode, the port, and for
/// allowlists whether any entry could match (so unlisted names are never even resolved).
pub fn precheck(policy: &NetworkPolicy, host: &str, port: u16) -> Result<(), &'static str> {
    match policy.mode {
        NetworkMode::None => Err("network-none"),
        NetworkMode::Public => Ok(()),
        NetworkMode::HttpsOnly if port == 443 => Ok(()),
        NetworkMode::HttpsOnly => Err("port"),
        NetworkMode::Allowlist => {
            let literal = host.parse::<IpAddr>().ok();
            let any = policy.allow.iter().any(|r| {
                port_ok(&r.ports, port)
                    && match (&r.host, &r.cidr, literal) {
                        (Some(h), _, None) => host_matches(h, host),
                        (_, Some(c), Some(ip)) => Cidr::parse(c).is_some_and(|c| c.contains(ip)),
                        // A name may still resolve into a listed range.
                        (_, Some(_), None) => true,
                        _ => false,
                    }
            });
            if any {
                Ok(())
            } else {
                Err("not-allowlisted")
            }
        }
    }
}

/// Like [`precheck`] for a DNS lookup of `host` (no port: any rule's ports will do).
pub fn precheck_name(policy: &NetworkPolicy, host: &str) -> Result<(), &'static str> {
    match policy.mode {
        NetworkMode::None => Err("network-none"),
        NetworkMode::Public | NetworkMode::HttpsOnly => Ok(()),
        NetworkMode::Allowlist => {
            let literal = host.parse::<IpAddr>().is_ok();
            let any = policy.allow.iter().any(|r| match (&r.host, &r.cidr) {
                (Some(h), _) => !literal && host_matches(h, host),
                (_, Some(_)) => true,
                _ => false,
            });
            if any {
                Ok(())
            } else {
                Err("not-allowlisted")
            }
        }
    }
}

/// Like [`check_resolved`] for an address a DNS lookup of `host` returned
/// (no port: any rule's ports will do). The address must pass [`check_addr`].
pub fn check_resolved_name(
    policy: &NetworkPolicy,
    facts: &Facts,
    host: &str,
    ip: IpAddr,
) -> Result<(), &'static str> {
    precheck_name(policy, host)?;
    check_addr(facts, ip)?;
    if policy.mode != NetworkMode::Allowlist {
        return Ok(());
    }
    let literal = host.parse::<IpAddr>().is_ok();
    let ok = policy.allow.iter().any(|r| match (&r.host, &r.cidr) {
        (Some(h), _) => !literal && host_matches(h, host),
        (_, Some(c)) => Cidr::parse(c).is_some_and(|c| c.contains(ip)),
        _ => false,
    });
    if ok {
        Ok(())
    } else {
        Err("not-allowlisted")
    }
}

/// Checks one resolved address of `host:port` against the policy.
pub fn check_resolved(
    policy: &NetworkPolicy,
    facts: &Facts,
    host: &str,
    ip: IpAddr,
    port: u16,
) -> Result<(), &'static str> {
    precheck(policy, host, port)?;
    check_addr(facts, ip)?;
    if policy.mode != NetworkMode::Allowlist {
        return Ok(());
    }
    let literal = host.parse::<IpAddr>().is_ok();
    let ok = policy.allow.iter().any(|r| {
        port_ok(&r.ports, port)
            && match (&r.host, &r.cidr) {
                (Some(h), _) => !literal && host_matches(h, host),
                (_, Some(c)) => Cidr::parse(c).is_some_and(|c| c.contains(ip)),
                _ => false,
            }
    });
    if ok {
        Ok(())
    } else {
        Err("not-allowlisted")
    }
}

fn prefix_len(mask: u128, bits: u32) -> u8 {
    // Netmasks are contiguous on Linux; counting leading ones never widens one.
    (mask.leading_ones().min(bits)) as u8
}

/// The host's own addresses and the networks its interfaces are directly
/// connected to (every interface, every family; a point-to-point link's peer
/// as a single address).
pub fn host_interfaces() -> (HashSet<IpAddr>, Vec<Cidr>) {
    let mut own = HashSet::new();
    let mut networks: Vec<Cidr> = Vec::new();
    let mut add_network = |ip: IpAddr, prefix: u8| {
        let net = Cidr {
            net: mask(ip, prefix),
            prefix,
        };
        if !networks.contains(&net) {
            networks.push(net);
        }
    };
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a linked list that we walk read-only and free once;
    // each sockaddr is read as the type its family says it is.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return (own, networks);
        }
        let mut p = ifap;
        while !p.is_null() {
            let ifa = &*p;
            p = ifa.ifa_next;
            let (addr, netmask) = (ifa.ifa_addr, ifa.ifa_netmask);
            if addr.is_null() {
                continue;
            }
            let peer = if ifa.ifa_flags & libc::IFF_POINTOPOINT as libc::c_uint != 0 {
                ifa.ifa_ifu
            } else {
                std::ptr::null_mut()
            };
            // The netmask is read in the address's family (its own family field
            // is not always set); the peer only when it is an address at all.
            let same_family =
                |s: *const libc::sockaddr| !s.is_null() && (*s).sa_family == (*addr).sa_family;
            match i32::from((*addr).sa_family) {
                libc::AF_INET => {
                    let v4 = |s: *const libc::sockaddr| {
                        let sin = s as *const libc::sockaddr_in;
                        u32::from_be((*sin).sin_addr.s_addr)
                    };
                    let ip = IpAddr::V4(Ipv4Addr::from(v4(addr)));
                    own.insert(ip);
                    if !netmask.is_null() {
                        add_network(ip, prefix_len(u128::from(v4(netmask)) << 96, 32));
                    }
                    if same_family(peer) {
                        add_network(IpAddr::V4(Ipv4Addr::from(v4(peer))), 32);
                    }
                }
                libc::AF_INET6 => {
                    let v6 = |s: *const libc::sockaddr| {
                        let sin6 = s as *const libc::sockaddr_in6;
                        u128::from_be_bytes((*sin6).sin6_addr.s6_addr)
                    };
                    let ip = IpAddr::V6(Ipv6Addr::from(v6(addr)));
                    own.insert(ip);
                    if !netmask.is_null() {
                        add_network(ip, prefix_len(v6(netmask), 128));
                    }
                    if same_family(peer) {
                        add_network(IpAddr::V6(Ipv6Addr::from(v6(peer))), 128);
                    }
                }
                _ => {}
            }
        }
        libc::freeifaddrs(ifap);
    }
    (own, networks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_api_types::AllowRule;

    fn facts() -> Facts {
        Facts {
            test_public: vec![Cidr::parse("10.213.0.0/16").unwrap()],
            own: ["10.213.1.1".parse().unwrap()].into_iter().collect(),
            networks: vec![Cidr::parse("10.213.1.0/30").unwrap()],
        }
    }

    fn denied(ip: &str) -> Option<&'static str> {
        check_addr(&Facts::default(), ip.parse().unwrap()).err()
    }

    #[test]
    fn always_denied_classes() {
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("127.1.2.3", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "cgnat"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "private"),
            ("fd12::1", "private"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
            // IPv4-compatible: judged by the IPv4 address it carries first.
            ("::127.0.0.1", "loopback"),
            ("198.18.0.1", "reserved"),
            ("240.0.0.1", "reserved"),
        ] {
            assert_eq!(denied(ip), Some(why), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "172.32.0.1",
            "192.0.3.1",
            "198.51.99.255",
            "203.0.114.0",
            "2606:4700::1",
            "2606:4700::1111",
            "2001:db9::1",
            "::ffff:8.8.8.8",
            // Documentation ranges: this machine's registries resolve there (DESIGN.md).
            "203.0.113.7",
            "198.51.100.1",
            "192.0.2.1",
            "2001:db8::1",
            "::ffff:203.0.113.80",
        ] {
            assert_eq!(denied(ip), None, "{ip}");
        }
    }

    #[test]
    fn directly_connected_networks_are_refused() {
        // A host with public addresses: its LAN neighbours and gateway are not "the internet".
        let f = Facts {
            test_public: vec![Cidr::parse("10.213.7.0/30").unwrap()],
            own: ["93.184.0.10", "2606:2800:1::10", "10.213.7.1"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect(),
            networks: [
                "93.184.0.0/24",
                "2606:2800:1::/64",
                "10.213.7.0/30",
                "10.214.0.0/30",
            ]
            .iter()
            .map(|c| Cidr::parse(c).unwrap())
            .collect(),
        };
        let check = |ip: &str| check_addr(&f, ip.parse().unwrap());
        for ip in [
            "93.184.0.1",
            "93.184.0.255",
            "::ffff:93.184.0.1",
            "64:ff9b::5db8:1",
            "2002:5db8:1::1",
            "2606:2800:1::1",
            "2606:2800:1:0:ffff::1",
        ] {
            assert_eq!(check(ip), Err("host-network"), "{ip}");
        }
        assert_eq!(check("93.184.0.10"), Err("host-address"));
        assert_eq!(check("64:ff9b::5db8:a"), Err("host-address"));
        assert_eq!(check("2606:2800:1::10"), Err("host-address"));
        // A private neighbour keeps its class as the reason.
        assert_eq!(check("10.214.0.2"), Err("private"));
        // The test range is on-link (a veth pair) and marked: it stays reachable,
        // the host's own end of it does not.
        assert_eq!(check("10.213.7.2"), Ok(()));
        assert_eq!(check("::ffff:10.213.7.2"), Ok(()));
        assert_eq!(check("10.213.7.1"), Err("host-address"));
        // Public addresses outside the host's networks.
        for ip in ["1.1.1.1", "93.184.1.1", "2606:4700::1", "2606:2800:2::1"] {
            assert_eq!(check(ip), Ok(()), "{ip}");
        }
        let public = NetworkPolicy::mode(NetworkMode::Public);
        assert_eq!(
            check_resolved(&public, &f, "gw.test", "93.184.0.1".parse().unwrap(), 443),
            Err("host-network")
        );
        assert_eq!(
            check_resolved_name(&public, &f, "gw.test", "2606:2800:1::1".parse().unwrap()),
            Err("host-network")
        );
    }

    #[test]
    fn test_public_ranges_never_unlock_loopback_or_own_addresses() {
        let f = facts();
        assert_eq!(check_addr(&f, "10.213.1.2".parse().unwrap()), Ok(()));
        assert_eq!(
            check_addr(&f, "10.213.1.1".parse().unwrap()),
            Err("host-address")
        );
        assert_eq!(
            check_addr(&f, "::ffff:10.213.1.1".parse().unwrap()),
            Err("host-address")
        );
        assert_eq!(check_addr(&f, "10.9.0.1".parse().unwrap()), Err("private"));
        let f2 = Facts {
            test_public: vec![Cidr::parse("127.0.0.0/8").unwrap()],
            ..Facts::default()
        };
        assert_eq!(
            check_addr(&f2, "127.0.0.1".parse().unwrap()),
            Err("loopback")
        );
    }

    #[test]
    fn modes_ports_and_allowlists() {
        let f = facts();
        let ip: IpAddr = "10.213.1.2".parse().unwrap();
        let public = NetworkPolicy::mode(NetworkMode::Public);
        assert_eq!(check_resolved(&public, &f, "x", ip, 80), Ok(()));
        let none = NetworkPolicy::mode(NetworkMode::None);
        assert_eq!(precheck(&none, "x", 443), Err("network-none"));
        let https = NetworkPolicy::mode(NetworkMode::HttpsOnly);
        assert_eq!(precheck(&https, "x", 80), Err("port"));
        assert_eq!(check_resolved(&https, &f, "x", ip, 443), Ok(()));
        let allow = NetworkPolicy {
            mode: NetworkMode::Allowlist,
            allow: vec![
                AllowRule {
                    host: Some("registry.test".into()),
                    ports: Some(vec![443]),
                    ..AllowRule::default()
                },
                AllowRule {
                    host: Some("*.cdn.test".into()),
                    ..AllowRule::default()
                },
                AllowRule {
                    cidr: Some("10.213.9.0/24".into()),
                    ports: Some(vec![8443]),
                    ..AllowRule::default()
                },
            ],
        };
        assert_eq!(precheck(&allow, "registry.test", 443), Ok(()));
        assert_eq!(
            precheck(&allow, "registry.test", 80),
            Err("not-allowlisted")
        );
        assert_eq!(precheck(&allow, "other.test", 443), Err("not-allowlisted"));
        assert_eq!(precheck(&allow, "a.cdn.test", 80), Ok(()));
        assert_eq!(precheck(&allow, "cdn.test", 80), Err("not-allowlisted"));
        assert_eq!(check_resolved(&allow, &f, "registry.test", ip, 443), Ok(()));
        // Rebinding: the allowed name now resolves to loopback.
        assert_eq!(
            check_resolved(
                &allow,
                &f,
                "registry.test",
                "127.0.0.1".parse().unwrap(),
                443
            ),
            Err("loopback")
        );
        let in_range: IpAddr = "10.213.9.5".parse().unwrap();
        assert_eq!(
            check_resolved(&allow, &f, "10.213.9.5", in_range, 8443),
            Ok(())
        );
        assert_eq!(
            check_resolved(&allow, &f, "10.213.9.5", in_range, 443),
            Err("not-allowlisted")
        );
        assert_eq!(
            check_resolved(&allow, &f, "10.213.1.2", ip, 8443),
            Err("not-allowlisted")
        );
        // DNS lookups: the name rule whatever the ports, then the address checks.
        assert_eq!(precheck_name(&none, "x"), Err("network-none"));
        assert_eq!(precheck_name(&https, "x"), Ok(()));
        assert_eq!(precheck_name(&allow, "registry.test"), Ok(()));
        assert_eq!(precheck_name(&allow, "a.cdn.test"), Ok(()));
        // Could resolve into the listed range.
        assert_eq!(precheck_name(&allow, "other.test"), Ok(()));
        assert_eq!(check_resolved_name(&allow, &f, "registry.test", ip), Ok(()));
        assert_eq!(
            check_resolved_name(&allow, &f, "registry.test", "127.0.0.1".parse().unwrap()),
            Err("loopback")
        );
        assert_eq!(
            check_resolved_name(&allow, &f, "other.test", in_range),
            Ok(())
        );
        assert_eq!(
            check_resolved_name(&allow, &f, "other.test", ip),
            Err("not-allowlisted")
        );
        let hosts_only = NetworkPolicy {
            mode: NetworkMode::Allowlist,
            allow: vec![AllowRule {
                host: Some("registry.test".into()),
                ports: Some(vec![443]),
                ..AllowRule::default()
            }],
        };
        assert_eq!(
            precheck_name(&hosts_only, "other.test"),
            Err("not-allowlisted")
        );
    }

    #[test]
    fn host_interfaces_include_loopback_and_its_network() {
        let (own, networks) = host_interfaces();
        assert!(own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(
            networks.contains(&Cidr::parse("127.0.0.0/8").unwrap()),
            "{networks:?}"
        );
        // Every interface address lies in one of the networks found.
        for ip in own {
            assert!(
                networks.iter().any(|n| n.contains(ip)),
                "{ip}: {networks:?}"
            );
        }
    }

    #[test]
    fn prefix_lengths_from_netmasks() {
        assert_eq!(prefix_len(u128::from(0xffff_ff00_u32) << 96, 32), 24);
        assert_eq!(prefix_len(u128::from(0xffff_fffc_u32) << 96, 32), 30);
        assert_eq!(prefix_len(u128::MAX, 32), 32);
        assert_eq!(prefix_len(0, 32), 0);
        assert_eq!(prefix_len(u128::MAX << 64, 128), 64);
    }
}
