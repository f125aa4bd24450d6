//! IANA's IPv4 and IPv6 Special-Purpose Address Registries, checked in as
//! the CSV files IANA publishes (`iana/*.csv`, same columns) and parsed once.
//!
//! The classification of special-purpose space comes from these rows, not
//! from a list written here: updating the files is how a new block (say the
//! next documentation prefix) becomes refused.

use std::net::IpAddr;
use std::sync::LazyLock;

const IPV4_CSV: &str = include_str!("iana/ipv4-special-registry.csv");
const IPV6_CSV: &str = include_str!("iana/ipv6-special-registry.csv");

/// The header IANA's CSV files start with (the columns we rely on by position).
const HEADER: [&str; 10] = [
    "Address Block",
    "Name",
    "RFC",
    "Allocation Date",
    "Termination Date",
    "Source",
    "Destination",
    "Forwardable",
    "Globally Reachable",
    "Reserved-by-Protocol",
];
const COL_BLOCK: usize = 0;
const COL_NAME: usize = 1;
const COL_TERMINATION: usize = 4;
const COL_GLOBAL: usize = 8;

/// Why an embedded registry file did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// A quoted field is not closed.
    #[error("{file}: unterminated quoted field")]
    Unterminated {
        /// Which file.
        file: &'static str,
    },
    /// The first row is not IANA's header.
    #[error("{file}: unexpected header {found:?}")]
    Header {
        /// Which file.
        file: &'static str,
        /// The header found.
        found: Vec<String>,
    },
    /// A row has the wrong number of fields.
    #[error("{file} row {row}: {found} fields, want {}", HEADER.len())]
    Fields {
        /// Which file.
        file: &'static str,
        /// Row number (header = 0).
        row: usize,
        /// Fields found.
        found: usize,
    },
    /// An address block is not `address/prefix` of the file's family with its host bits clear.
    #[error("{file} row {row}: bad address block {text:?}")]
    Block {
        /// Which file.
        file: &'static str,
        /// Row number (header = 0).
        row: usize,
        /// The block as written.
        text: String,
    },
}

/// One block of a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Network address, as bits (IPv4 in the low 32 bits).
    bits: u128,
    /// Prefix length.
    pub prefix: u8,
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// The registry's name for it ("Private-Use", "Documentation", ...).
    pub name: String,
    /// "Globally Reachable": `None` for N/A (a form judged by what it embeds).
    pub globally_reachable: Option<bool>,
}

impl Block {
    /// Whether `ip` lies inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (bits, width) = match ip {
            IpAddr::V4(v4) if self.v4 => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) if !self.v4 => (u128::from(v6), 128),
            _ => return false,
        };
        let shift = width - u32::from(self.prefix);
        // A /0 would shift by the full width; no registry row is one, but stay total.
        shift >= 128 || (bits >> shift) == (self.bits >> shift)
    }

    /// Whether this is the block `net/prefix` (e.g. to name an exception).
    pub fn is(&self, net: IpAddr, prefix: u8) -> bool {
        let bits = match net {
            IpAddr::V4(v4) => u128::from(u32::from(v4)),
            IpAddr::V6(v6) => u128::from(v6),
        };
        self.v4 == net.is_ipv4() && self.bits == bits && self.prefix == prefix
    }
}

/// Both registries' current (not terminated) blocks.
#[derive(Debug)]
pub struct Registry {
    blocks: Vec<Block>,
}

impl Registry {
    /// Parses the two files.
    pub fn parse(v4: &str, v6: &str) -> Result<Registry, RegistryError> {
        let mut blocks = parse_file("ipv4-special-registry.csv", v4, true)?;
        blocks.extend(parse_file("ipv6-special-registry.csv", v6, false)?);
        Ok(Registry { blocks })
    }

    /// The most specific block containing `ip`, if any.
    pub fn lookup(&self, ip: IpAddr) -> Option<&Block> {
        self.blocks
            .iter()
            .filter(|b| b.contains(ip))
            .max_by_key(|b| b.prefix)
    }

    /// Every block (tests, diagnostics).
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
}

