//! Input rules of §8, mirrored from the SDK's client-side checks.

use std::collections::BTreeMap;

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// A required field is absent.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A field is malformed or over a limit.
    #[error("{field}: {reason}")]
    Format {
        /// Field name as on the wire.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn bad(field: &'static str, reason: impl Into<String>) -> ValidationError {
    ValidationError::Format {
        field,
        reason: reason.into(),
    }
}

/// Most argv items.
pub const MAX_ARGV_ITEMS: usize = 128;
/// Most argv bytes.
pub const MAX_ARGV_BYTES: usize = 32 * 1024;
/// Most environment entries.
pub const MAX_ENV_ENTRIES: usize = 256;
/// Most environment bytes (Σ key + 1 + value).
pub const MAX_ENV_BYTES: usize = 64 * 1024;
/// Longest cwd or file path.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest name, in code points.
pub const MAX_NAME_CHARS: usize = 255;
/// Longest secret name, in bytes.
pub const MAX_SECRET_NAME_BYTES: usize = 256;
/// Largest timeout, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// Largest `tailBytes`.
pub const MAX_TAIL_BYTES: u64 = 512 * 1024;

/// Unicode general category Cf (format characters), Unicode 16.0, as
/// inclusive ranges. Invisible in most terminals and browsers, so a name
/// holding one can look like another name; the bidirectional controls among
/// them (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) can also
/// reorder the rest of a console or CLI line.
const FORMAT_CHARS: [(char, char); 21] = [
    ('\u{00AD}', '\u{00AD}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

/// Whether `c` is a format character (general category Cf).
pub fn is_format_char(c: char) -> bool {
    FORMAT_CHARS.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// The first character of `value` a name must not hold, with why: control
/// characters (Cc), format characters (Cf, which include the bidirectional
/// controls) and the line and paragraph separators U+2028/U+2029 (a line
/// break in one-line CLI output).
fn forbidden_char(value: &str) -> Option<(char, &'static str)> {
    value.chars().find_map(|c| {
        if c.is_control() {
            Some((c, "a control character"))
        } else if is_format_char(c) {
            Some((c, "an invisible or bidirectional format character"))
        } else if matches!(c, '\u{2028}' | '\u{2029}') {
            Some((c, "a line or paragraph separator"))
        } else {
            None
        }
    })
}

/// Refuses a name holding a [`forbidden_char`], naming it as U+XXXX.
fn visible_chars_only(field: &'static str, what: &str, value: &str) -> Result<(), ValidationError> {
    match forbidden_char(value) {
        Some((c, kind)) => Err(bad(
            field,
            format!("{what} must not contain {kind} (U+{:04X})", u32::from(c)),
        )),
        None => Ok(()),
    }
}

/// Sandbox and snapshot names: 1–255 code points, no edge whitespace, no
/// control, format (invisible, bidirectional) or line-separator characters.
pub fn name(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(bad(field, "must not be empty"));
    }
    if value.chars().count() > MAX_NAME_CHARS {
        return Err(bad(field, "must be at most 255 characters"));
    }
    if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        return Err(bad(field, "must not start or end with whitespace"));
    }
    visible_chars_only(field, "the name", value)
}

/// Secret names: ≤256 bytes, no edge whitespace, no CR/LF/NUL, valid environment key, no
/// control, format or line-separator characters.
pub fn secret_name(value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(bad("secrets", "secret names must not be empty"));
    }
    if value.len() > MAX_SECRET_NAME_BYTES {
        return Err(bad("secrets", "secret names must be at most 256 bytes"));
    }
    if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        return Err(bad(
            "secrets",
            "secret names must not start or end with whitespace",
        ));
    }
    if value.contains(['\r', '\n', '\0', '=']) {
        return Err(bad(
            "secrets",
            "secret names must not contain CR, LF, NUL or '='",
        ));
    }
    visible_chars_only("secrets", "secret names", value)
}

