//! Reading one sandbox's counters from cgroupfs and its disk.
//!
//! runsc puts a sandbox's host processes (the sentry, the gofer and the
//! systrap platform's stub processes) in the cgroup
//! `PARENT/ID`: on cgroup v2 one directory under the unified mount, on v1 one
//! per controller (`cpuacct/`, `memory/`, `pids/`). Every reader takes the
//! mount point as a parameter so that unit tests point it at fake files in a
//! temporary directory.

use std::path::{Path, PathBuf};

/// Failures while reading (the sample is skipped, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The sandbox has no cgroup (it is gone, or was never started).
    #[error("no cgroup found for {0}")]
    NoCgroup(String),
    /// A counter file could not be read or parsed.
    #[error("reading {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What the cgroups of one sandbox say, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupCounters {
    /// CPU time used by every host process of the sandbox since it started, µs.
    pub cpu_usec: u64,
    /// Memory charged to the sandbox now, bytes (guest memory lives in the
    /// sentry's memory file, so it is charged here too).
    pub memory_bytes: u64,
    /// Highest `memory_bytes` seen by the kernel (v1 `max_usage_in_bytes`,
    /// v2 `memory.peak` where the kernel has it).
    pub memory_peak_bytes: Option<u64>,
    /// Host page cache of the sandbox's files: file-backed memory minus
    /// shared memory (the guest's own memory is shared memory of the sentry).
    pub memory_cache_bytes: u64,
    /// Host tasks (threads) of the sandbox (`pids.current`): the sentry's and
    /// gofer's threads and the platform's stubs, not the guest's processes
    /// (measured: 7 stub processes for 2 guest processes), so not shown as a
    /// process count.
    pub host_tasks: u64,
}

/// A sandbox disk's use, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskCounters {
    /// Bytes in use.
    pub used_bytes: u64,
    /// Size of the disk; 0 when the sandbox has no disk limit.
    pub total_bytes: u64,
}

fn read_file(path: &Path) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|e| ReadError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn parse_u64(path: &Path, text: &str) -> Result<u64, ReadError> {
    text.trim().parse().map_err(|_| ReadError::File {
        path: path.to_path_buf(),
        reason: format!("not a number: {:?}", text.trim()),
    })
}

fn read_u64(path: &Path) -> Result<u64, ReadError> {
    parse_u64(path, &read_file(path)?)
}

/// The value of `key` in a flat-keyed file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn keyed_in(path: &Path, text: &str, key: &str) -> Result<u64, ReadError> {
    keyed(text, key).ok_or_else(|| ReadError::File {
        path: path.to_path_buf(),
        reason: format!("no {key} line"),
    })
}

/// Reads the counters of container `cid` under `mount` (cgroup v2 when
/// `mount/PARENT/ID/cgroup.controllers` exists, else the v1 hierarchies).
pub fn cgroup_counters(mount: &Path, parent: &str, cid: &str) -> Result<CgroupCounters, ReadError> {
    let v2 = mount.join(parent).join(cid);
    if v2.join("cgroup.controllers").exists() {
        return v2_counters(&v2);
    }
    let v1 = |controller: &str| mount.join(controller).join(parent).join(cid);
    if !v1("memory").exists() {
        return Err(ReadError::NoCgroup(cid.to_string()));
    }
    v1_counters(&v1("cpuacct"), &v1("memory"), &v1("pids"))
}

fn v2_counters(dir: &Path) -> Result<CgroupCounters, ReadError> {
    let cpu_stat = dir.join("cpu.stat");
    let cpu_usec = keyed_in(&cpu_stat, &read_file(&cpu_stat)?, "usage_usec")?;
    let memory_bytes = read_u64(&dir.join("memory.current"))?;
    // memory.peak came with Linux 5.19.
    let memory_peak_bytes = read_u64(&dir.join("memory.peak")).ok();
    let stat_path = dir.join("memory.stat");
    let stat = read_file(&stat_path)?;
    let file = keyed_in(&stat_path, &stat, "file")?;
    let shmem = keyed(&stat, "shmem").unwrap_or(0);
    Ok(CgroupCounters {
        cpu_usec,
        memory_bytes,
        memory_peak_bytes,
        memory_cache_bytes: file.saturating_sub(shmem),
        host_tasks: read_u64(&dir.join("pids.current")).unwrap_or(0),
    })
}

fn v1_counters(cpuacct: &Path, memory: &Path, pids: &Path) -> Result<CgroupCounters, ReadError> {
    // cpuacct.usage is in nanoseconds.
    let cpu_usec = read_u64(&cpuacct.join("cpuacct.usage"))? / 1000;
    let memory_bytes = read_u64(&memory.join("memory.usage_in_bytes"))?;
    let memory_peak_bytes = read_u64(&memory.join("memory.max_usage_in_bytes")).ok();
    let stat_path = memory.join("memory.stat");
    let stat = read_file(&stat_path)?;
    // The `total_` lines include child cgroups (runsc makes none, but they are the honest sum).
    let cache = keyed(&stat, "total_cache")
        .or_else(|| keyed(&stat, "cache"))
        .ok_or_else(|| ReadError::File {
            path: stat_path.clone(),
            reason: "no cache line".into(),
        })?;
    let shmem = keyed(&stat, "total_shmem")
        .or_else(|| keyed(&stat, "shmem"))
        .unwrap_or(0);
    Ok(CgroupCounters {
        cpu_usec,
        memory_bytes,
        memory_peak_bytes,
        memory_cache_bytes: cache.saturating_sub(shmem),
        host_tasks: read_u64(&pids.join("pids.current")).unwrap_or(0),
    })
}