static REGISTRY: LazyLock<Result<Registry, RegistryError>> =
    LazyLock::new(|| Registry::parse(IPV4_CSV, IPV6_CSV));

/// The embedded registries, parsed on first use. An error (only possible if
/// the checked-in files were edited badly; a unit test parses them) makes
/// callers refuse every address rather than guess.
pub fn registry() -> Result<&'static Registry, &'static RegistryError> {
    REGISTRY.as_ref()
}

/// Splits CSV text (RFC 4180: quoted fields may hold commas, `""` and line breaks).
fn records(file: &'static str, text: &str) -> Result<Vec<Vec<String>>, RegistryError> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => row.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(RegistryError::Unterminated { file });
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    // Blank lines (a trailing newline) are not rows.
    rows.retain(|r| !(r.len() == 1 && r[0].trim().is_empty()));
    Ok(rows)
}

/// A cell without IANA's footnote marks ("False [1]" -> "False").
fn strip_notes(cell: &str) -> &str {
    cell.split(" [").next().unwrap_or(cell).trim()
}

fn parse_block(text: &str, v4: bool) -> Option<(u128, u8)> {
    let (addr, prefix) = text.trim().split_once('/')?;
    let prefix: u8 = prefix.trim().parse().ok()?;
    let (bits, width) = match addr.trim().parse::<IpAddr>().ok()? {
        IpAddr::V4(a) if v4 => (u128::from(u32::from(a)), 32u32),
        IpAddr::V6(a) if !v4 => (u128::from(a), 128u32),
        _ => return None,
    };
    if u32::from(prefix) > width || prefix == 0 {
        return None;
    }
    let host_bits = width - u32::from(prefix);
    let host_mask = if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    (bits & host_mask == 0).then_some((bits, prefix))
}

