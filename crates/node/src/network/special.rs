//! Address classes: which destinations are not "the internet".
//!
//! Special-purpose space comes from IANA's registries ([`super::iana`]): an
//! address is public only when the most specific registry block holding it is
//! "Globally Reachable", or no block holds it and it is unicast space (all of
//! IPv4 but multicast; IPv6 global unicast, 2000::/3). Multicast is refused
//! here (it has registries of its own).
//!
//! IPv6 forms that embed an IPv4 address are decoded and the IPv4 address is
//! classified, so a forbidden IPv4 destination cannot be dressed up as IPv6:
//! * judged as the IPv4 they carry: IPv4-mapped `::ffff:0:0/96` (the kernel
//!   dials the IPv4 address itself), NAT64 well-known `64:ff9b::/96`, 6to4
//!   `2002::/16` (a relay reaches the embedded address);
//! * refused whatever they carry, reported with the carried address's class
//!   when that is not public: NAT64 local-use `64:ff9b:1::/48` (RFC 8215;
//!   IANA: not globally reachable), SIIT IPv4-translated `::ffff:0:0:0/96`
//!   (RFC 2765) and IPv4-compatible `::/96` (deprecated, RFC 4291), which
//!   reach no IPv4 host from here, and Teredo `2001::/32`: it needs a relay we
//!   do not run and its client address (last 32 bits inverted) is whatever the
//!   guest wrote, so it is refused entirely (server and client are decoded
//!   only to name the reason).
//!
//! Kept exception: the IPv4 documentation ranges and `2001:db8::/32` count as
//! public, because this machine's package registries resolve to them
//! (DESIGN.md "Package registries from inside a sandbox"). The newer IPv6
//! documentation block `3fff::/20` is refused, as IANA says.

use super::iana::{self, Block};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A non-public address class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// Short reason shown in counters and logs.
    pub reason: &'static str,
    /// Whether `--network-test-public-cidr` may mark it public.
    pub overridable: bool,
}

const fn never(reason: &'static str) -> Option<Class> {
    Some(Class {
        reason,
        overridable: false,
    })
}

const fn unless_marked(reason: &'static str) -> Option<Class> {
    Some(Class {
        reason,
        overridable: true,
    })
}

/// Registry blocks treated as public although IANA says "not globally
/// reachable": documentation ranges this machine's registries resolve into.
const DOCUMENTATION_AS_PUBLIC: [(IpAddr, u8); 4] = [
    (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(198, 51, 100, 0)), 24),
    (IpAddr::V4(Ipv4Addr::new(203, 0, 113, 0)), 24),
    (
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)),
        32,
    ),
];

/// The reason (and whether tests may unlock it) for a registry block that is
/// not globally reachable, from the registry's own name for it.
fn class_of_name(name: &str) -> Option<Class> {
    let n = name.to_ascii_lowercase();
    if n.contains("loopback") {
        never("loopback")
    } else if n.contains("this network") || n.contains("this host") || n.contains("unspecified") {
        never("unspecified")
    } else if n.contains("link local") || n.contains("link-local") {
        never("link-local")
    } else if n.contains("broadcast") {
        never("broadcast")
    } else if n.contains("private-use") || n.contains("unique-local") {
        unless_marked("private")
    } else if n.contains("shared address space") {
        unless_marked("cgnat")
    } else {
        unless_marked("reserved")
    }
}

fn class_of_block(block: &Block) -> Option<Class> {
    if block.globally_reachable == Some(true) {
        return None;
    }
    if DOCUMENTATION_AS_PUBLIC
        .iter()
        .any(|(net, prefix)| block.is(*net, *prefix))
    {
        return None;
    }
    // False, or N/A on a block no decoder handled: not public.
    class_of_name(&block.name)
}

/// What the registries say about an address.
enum Listed {
    /// The most specific block holding it, as a class (`None`: globally reachable).
    Block(Option<Class>),
    /// No block holds it.
    Unlisted,
}