/// Use of a sandbox's disk at `dir`: with a disk limit `dir` is the mount
/// point of the sandbox's own filesystem (`statvfs`); without one, the bytes
/// allocated to the files under `dir` and no total.
pub fn disk_counters(dir: &Path, mounted: bool) -> Result<DiskCounters, ReadError> {
    let err = |reason: String| ReadError::File {
        path: dir.to_path_buf(),
        reason,
    };
    if mounted {
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|e| err(e.to_string()))?;
        // SAFETY: statvfs(3) with a NUL-terminated path and a zeroed out-struct.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(err(std::io::Error::last_os_error().to_string()));
        }
        let frsize = st.f_frsize as u64;
        return Ok(DiskCounters {
            used_bytes: (st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * frsize,
            total_bytes: st.f_blocks as u64 * frsize,
        });
    }
    Ok(DiskCounters {
        used_bytes: allocated_under(dir).map_err(|e| err(e.to_string()))?,
        total_bytes: 0,
    })
}

/// Bytes allocated to the files under `dir` (`st_blocks`: sparse files count what they hold).
fn allocated_under(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(meta.blocks() * 512);
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    //! These tests read fake cgroup files written into a temporary directory.
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn v2_counters_come_from_the_unified_dir() {
        let mount = tempfile::tempdir().unwrap();
        let d = mount.path().join("sbx/c1");
        write(&d, "cgroup.controllers", "cpu memory pids\n");
        write(&d, "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\n");
        write(&d, "memory.current", "104857600\n");
        write(&d, "memory.peak", "209715200\n");
        write(&d, "memory.stat", "anon 1000\nfile 5000\nshmem 3000\n");
        write(&d, "pids.current", "42\n");
        let c = cgroup_counters(mount.path(), "sbx", "c1").unwrap();
        assert_eq!(
            c,
            CgroupCounters {
                cpu_usec: 1_500_000,
                memory_bytes: 104_857_600,
                memory_peak_bytes: Some(209_715_200),
                memory_cache_bytes: 2000,
                host_tasks: 42,
            }
        );
        // An older kernel without memory.peak.
        std::fs::remove_file(d.join("memory.peak")).unwrap();
        let c = cgroup_counters(mount.path(), "sbx", "c1").unwrap();
        assert_eq!(c.memory_peak_bytes, None);
    }

    #[test]
    fn v1_counters_come_from_each_controller() {
        let mount = tempfile::tempdir().unwrap();
        let m = mount.path();
        write(&m.join("cpuacct/sbx/c1"), "cpuacct.usage", "2500000000\n");
        write(&m.join("memory/sbx/c1"), "memory.usage_in_bytes", "300\n");
        write(
            &m.join("memory/sbx/c1"),
            "memory.max_usage_in_bytes",
            "900\n",
        );
        write(
            &m.join("memory/sbx/c1"),
            "memory.stat",
            "cache 10\nshmem 5\ntotal_cache 400\ntotal_shmem 250\n",
        );
        write(&m.join("pids/sbx/c1"), "pids.current", "7\n");
        let c = cgroup_counters(m, "sbx", "c1").unwrap();
        assert_eq!(
            c,
            CgroupCounters {
                cpu_usec: 2_500_000,
                memory_bytes: 300,
                memory_peak_bytes: Some(900),
                memory_cache_bytes: 150,
                host_tasks: 7,
            }
        );
    }

    #[test]
    fn a_missing_cgroup_or_a_garbled_file_is_an_error() {
        let mount = tempfile::tempdir().unwrap();
        assert!(matches!(
            cgroup_counters(mount.path(), "sbx", "gone"),
            Err(ReadError::NoCgroup(_))
        ));
        let d = mount.path().join("sbx/c1");
        write(&d, "cgroup.controllers", "");
        write(&d, "cpu.stat", "usage_usec lots\n");
        assert!(matches!(
            cgroup_counters(mount.path(), "sbx", "c1"),
            Err(ReadError::File { .. })
        ));
    }

    #[test]
    fn an_unlimited_disk_counts_allocated_blocks_and_has_no_total() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), vec![1u8; 64 * 1024]).unwrap();
        let c = disk_counters(dir.path(), false).unwrap();
        assert!(c.used_bytes >= 64 * 1024, "{c:?}");
        assert_eq!(c.total_bytes, 0);
        // statvfs of any directory answers its filesystem's size.
        let c = disk_counters(dir.path(), true).unwrap();
        assert!(c.total_bytes > 0 && c.used_bytes <= c.total_bytes, "{c:?}");
    }
}