/// argv: 1–128 items, first non-empty, ≤32 KiB, no NUL.
pub fn command(field: &'static str, argv: &[String]) -> Result<(), ValidationError> {
    if argv.is_empty() {
        return Err(bad(field, "must have at least one item"));
    }
    if argv.len() > MAX_ARGV_ITEMS {
        return Err(bad(field, "must have at most 128 items"));
    }
    if argv[0].is_empty() {
        return Err(bad(field, "the first item must not be empty"));
    }
    if argv.iter().map(String::len).sum::<usize>() > MAX_ARGV_BYTES {
        return Err(bad(field, "must be at most 32768 bytes in total"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(bad(field, "must not contain NUL"));
    }
    Ok(())
}

/// Environment: ≤256 entries (counting `extra_entries`), keys non-empty without `=`/NUL, ≤64 KiB.
pub fn environment(
    field: &'static str,
    env: &BTreeMap<String, String>,
    extra_entries: &[String],
) -> Result<(), ValidationError> {
    if env.len() + extra_entries.len() > MAX_ENV_ENTRIES {
        return Err(bad(field, "must have at most 256 entries"));
    }
    let mut bytes = 0usize;
    for (k, v) in env {
        if k.is_empty() || k.contains(['=', '\0']) {
            return Err(bad(field, format!("invalid key {k:?}")));
        }
        if v.contains('\0') {
            return Err(bad(field, format!("value of {k:?} contains NUL")));
        }
        bytes += k.len() + 1 + v.len();
    }
    bytes += extra_entries.iter().map(|k| k.len() + 1).sum::<usize>();
    if bytes > MAX_ENV_BYTES {
        return Err(bad(field, "must be at most 65536 bytes"));
    }
    Ok(())
}

/// cwd: no NUL, ≤4096 bytes; `""` means default. Must be absolute when given.
pub fn cwd(value: &str) -> Result<Option<String>, ValidationError> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() > MAX_PATH_BYTES || value.contains('\0') {
        return Err(bad("cwd", "must be at most 4096 bytes without NUL"));
    }
    if !value.starts_with('/') {
        return Err(bad("cwd", "must be an absolute path"));
    }
    Ok(Some(value.to_string()))
}

/// File paths: absolute, ≤4096 bytes, no NUL.
pub fn file_path(value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::Missing("path"));
    }
    if !value.starts_with('/') {
        return Err(bad("path", "must be an absolute path"));
    }
    if value.len() > MAX_PATH_BYTES || value.contains('\0') {
        return Err(bad("path", "must be at most 4096 bytes without NUL"));
    }
    if value.len() > 1 && value.ends_with('/') {
        return Err(bad("path", "must not end with '/'"));
    }
    if value != "/"
        && value[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(bad(
            "path",
            "must be normalised: no empty, '.' or '..' components",
        ));
    }
    Ok(())
}

/// An id (sandbox, process, snapshot): a canonical lower-case hyphenated,
/// non-nil UUID, the only form this server returns (§2.3). Other spellings
/// the `uuid` crate would accept (upper case, braces, `urn:uuid:`, no
/// hyphens) are refused rather than normalised, so one id has one spelling
/// in paths, bodies, logs and the store.
pub fn canonical_id(field: &'static str, raw: &str) -> Result<uuid::Uuid, ValidationError> {
    let refused = || bad(field, "must be a lowercase UUID");
    let shape_ok = raw.len() == 36
        && raw.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        });
    if !shape_ok {
        return Err(refused());
    }
    match uuid::Uuid::parse_str(raw) {
        Ok(id) if !id.is_nil() => Ok(id),
        _ => Err(refused()),
    }
}

/// Durations: `"<n>ms"` (what the SDK sends), or a Go-style duration such as `30s`, `4m30s`.
pub fn duration_ms(field: &'static str, value: &str) -> Result<u64, ValidationError> {
    let err = || {
        bad(
            field,
            format!("invalid duration {value:?}; use e.g. \"30000ms\""),
        )
    };
    if value.is_empty() {
        return Err(err());
    }
    let mut total: f64 = 0.0;
    let mut rest = value;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 60e3,
            "h" => 3600e3,
            _ => return Err(err()),
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    // Rounded up, so any positive duration is at least 1 ms (a sub-millisecond one
    // used to be refused or accepted depending on which side of 0.5 ms it fell).
    let ms = total.ceil();
    if ms < 1.0 {
        return Err(bad(field, "must be a positive duration"));
    }
    if ms > 1e15 {
        return Err(bad(field, "is too long"));
    }
    Ok(ms as u64)
}

/// A timeout in 1..=300000 ms.
pub fn timeout_ms(field: &'static str, value: &str) -> Result<u64, ValidationError> {
    let ms = duration_ms(field, value)?;
    if ms > MAX_TIMEOUT_MS {
        return Err(bad(field, "must be at most 300000ms (5 minutes)"));
    }
    Ok(ms)
}