fn parse_file(file: &'static str, text: &str, v4: bool) -> Result<Vec<Block>, RegistryError> {
    let rows = records(file, text)?;
    let header_ok = rows
        .first()
        .is_some_and(|h| h.iter().map(|c| c.trim()).eq(HEADER.iter().copied()));
    if !header_ok {
        return Err(RegistryError::Header {
            file,
            found: rows.first().cloned().unwrap_or_default(),
        });
    }
    let mut blocks = Vec::new();
    for (row, cells) in rows.iter().enumerate().skip(1) {
        if cells.len() != HEADER.len() {
            return Err(RegistryError::Fields {
                file,
                row,
                found: cells.len(),
            });
        }
        let termination = strip_notes(&cells[COL_TERMINATION]);
        if !(termination.is_empty() || termination == "N/A") {
            // A terminated reservation (e.g. the 6to4 relay anycast /24) no longer applies.
            continue;
        }
        let globally_reachable = match strip_notes(&cells[COL_GLOBAL]) {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        };
        let name = cells[COL_NAME].trim().to_string();
        // One cell may list several blocks ("192.0.0.170/32, 192.0.0.171/32").
        for text in strip_notes(&cells[COL_BLOCK]).split(',') {
            let (bits, prefix) = parse_block(text, v4).ok_or_else(|| RegistryError::Block {
                file,
                row,
                text: text.to_string(),
            })?;
            blocks.push(Block {
                bits,
                prefix,
                v4,
                name: name.clone(),
                globally_reachable,
            });
        }
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(r: &'a Registry, ip: &str) -> Option<&'a Block> {
        r.lookup(ip.parse().unwrap())
    }

    #[test]
    fn the_embedded_registries_parse() {
        let r = registry().expect("embedded IANA registries parse");
        let v4 = r.blocks().iter().filter(|b| b.v4).count();
        let v6 = r.blocks().len() - v4;
        // 25 IPv4 rows (one holds two blocks, one is terminated), 25 IPv6 rows (one terminated).
        assert_eq!((v4, v6), (25, 24), "{:#?}", r.blocks());
        let b = find(r, "10.1.2.3").unwrap();
        assert_eq!((b.name.as_str(), b.prefix), ("Private-Use", 8));
        assert_eq!(b.globally_reachable, Some(false));
        // Footnote marks are stripped: "False [1]".
        assert_eq!(
            find(r, "127.0.0.1").unwrap().globally_reachable,
            Some(false)
        );
        assert_eq!(find(r, "127.0.0.1").unwrap().name, "Loopback");
        // Quoted names with doubled quotes.
        assert_eq!(find(r, "0.1.2.3").unwrap().name, "\"This network\"");
        // Most specific wins: 192.0.0.9/32 is globally reachable inside 192.0.0.0/24.
        assert_eq!(find(r, "192.0.0.9").unwrap().globally_reachable, Some(true));
        assert_eq!(find(r, "192.0.0.9").unwrap().prefix, 32);
        assert_eq!(find(r, "192.0.0.200").unwrap().prefix, 24);
        assert_eq!(
            find(r, "192.0.0.171").unwrap().name,
            "NAT64/DNS64 Discovery"
        );
        // A multi-line quoted RFC cell does not split the row.
        let bc = find(r, "255.255.255.255").unwrap();
        assert_eq!(
            (bc.name.as_str(), bc.globally_reachable),
            ("Limited Broadcast", Some(false))
        );
        // Terminated: the 6to4 relay anycast /24 applies no more, its 6a44 /32 does.
        assert!(find(r, "192.88.99.1").is_none());
        assert_eq!(find(r, "192.88.99.2").unwrap().prefix, 32);
        for (ip, name, prefix, global) in [
            ("3fff::1", "Documentation", 20, Some(false)),
            ("5f00::1", "Segment Routing (SRv6) SIDs", 16, Some(false)),
            ("2001:db8::1", "Documentation", 32, Some(false)),
            ("100::1", "Discard-Only Address Block", 64, Some(false)),
            ("100:0:0:1::1", "Dummy IPv6 Prefix", 64, Some(false)),
            ("2001:2::1", "Benchmarking", 48, Some(false)),
            ("2001:20::1", "ORCHIDv2", 28, Some(true)),
            ("64:ff9b:1::1", "IPv4-IPv6 Translat.", 48, Some(false)),
            ("64:ff9b::1", "IPv4-IPv6 Translat.", 96, Some(true)),
            ("2001::1", "TEREDO", 32, None),
            ("2002::1", "6to4", 16, None),
            ("2001:1ff::1", "IETF Protocol Assignments", 23, Some(false)),
            ("fd00::1", "Unique-Local", 7, Some(false)),
            ("fe80::1", "Link-Local Unicast", 10, Some(false)),
        ] {
            let b = find(r, ip).unwrap_or_else(|| panic!("{ip}: no block"));
            assert_eq!(
                (b.name.as_str(), b.prefix, b.globally_reachable),
                (name, prefix, global),
                "{ip}"
            );
        }
        assert!(find(r, "2606:4700::1").is_none());
        assert!(find(r, "8.8.8.8").is_none());
        // The terminated ORCHID /28 is gone; the IETF /23 around it remains.
        assert_eq!(find(r, "2001:10::1").unwrap().prefix, 23);
    }

    #[test]
    fn malformed_files_are_errors() {
        let header = HEADER.join(",");
        let v6 = format!("{header}\n");
        assert!(matches!(
            Registry::parse("a,b\n", &v6),
            Err(RegistryError::Header { .. })
        ));
        let bad = format!("{header}\n10.0.0.1/8,X,R,2000-01,N/A,True,True,True,False,False\n");
        assert!(matches!(
            Registry::parse(&bad, &v6),
            Err(RegistryError::Block { row: 1, .. })
        ));
        let short = format!("{header}\n10.0.0.0/8,X\n");
        assert!(matches!(
            Registry::parse(&short, &v6),
            Err(RegistryError::Fields {
                row: 1,
                found: 2,
                ..
            })
        ));
        let open = format!("{header}\n\"10.0.0.0/8,X\n");
        assert!(matches!(
            Registry::parse(&open, &v6),
            Err(RegistryError::Unterminated { .. })
        ));
        let wrong_family =
            format!("{header}\nfc00::/7,X,R,2000-01,N/A,True,True,True,False,False\n");
        assert!(matches!(
            Registry::parse(&wrong_family, &v6),
            Err(RegistryError::Block { .. })
        ));
    }
}
