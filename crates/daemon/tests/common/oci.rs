//! Image archives made by hand for the image tests: layer tarballs (with raw
//! header names, so that `..` and absolute paths can be sent) and OCI image
//! layouts around them.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// One layer entry.
pub enum Entry<'a> {
    /// A regular file: path, contents, mode.
    File(&'a str, Vec<u8>, u32),
    /// A directory.
    Dir(&'a str),
    /// A symlink: path, target.
    Symlink(&'a str, &'a str),
    /// A hard link: path, target.
    Hardlink(&'a str, &'a str),
    /// A character device node.
    Char(&'a str),
}

/// A layer tarball of `entries`, in order.
pub fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (name, data, kind, mode, link): (&str, &[u8], tar::EntryType, u32, Option<&str>) =
            match e {
                Entry::File(n, d, m) => (n, d, tar::EntryType::Regular, *m, None),
                Entry::Dir(n) => (n, b"", tar::EntryType::Directory, 0o755, None),
                Entry::Symlink(n, t) => (n, b"", tar::EntryType::Symlink, 0o777, Some(t)),
                Entry::Hardlink(n, t) => (n, b"", tar::EntryType::Link, 0o644, Some(t)),
                Entry::Char(n) => (n, b"", tar::EntryType::Char, 0o666, None),
            };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(t) = link {
            h.as_old_mut().linkname[..t.len()].copy_from_slice(t.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner().expect("layer tar")
}

/// `layer` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An OCI image layout tarball: `layers` (bottom first) and an image config
/// whose `config` object is `run` (e.g. `{"Env": [...], "WorkingDir": "/w"}`).
pub fn oci_layout(layers: &[Vec<u8>], run: Value) -> Vec<u8> {
    let config = json!({"architecture": "amd64", "os": "linux", "config": run}).to_string();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{}", sha(config.as_bytes())), "size": config.len()},
        "layers": layers.iter().map(|l| json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{}", sha(l)), "size": l.len()})).collect::<Vec<_>>(),
    })
    .to_string();
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": format!("sha256:{}", sha(manifest.as_bytes())),
                       "size": manifest.len()}],
    })
    .to_string();
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".into(), index.into_bytes()),
        (
            format!("blobs/sha256/{}", sha(manifest.as_bytes())),
            manifest.into_bytes(),
        ),
        (
            format!("blobs/sha256/{}", sha(config.as_bytes())),
            config.into_bytes(),
        ),
    ];
    for l in layers {
        files.push((format!("blobs/sha256/{}", sha(l)), l.clone()));
    }
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// A one-layer image holding a single file: the smallest valid archive.
pub fn tiny_image(marker: &str) -> Vec<u8> {
    oci_layout(
        &[layer(&[Entry::File(
            "marker",
            marker.as_bytes().to_vec(),
            0o644,
        )])],
        json!({}),
    )
}

/// A file of the default image (`SBX_TEST_IMAGE_ROOTFS`), for hand-made layers.
pub fn from_default(path: &str) -> Vec<u8> {
    let root = std::env::var("SBX_TEST_IMAGE_ROOTFS").expect("SBX_TEST_IMAGE_ROOTFS");
    std::fs::read(std::path::Path::new(&root).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A layer with just enough of a system to run `sh`, `env` and `cat`
/// (binaries of the default image, dynamically linked against its libc),
/// merged-usr symlinks, root in /etc/passwd and /root, then `extra`.
pub fn shell_layer(extra: &[Entry<'_>]) -> Vec<u8> {
    let lib = "usr/lib/x86_64-linux-gnu";
    let (libc, ld) = (
        format!("{lib}/libc.so.6"),
        format!("{lib}/ld-linux-x86-64.so.2"),
    );
    let mut entries = vec![
        Entry::Dir("usr/"),
        Entry::Dir("usr/bin/"),
        Entry::File("usr/bin/dash", from_default("usr/bin/dash"), 0o755),
        Entry::Symlink("usr/bin/sh", "dash"),
        Entry::File("usr/bin/env", from_default("usr/bin/env"), 0o755),
        Entry::File("usr/bin/cat", from_default("usr/bin/cat"), 0o755),
        Entry::File(&libc, from_default(&libc), 0o755),
        Entry::File(&ld, from_default(&ld), 0o755),
        Entry::Symlink(
            "usr/lib64/ld-linux-x86-64.so.2",
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        ),
        Entry::Symlink("bin", "usr/bin"),
        Entry::Symlink("lib", "usr/lib"),
        Entry::Symlink("lib64", "usr/lib64"),
        Entry::File(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
            0o644,
        ),
        Entry::Dir("root/"),
    ];
    for e in extra {
        entries.push(match e {
            Entry::File(n, d, m) => Entry::File(n, d.clone(), *m),
            Entry::Dir(n) => Entry::Dir(n),
            Entry::Symlink(n, t) => Entry::Symlink(n, t),
            Entry::Hardlink(n, t) => Entry::Hardlink(n, t),
            Entry::Char(n) => Entry::Char(n),
        });
    }
    layer(&entries)
}

/// The digest directories of a daemon's image store (sorted, without `tmp`).
pub fn image_dirs(d: &super::Daemon) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(d.data_dir().join("images/sha256"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "tmp")
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}