fn listed(ip: IpAddr) -> Result<Listed, &'static iana::RegistryError> {
    let r = iana::registry()?;
    Ok(match r.lookup(ip) {
        Some(b) => Listed::Block(class_of_block(b)),
        None => Listed::Unlisted,
    })
}

/// The class of a non-public IPv4 address, `None` when public.
pub fn classify_v4(ip: Ipv4Addr) -> Option<Class> {
    if ip.is_multicast() {
        return never("multicast");
    }
    match listed(IpAddr::V4(ip)) {
        Ok(Listed::Block(c)) => c,
        Ok(Listed::Unlisted) => None,
        Err(_) => never("registry-unavailable"),
    }
}

/// An IPv6 form that carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedded {
    /// `::ffff:a.b.c.d` (RFC 4291): the kernel dials the IPv4 address.
    Mapped(Ipv4Addr),
    /// `64:ff9b::a.b.c.d` (RFC 6052 well-known NAT64 prefix).
    Nat64(Ipv4Addr),
    /// `2002:AABB:CCDD::/48` (RFC 3056 6to4): the IPv4 address in bits 16..48.
    SixToFour(Ipv4Addr),
    /// `64:ff9b:1::/48` (RFC 8215 local-use NAT64), IPv4 in the last 32 bits.
    Nat64Local(Ipv4Addr),
    /// `::ffff:0:a.b.c.d` (RFC 2765 SIIT "IPv4-translated").
    Translated(Ipv4Addr),
    /// `::a.b.c.d` (RFC 4291 "IPv4-compatible", deprecated), not `::` or `::1`.
    Compatible(Ipv4Addr),
    /// `2001:0::/32` (RFC 4380 Teredo): server in bits 32..64, client the last 32 bits inverted.
    Teredo {
        /// The Teredo server.
        server: Ipv4Addr,
        /// The client's (mapped) public address.
        client: Ipv4Addr,
    },
}

impl Embedded {
    /// The IPv4 addresses the form carries.
    pub fn ipv4s(&self) -> Vec<Ipv4Addr> {
        match *self {
            Embedded::Mapped(a)
            | Embedded::Nat64(a)
            | Embedded::SixToFour(a)
            | Embedded::Nat64Local(a)
            | Embedded::Translated(a)
            | Embedded::Compatible(a) => vec![a],
            Embedded::Teredo { server, client } => vec![server, client],
        }
    }

    /// The IPv4 address a dial to this form actually reaches, for the forms
    /// judged as that address (`None` for the forms refused whatever they carry).
    pub fn reaches(&self) -> Option<Ipv4Addr> {
        match *self {
            Embedded::Mapped(a) | Embedded::Nat64(a) | Embedded::SixToFour(a) => Some(a),
            _ => None,
        }
    }
}

/// Decodes the IPv4 address an IPv6 address embeds, if it is one of the forms above.
pub fn embedded(ip: Ipv6Addr) -> Option<Embedded> {
    let bits = u128::from(ip);
    let low = Ipv4Addr::from(bits as u32);
    let top96 = bits >> 32;
    if top96 == 0xffff {
        Some(Embedded::Mapped(low))
    } else if top96 == 0xffff_0000 {
        Some(Embedded::Translated(low))
    } else if top96 == 0 && bits > 1 {
        Some(Embedded::Compatible(low))
    } else if top96 == 0x0064_ff9b_u128 << 64 {
        Some(Embedded::Nat64(low))
    } else if bits >> 80 == 0x0064_ff9b_0001 {
        Some(Embedded::Nat64Local(low))
    } else if bits >> 112 == 0x2002 {
        Some(Embedded::SixToFour(Ipv4Addr::from((bits >> 80) as u32)))
    } else if bits >> 96 == 0x2001_0000 {
        Some(Embedded::Teredo {
            server: Ipv4Addr::from((bits >> 64) as u32),
            client: Ipv4Addr::from(!(bits as u32)),
        })
    } else {
        None
    }
}

