//! A built package (its unpacked files and `node_modules`) as one gzip tarball, so that
//! the nodes of a cluster that did not build it can fetch it from the shared store.

use std::path::{Path, PathBuf};

/// Errors of packing or unpacking an artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Reading the directory or writing the tarball failed.
    #[error("packing the built package {path}: {source}")]
    Pack {
        /// The artifact directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The tarball does not unpack (damaged, or the disk is full).
    #[error("unpacking the built package into {path}: {source}")]
    Unpack {
        /// The directory it was unpacked into.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Packs the directory `dir` (symbolic links kept as links, never followed).
pub fn pack(dir: &Path) -> Result<Vec<u8>, ArtifactError> {
    let err = |source| ArtifactError::Pack {
        path: dir.display().to_string(),
        source,
    };
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir).map_err(err)?;
    builder.into_inner().and_then(|gz| gz.finish()).map_err(err)
}

/// Unpacks `tarball` as the directory `dir`, all or nothing: into a fresh sibling first,
/// then renamed. A `dir` that exists already (another job fetched it first) is kept.
pub fn unpack(tarball: &[u8], dir: &Path) -> Result<(), ArtifactError> {
    let tmp = sibling(dir);
    let err = |source| ArtifactError::Unpack {
        path: dir.display().to_string(),
        source,
    };
    let result = (|| {
        std::fs::create_dir_all(&tmp)?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tarball));
        archive.set_preserve_permissions(true);
        archive.set_overwrite(false);
        // `unpack` refuses entries that would land outside `tmp` (`..`, absolute paths,
        // writes through a symbolic link): the files came from a build sandbox.
        archive.unpack(&tmp)?;
        match std::fs::rename(&tmp, dir) {
            Ok(()) => Ok(()),
            Err(_) if dir.is_dir() => Ok(()),
            Err(e) => Err(e),
        }
    })();
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map_err(err)
}

fn sibling(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.fetch-{}", uuid::Uuid::new_v4()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_directory_unpacks_the_same_with_links_and_modes() {
        let src = tempfile::tempdir().expect("tmp");
        let root = src.path().join("b1");
        std::fs::create_dir_all(root.join("node_modules/.bin")).expect("mkdir");
        std::fs::write(root.join("index.mjs"), b"export default {}").expect("write");
        std::fs::write(root.join("node_modules/tool.js"), b"#!/usr/bin/env node").expect("write");
        std::os::unix::fs::symlink("../tool.js", root.join("node_modules/.bin/tool"))
            .expect("link");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            root.join("node_modules/tool.js"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let bytes = pack(&root).expect("pack");

        let dst = tempfile::tempdir().expect("tmp");
        let out = dst.path().join("b1");
        unpack(&bytes, &out).expect("unpack");
        assert_eq!(
            std::fs::read(out.join("index.mjs")).expect("read"),
            b"export default {}"
        );
        let link = std::fs::read_link(out.join("node_modules/.bin/tool")).expect("link");
        assert_eq!(link, Path::new("../tool.js"));
        let mode = std::fs::metadata(out.join("node_modules/tool.js"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // A second fetch of the same artifact keeps the first and leaves no temporary dir.
        unpack(&bytes, &out).expect("again");
        let names: Vec<_> = std::fs::read_dir(dst.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("b1")]);
    }

    #[test]
    fn a_damaged_tarball_leaves_nothing_behind() {
        let dst = tempfile::tempdir().expect("tmp");
        let out = dst.path().join("b2");
        let e = unpack(b"not a tarball", &out).expect_err("damaged");
        assert!(e.to_string().contains("unpacking"), "{e}");
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dst.path()).expect("ls").count(), 0);
    }
}