/// A list limit in 1..=250 (default 50).
pub fn list_limit(value: Option<&str>) -> Result<u32, ValidationError> {
    match value {
        None => Ok(50),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if (1..=250).contains(&n) => Ok(n),
            _ => Err(bad("limit", "must be an integer from 1 to 250")),
        },
    }
}

/// File mode: octal, 1..=0o777 (default 0644).
pub fn file_mode(value: Option<&str>) -> Result<u32, ValidationError> {
    match value {
        None => Ok(0o644),
        Some(v) => match u32::from_str_radix(v, 8) {
            Ok(m) if (1..=0o777).contains(&m) && !v.is_empty() && v.len() <= 4 => Ok(m),
            _ => Err(bad("mode", "must be octal from 0001 to 0777")),
        },
    }
}

/// vCPU counts a sandbox may have.
pub const VCPUS: [u32; 3] = [1, 2, 4];
/// Memory per vCPU a sandbox may have, MiB (1, 2 or 4 GiB).
pub const MIB_PER_VCPU: [u32; 3] = [1024, 2048, 4096];

/// Every shape `(vcpu, memory_mb)` sbxd offers: [`VCPUS`] × [`MIB_PER_VCPU`],
/// the grid of the Sandboxes reference for newer SDKs, by vCPU then memory.
/// It includes the seed's three (1/1024, 2/2048, 4/4096).
pub const SHAPES: [(u32, u32); 9] = [
    (1, 1024),
    (1, 2048),
    (1, 4096),
    (2, 2048),
    (2, 4096),
    (2, 8192),
    (4, 4096),
    (4, 8192),
    (4, 16384),
];

/// Checks `vcpu`/`memoryMb` against the whole grid [`SHAPES`].
pub fn shape(vcpu: u64, memory_mb: u64) -> Result<(u32, u32), ValidationError> {
    shape_in(&SHAPES, vcpu, memory_mb)
}

/// Checks `vcpu`/`memoryMb` against `allowed` (a node's `--shapes`); the
/// refusal lists the allowed shapes.
pub fn shape_in(
    allowed: &[(u32, u32)],
    vcpu: u64,
    memory_mb: u64,
) -> Result<(u32, u32), ValidationError> {
    allowed
        .iter()
        .copied()
        .find(|(c, m)| u64::from(*c) == vcpu && u64::from(*m) == memory_mb)
        .ok_or_else(|| {
            bad(
                "resources",
                format!(
                    "{vcpu} vCPU / {memory_mb} MiB is not offered; use {}",
                    describe_shapes(allowed)
                ),
            )
        })
}

