//! Host facts for the header line, and the sbxd process's memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One line describing the machine.
pub fn machine_line(runsc: &std::path::Path) -> String {
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = meminfo_kib("MemTotal").map(|k| k as f64 / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let runsc_version = std::process::Command::new(runsc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim().trim_start_matches("runsc version ").to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!(
        "{nproc} cores ({cpu}), {} RAM, Linux {kernel}, runsc {runsc_version}",
        mem_gib
            .map(|g| format!("{g:.1} GiB"))
            .unwrap_or_else(|| "? GiB".into())
    )
}

fn meminfo_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    s.lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `VmRSS` of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// The pid of the process with a listening TCP socket on `port`
/// (/proc/net/tcp{,6} inode, then the process holding that socket).
pub fn pid_listening_on(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(s) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in s.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let local_port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
                    return Some(pid);
                }
            }
        }
    }
    None
}

/// Samples a process's RSS every `every` until stopped; keeps the maximum.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, usize)>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let (mut max, mut n) = (0u64, 0usize);
            loop {
                if let Some(k) = rss_kib(pid) {
                    max = max.max(k);
                    n += 1;
                }
                if flag.load(Ordering::Relaxed) {
                    return (max, n);
                }
                tokio::time::sleep(every).await;
            }
        });
        RssSampler { stop, task }
    }

    /// Stops; returns (max RSS KiB, number of samples).
    pub async fn finish(self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or((0, 0))
    }
}

/// KiB as MiB text.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `Pss:` of a `/proc/<pid>/smaps_rollup` text, in KiB.
pub fn parse_pss_kib(smaps_rollup: &str) -> Option<u64> {
    smaps_rollup
        .lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// PSS of `pid` in KiB (from `/proc/<pid>/smaps_rollup`).
pub fn pss_kib(pid: u32) -> Option<u64> {
    parse_pss_kib(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?)
}

/// Whether `a` and `b` share one address space (`kcmp` `KCMP_VM`), as a
/// gVisor systrap stub process and the stub threads it clones with
/// `CLONE_VM` do: each one's `smaps_rollup` reports the whole address space,
/// so it must be counted once. False when the kernel cannot tell (no
/// permission, a process gone).
pub fn same_address_space(a: u32, b: u32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp with integer arguments only.
    unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::pid_t,
            b as libc::pid_t,
            KCMP_VM,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) == 0
    }
}

/// One host process: pid, parent pid, command line (NULs as spaces).
#[derive(Debug, Clone, PartialEq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: String,
}

/// Every process on the host (kernel threads have an empty command line).
pub fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Some(ppid) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
            .map(|s| s.ppid)
        else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .replace('\0', " ")
                    .trim_end()
                    .to_string()
            })
            .unwrap_or_default();
        out.push(Proc { pid, ppid, cmdline });
    }
    out
}

/// Which of `keys` each process belongs to: a process whose command line
/// contains a key belongs to it (the first that matches), and so does every
/// descendant of such a process. Returns pid → key index.
pub fn owners(procs: &[Proc], keys: &[String]) -> std::collections::BTreeMap<u32, usize> {
    use std::collections::BTreeMap;
    let parent: BTreeMap<u32, u32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let direct: BTreeMap<u32, usize> = procs
        .iter()
        .filter(|p| !p.cmdline.is_empty())
        .filter_map(|p| {
            keys.iter()
                .position(|k| !k.is_empty() && p.cmdline.contains(k.as_str()))
                .map(|i| (p.pid, i))
        })
        .collect();
    let mut out = BTreeMap::new();
    for p in procs {
        let mut cur = p.pid;
        // Bounded walk up the parent chain (a pid-reuse cycle cannot loop).
        for _ in 0..64 {
            if let Some(&k) = direct.get(&cur) {
                out.insert(p.pid, k);
                break;
            }
            match parent.get(&cur) {
                Some(&pp) if pp != 0 && pp != cur => cur = pp,
                _ => break,
            }
        }
    }
    out
}

/// The fields of `/proc/<pid>/stat` the bench uses (times in clock ticks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub ppid: u32,
    pub utime: u64,
    pub stime: u64,
    /// CPU of waited-for children.
    pub cutime: u64,
    pub cstime: u64,
}

/// Parses `/proc/<pid>/stat` (the command may contain spaces and parens).
pub fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    // Fields after the command: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        ppid: n(4)? as u32,
        utime: n(14)?,
        stime: n(15)?,
        cutime: n(16)?,
        cstime: n(17)?,
    })
}

/// `/proc/<pid>/stat` of `pid`.
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Clock ticks per second (`_SC_CLK_TCK`).
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes an integer name and has no other effect.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pss_from_smaps_rollup() {
        let text =
            "55d0c0a4b000-7ffd8e3f2000 ---p 00000000 00:00 0                          [rollup]\n\
                    Rss:               38252 kB\n\
                    Pss:               21034 kB\n\
                    Pss_Dirty:         12000 kB\n\
                    Pss_Anon:          11500 kB\n\
                    Shared_Clean:      17000 kB\n";
        assert_eq!(parse_pss_kib(text), Some(21034));
        assert_eq!(parse_pss_kib("Rss: 1 kB\n"), None);
        assert_eq!(parse_pss_kib(""), None);
    }

    #[test]
    fn address_space_comparison() {
        let me = std::process::id();
        assert!(same_address_space(me, me));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(!same_address_space(me, child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn proc_stat_fields() {
        let s = "364 (runsc-sandbox (x)) S 1 364 364 0 -1 4194560 9 0 0 0 120 35 7 2 20 0 40 0 \
                 100 2000000 9000";
        let st = parse_stat(s).unwrap();
        assert_eq!(
            st,
            Stat {
                ppid: 1,
                utime: 120,
                stime: 35,
                cutime: 7,
                cstime: 2
            }
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 0 1"), None);
    }

    #[test]
    fn processes_are_grouped_by_key_and_ancestry() {
        let p = |pid, ppid, c: &str| Proc {
            pid,
            ppid,
            cmdline: c.to_string(),
        };
        let procs = vec![
            p(1, 0, "/sbin/init"),
            p(10, 1, "sbxd --dev"),
            p(
                20,
                1,
                "runsc-sandbox --root=/r boot --bundle=/d/aaa/bundle sbx-aaa",
            ),
            p(
                21,
                20,
                "runsc-sandbox --root=/r boot --bundle=/d/aaa/bundle sbx-aaa",
            ),
            p(22, 21, ""),
            p(30, 1, "runsc-gofer gofer --bundle=/d/bbb/bundle"),
            p(31, 10, "runsc exec sbx-aaa /.sbx/bin/sbx-agent relay"),
            p(40, 1, "sleep 100"),
        ];
        let keys = vec!["aaa".to_string(), "bbb".to_string()];
        let o = owners(&procs, &keys);
        assert_eq!(o.get(&20), Some(&0));
        assert_eq!(o.get(&22), Some(&0), "descendant without a cmdline");
        assert_eq!(o.get(&31), Some(&0), "relay child of sbxd");
        assert_eq!(o.get(&30), Some(&1));
        assert_eq!(o.get(&10), None);
        assert_eq!(o.get(&1), None);
        assert_eq!(o.get(&40), None);
        assert_eq!(o.len(), 5);
    }
}
