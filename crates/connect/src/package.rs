//! Uploaded package tarballs: gzip tar with package.json (name, version, `"type": "module"`) and
//! package-lock.json; checked before anything is stored, unpacked for builds.

use flate2::read::GzDecoder;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Largest uploaded tarball.
pub const MAX_TARBALL_BYTES: usize = 64 * 1024 * 1024;
/// Largest unpacked package.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;
/// Most files in a package.
pub const MAX_FILES: usize = 20_000;

/// Errors of the package module.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// The upload is not a readable gzip tar.
    #[error("the upload is not a gzip tar archive: {0}")]
    NotATarball(String),
    /// Too big.
    #[error("the package is too large ({0})")]
    TooLarge(&'static str),
    /// An entry is unsafe or unsupported.
    #[error("archive entry {0:?} is not allowed (only regular files and directories with relative paths)")]
    BadEntry(String),
    /// A required file is missing.
    #[error("the package has no {0}")]
    Missing(&'static str),
    /// package.json is invalid.
    #[error("package.json: {0}")]
    BadManifest(String),
    /// package-lock.json is invalid.
    #[error("package-lock.json: {0}")]
    BadLockfile(String),
    /// Dependencies need install scripts, which builds never run.
    #[error("these dependencies need install scripts, which builds do not run (npm ci --ignore-scripts): {}", .0.join(", "))]
    InstallScripts(Vec<String>),
    /// Writing the unpacked files failed.
    #[error("unpacking to {path}: {source}")]
    Io {
        /// Destination.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// What an upload holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// Package name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Entry module, relative (`index.js`).
    pub entry: String,
    /// Hex sha256 of the tarball.
    pub sha256: String,
    /// Tarball size.
    pub size: u64,
}

/// One archive entry after path normalization.
struct Entry {
    path: PathBuf,
    is_dir: bool,
    data: Vec<u8>,
}

fn safe_path(raw: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

fn read_entries(tarball: &[u8]) -> Result<Vec<Entry>, PackageError> {
    if tarball.len() > MAX_TARBALL_BYTES {
        return Err(PackageError::TooLarge("tarball over 64 MiB"));
    }
    let mut archive = tar::Archive::new(GzDecoder::new(tarball));
    let mut entries = Vec::new();
    let mut total = 0u64;
    let iter = archive
        .entries()
        .map_err(|e| PackageError::NotATarball(e.to_string()))?;
    for entry in iter {
        let mut entry = entry.map_err(|e| PackageError::NotATarball(e.to_string()))?;
        let raw = entry
            .path()
            .map_err(|e| PackageError::NotATarball(e.to_string()))?
            .into_owned();
        let shown = raw.display().to_string();
        let kind = entry.header().entry_type();
        // PAX/GNU metadata entries carry no file.
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
        {
            continue;
        }
        let is_dir = kind.is_dir();
        if !(is_dir || kind.is_file()) {
            return Err(PackageError::BadEntry(shown));
        }
        // `tar -C dir .` archives the root itself as `./`: nothing to unpack.
        if is_dir && safe_path(&raw).is_none() && raw.components().all(|c| c == Component::CurDir) {
            continue;
        }
        let path = safe_path(&raw).ok_or_else(|| PackageError::BadEntry(shown.clone()))?;
        total += entry.size();
        if total > MAX_UNPACKED_BYTES {
            return Err(PackageError::TooLarge("unpacked over 256 MiB"));
        }
        let mut data = Vec::new();
        if !is_dir {
            entry
                .read_to_end(&mut data)
                .map_err(|e| PackageError::NotATarball(e.to_string()))?;
        }
        entries.push(Entry { path, is_dir, data });
        if entries.len() > MAX_FILES {
            return Err(PackageError::TooLarge("too many files"));
        }
    }
    // `npm pack` puts everything under `package/`; accept that and a bare root.
    if entries
        .iter()
        .any(|e| e.path == Path::new("package/package.json"))
    {
        entries.retain(|e| e.path.starts_with("package"));
        for e in &mut entries {
            e.path = e
                .path
                .strip_prefix("package")
                .map(Path::to_path_buf)
                .unwrap_or_default();
        }
        entries.retain(|e| !e.path.as_os_str().is_empty());
    }
    Ok(entries)
}

fn file<'a>(entries: &'a [Entry], name: &str) -> Option<&'a [u8]> {
    entries
        .iter()
        .find(|e| !e.is_dir && e.path == Path::new(name))
        .map(|e| e.data.as_slice())
}

fn valid_name(name: &str) -> bool {
    let re = regex::Regex::new(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$");
    name.len() <= 214 && re.is_ok_and(|re| re.is_match(name))
}

fn valid_version(version: &str) -> bool {
    let re = regex::Regex::new(
        r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$",
    );
    version.len() <= 64 && re.is_ok_and(|re| re.is_match(version))
}

/// Dependencies marked `hasInstallScript` in a lockfile (v2/v3 `packages` map), sorted.
pub fn install_script_dependencies(lockfile: &Value) -> Result<Vec<String>, PackageError> {
    let version = lockfile
        .get("lockfileVersion")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if version < 2 {
        return Err(PackageError::BadLockfile(
            "lockfileVersion 2 or 3 is required (npm 7 or newer)".into(),
        ));
    }
    let Some(packages) = lockfile.get("packages").and_then(Value::as_object) else {
        return Err(PackageError::BadLockfile("no \"packages\" map".into()));
    };
    let mut names: Vec<String> = packages
        .iter()
        .filter(|(path, entry)| {
            !path.is_empty() && entry.get("hasInstallScript") == Some(&Value::Bool(true))
        })
        .map(|(path, entry)| {
            // "node_modules/a/node_modules/@s/b" → "@s/b"; a `name` field wins when present.
            entry
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| {
                    path.rsplit("node_modules/")
                        .next()
                        .unwrap_or(path)
                        .to_string()
                })
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Checks an uploaded tarball and reads its identity.
pub fn inspect(tarball: &[u8]) -> Result<Inspected, PackageError> {
    let entries = read_entries(tarball)?;
    let manifest = file(&entries, "package.json").ok_or(PackageError::Missing("package.json"))?;
    let manifest: Value =
        serde_json::from_slice(manifest).map_err(|e| PackageError::BadManifest(e.to_string()))?;
    let text = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let name =
        text("name").ok_or_else(|| PackageError::BadManifest("\"name\" is required".into()))?;
    if !valid_name(&name) {
        return Err(PackageError::BadManifest(format!(
            "{name:?} is not a valid npm package name"
        )));
    }
    let version = text("version")
        .ok_or_else(|| PackageError::BadManifest("\"version\" is required".into()))?;
    if !valid_version(&version) {
        return Err(PackageError::BadManifest(format!(
            "{version:?} is not a semantic version"
        )));
    }
    if text("type").as_deref() != Some("module") {
        return Err(PackageError::BadManifest(
            "\"type\" must be \"module\" (packages are ES modules)".into(),
        ));
    }
    let main = text("main").unwrap_or_else(|| "index.js".to_string());
    let entry = safe_path(Path::new(&main)).ok_or_else(|| {
        PackageError::BadManifest(format!(
            "\"main\" {main:?} must be a relative path inside the package"
        ))
    })?;
    if file(&entries, &entry.to_string_lossy()).is_none() {
        return Err(PackageError::BadManifest(format!(
            "\"main\" {main:?} is not in the package"
        )));
    }
    let lock =
        file(&entries, "package-lock.json").ok_or(PackageError::Missing("package-lock.json"))?;
    let lock: Value =
        serde_json::from_slice(lock).map_err(|e| PackageError::BadLockfile(e.to_string()))?;
    let scripts = install_script_dependencies(&lock)?;
    if !scripts.is_empty() {
        return Err(PackageError::InstallScripts(scripts));
    }
    Ok(Inspected {
        name,
        version,
        entry: entry.to_string_lossy().into_owned(),
        sha256: hex::encode(Sha256::digest(tarball)),
        size: tarball.len() as u64,
    })
}

/// Unpacks a (checked) tarball into `dest`, which must not exist yet.
pub fn unpack(tarball: &[u8], dest: &Path) -> Result<(), PackageError> {
    let entries = read_entries(tarball)?;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| PackageError::Io { path, source }
    };
    std::fs::create_dir_all(dest).map_err(io(dest))?;
    let mut dirs: BTreeMap<PathBuf, ()> = BTreeMap::new();
    for e in &entries {
        let target = dest.join(&e.path);
        if e.is_dir {
            dirs.insert(target, ());
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&target, &e.data).map_err(io(&target))?;
    }
    for dir in dirs.keys() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    Ok(())
}

/// Test helper: builds a gzip tarball from (path, content) pairs.
pub fn make_tarball(files: &[(&str, &[u8])]) -> Result<Vec<u8>, std::io::Error> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(gz);
    for (path, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append_data(&mut header, path, *data)?;
    }
    builder.into_inner()?.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lock(extra: Value) -> Vec<u8> {
        let mut packages = json!({
            "": {"name": "conn", "version": "1.0.0", "hasInstallScript": true},
            "node_modules/tiny": {"version": "1.0.0"}
        });
        if let (Some(p), Some(e)) = (packages.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                p.insert(k.clone(), v.clone());
            }
        }
        json!({"name": "conn", "lockfileVersion": 3, "packages": packages})
            .to_string()
            .into_bytes()
    }

    fn manifest(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    #[test]
    fn accepts_npm_pack_layout() {
        let pj = manifest(
            json!({"name": "@acme/conn", "version": "1.2.3", "type": "module", "main": "src/index.js"}),
        );
        let lk = lock(json!({}));
        let t = make_tarball(&[
            ("package/package.json", &pj),
            ("package/package-lock.json", &lk),
            ("package/src/index.js", b"export default {}"),
        ])
        .expect("tar");
        let i = inspect(&t).expect("inspect");
        assert_eq!(
            (i.name.as_str(), i.version.as_str(), i.entry.as_str()),
            ("@acme/conn", "1.2.3", "src/index.js")
        );
        assert_eq!(i.sha256, hex::encode(Sha256::digest(&t)));
        let dir = tempfile::tempdir().expect("tmp");
        unpack(&t, &dir.path().join("out")).expect("unpack");
        assert!(dir.path().join("out/src/index.js").exists());
        assert!(dir.path().join("out/package.json").exists());
    }

    #[test]
    fn accepts_the_root_entry_of_tar_c_dir_dot() {
        // `tar -czf x.tgz -C dir .` archives `./`, then `./package.json`, ...
        let pj = manifest(
            json!({"name": "conn", "version": "1.0.0", "type": "module", "main": "index.js"}),
        );
        let lk = lock(json!({}));
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        let mut dir = tar::Header::new_gnu();
        dir.set_size(0);
        dir.set_mode(0o755);
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_cksum();
        builder
            .append_data(&mut dir, "./", std::io::empty())
            .expect("dir");
        for (path, data) in [
            ("./package.json", pj.as_slice()),
            ("./package-lock.json", lk.as_slice()),
            ("./index.js", b"export default {}".as_slice()),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append_data(&mut header, path, data).expect("file");
        }
        let t = builder.into_inner().expect("tar").finish().expect("gz");
        let i = inspect(&t).expect("inspect");
        assert_eq!((i.name.as_str(), i.entry.as_str()), ("conn", "index.js"));
    }

    #[test]
    fn install_scripts_are_named() {
        let lk = json!({"lockfileVersion": 3, "packages": {
            "": {"hasInstallScript": true},
            "node_modules/esbuild": {"hasInstallScript": true},
            "node_modules/a/node_modules/@s/b": {"hasInstallScript": true},
            "node_modules/plain": {}
        }});
        assert_eq!(
            install_script_dependencies(&lk).expect("scan"),
            vec!["@s/b".to_string(), "esbuild".to_string()]
        );
        let pj = manifest(json!({"name": "conn", "version": "1.0.0", "type": "module"}));
        let lk = lock(json!({"node_modules/sharp": {"hasInstallScript": true}}));
        let t = make_tarball(&[
            ("package.json", &pj),
            ("package-lock.json", &lk),
            ("index.js", b""),
        ])
        .expect("tar");
        let e = inspect(&t).expect_err("install script");
        assert!(e.to_string().contains("sharp"), "{e}");
        assert!(
            install_script_dependencies(&json!({"lockfileVersion": 1, "dependencies": {}}))
                .is_err()
        );
    }

    #[test]
    fn rejects_bad_packages() {
        let lk = lock(json!({}));
        let good = json!({"name": "conn", "version": "1.0.0", "type": "module"});
        let with = |k: &str, v: Value| {
            let mut m = good.clone();
            if let Some(o) = m.as_object_mut() {
                o.insert(k.into(), v);
            }
            manifest(m)
        };
        type Case<'a> = (Vec<(&'a str, Vec<u8>)>, &'a str);
        let cases: Vec<Case> = vec![
            (
                vec![
                    ("package.json", with("type", json!("commonjs"))),
                    ("package-lock.json", lk.clone()),
                    ("index.js", vec![]),
                ],
                "type",
            ),
            (
                vec![
                    ("package.json", with("version", json!("1.0"))),
                    ("package-lock.json", lk.clone()),
                    ("index.js", vec![]),
                ],
                "semantic",
            ),
            (
                vec![
                    ("package.json", with("name", json!("Bad Name"))),
                    ("package-lock.json", lk.clone()),
                    ("index.js", vec![]),
                ],
                "name",
            ),
            (
                vec![
                    ("package.json", with("main", json!("../x.js"))),
                    ("package-lock.json", lk.clone()),
                    ("index.js", vec![]),
                ],
                "main",
            ),
            (
                vec![
                    ("package.json", manifest(good.clone())),
                    ("package-lock.json", lk.clone()),
                ],
                "not in the package",
            ),
            (
                vec![
                    ("package.json", manifest(good.clone())),
                    ("index.js", vec![]),
                ],
                "package-lock.json",
            ),
            (
                vec![("package-lock.json", lk.clone()), ("index.js", vec![])],
                "package.json",
            ),
        ];
        for (files, want) in cases {
            let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, d)| (*p, d.as_slice())).collect();
            let t = make_tarball(&refs).expect("tar");
            let e = inspect(&t).expect_err(want);
            assert!(e.to_string().contains(want), "{e} should mention {want}");
        }
        assert!(matches!(
            inspect(b"not gzip"),
            Err(PackageError::NotATarball(_))
        ));
    }

    #[test]
    fn rejects_escaping_and_symlink_entries() {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "link", "/etc/passwd").expect("link");
        let t = b.into_inner().and_then(|g| g.finish()).expect("tar");
        assert!(matches!(inspect(&t), Err(PackageError::BadEntry(_))));
        assert!(safe_path(Path::new("../x")).is_none());
        assert!(safe_path(Path::new("/abs")).is_none());
        assert_eq!(safe_path(Path::new("./a/b")), Some(PathBuf::from("a/b")));
    }
}