/// `allowed` as `vcpu/memoryMb` items, e.g. `1/1024, 2/2048 or 4/4096`.
pub fn describe_shapes(allowed: &[(u32, u32)]) -> String {
    let items: Vec<String> = allowed.iter().map(|(c, m)| format!("{c}/{m}")).collect();
    match items.split_last() {
        None => "none (no shape is offered)".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Parses one `VCPUxMIB` shape (as in `--shapes` and `--warm-pool`), e.g.
/// `2x4096`, and checks it against the grid.
pub fn parse_shape(value: &str) -> Result<(u32, u32), ValidationError> {
    let malformed = || {
        bad(
            "shape",
            format!("{value:?}: expected VCPUxMIB, e.g. 2x4096"),
        )
    };
    let (vcpu, mem) = value.trim().split_once('x').ok_or_else(malformed)?;
    let vcpu: u64 = vcpu.trim().parse().map_err(|_| malformed())?;
    let mem: u64 = mem.trim().parse().map_err(|_| malformed())?;
    shape(vcpu, mem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_sdk_rule() {
        assert!(name("name", "build-42").is_ok());
        assert!(name("name", "Ünïcode name ok").is_ok());
        assert!(name("name", "").is_err());
        assert!(name("name", " lead").is_err());
        assert!(name("name", "trail\u{00a0}").is_err());
        assert!(name("name", "ctl\u{7}").is_err());
        assert!(name("name", &"a".repeat(255)).is_ok());
        assert!(name("name", &"é".repeat(256)).is_err());
    }

    /// The refusal names the field and the character as U+XXXX.
    fn refused_char(field: &'static str, value: &str) -> String {
        match name(field, value) {
            Err(ValidationError::Format { field: f, reason }) => {
                assert_eq!(f, field);
                reason
            }
            other => panic!("{value:?}: expected a format error, got {other:?}"),
        }
    }

    #[test]
    fn names_refuse_bidi_and_invisible_characters() {
        // The two characters of the issue: a right-to-left override that
        // makes "evil\u{202E}gnp.exe" print as "evilexe.png", and a zero-width space.
        let rlo = refused_char("name", "evil\u{202E}gnp.exe");
        assert!(
            rlo.contains("U+202E") && rlo.contains("bidirectional"),
            "{rlo}"
        );
        let zwsp = refused_char("name", "prod\u{200B}");
        assert!(zwsp.contains("U+200B"), "{zwsp}");
        // Every bidirectional control the brief lists.
        for c in ['\u{061C}', '\u{200E}', '\u{200F}']
            .into_iter()
            .chain('\u{202A}'..='\u{202E}')
            .chain('\u{2066}'..='\u{2069}')
        {
            let reason = refused_char("name", &format!("a{c}b"));
            assert!(
                reason.contains(&format!("U+{:04X}", u32::from(c))),
                "{reason}"
            );
        }
        // Other format characters (Cf), from each block of the table.
        for c in [
            '\u{00AD}',
            '\u{0600}',
            '\u{06DD}',
            '\u{070F}',
            '\u{0890}',
            '\u{08E2}',
            '\u{180E}',
            '\u{200C}',
            '\u{200D}',
            '\u{2060}',
            '\u{2064}',
            '\u{206F}',
            '\u{FEFF}',
            '\u{FFFB}',
            '\u{110BD}',
            '\u{13430}',
            '\u{1343F}',
            '\u{1BCA3}',
            '\u{1D173}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
        ] {
            let reason = refused_char("name", &format!("x{c}y"));
            assert!(
                reason.contains(&format!("U+{:04X}", u32::from(c))),
                "{reason}"
            );
        }
        // Control characters (Cc) inside a name, C0 and C1, and line separators.
        for c in [
            '\u{1B}', '\u{7F}', '\u{85}', '\u{9B}', '\u{2028}', '\u{2029}',
        ] {
            let reason = refused_char("name", &format!("x{c}y"));
            assert!(
                reason.contains(&format!("U+{:04X}", u32::from(c))),
                "{reason}"
            );
        }
        // Ordinary Unicode is still welcome: accents, CJK, RTL letters
        // (Hebrew, Arabic), emoji with a variation selector, inner spaces.
        for ok in [
            "café-日本",
            "שלום world",
            "مرحبا",
            "snow ☃\u{FE0F}",
            "a b\u{00A0}c",
            "Ünïcode name ok",
        ] {
            assert!(name("name", ok).is_ok(), "{ok:?}");
        }
        // Neighbours of the table's ranges are not format characters.
        for c in [
            '\u{00AC}', '\u{00AE}', '\u{200A}', '\u{2010}', '\u{2065}', '\u{FEFE}',
        ] {
            assert!(!is_format_char(c), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn secret_names_refuse_bidi_and_invisible_characters() {
        assert!(secret_name("API_KEY").is_ok());
        for bad_name in ["API\u{202E}KEY", "API_KEY\u{200B}", "A\tB", "\u{FEFF}KEY"] {
            match secret_name(bad_name) {
                Err(ValidationError::Format { field, reason }) => {
                    assert_eq!(field, "secrets");
                    assert!(reason.contains("U+"), "{reason}");
                }
                other => panic!("{bad_name:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn ids_are_canonical_lowercase_only() {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(
            canonical_id("snapshotId", id)
                .expect("canonical")
                .to_string(),
            id
        );
        for other in [
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "0f8fad5b-d9cb-469f-a165-70867728950E",
            "0f8fad5bd9cb469fa16570867728950e",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
            " 0f8fad5b-d9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-a16-570867728950e",
            "00000000-0000-0000-0000-000000000000",
            "",
        ] {
            match canonical_id("snapshotId", other) {
                Err(ValidationError::Format { field, reason }) => {
                    assert_eq!(field, "snapshotId");
                    assert!(reason.contains("lowercase UUID"), "{reason}");
                }
                Ok(v) => panic!("{other:?} accepted as {v}"),
                Err(e) => panic!("{other:?}: {e:?}"),
            }
        }
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms("t", "30000ms").unwrap(), 30000);
        assert_eq!(duration_ms("t", "4m30s").unwrap(), 270000);
        assert_eq!(duration_ms("t", "1.5s").unwrap(), 1500);
        // Sub-millisecond parts round up: any positive duration is at least 1 ms.
        for (v, ms) in [
            ("1us", 1),
            ("0.4ms", 1),
            ("0.5ms", 1),
            ("1500us", 2),
            ("1ns", 1),
        ] {
            assert_eq!(duration_ms("t", v).unwrap(), ms, "{v}");
        }
        let long = duration_ms("t", "99999999999999999999999ms").unwrap_err();
        assert!(long.to_string().contains("too long"), "{long}");
        for bad_value in ["", "ms", "10", "-5ms", "0ms", "0.0s", "5 ms", "5xs", "abc"] {
            assert!(duration_ms("t", bad_value).is_err(), "{bad_value}");
        }
        assert!(timeout_ms("t", "300001ms").is_err());
        assert_eq!(timeout_ms("t", "300000ms").unwrap(), 300000);
    }

    #[test]
    fn commands_and_env() {
        assert!(command("command", &[]).is_err());
        assert!(command("command", &["".into()]).is_err());
        assert!(command("command", &vec!["x".to_string(); 129]).is_err());
        assert!(command("command", &["a\0b".into()]).is_err());
        assert!(command("command", &["true".into(), "".into()]).is_ok());
        let mut env = BTreeMap::new();
        env.insert("WITH.DOT".to_string(), "".to_string());
        assert!(environment("environment", &env, &[]).is_ok());
        env.insert("A=B".to_string(), "x".to_string());
        assert!(environment("environment", &env, &[]).is_err());
    }

    #[test]
    fn the_grid_is_vcpus_times_gib_per_vcpu() {
        let grid: Vec<(u32, u32)> = VCPUS
            .iter()
            .flat_map(|c| MIB_PER_VCPU.iter().map(move |m| (*c, c * m)))
            .collect();
        assert_eq!(grid, SHAPES);
        for seed in [(1, 1024), (2, 2048), (4, 4096)] {
            assert!(SHAPES.contains(&seed), "{seed:?}");
        }
        for (c, m) in SHAPES {
            assert_eq!(shape(c.into(), m.into()).unwrap(), (c, m));
        }
        // Off the grid: 3 vCPUs, 8 GiB per vCPU, less than 1 GiB per vCPU, 0.
        for (c, m) in [
            (3, 3072),
            (1, 8192),
            (2, 1024),
            (4, 2048),
            (0, 0),
            (8, 8192),
        ] {
            let e = shape(c, m).unwrap_err();
            assert!(e.to_string().contains("4/16384"), "{e}");
        }
    }

    #[test]
    fn a_narrowed_list_is_named_in_the_refusal() {
        let allowed = [(1, 1024), (2, 8192)];
        assert_eq!(shape_in(&allowed, 2, 8192).unwrap(), (2, 8192));
        let e = shape_in(&allowed, 2, 2048).unwrap_err().to_string();
        assert_eq!(
            e,
            "resources: 2 vCPU / 2048 MiB is not offered; use 1/1024 or 2/8192"
        );
        assert_eq!(describe_shapes(&[(4, 4096)]), "4/4096");
        assert_eq!(parse_shape(" 2x4096 ").unwrap(), (2, 4096));
        for bad_value in ["2x", "x4096", "2*4096", "3x3072", "2x2048x1", ""] {
            assert!(parse_shape(bad_value).is_err(), "{bad_value:?}");
        }
    }

    #[test]
    fn shapes_modes_paths() {
        assert_eq!(shape(2, 2048).unwrap(), (2, 2048));
        assert!(shape(2, 1024).is_err());
        assert!(shape(8, 8192).is_err());
        assert_eq!(file_mode(Some("0640")).unwrap(), 0o640);
        assert!(file_mode(Some("0000")).is_err());
        assert!(file_mode(Some("1777")).is_err());
        assert!(file_mode(Some("9")).is_err());
        assert!(file_path("relative").is_err());
        assert!(file_path("/ok/x").is_ok());
        assert!(file_path("/").is_ok());
        for p in ["/ok/../x", "/a//b", "/a/./b", "/a/", "/.."] {
            assert!(file_path(p).is_err(), "{p}");
        }
        assert!(cwd("").unwrap().is_none());
        assert!(cwd("tmp").is_err());
        assert_eq!(list_limit(None).unwrap(), 50);
        assert!(list_limit(Some("0")).is_err());
        assert!(list_limit(Some("251")).is_err());
    }
}
