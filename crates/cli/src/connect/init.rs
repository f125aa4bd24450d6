//! `sbx connect init NAME`: a new Connect package directory that builds, verifies
//! and syncs as generated (`sbx connect dev` on it passes without edits against
//! an API shaped like `examples/test-api`).

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

/// The package's files, `{{NAME}}` standing for its name.
const FILES: [(&str, &str); 5] = [
    ("index.mjs", include_str!("scaffold/index.mjs")),
    ("src/items.mjs", include_str!("scaffold/items.mjs")),
    (
        "test/items.test.mjs",
        include_str!("scaffold/items.test.mjs"),
    ),
    ("README.md", include_str!("scaffold/README.md")),
    (".gitignore", "node_modules/\n"),
];

/// Whether `name` is an npm package name the platform accepts (lower case,
/// optionally scoped, at most 214 characters).
pub fn valid_name(name: &str) -> bool {
    let word = |w: &str| {
        w.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && w.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._~-".contains(&b))
    };
    let ok = match name.strip_prefix('@') {
        Some(scoped) => scoped
            .split_once('/')
            .is_some_and(|(scope, rest)| word(scope) && word(rest)),
        None => word(name),
    };
    ok && name.len() <= 214
}

/// package.json and package-lock.json of a package without dependencies.
fn manifests(name: &str) -> anyhow::Result<[(String, String); 2]> {
    let package = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "description": "An sbx Connect package",
        "type": "module",
        "main": "index.mjs",
        "scripts": { "test": "node --test" },
        "engines": { "node": ">=24" },
    });
    // What `npm install` writes for it: the build installs from the lockfile (npm ci).
    let lock = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "lockfileVersion": 3,
        "requires": true,
        "packages": { "": { "name": name, "version": "0.1.0", "engines": { "node": ">=24" } } },
    });
    Ok([
        (
            "package.json".into(),
            serde_json::to_string_pretty(&package)? + "\n",
        ),
        (
            "package-lock.json".into(),
            serde_json::to_string_pretty(&lock)? + "\n",
        ),
    ])
}

/// Writes the package `name` into `dir` (default `./NAME` without its scope),
/// which must not exist or be empty; returns the directory.
pub fn init(name: &str, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    if !valid_name(name) {
        bail!("{name:?} is not an npm package name: use lower-case letters, digits, '-', '.', '_' (optionally @scope/name)");
    }
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from(name.rsplit('/').next().unwrap_or(name)),
    };
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let files = manifests(name)?.into_iter().chain(
        FILES
            .iter()
            .map(|(path, text)| (path.to_string(), text.replace("{{NAME}}", name))),
    );
    for (rel, text) in files {
        let path = dir.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_npm() {
        for ok in ["my-connector", "a", "x.y_z~1", "@acme/crm-sync"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "My",
            "-a",
            "a b",
            "@acme",
            "@/x",
            "a/b",
            &"a".repeat(215),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn init_writes_a_package_and_refuses_a_full_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("crm");
        assert_eq!(init("@acme/crm", Some(&dir)).unwrap(), dir);
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("package.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["name"], "@acme/crm");
        assert_eq!(manifest["type"], "module");
        let lock: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("package-lock.json")).unwrap())
                .unwrap();
        assert_eq!(lock["lockfileVersion"], 3);
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        assert!(readme.starts_with("# @acme/crm\n"), "{readme}");
        for f in [
            "index.mjs",
            "src/items.mjs",
            "test/items.test.mjs",
            ".gitignore",
        ] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let again = init("crm", Some(&dir)).unwrap_err().to_string();
        assert!(again.contains("not empty"), "{again}");
        assert!(init("Bad Name", Some(&tmp.path().join("x"))).is_err());
    }
}