/// The IPv4 address a dial to `ip` reaches when that is what it is judged as
/// (mapped, NAT64 well-known, 6to4): checked against the host's own addresses and networks too.
pub fn carried_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    embedded(ip).and_then(|e| e.reaches())
}

/// The class of a non-public IPv6 address, `None` when public.
pub fn classify_v6(ip: Ipv6Addr) -> Option<Class> {
    let bits = u128::from(ip);
    if bits >> 120 == 0xff {
        return never("multicast");
    }
    if let Some(form) = embedded(ip) {
        // The carried address first: its class is the most telling reason.
        if let Some(c) = form.ipv4s().into_iter().find_map(classify_v4) {
            return Some(c);
        }
        return match form {
            Embedded::Mapped(_) | Embedded::Nat64(_) | Embedded::SixToFour(_) => None,
            Embedded::Teredo { .. } => never("teredo"),
            Embedded::Nat64Local(_) | Embedded::Translated(_) | Embedded::Compatible(_) => {
                never("reserved")
            }
        };
    }
    match listed(IpAddr::V6(ip)) {
        Ok(Listed::Block(c)) => c,
        // Outside every block: only global unicast space (2000::/3) is the internet.
        Ok(Listed::Unlisted) if bits >> 125 == 0b001 => None,
        Ok(Listed::Unlisted) => unless_marked("reserved"),
        Err(_) => never("registry-unavailable"),
    }
}

