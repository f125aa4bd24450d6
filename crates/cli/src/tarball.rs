//! Packs a connector package directory into a deterministic gzip tarball for upload.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Directories never packed: installed dependencies (the build installs them) and VCS data.
const SKIPPED_DIRS: [&str; 2] = ["node_modules", ".git"];

/// Errors of packing a directory.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file could not be read or the archive written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Packages hold regular files and directories only.
    #[error("{0}: symlinks and special files cannot be packed")]
    NotRegular(PathBuf),
    /// A path that is not UTF-8 cannot go into the archive.
    #[error("{0}: the path is not UTF-8")]
    NotUtf8(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Relative paths of the files under `root`, sorted, skipping `node_modules` and `.git`.
pub fn list_files(root: &Path) -> Result<Vec<String>, PackError> {
    let mut out = Vec::new();
    walk(root, "", &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(root: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), PackError> {
    let dir = root.join(rel);
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .map_err(io(&dir))?
        .collect::<Result<_, _>>()
        .map_err(io(&dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| PackError::NotUtf8(path.clone()))?;
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_str()) {
                walk(root, &child, out)?;
            }
        } else if kind.is_file() {
            out.push(child);
        } else {
            return Err(PackError::NotRegular(path));
        }
    }
    Ok(())
}

/// A gzip tarball of the package directory: regular files only, sorted, with fixed times,
/// owners and modes, so that packing the same files again gives the same bytes (an upload
/// of unchanged files is then the idempotent `200`, not a version conflict).
pub fn pack_dir(root: &Path) -> Result<Vec<u8>, PackError> {
    pack_dir_with(root, &[])
}

/// [`pack_dir`], with the contents of some files (by relative path) replaced.
pub fn pack_dir_with(root: &Path, replaced: &[(&str, Vec<u8>)]) -> Result<Vec<u8>, PackError> {
    let files = list_files(root)?;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(gz);
    for rel in &files {
        let path = root.join(rel);
        let data = match replaced.iter().find(|(r, _)| r == rel) {
            Some((_, data)) => data.clone(),
            None => fs::read(&path).map_err(io(&path))?,
        };
        let executable = is_executable(&path)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(if executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, rel, data.as_slice())
            .map_err(io(&path))?;
    }
    let gz = builder.into_inner().map_err(io(root))?;
    let mut bytes = gz.finish().map_err(io(root))?;
    bytes.flush().map_err(io(root))?;
    Ok(bytes)
}

fn is_executable(path: &Path) -> Result<bool, PackError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(path).map_err(io(path))?;
    Ok(meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_sorted_and_skips_node_modules() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::write(root.join("package.json"), "{}").expect("write");
        fs::write(root.join("index.mjs"), "export default {}").expect("write");
        fs::create_dir_all(root.join("node_modules/x")).expect("mkdir");
        fs::write(root.join("node_modules/x/i.js"), "x").expect("write");
        fs::create_dir_all(root.join("lib")).expect("mkdir");
        fs::write(root.join("lib/a.mjs"), "a").expect("write");
        assert_eq!(
            list_files(root).expect("list"),
            vec!["index.mjs", "lib/a.mjs", "package.json"]
        );
        let first = pack_dir(root).expect("pack");
        let again = pack_dir(root).expect("pack");
        assert_eq!(first, again, "packing is deterministic");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(first.as_slice()));
        let names: Vec<String> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(names, vec!["index.mjs", "lib/a.mjs", "package.json"]);
    }

    #[test]
    fn refuses_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("leak")).expect("symlink");
        assert!(matches!(
            list_files(dir.path()),
            Err(PackError::NotRegular(_))
        ));
    }
}
