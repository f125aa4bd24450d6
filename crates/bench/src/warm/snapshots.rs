//! `snapshot-idle`, `clone` (from the last idle snapshot) and `snapshot-50MB` on the warm sandbox.

use std::path::PathBuf;

use serde_json::json;

use super::seed;
use crate::stats::{Failure, Kind, Row, Side, Target};
use crate::{inherit, timed, timed_val, Bench};

const WRITE_50MB: &str = "head -c 50000000 /dev/urandom > /root/bench-50MB && sync";

impl Bench {
    /// `snapshot-idle`, `clone` (from the last idle snapshot), then
    /// `snapshot-50MB` after writing 50 MB inside.
    pub(super) async fn snapshots(
        &mut self,
        sbx: &Result<String, Failure>,
        raw: &Result<String, Failure>,
    ) {
        if self.wants("snapshot-idle") || self.wants("snapshot-50MB") {
            let compression = match self.raw_compression.as_str() {
                "" => "runsc's default compression".to_string(),
                c => format!("`--compression={c}`"),
            };
            self.notes.push(format!(
                "snapshots: sbx = POST .../snapshots until READY (201, or 202 then GET \
                 /v2/snapshots/{{id}}); raw = `runsc checkpoint --leave-running` with \
                 {compression} (sbxd uses none). snapshot-50MB is taken after writing 50 MB of \
                 /dev/urandom to /root inside (root overlay)."
            ));
        }
        // Idle snapshots; the last one of each side is kept for `clone`.
        let mut idle = Row::new("snapshot-idle", Kind::Latency, Target::None);
        seed(&mut idle, sbx, raw);
        let iters = if self.wants("snapshot-idle") {
            self.warm + self.n
        } else if self.wants("clone") {
            1
        } else {
            0
        };
        let mut sbx_snap: Option<String> = None;
        let mut raw_image: Option<PathBuf> = None;
        for i in 0..iters {
            eprintln!("[snapshot-idle] {}/{iters}", i + 1);
            if let (true, Ok(id)) = (idle.sbx.active(), sbx) {
                let name = self.sbx_name("snap-idle", i);
                match timed_val(self.api.snapshot(id, &name)).await {
                    Ok((sid, d)) => {
                        idle.sbx.take(i, self.warm, Ok(d));
                        if let Some(old) = sbx_snap.replace(sid) {
                            let _ = self.api.delete_snapshot(&old).await;
                        }
                    }
                    Err(e) => idle.sbx.take(i, self.warm, Err(e)),
                }
            }
            if let (true, Ok(cid)) = (idle.raw.active(), raw) {
                let image = self.raw.image_dir(&format!("idle-{i:03}"));
                match timed(self.raw.checkpoint(cid, &image, &self.raw_compression)).await {
                    Ok(d) => {
                        idle.raw.take(i, self.warm, Ok(d));
                        if let Some(old) = raw_image.replace(image) {
                            let _ = std::fs::remove_dir_all(old);
                        }
                    }
                    Err(e) => idle.raw.take(i, self.warm, Err(e)),
                }
            }
        }

        if self.wants("clone") {
            let mut clone = Row::new("clone", Kind::Latency, Target::RatioAtMost(1.3));
            match (&sbx_snap, &idle.sbx.failure) {
                (Some(_), _) => {}
                (None, Some(f)) => clone.sbx = inherit(f, "snapshot"),
                (None, None) => clone.sbx = Side::skipped("no snapshot"),
            }
            match (&raw_image, &idle.raw.failure) {
                (Some(_), _) => {}
                (None, Some(f)) => clone.raw = inherit(f, "checkpoint"),
                (None, None) => clone.raw = Side::skipped("no checkpoint"),
            }
            for i in 0..self.warm + self.n {
                eprintln!("[clone] {}/{}", i + 1, self.warm + self.n);
                if let (true, Some(sid)) = (clone.sbx.active(), &sbx_snap) {
                    let body = json!({ "name": self.sbx_name("clone", i), "snapshotId": sid });
                    match timed_val(self.api.create(body)).await {
                        Ok((id, d)) => {
                            clone.sbx.take(i, self.warm, Ok(d));
                            if let Err(e) = self.api.destroy(&id).await {
                                eprintln!("  ! destroying clone {id}: {e:#}");
                            }
                        }
                        Err(e) => clone.sbx.take(i, self.warm, Err(e)),
                    }
                }
                if let (true, Some(image)) = (clone.raw.active(), &raw_image) {
                    match timed_val(self.raw.restore(image)).await {
                        Ok((cid, d)) => {
                            clone.raw.take(i, self.warm, Ok(d));
                            if let Err(e) = self.raw.destroy(&cid).await {
                                eprintln!("  ! deleting raw clone {cid}: {e:#}");
                            }
                        }
                        Err(e) => clone.raw.take(i, self.warm, Err(e)),
                    }
                }
            }
            self.notes.push(
                "clone: sbx = POST /v2/sandboxes {snapshotId} until RUNNING; raw = new bundle + \
                 `runsc restore --detach` of the last idle checkpoint + `runsc state` until \
                 running; each clone is destroyed (untimed) before the next."
                    .into(),
            );
            self.put("clone", clone);
        }
        if let Some(sid) = sbx_snap {
            let _ = self.api.delete_snapshot(&sid).await;
        }
        if let Some(image) = raw_image {
            let _ = std::fs::remove_dir_all(image);
        }
        if self.wants("snapshot-idle") {
            self.put("snapshot-idle", idle);
        }

        if self.wants("snapshot-50MB") {
            let mut big = Row::new("snapshot-50MB", Kind::Latency, Target::None);
            seed(&mut big, sbx, raw);
            if let Ok(id) = sbx {
                if let Err(e) = self.api.exec_ok(id, &["sh", "-c", WRITE_50MB]).await {
                    eprintln!("  ! writing 50 MB (sbx): {e:#}");
                    big.sbx.fail(&e);
                }
            }
            if let Ok(cid) = raw {
                if let Err(e) = self.raw.exec_ok(cid, &["sh", "-c", WRITE_50MB]).await {
                    eprintln!("  ! writing 50 MB (raw): {e:#}");
                    big.raw.fail(&e);
                }
            }
            for i in 0..self.warm + self.n {
                eprintln!("[snapshot-50MB] {}/{}", i + 1, self.warm + self.n);
                if let (true, Ok(id)) = (big.sbx.active(), sbx) {
                    let name = self.sbx_name("snap-50mb", i);
                    match timed_val(self.api.snapshot(id, &name)).await {
                        Ok((sid, d)) => {
                            big.sbx.take(i, self.warm, Ok(d));
                            let _ = self.api.delete_snapshot(&sid).await;
                        }
                        Err(e) => big.sbx.take(i, self.warm, Err(e)),
                    }
                }
                if let (true, Ok(cid)) = (big.raw.active(), raw) {
                    let image = self.raw.image_dir(&format!("50mb-{i:03}"));
                    let r = timed(self.raw.checkpoint(cid, &image, &self.raw_compression)).await;
                    let _ = std::fs::remove_dir_all(&image);
                    big.raw.take(i, self.warm, r);
                }
            }
            self.put("snapshot-50MB", big);
        }
    }
}
