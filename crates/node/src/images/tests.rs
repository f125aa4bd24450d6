//! Layer application on a real temporary directory (no fakes): whiteouts,
//! opaque directories, and every way out of the root a tarball can try.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// One tar entry, written with raw header names (`tar::Builder` itself
/// refuses `..` and absolute paths, which these tests need to send).
enum E<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    Char(&'a str),
}

fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (name, data, kind, mode, link): (&str, &[u8], tar::EntryType, u32, Option<&str>) =
            match e {
                E::File(n, d, m) => (n, d, tar::EntryType::Regular, *m, None),
                E::Dir(n) => (n, b"", tar::EntryType::Directory, 0o755, None),
                E::Symlink(n, t) => (n, b"", tar::EntryType::Symlink, 0o777, Some(t)),
                E::Hardlink(n, t) => (n, b"", tar::EntryType::Link, 0o644, Some(t)),
                E::Char(n) => (n, b"", tar::EntryType::Char, 0o666, None),
            };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(t) = link {
            h.as_old_mut().linkname[..t.len()].copy_from_slice(t.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner().expect("tar")
}

const OPTS: LayerOptions = LayerOptions {
    whiteouts: true,
    max_bytes: 1 << 30,
};

fn root() -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("rootfs")).expect("rootfs");
    let root = Root::open(&dir.path().join("rootfs")).expect("open");
    (dir, root)
}

#[test]
fn whiteouts_remove_lower_files_and_opaque_dirs_hide_lower_children() {
    let (dir, mut r) = root();
    let rootfs = dir.path().join("rootfs");
    r.apply_layer(
        &tar_of(&[
            E::Dir("a/"),
            E::File("a/keep", b"k", 0o644),
            E::File("a/gone", b"g", 0o644),
            E::File("o/old", b"o", 0o644),
            E::File("o/sub/x", b"x", 0o644),
        ])[..],
        OPTS,
    )
    .expect("layer 1");
    r.apply_layer(
        &tar_of(&[
            E::File("o/new", b"n", 0o644),
            E::File("a/.wh.gone", b"", 0o644),
            // The opaque marker after a file of its own layer: that file stays.
            E::File("o/.wh..wh..opq", b"", 0o644),
            E::File("./b/file", b"b", 0o600),
            // A whiteout of something that never existed is a no-op.
            E::File("a/.wh.nothing", b"", 0o644),
        ])[..],
        OPTS,
    )
    .expect("layer 2");
    assert_eq!(std::fs::read(rootfs.join("a/keep")).unwrap(), b"k");
    assert!(!rootfs.join("a/gone").exists());
    assert!(!rootfs.join("a/.wh.gone").exists());
    assert!(!rootfs.join("o/old").exists());
    assert!(!rootfs.join("o/sub").exists());
    assert_eq!(std::fs::read(rootfs.join("o/new")).unwrap(), b"n");
    assert!(!rootfs.join("o/.wh..wh..opq").exists());
    let meta = std::fs::metadata(rootfs.join("b/file")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.mtime(), 1_700_000_000);
}

#[test]
fn plain_rootfs_tars_keep_whiteout_names_as_files() {
    let (dir, mut r) = root();
    let opts = LayerOptions {
        whiteouts: false,
        ..OPTS
    };
    r.apply_layer(
        &tar_of(&[E::File("x", b"1", 0o644), E::File(".wh.x", b"", 0o644)])[..],
        opts,
    )
    .expect("layer");
    assert!(dir.path().join("rootfs/x").exists());
    assert!(dir.path().join("rootfs/.wh.x").exists());
}