/// The class of a non-public address, `None` when public.
pub fn classify(ip: IpAddr) -> Option<Class> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ip: &str) -> Option<&'static str> {
        classify(ip.parse().unwrap()).map(|c| c.reason)
    }

    #[test]
    fn every_ipv4_embedding_form_is_decoded() {
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let v4 = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            embedded(v6("::ffff:7f00:1")),
            Some(Embedded::Mapped(v4("127.0.0.1")))
        );
        assert_eq!(
            embedded(v6("::ffff:0:7f00:1")),
            Some(Embedded::Translated(v4("127.0.0.1")))
        );
        assert_eq!(
            embedded(v6("::a9fe:a9fe")),
            Some(Embedded::Compatible(v4("169.254.169.254")))
        );
        assert_eq!(embedded(v6("::1")), None);
        assert_eq!(embedded(v6("::")), None);
        assert_eq!(
            embedded(v6("64:ff9b::a00:1")),
            Some(Embedded::Nat64(v4("10.0.0.1")))
        );
        assert_eq!(
            embedded(v6("64:ff9b:1::a9fe:a9fe")),
            Some(Embedded::Nat64Local(v4("169.254.169.254")))
        );
        assert_eq!(
            embedded(v6("64:ff9b:1:ffff:1:2:a9fe:a9fe")),
            Some(Embedded::Nat64Local(v4("169.254.169.254")))
        );
        assert_eq!(
            embedded(v6("2002:c0a8:101::1")),
            Some(Embedded::SixToFour(v4("192.168.1.1")))
        );
        // Teredo: server 65.54.227.120, client 192.0.2.45 stored inverted (RFC 4380 example).
        assert_eq!(
            embedded(v6("2001:0:4136:e378:8000:63bf:3fff:fdd2")),
            Some(Embedded::Teredo {
                server: v4("65.54.227.120"),
                client: v4("192.0.2.45"),
            })
        );
        // Neighbours of the forms are not decoded.
        assert_eq!(embedded(v6("2001:1::1")), None);
        assert_eq!(embedded(v6("64:ff9b:2::1")), None);
        assert_eq!(embedded(v6("::1:ffff:7f00:1")), None);
    }

    #[test]
    fn forms_carrying_a_forbidden_ipv4_are_refused_as_it() {
        for (ip, why) in [
            // The findings.
            ("64:ff9b:1::a9fe:a9fe", "link-local"),
            ("::ffff:0:7f00:1", "loopback"),
            ("::ffff:0:a00:1", "private"),
            // Mapped, NAT64, compatible, 6to4 (server and prefix forms).
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:a9fe:a9fe", "link-local"),
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::c0a8:1", "private"),
            ("64:ff9b::6440:1", "cgnat"),
            ("::a9fe:a9fe", "link-local"),
            ("::10.1.2.3", "private"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a9fe:a9fe:1:2:3:4:5", "link-local"),
            ("2002:e000:1::", "multicast"),
            ("2002:ffff:ffff::", "broadcast"),
            // Teredo: a forbidden server or client names the reason.
            ("2001:0:7f00:1::ffff:ffff", "loopback"),
            ("2001:0:808:808:0:0:80ff:fffe", "loopback"),
            ("2001:0:808:808:0:0:f5ff:fffe", "private"),
        ] {
            assert_eq!(reason(ip), Some(why), "{ip}");
        }
    }

    #[test]
    fn forms_that_reach_no_ipv4_host_are_refused_even_when_it_is_public() {
        for (ip, why) in [
            ("64:ff9b:1::808:808", "reserved"),
            ("::ffff:0:808:808", "reserved"),
            ("::8.8.8.8", "reserved"),
            // Teredo is refused entirely, public server and client included.
            ("2001:0:808:808:0:0:f7f7:f7f7", "teredo"),
        ] {
            let c = classify(ip.parse().unwrap());
            assert_eq!(c.map(|c| c.reason), Some(why), "{ip}");
            assert_eq!(c.map(|c| c.overridable), Some(false), "{ip}");
        }
        // Judged as the public IPv4 address they reach.
        for ip in ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"] {
            assert_eq!(reason(ip), None, "{ip}");
        }
    }

    #[test]
    fn special_purpose_blocks_follow_the_registry() {
        for (ip, why) in [
            // Wrongly public before (issue #23).
            ("3fff::1", "reserved"),
            ("3fff:fff:ffff::1", "reserved"),
            ("5f00::1", "reserved"),
            ("100::1", "reserved"),
            ("100:0:0:1::1", "reserved"),
            ("2001:2::1", "reserved"),
            ("2001:1ff::1", "reserved"),
            ("fc00::1", "private"),
            ("fe80::1", "link-local"),
            ("fec0::1", "reserved"),
            ("ff02::1", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("4000::1", "reserved"),
            ("5f01::1", "reserved"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("192.168.0.1", "private"),
            ("100.64.0.1", "cgnat"),
            ("192.0.0.1", "reserved"),
            ("192.0.0.8", "reserved"),
            ("192.0.0.170", "reserved"),
            ("192.0.0.171", "reserved"),
            ("192.0.0.255", "reserved"),
            ("192.88.99.2", "reserved"),
            ("198.18.0.1", "reserved"),
            ("198.19.255.255", "reserved"),
            ("240.0.0.1", "reserved"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("255.255.255.255", "broadcast"),
        ] {
            assert_eq!(reason(ip), Some(why), "{ip}");
        }
        for ip in [
            // Globally reachable per IANA.
            "192.0.0.9",
            "192.0.0.10",
            "192.31.196.1",
            "192.175.48.1",
            "64:ff9b::808:808",
            "2001:1::1",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2620:4f:8000::1",
            // Unlisted unicast.
            "8.8.8.8",
            "192.88.99.1",
            "198.20.0.1",
            "2606:4700::1",
            "2001:db9::1",
            "3fff:1000::1",
            "2c0f:f000::1",
            // The kept exception: documentation ranges the registries resolve into.
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.7",
            "2001:db8::1",
        ] {
            assert_eq!(reason(ip), None, "{ip}");
        }
    }

    #[test]
    fn only_loopback_like_classes_are_never_overridable() {
        let over = |ip: &str| classify(ip.parse().unwrap()).map(|c| c.overridable);
        for ip in [
            "127.0.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "::1",
            "fe80::1",
        ] {
            assert_eq!(over(ip), Some(false), "{ip}");
        }
        for ip in ["10.0.0.1", "100.64.0.1", "198.18.0.1", "fd00::1", "3fff::1"] {
            assert_eq!(over(ip), Some(true), "{ip}");
        }
    }
}
