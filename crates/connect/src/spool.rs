//! The on-disk spool of a running sync: records and checkpoints are appended as frames and
//! read back once at commit; the file is deleted when the spool is dropped.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const RECORD: u8 = b'R';
const CHECKPOINT: u8 = b'C';
const NO_KEY: u32 = u32::MAX;

/// Errors of the spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// File I/O failed.
    #[error("spool {path}: {source}")]
    Io {
        /// Spool path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file does not hold valid frames (truncated or overwritten).
    #[error("spool {0} is damaged")]
    Damaged(String),
    /// A frame is larger than a frame can say.
    #[error("spool frame too large")]
    TooLarge,
}

/// One spooled item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolEntry {
    /// A record: primary key text (merge) and JSON text.
    Record {
        /// Key text.
        key: Option<String>,
        /// JSON object text.
        data: String,
    },
    /// A checkpoint's JSON text.
    Checkpoint(String),
}

/// Writes a spool; dropping it unfinished deletes the file.
#[derive(Debug)]
pub struct SpoolWriter {
    path: PathBuf,
    file: Option<BufWriter<File>>,
    records: u64,
}

/// A finished spool, ready to commit; dropping it deletes the file.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    records: u64,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn len_u32(n: usize) -> Result<u32, SpoolError> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n != NO_KEY)
        .ok_or(SpoolError::TooLarge)
}

impl SpoolWriter {
    /// Creates (truncating) the spool file.
    pub fn create(path: &Path) -> Result<Self, SpoolError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(path))?;
        }
        let file = File::create(path).map_err(io_err(path))?;
        Ok(SpoolWriter {
            path: path.to_path_buf(),
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            records: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        let path = self.path.clone();
        match self.file.as_mut() {
            Some(f) => f.write_all(bytes).map_err(io_err(&path)),
            None => Err(SpoolError::Damaged(path.display().to_string())),
        }
    }

    /// Appends one record.
    pub fn append_record(&mut self, key: Option<&str>, data: &str) -> Result<(), SpoolError> {
        let key_len = match key {
            Some(k) => len_u32(k.len())?,
            None => NO_KEY,
        };
        let data_len = len_u32(data.len())?;
        self.write(&[RECORD])?;
        self.write(&key_len.to_le_bytes())?;
        if let Some(k) = key {
            self.write(k.as_bytes())?;
        }
        self.write(&data_len.to_le_bytes())?;
        self.write(data.as_bytes())?;
        self.records += 1;
        Ok(())
    }

    /// Appends a checkpoint (the last one counts).
    pub fn append_checkpoint(&mut self, checkpoint: &str) -> Result<(), SpoolError> {
        let len = len_u32(checkpoint.len())?;
        self.write(&[CHECKPOINT])?;
        self.write(&len.to_le_bytes())?;
        self.write(checkpoint.as_bytes())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes and closes the file.
    pub fn finish(mut self) -> Result<Spool, SpoolError> {
        let path = self.path.clone();
        if let Some(f) = self.file.take() {
            // Spools only need to outlive the daemon process, not a power loss: no fsync.
            f.into_inner().map_err(|e| io_err(&path)(e.into_error()))?;
        }
        let records = self.records;
        // The file now belongs to the Spool; do not let our Drop delete it.
        self.path = PathBuf::new();
        Ok(Spool { path, records })
    }
}

impl Drop for SpoolWriter {
    fn drop(&mut self) {
        self.file.take();
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Spool {
    /// Records in the spool.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The spool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the entries back in order.
    pub fn reader(&self) -> Result<SpoolReader, SpoolError> {
        let file = File::open(&self.path).map_err(io_err(&self.path))?;
        Ok(SpoolReader {
            path: self.path.clone(),
            file: BufReader::with_capacity(1 << 20, file),
        })
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads spool entries.
pub struct SpoolReader {
    path: PathBuf,
    file: BufReader<File>,
}

impl SpoolReader {
    fn damaged(&self) -> SpoolError {
        SpoolError::Damaged(self.path.display().to_string())
    }

    fn read_u32(&mut self) -> Result<u32, SpoolError> {
        let mut b = [0u8; 4];
        self.file.read_exact(&mut b).map_err(|_| self.damaged())?;
        Ok(u32::from_le_bytes(b))
    }

    fn read_text(&mut self, len: u32) -> Result<String, SpoolError> {
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact(&mut buf).map_err(|_| self.damaged())?;
        String::from_utf8(buf).map_err(|_| self.damaged())
    }

    /// The next entry, `None` at the end.
    pub fn next_entry(&mut self) -> Result<Option<SpoolEntry>, SpoolError> {
        let mut tag = [0u8; 1];
        match self.file.read(&mut tag) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(io_err(&self.path)(e)),
        }
        match tag[0] {
            RECORD => {
                let key_len = self.read_u32()?;
                let key = if key_len == NO_KEY {
                    None
                } else {
                    Some(self.read_text(key_len)?)
                };
                let data_len = self.read_u32()?;
                let data = self.read_text(data_len)?;
                Ok(Some(SpoolEntry::Record { key, data }))
            }
            CHECKPOINT => {
                let len = self.read_u32()?;
                Ok(Some(SpoolEntry::Checkpoint(self.read_text(len)?)))
            }
            _ => Err(self.damaged()),
        }
    }
}

/// Deletes every spool file in `dir` (left by a daemon that crashed mid-run); returns how many.
pub fn clean_dir(dir: &Path) -> Result<usize, SpoolError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut n = 0;
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "spool") {
            std::fs::remove_file(&path).map_err(io_err(&path))?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_delete_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.spool");
        let mut w = SpoolWriter::create(&path).expect("create");
        w.append_record(None, r#"{"a":1}"#).expect("rec");
        w.append_checkpoint(r#"{"page":1}"#).expect("cp");
        w.append_record(Some("k"), r#"{"id":"k"}"#).expect("rec");
        let spool = w.finish().expect("finish");
        assert_eq!(spool.records(), 2);
        let mut r = spool.reader().expect("reader");
        let mut got = Vec::new();
        while let Some(e) = r.next_entry().expect("entry") {
            got.push(e);
        }
        assert_eq!(
            got,
            vec![
                SpoolEntry::Record {
                    key: None,
                    data: r#"{"a":1}"#.into()
                },
                SpoolEntry::Checkpoint(r#"{"page":1}"#.into()),
                SpoolEntry::Record {
                    key: Some("k".into()),
                    data: r#"{"id":"k"}"#.into()
                },
            ]
        );
        assert!(path.exists());
        drop(spool);
        assert!(!path.exists());
    }

    #[test]
    fn unfinished_writer_deletes_file_and_clean_dir_removes_leftovers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.spool");
        {
            let mut w = SpoolWriter::create(&path).expect("create");
            w.append_record(None, "{}").expect("rec");
            assert!(path.exists());
        }
        assert!(!path.exists());
        std::fs::write(dir.path().join("left.spool"), b"R").expect("write");
        std::fs::write(dir.path().join("keep.txt"), b"x").expect("write");
        assert_eq!(clean_dir(dir.path()).expect("clean"), 1);
        assert!(dir.path().join("keep.txt").exists());
        assert_eq!(clean_dir(&dir.path().join("missing")).expect("clean"), 0);
    }
}
