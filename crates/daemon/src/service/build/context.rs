//! A build's context: the uploaded tarball held in memory (bounded), its
//! `.dockerignore`, and the files a `COPY`/`ADD` selects, packed as the tar
//! that is unpacked inside the build sandbox, with a digest of their content
//! for the layer cache.

use super::dockerfile::CopySpec;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;

/// Most bytes of file data a context may hold (it is kept in memory).
pub const MAX_CONTEXT_BYTES: u64 = 512 * 1024 * 1024;

/// Why a context cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// Not a tar (or gzip'd tar), or an entry we refuse.
    #[error("the build context: {0}")]
    Invalid(String),
    /// Over [`MAX_CONTEXT_BYTES`].
    #[error("the build context holds more than {MAX_CONTEXT_BYTES} bytes of files")]
    TooLarge,
    /// A COPY/ADD source matched nothing.
    #[error("line {line}: {kw} {path}: no such file or directory in the context (or excluded by .dockerignore)")]
    Missing {
        /// The instruction's line.
        line: usize,
        /// COPY or ADD.
        kw: &'static str,
        /// The source as written.
        path: String,
    },
}

/// One entry of the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link (copied as a link).
    Symlink {
        /// Where it points.
        target: String,
    },
}

/// The context's entries by clean relative path (`a/b.txt`).
#[derive(Debug, Default)]
pub struct Context {
    entries: BTreeMap<String, Entry>,
    ignore: Vec<(bool, String)>,
}

/// What one `COPY`/`ADD` puts into the sandbox.
#[derive(Debug, Default)]
pub struct Selection {
    /// A tar of the selected files at their destination paths (relative to `/`).
    pub tar: Vec<u8>,
    /// Destination paths (absolute) of everything in `tar`, for `--chown`.
    pub paths: Vec<String>,
    /// `ADD` archives to unpack: (destination directory, gzip'd, bytes).
    pub archives: Vec<(String, bool, Vec<u8>)>,
    /// sha256 over every destination path, kind, mode and content (hex).
    pub digest: String,
}

/// `a/./b/` → `a/b`; `None` for paths leaving the root.
fn clean(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// Shell-style match: `*` and `?` stay within a path component, `**` crosses them.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                let rest = p[2..].strip_prefix(b"/").unwrap_or(&p[2..]);
                (0..=s.len()).any(|i| go(rest, &s[i..]))
            }
            Some(b'*') => (0..=s.len())
                .take_while(|&i| i == 0 || s[i - 1] != b'/')
                .any(|i| go(&p[1..], &s[i..])),
            Some(b'?') => s.first().is_some_and(|&c| c != b'/') && go(&p[1..], &s[1..]),
            Some(&c) => s.first() == Some(&c) && go(&p[1..], &s[1..]),
        }
    }
    go(pattern.as_bytes(), path.as_bytes())
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

