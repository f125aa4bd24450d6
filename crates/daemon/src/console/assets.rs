//! The console's static files, embedded in the sbxd binary at build time from
//! `crates/daemon/console/` (plain ES modules and CSS: no build step; the one
//! dependency, xterm.js, is vendored in `console/vendor/` by `scripts/vendor-xterm`).

use sha2::{Digest, Sha256};

/// One embedded file.
pub struct Asset {
    /// File name under `/console/assets/` (or `index.html` for `/`).
    pub name: &'static str,
    /// `Content-Type` it is served with.
    pub content_type: &'static str,
    /// The file's bytes.
    pub bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ty:expr) => {
        asset!($name, $name, $ty)
    };
    ($name:literal, $file:literal, $ty:expr) => {
        Asset {
            name: $name,
            content_type: $ty,
            bytes: include_bytes!(concat!("../../console/", $file)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the console serves.
pub static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("list.js", JS),
    asset!("connect.js", JS),
    asset!("connect-common.js", JS),
    asset!("connection-edit.js", JS),
    asset!("live-runs.js", JS),
    asset!("packages.js", JS),
    asset!("records.js", JS),
    asset!("deliveries.js", JS),
    asset!("detail.js", JS),
    asset!("files.js", JS),
    asset!("preview.js", JS),
    asset!("volumes.js", JS),
    asset!("images.js", JS),
    asset!("build.js", JS),
    asset!("templates.js", JS),
    asset!("terminal.js", JS),
    // xterm.js, vendored from npm by scripts/vendor-xterm (versions in vendor/VERSIONS).
    asset!("xterm.mjs", "vendor/xterm.mjs", JS),
    asset!("addon-fit.mjs", "vendor/addon-fit.mjs", JS),
    asset!("xterm.css", "vendor/xterm.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
];

/// The strict policy every console response carries: no inline script or style,
/// nothing from other origins, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

/// Cache policy: revalidate every time (cheap: the `ETag` answers 304).
pub const CACHE_CONTROL: &str = "no-cache";

/// The embedded file of that name.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// A strong validator for the file's bytes.
pub fn etag(asset: &Asset) -> String {
    let digest = Sha256::digest(asset.bytes);
    format!("\"{}\"", hex::encode(&digest[..12]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_and_typed() {
        for a in ASSETS {
            assert!(std::ptr::eq(find(a.name).unwrap(), a));
            assert!(!a.bytes.is_empty(), "{} is empty", a.name);
        }
        assert!(find("../Cargo.toml").is_none());
        let index = std::str::from_utf8(find("index.html").unwrap().bytes).unwrap();
        assert!(
            !index.contains("<script>") && !index.contains(" style="),
            "no inline script or style"
        );
    }
}
