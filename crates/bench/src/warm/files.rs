//! `upload-*` and `download-*`: transfer throughput to and from the warm sandbox.

use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;

use super::{seed, seed_one};
use crate::cli::SCENARIOS;
use crate::stats::{Failure, Kind, Row, Target};
use crate::{inherit, sys, timed, timed_val, Bench};

/// Transfer sizes are multiples of this.
pub const MIB: u64 = 1024 * 1024;
const SBX_FILE: &str = "/tmp/bench.bin";
const RAW_FILE: &str = "/tmp/x";

/// Fast deterministic filler bytes (incompressible enough for a transfer test).
fn filler(len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

impl Bench {
    /// Upload then download of `size` bytes, `iters` times each.
    pub(super) async fn files(
        &mut self,
        sbx: &Result<String, Failure>,
        raw: &Result<String, Failure>,
        size: u64,
        iters: usize,
        warm: usize,
    ) {
        let label = if size >= MIB { size / MIB } else { 0 };
        let up_name = SCENARIOS
            .iter()
            .copied()
            .find(|s| *s == format!("upload-{label}MiB"));
        let down_name = SCENARIOS
            .iter()
            .copied()
            .find(|s| *s == format!("download-{label}MiB"));
        let (Some(up_name), Some(down_name)) = (up_name, down_name) else {
            return;
        };
        let (want_up, want_down) = (self.wants(up_name), self.wants(down_name));
        if !want_up && !want_down {
            return;
        }
        let big = size >= 100 * MIB;
        let target = if big {
            Target::MinMbps(300.0)
        } else {
            Target::None
        };
        let data = filler(size as usize);
        let rss_pid = if big { self.sbxd_pid } else { None };
        if let Some(pid) = rss_pid {
            if let Some(k) = sys::rss_kib(pid) {
                self.notes.push(format!(
                    "sbxd RSS (pid {pid}) before the 100 MiB transfers: {}",
                    sys::mib(k)
                ));
            }
        }

        let mut up = Row::new(up_name, Kind::Throughput { bytes: size }, target);
        seed(&mut up, sbx, raw);
        let mut rss_max = 0u64;
        let mut rss_n = 0usize;
        // Without a timed upload, the download still needs the file once.
        let up_iters = if want_up { warm + iters } else { 1 };
        for i in 0..up_iters {
            eprintln!("[{up_name}] {}/{up_iters}", i + 1);
            if let (true, Ok(id)) = (up.sbx.active(), sbx) {
                let sampler = rss_pid.map(|p| sys::RssSampler::start(p, Duration::from_millis(50)));
                let r = timed(self.api.upload(id, SBX_FILE, &data)).await;
                if let Some(s) = sampler {
                    let (m, n) = s.finish().await;
                    rss_max = rss_max.max(m);
                    rss_n += n;
                }
                up.sbx.take(i, warm, r);
            }
            if let (true, Ok(cid)) = (up.raw.active(), raw) {
                let r = timed(self.raw.upload(cid, RAW_FILE, &data)).await;
                up.raw.take(i, warm, r);
            }
        }
        if let (Some(pid), true) = (rss_pid, rss_n > 0) {
            self.notes.push(format!(
                "sbxd RSS (pid {pid}) max during the 100 MiB uploads: {} ({rss_n} samples every 50 ms)",
                sys::mib(rss_max)
            ));
        }

        if want_down {
            let mut down = Row::new(down_name, Kind::Throughput { bytes: size }, target);
            match &up.sbx.failure {
                Some(f) => down.sbx = inherit(f, "upload"),
                None => seed_one(&mut down.sbx, sbx),
            }
            match &up.raw.failure {
                Some(f) => down.raw = inherit(f, "upload"),
                None => seed_one(&mut down.raw, raw),
            }
            let (mut rss_max, mut rss_n) = (0u64, 0usize);
            for i in 0..warm + iters {
                eprintln!("[{down_name}] {}/{}", i + 1, warm + iters);
                if let (true, Ok(id)) = (down.sbx.active(), sbx) {
                    let sampler =
                        rss_pid.map(|p| sys::RssSampler::start(p, Duration::from_millis(50)));
                    let r = timed_val(self.api.download(id, SBX_FILE)).await;
                    if let Some(s) = sampler {
                        let (m, n) = s.finish().await;
                        rss_max = rss_max.max(m);
                        rss_n += n;
                    }
                    down.sbx.take(i, warm, check_len(r, size));
                }
                if let (true, Ok(cid)) = (down.raw.active(), raw) {
                    let r = timed_val(self.raw.download(cid, RAW_FILE)).await;
                    down.raw.take(i, warm, check_len(r, size));
                }
            }
            if let (Some(pid), true) = (rss_pid, rss_n > 0) {
                self.notes.push(format!(
                    "sbxd RSS (pid {pid}) max during the 100 MiB downloads: {} ({rss_n} samples)",
                    sys::mib(rss_max)
                ));
            }
            self.put(down_name, down);
        }
        if want_up {
            self.put(up_name, up);
        }
        if big {
            if let Some(k) = rss_pid.and_then(sys::rss_kib) {
                self.notes.push(format!(
                    "sbxd RSS after the 100 MiB transfers: {}",
                    sys::mib(k)
                ));
            }
        }
        if let Ok(id) = sbx {
            let _ = self.api.exec(id, &["rm", "-f", SBX_FILE]).await;
        }
        if let Ok(cid) = raw {
            let _ = self.raw.exec_ok(cid, &["rm", "-f", RAW_FILE]).await;
        }
    }
}

/// A transfer result whose byte count must be `want`.
fn check_len(r: Result<(u64, Duration)>, want: u64) -> Result<Duration> {
    let (n, d) = r?;
    if n != want {
        bail!("downloaded {n} bytes, want {want}");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_has_the_length() {
        assert_eq!(filler(1_000_003).len(), 1_000_003);
        let f = filler(64);
        assert_ne!(f[0..8], f[8..16]);
    }
}