impl Context {
    /// Reads a tar (gzip'd when it starts with the gzip magic) into memory.
    pub fn read(bytes: &[u8]) -> Result<Context, ContextError> {
        let reader: Box<dyn Read + '_> = if bytes.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::GzDecoder::new(bytes))
        } else {
            Box::new(bytes)
        };
        let mut archive = tar::Archive::new(reader);
        let bad = |e: std::io::Error| ContextError::Invalid(e.to_string());
        let mut entries = BTreeMap::new();
        let mut total = 0u64;
        for entry in archive.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let path = clean(&raw).ok_or_else(|| {
                ContextError::Invalid(format!("entry {raw:?} leaves the context"))
            })?;
            if path.is_empty() {
                continue;
            }
            let mode = entry.header().mode().map_err(bad)? & 0o777;
            let kind = entry.header().entry_type();
            let value = if kind.is_dir() {
                Entry::Dir { mode }
            } else if kind.is_symlink() {
                let target = entry
                    .link_name()
                    .map_err(bad)?
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Entry::Symlink { target }
            } else if kind.is_file() {
                total += entry.size();
                if total > MAX_CONTEXT_BYTES {
                    return Err(ContextError::TooLarge);
                }
                let mut data = Vec::with_capacity(entry.size() as usize);
                entry.read_to_end(&mut data).map_err(bad)?;
                Entry::File { mode, data }
            } else {
                // Hard links, devices, fifos: not something a COPY takes.
                continue;
            };
            entries.insert(path, value);
        }
        // A tar may list files without their directories: they exist all the same.
        let parents: Vec<String> = entries
            .keys()
            .flat_map(|p| {
                p.match_indices('/')
                    .map(|(i, _)| p[..i].to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        for dir in parents {
            entries.entry(dir).or_insert(Entry::Dir { mode: 0o755 });
        }
        let mut ctx = Context {
            entries,
            ignore: Vec::new(),
        };
        if let Some(Entry::File { data, .. }) = ctx.entries.get(".dockerignore") {
            ctx.ignore = parse_ignore(&String::from_utf8_lossy(data));
        }
        Ok(ctx)
    }

    /// The Dockerfile's text at `path` in the context.
    pub fn dockerfile(&self, path: &str) -> Result<String, ContextError> {
        let clean_path = clean(path).unwrap_or_default();
        match self.entries.get(&clean_path) {
            Some(Entry::File { data, .. }) => String::from_utf8(data.clone())
                .map_err(|_| ContextError::Invalid(format!("{path} is not UTF-8 text"))),
            _ => Err(ContextError::Invalid(format!(
                "no file {path:?} in the context (name it with ?dockerfile=)"
            ))),
        }
    }

    /// Whether `.dockerignore` leaves `path` out (a path is out when it or
    /// a parent matches; the last matching pattern wins, `!` brings back).
    pub fn ignored(&self, path: &str) -> bool {
        let mut out = false;
        for (negated, pattern) in &self.ignore {
            let mut prefix = String::new();
            let mut hit = false;
            for part in path.split('/') {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
                if glob_match(pattern, &prefix) {
                    hit = true;
                    break;
                }
            }
            if hit {
                out = !negated;
            }
        }
        out
    }

    /// The files one `COPY`/`ADD` takes, at their destinations.
    pub fn select(&self, line: usize, spec: &CopySpec) -> Result<Selection, ContextError> {
        let kw = if spec.add { "ADD" } else { "COPY" };
        // destination path (absolute) -> entry
        let mut chosen: BTreeMap<String, Entry> = BTreeMap::new();
        let mut archives = Vec::new();
        let dest_dir = spec.dest.trim_end_matches('/');
        for source in &spec.sources {
            let pattern = clean(source).unwrap_or_default();
            let roots: Vec<&String> = if pattern.is_empty() {
                vec![]
            } else if has_glob(&pattern) {
                self.entries
                    .keys()
                    .filter(|p| glob_match(&pattern, p) && !self.ignored(p))
                    .collect()
            } else {
                self.entries
                    .get_key_value(&pattern)
                    .map(|(k, _)| k)
                    .filter(|p| !self.ignored(p))
                    .into_iter()
                    .collect()
            };
            let whole = pattern.is_empty();
            if roots.is_empty() && !whole {
                return Err(ContextError::Missing {
                    line,
                    kw,
                    path: source.clone(),
                });
            }
            if whole {
                // `.`: the context's contents go into the destination.
                for (p, e) in &self.entries {
                    if !self.ignored(p) {
                        chosen.insert(format!("{dest_dir}/{p}"), e.clone());
                    }
                }
                continue;
            }
            for root in roots {
                let entry = &self.entries[root];
                match entry {
                    Entry::Dir { .. } => {
                        let inside = format!("{root}/");
                        for (p, e) in self.entries.range(inside.clone()..) {
                            let Some(rel) = p.strip_prefix(&inside) else {
                                break;
                            };
                            if !self.ignored(p) {
                                chosen.insert(format!("{dest_dir}/{rel}"), e.clone());
                            }
                        }
                    }
                    Entry::File { data, .. } if spec.add && is_tar(data) => {
                        archives.push((
                            dest_dir.to_string(),
                            data.starts_with(&[0x1f, 0x8b]),
                            data.clone(),
                        ));
                    }
                    _ => {
                        let base = root.rsplit('/').next().unwrap_or(root);
                        let to = if spec.dest.ends_with('/') {
                            format!("{dest_dir}/{base}")
                        } else {
                            spec.dest.clone()
                        };
                        chosen.insert(to, entry.clone());
                    }
                }
            }
        }
        let mut hash = Sha256::new();
        let mut builder = tar::Builder::new(Vec::new());
        let mut paths = Vec::new();
        let io = |e: std::io::Error| ContextError::Invalid(format!("packing: {e}"));
        for (dest, entry) in &chosen {
            let rel = dest.trim_start_matches('/');
            let mut header = tar::Header::new_gnu();
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(0);
            hash.update(dest.as_bytes());
            match entry {
                Entry::File { mode, data } => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    header.set_size(data.len() as u64);
                    builder
                        .append_data(&mut header, rel, &data[..])
                        .map_err(io)?;
                    hash.update(format!("\0f{mode:o}\0").as_bytes());
                    hash.update(Sha256::digest(data));
                }
                Entry::Dir { mode } => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(*mode);
                    header.set_size(0);
                    builder
                        .append_data(&mut header, rel, std::io::empty())
                        .map_err(io)?;
                    hash.update(format!("\0d{mode:o}\0").as_bytes());
                }
                Entry::Symlink { target } => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_size(0);
                    builder.append_link(&mut header, rel, target).map_err(io)?;
                    hash.update(format!("\0l{target}\0").as_bytes());
                }
            }
            paths.push(dest.clone());
        }
        for (dir, gz, data) in &archives {
            hash.update(format!("\0a{dir}\0").as_bytes());
            hash.update(Sha256::digest(data));
            let _ = gz;
        }
        let tar = builder.into_inner().map_err(io)?;
        Ok(Selection {
            tar,
            paths,
            archives,
            digest: hex::encode(hash.finalize()),
        })
    }
}