/// Every escape is refused with a reason, and nothing appears outside the root.
#[test]
fn escapes_are_refused_and_nothing_is_written_outside() {
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"untouched").unwrap();
    let out = outside.path().display().to_string();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("dotdot", tar_of(&[E::File("../escaped", b"x", 0o644)])),
        (
            "nested dotdot",
            tar_of(&[E::File("a/../../escaped", b"x", 0o644)]),
        ),
        (
            "absolute",
            tar_of(&[E::File(&format!("{out}/escaped"), b"x", 0o644)]),
        ),
        (
            "write through an absolute symlink",
            tar_of(&[
                E::Symlink("link", &out),
                E::File("link/escaped", b"x", 0o644),
            ]),
        ),
        (
            "write through a relative symlink",
            tar_of(&[
                E::Symlink("up", "../../../../../../../.."),
                E::File(&format!("up{out}/escaped"), b"x", 0o644),
            ]),
        ),
        (
            "hard link to an absolute path",
            tar_of(&[E::Hardlink("h", &format!("{out}/victim"))]),
        ),
        (
            "hard link with dotdot",
            tar_of(&[E::Hardlink("h", "../../../../victim")]),
        ),
        (
            "hard link through a symlink",
            tar_of(&[E::Symlink("link", &out), E::Hardlink("h", "link/victim")]),
        ),
        ("device node", tar_of(&[E::Char("dev/evil")])),
        (
            "whiteout through a symlink",
            tar_of(&[
                E::Symlink("link", &out),
                E::File("link/.wh.victim", b"", 0o644),
            ]),
        ),
    ];
    for (what, tar) in cases {
        let (_dir, mut r) = root();
        let err = r.apply_layer(&tar[..], OPTS).expect_err(what);
        assert!(matches!(err, ExtractError::Unsafe { .. }), "{what}: {err}");
        let mut left: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, vec!["victim"], "{what}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched", "{what}");
    }
}

#[test]
fn setuid_bits_are_dropped_and_links_inside_work() {
    let (dir, mut r) = root();
    let rootfs = dir.path().join("rootfs");
    r.apply_layer(
        &tar_of(&[
            E::File("bin/su", b"elf", 0o4755),
            E::File("bin/sg", b"elf", 0o2755),
            E::Dir("tmp/"),
            E::Hardlink("bin/su2", "bin/su"),
            E::Symlink("bin/abs", "/etc/passwd"),
        ])[..],
        OPTS,
    )
    .expect("layer");
    assert_eq!(
        std::fs::metadata(rootfs.join("bin/su")).unwrap().mode() & 0o7777,
        0o755
    );
    assert_eq!(
        std::fs::metadata(rootfs.join("bin/sg")).unwrap().mode() & 0o7777,
        0o755
    );
    assert_eq!(std::fs::read(rootfs.join("bin/su2")).unwrap(), b"elf");
    assert_eq!(
        std::fs::read_link(rootfs.join("bin/abs")).unwrap(),
        std::path::Path::new("/etc/passwd")
    );
}

