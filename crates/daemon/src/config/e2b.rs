//! The E2B face's flags: `--e2b-domain` and `--e2b-template`.

/// E2B's own domains: an answer naming one would send the SDKs to E2B's
/// cloud (`https://sandbox.e2b.app`), contract §1.3.
const E2B_CLOUD_DOMAINS: &[&str] = &[
    "e2b.app",
    "e2b.dev",
    "e2b.pro",
    "e2b-staging.dev",
    "e2b-tango.dev",
    "e2b-juliett.dev",
    "foxtrot-2.e2b.dev",
];

/// Checks `--e2b-domain`: a DNS name (lower-cased), optionally with `:port`,
/// not one of E2B's own domains.
pub fn parse_e2b_domain(value: &str) -> Result<String, String> {
    let v = value.trim().to_ascii_lowercase();
    let (name, port) = match v.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (v.as_str(), None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 200 || !name.split('.').all(label_ok) {
        return Err(format!(
            "--e2b-domain {value:?}: expected a DNS name such as sbx.example.com"
        ));
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err(format!("--e2b-domain {value:?}: the port must be 1-65535"));
    }
    if E2B_CLOUD_DOMAINS.contains(&name) {
        return Err(format!(
            "--e2b-domain {value:?} is E2B's own domain: the SDKs would send sandbox traffic to E2B's cloud"
        ));
    }
    Ok(v)
}

/// Parses `--e2b-template NAME=IMAGE` values into template names and the
/// image each names: `default`, or an image reference (`name:tag`, `name`,
/// `sha256:…`) resolved in the creating tenant's images.
pub fn parse_e2b_templates(
    values: &[String],
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut out = std::collections::BTreeMap::new();
    for v in values.iter().filter(|v| !v.is_empty()) {
        let (name, image) = v
            .split_once('=')
            .ok_or_else(|| format!("--e2b-template {v:?}: expected NAME=IMAGE"))?;
        let visible = |s: &str| {
            !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic() && b != b',')
        };
        if !visible(name) {
            return Err(format!(
                "--e2b-template {v:?}: NAME must be 1-128 visible characters"
            ));
        }
        if !visible(image) {
            return Err(format!(
                "--e2b-template {v:?}: IMAGE must be default or an image reference (name:tag)"
            ));
        }
        if out.insert(name.to_string(), image.to_string()).is_some() {
            return Err(format!("--e2b-template {v:?}: NAME given twice"));
        }
    }
    Ok(out)
}
