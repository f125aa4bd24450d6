//! `template-create`: create→RUNNING from a template (`/v1/templates`: the
//! default image with `python3 -m http.server 8000` started and ready on
//! port 8000) against a clone of an ordinary snapshot of a sandbox running
//! the same server, in the same run. Both sides are sbx: the row's "raw"
//! column is the ordinary clone, so its ratio is template ÷ clone.

use anyhow::{anyhow, Result};
use reqwest::Method;
use serde_json::json;

use crate::stats::{Kind, Row, Side, Target};
use crate::{timed_val, Bench};

/// The server both sides start.
const SERVER: &str = "python3 -m http.server 8000";

impl Bench {
    /// `template-create`.
    pub(crate) async fn template_create(&mut self) {
        let mut row = Row::new("template-create", Kind::Latency, Target::RatioAtMost(1.2));
        let name = format!("bench-{}-tpl", self.tag);
        let setup = self.template_setup(&name).await;
        let snapshot = match setup {
            Ok(s) => s,
            Err(e) => {
                eprintln!("  ! template-create setup: {e:#}");
                row.sbx = Side::failed(&e);
                row.raw = Side::failed(&e);
                let _ = self
                    .api
                    .call(Method::DELETE, &format!("/v1/templates/{name}"), None)
                    .await;
                self.put("template-create", row);
                return;
            }
        };
        for i in 0..self.warm + self.n {
            eprintln!("[template-create] {}/{}", i + 1, self.warm + self.n);
            if row.sbx.active() {
                let body = json!({ "name": self.sbx_name("tpl", i), "template": name });
                match timed_val(self.api.create_at("/v1/sandboxes", body)).await {
                    Ok((id, d)) => {
                        row.sbx.take(i, self.warm, Ok(d));
                        if let Err(e) = self.api.destroy(&id).await {
                            eprintln!("  ! destroying {id}: {e:#}");
                        }
                    }
                    Err(e) => row.sbx.take(i, self.warm, Err(e)),
                }
            }
            if row.raw.active() {
                let body = json!({ "name": self.sbx_name("tpl-clone", i), "snapshotId": snapshot });
                match timed_val(self.api.create(body)).await {
                    Ok((id, d)) => {
                        row.raw.take(i, self.warm, Ok(d));
                        if let Err(e) = self.api.destroy(&id).await {
                            eprintln!("  ! destroying {id}: {e:#}");
                        }
                    }
                    Err(e) => row.raw.take(i, self.warm, Err(e)),
                }
            }
        }
        let _ = self.api.delete_snapshot(&snapshot).await;
        let _ = self
            .api
            .call(Method::DELETE, &format!("/v1/templates/{name}"), None)
            .await;
        self.notes.push(format!(
            "template-create: sbx = POST /v1/sandboxes {{template}} until RUNNING (a template of \
             the default image with `{SERVER}` ready on port 8000); the raw column is NOT runsc \
             here but sbx too: POST /v2/sandboxes {{snapshotId}} of an ordinary snapshot of a \
             sandbox running the same server, so the ratio is template ÷ clone (target ≤ 1.2). \
             Each sandbox is destroyed (untimed) before the next."
        ));
        self.put("template-create", row);
    }

    /// Builds the template and the ordinary snapshot; returns the snapshot id.
    async fn template_setup(&self, name: &str) -> Result<String> {
        let t = self
            .api
            .call(
                Method::POST,
                "/v1/templates?wait=true",
                Some(json!({"name": name, "startCommand": SERVER,
                            "readyCheck": {"port": 8000}})),
            )
            .await?;
        if t.body["data"]["status"] != "READY" {
            return Err(anyhow!("template build: {}", t.body));
        }
        let id = self
            .api
            .create(self.create_body(self.sbx_name("tpl-src", 0)))
            .await?;
        let result = async {
            self.api.start_process(&id, &["sh", "-c", SERVER]).await?;
            // Ready as the template's check is: the port answers.
            let probe = "import socket,time\nfor _ in range(600):\n  try:\n    socket.create_connection(('127.0.0.1',8000),1);break\n  except OSError:\n    time.sleep(0.05)";
            self.api.exec_ok(&id, &["python3", "-c", probe]).await?;
            self.api
                .snapshot(&id, &self.sbx_name("tpl-snap", 0))
                .await
        }
        .await;
        let _ = self.api.destroy(&id).await;
        result
    }
}