#[test]
fn the_size_limit_stops_an_import() {
    let (_dir, mut r) = root();
    let err = r
        .apply_layer(
            &tar_of(&[E::File("big", &[0u8; 4096], 0o644)])[..],
            LayerOptions {
                whiteouts: true,
                max_bytes: 1000,
            },
        )
        .expect_err("too large");
    assert!(matches!(err, ExtractError::TooLarge(1000)), "{err}");
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An OCI layout and a `docker save` tarball of the same layers and config
/// import to the same digest, stored once.
#[test]
fn oci_layout_and_docker_save_import_to_one_digest() {
    let layer1 = tar_of(&[E::File("etc/hello", b"hi\n", 0o644)]);
    let layer2 = tar_of(&[
        E::File("etc/.wh.hello", b"", 0o644),
        E::File("app/x", b"x", 0o644),
    ]);
    let config = br#"{"config":{"Env":["A=1"],"WorkingDir":"/app","Cmd":["sh"]}}"#.to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &layer2).unwrap();
    let layer2_gz = gz.finish().unwrap();
    let manifest = format!(
        r#"{{"config":{{"digest":"sha256:{}"}},"layers":[{{"digest":"sha256:{}"}},{{"digest":"sha256:{}"}}]}}"#,
        sha(&config),
        sha(&layer1),
        sha(&layer2_gz)
    );
    let index = format!(
        r#"{{"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}"}}]}}"#,
        sha(manifest.as_bytes())
    );
    let mut oci = tar::Builder::new(Vec::new());
    for (name, data) in [
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        ("index.json".to_string(), index.into_bytes()),
        (
            format!("blobs/sha256/{}", sha(manifest.as_bytes())),
            manifest.clone().into_bytes(),
        ),
        (format!("blobs/sha256/{}", sha(&config)), config.clone()),
        (format!("blobs/sha256/{}", sha(&layer1)), layer1.clone()),
        (
            format!("blobs/sha256/{}", sha(&layer2_gz)),
            layer2_gz.clone(),
        ),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        oci.append_data(&mut h, name, &data[..]).unwrap();
    }
    let oci = oci.into_inner().unwrap();
    let docker_of = |top: &[u8]| {
        let mut docker = tar::Builder::new(Vec::new());
        for (name, data) in [
            (
                "manifest.json",
                br#"[{"Config":"cfg.json","RepoTags":["x:1"],"Layers":["l1/layer.tar","l2/layer.tar"]}]"#.to_vec(),
            ),
            ("cfg.json", config.clone()),
            ("l1/layer.tar", layer1.clone()),
            ("l2/layer.tar", top.to_vec()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            docker.append_data(&mut h, name, &data[..]).unwrap();
        }
        docker.into_inner().unwrap()
    };
    let docker = docker_of(&layer2);

    let dir = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&dir.path().join("images")).unwrap();
    let up = dir.path().join("oci.tar");
    std::fs::write(&up, &oci).unwrap();
    let a = store.import_archive(&up, 1 << 30).expect("oci import");
    assert_eq!(a.config.env, vec!["A=1".to_string()]);
    assert_eq!(a.config.workdir.as_deref(), Some("/app"));
    assert_eq!(a.config.cmd, Some(vec!["sh".to_string()]));
    let rootfs = store.rootfs(&a.digest).expect("rootfs");
    assert!(!rootfs.join("etc/hello").exists());
    assert_eq!(std::fs::read(rootfs.join("app/x")).unwrap(), b"x");
    assert_eq!(a.size_bytes, 1);
    assert_eq!(store.config(&a.digest), Some(a.config.clone()));
    // The docker tarball has the same layers uncompressed: the layer digests
    // (of the uncompressed streams) and so the image digest are the same.
    std::fs::write(&up, &docker).unwrap();
    let b = store.import_archive(&up, 1 << 30).expect("docker import");
    assert_eq!(a, b);
    // The same with the top layer zstd-compressed: the same image again.
    let zst =
        ruzstd::encoding::compress_to_vec(&layer2[..], ruzstd::encoding::CompressionLevel::Fastest);
    std::fs::write(&up, docker_of(&zst)).unwrap();
    let c = store
        .import_archive(&up, 1 << 30)
        .expect("zstd layer import");
    assert_eq!(a, c);
    // A damaged zstd layer fails the import, as a damaged gzip one does.
    std::fs::write(&up, docker_of(&zst[..zst.len() - 4])).unwrap();
    assert!(store.import_archive(&up, 1 << 30).is_err());
    assert_eq!(store.digests().unwrap(), vec![a.digest.clone()]);
    store.remove(&a.digest).unwrap();
    assert!(store.rootfs(&a.digest).is_none());
    assert!(store.digests().unwrap().is_empty());
    // Neither layout: refused as malformed.
    std::fs::write(&up, tar_of(&[E::File("x", b"", 0o644)])).unwrap();
    assert!(matches!(
        store.import_archive(&up, 1 << 30),
        Err(ExtractError::Malformed(_))
    ));
}
