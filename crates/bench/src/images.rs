//! The image rows: `image-build-cold` and `image-build-cached` (a small
//! Dockerfile built through `POST /v1/images/build`: every step run, then
//! the same build again, served from the layer cache), and
//! `create-from-image` (create → RUNNING from the built image; the raw
//! column is the same create from the default image, measured alongside).

use crate::stats::{Kind, Row, Side, Target};
use crate::Bench;
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use reqwest::Method;
use serde_json::Value;
use std::time::Instant;

/// Image scenarios, in table order.
pub const SCENARIOS: &[&str] = &[
    "image-build-cold",
    "image-build-cached",
    "create-from-image",
];

/// A context tar: a Dockerfile with one COPY and two RUNs, `nonce` making
/// each cold build's key new.
fn context(nonce: &str) -> Result<Bytes> {
    let dockerfile = format!(
        "FROM default\nENV BENCH=1\nWORKDIR /srv\nCOPY app.py /srv/app.py\n\
         RUN echo {nonce} > /srv/nonce && python3 -c 'print(1)'\nRUN ls /srv\n"
    );
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in [
        ("Dockerfile", dockerfile.as_str()),
        ("app.py", "print('hi')\n"),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data.as_bytes())?;
    }
    Ok(Bytes::from(b.into_inner()?))
}

impl Bench {
    /// The image rows (sbx only: runsc has no images).
    pub(crate) async fn images(&mut self) {
        let mut names = Vec::new();
        let (cold, cached, from) = match self.images_measure(&mut names).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("  ! images: {e:#}");
                for name in SCENARIOS {
                    let mut row = Row::new(name, Kind::Latency, Target::None);
                    row.sbx.fail(&e);
                    row.raw = Side::skipped("sbx only");
                    self.put(name, row);
                }
                return;
            }
        };
        for n in names {
            let _ = self
                .api
                .call(Method::DELETE, &format!("/v1/images/{n}"), None)
                .await;
        }
        let mut row = Row::new("image-build-cold", Kind::Latency, Target::None);
        row.sbx.ms = cold;
        row.raw = Side::skipped("sbx only");
        self.put("image-build-cold", row);
        let mut row = Row::new("image-build-cached", Kind::Latency, Target::None);
        row.sbx.ms = cached;
        row.raw = Side::skipped("sbx only");
        self.put("image-build-cached", row);
        let mut row = Row::new("create-from-image", Kind::Latency, Target::None);
        row.sbx.ms = from.0;
        row.raw.ms = from.1;
        self.put("create-from-image", row);
        self.notes.push(
            "`image-build-cold`/`image-build-cached`: `POST /v1/images/build` of a 6-line \
             Dockerfile (ENV, WORKDIR, COPY, two RUNs) to its `result` line; cold builds \
             differ in one RUN (a build sandbox boots, the steps run, its files become the \
             image), the cached ones repeat one build (served from the layer cache, nothing \
             boots). `create-from-image`: create → RUNNING from the built image; its raw \
             column is the same create from the default image, alternating with it."
                .into(),
        );
    }

    /// Builds one context; answers the build's time (ms) and its last event.
    async fn build_once(&self, name: &str, ctx: Bytes) -> Result<(f64, Value)> {
        let started = Instant::now();
        let text = self
            .api
            .post_text(
                &format!("/v1/images/build?name={name}&tag=1"),
                "application/x-tar",
                ctx,
            )
            .await?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let last: Value = text
            .lines()
            .last()
            .map(serde_json::from_str)
            .transpose()
            .context("the build log's last line")?
            .unwrap_or(Value::Null);
        if last["type"] != "result" {
            bail!("build {name}: {last}");
        }
        Ok((ms, last))
    }

    async fn images_measure(
        &mut self,
        names: &mut Vec<String>,
    ) -> Result<(Vec<f64>, Vec<f64>, (Vec<f64>, Vec<f64>))> {
        let rounds = self.big.min(3);
        let mut cold = Vec::new();
        for i in 0..rounds {
            let name = format!("bench-{}-cold{i}", self.tag);
            let (ms, _) = self
                .build_once(&name, context(&format!("{}-{i}", self.tag))?)
                .await?;
            eprintln!("  image-build-cold {i}: {ms:.0} ms");
            names.push(format!("{name}:1"));
            cold.push(ms);
        }
        let mut cached = Vec::new();
        for i in 0..self.n {
            let name = format!("bench-{}-cached{i}", self.tag);
            // Same content as cold build 0: every step from the cache.
            let (ms, last) = self
                .build_once(&name, context(&format!("{}-0", self.tag))?)
                .await?;
            if last["image"]["name"] != name.as_str() {
                bail!("cached build named {}", last["image"]["name"]);
            }
            names.push(format!("{name}:1"));
            cached.push(ms);
        }
        let image = format!("bench-{}-cold0:1", self.tag);
        let (mut custom, mut default) = (Vec::new(), Vec::new());
        for i in 0..self.n {
            for (which, out) in [(Some(&image), &mut custom), (None, &mut default)] {
                let mut body = self
                    .create_body(self.sbx_name(if which.is_some() { "imgc" } else { "imgd" }, i));
                if let Some(img) = which {
                    body["image"] = Value::String(img.clone());
                }
                let started = Instant::now();
                let id = self.api.create_at("/v1/sandboxes", body).await?;
                out.push(started.elapsed().as_secs_f64() * 1000.0);
                self.api.destroy(&id).await?;
            }
        }
        Ok((cold, cached, (custom, default)))
    }
}