/// A local tar archive `ADD` unpacks: plain (ustar magic) or gzip'd.
fn is_tar(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b]) || data.get(257..262) == Some(b"ustar")
}

/// `.dockerignore` lines: comments and blanks dropped, `!` negates, leading `/` and `./` dropped.
fn parse_ignore(text: &str) -> Vec<(bool, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (neg, p) = match l.strip_prefix('!') {
                Some(p) => (true, p.trim()),
                None => (false, l),
            };
            let p = clean(p)?;
            (!p.is_empty()).then_some((neg, p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(files: &[(&str, &str)], ignore: &str) -> Context {
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |path: &str, data: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, path, data).unwrap();
        };
        for (p, d) in files {
            add(p, d.as_bytes());
        }
        add(".dockerignore", ignore.as_bytes());
        Context::read(&b.into_inner().unwrap()).unwrap()
    }

    fn spec(sources: &[&str], dest: &str) -> CopySpec {
        CopySpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            dest: dest.into(),
            chown: None,
            add: false,
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.py", "a.py"));
        assert!(!glob_match("*.py", "d/a.py"));
        assert!(glob_match("**/*.py", "d/e/a.py"));
        assert!(glob_match("**/*.py", "a.py"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "a/c"));
    }

    #[test]
    fn dockerignore_excludes_and_negates() {
        let c = ctx(
            &[
                ("a.txt", "a"),
                ("secret.env", "s"),
                ("logs/x.log", "l"),
                ("logs/keep.log", "k"),
            ],
            "*.env\nlogs\n!logs/keep.log\n",
        );
        assert!(c.ignored("secret.env"));
        assert!(c.ignored("logs/x.log"));
        assert!(!c.ignored("logs/keep.log"));
        assert!(!c.ignored("a.txt"));
        let s = c.select(3, &spec(&["."], "/app/")).unwrap();
        assert_eq!(
            s.paths,
            vec!["/app/.dockerignore", "/app/a.txt", "/app/logs/keep.log"]
        );
        let e = c.select(4, &spec(&["secret.env"], "/x")).unwrap_err();
        assert!(e.to_string().starts_with("line 4: COPY secret.env"), "{e}");
    }

    #[test]
    fn files_dirs_and_globs_land_where_docker_puts_them() {
        let c = ctx(
            &[("src/m.py", "m"), ("src/sub/n.py", "n"), ("req.txt", "r")],
            "",
        );
        let s = c.select(1, &spec(&["req.txt"], "/app/")).unwrap();
        assert_eq!(s.paths, vec!["/app/req.txt"]);
        let s = c.select(1, &spec(&["req.txt"], "/app/r2.txt")).unwrap();
        assert_eq!(s.paths, vec!["/app/r2.txt"]);
        let s = c.select(1, &spec(&["src"], "/code")).unwrap();
        assert_eq!(s.paths, vec!["/code/m.py", "/code/sub", "/code/sub/n.py"]);
        let s = c.select(1, &spec(&["src/*.py", "req.txt"], "/g/")).unwrap();
        assert_eq!(s.paths, vec!["/g/m.py", "/g/req.txt"]);
    }

    #[test]
    fn the_digest_follows_content() {
        let a = ctx(&[("f", "one")], "")
            .select(1, &spec(&["f"], "/f"))
            .unwrap();
        let b = ctx(&[("f", "two")], "")
            .select(1, &spec(&["f"], "/f"))
            .unwrap();
        let a2 = ctx(&[("f", "one")], "")
            .select(1, &spec(&["f"], "/f"))
            .unwrap();
        assert_ne!(a.digest, b.digest);
        assert_eq!(a.digest, a2.digest);
    }

    #[test]
    fn entries_leaving_the_context_are_refused() {
        let mut data = Vec::new();
        {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(1);
            // `append_data` refuses `..`; write the name by hand.
            h.as_gnu_mut().unwrap().name[..7].copy_from_slice(b"../evil");
            h.set_cksum();
            data.extend_from_slice(h.as_bytes());
            data.extend_from_slice(&[b'x'; 512]);
            data.extend_from_slice(&[0; 1024]);
        }
        assert!(matches!(
            Context::read(&data),
            Err(ContextError::Invalid(_))
        ));
    }
}
