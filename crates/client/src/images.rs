//! Image calls (`/v1/images`): import, list, get, tag, delete, and an image of a sandbox.

use crate::{Client, ClientError};
use reqwest::Method;
use sbx_api_types::{BuildEvent, Image, ImageFromSandboxRequest, ImageList, ImageTagRequest};
use std::path::Path;
use uuid::Uuid;

/// What `POST /v1/images/build` takes besides the context.
#[derive(Debug, Default, Clone)]
pub struct BuildOptions {
    /// The Dockerfile's path in the context (`Dockerfile` when `None`).
    pub dockerfile: Option<String>,
    /// `ARG` values.
    pub build_args: std::collections::BTreeMap<String, String>,
    /// `public`, `https-only` or `none` (the server's `public` when `None`).
    pub network: Option<String>,
}

impl Client {
    /// `POST /v1/images/build?name&tag`: sends a build context tar and
    /// answers the build's log, one [`BuildEvent`] at a time (`None` at its end).
    pub async fn image_build(
        &self,
        name: &str,
        tag: &str,
        context: Vec<u8>,
        options: &BuildOptions,
    ) -> Result<BuildLog, ClientError> {
        let mut query = vec![("name", name.to_string()), ("tag", tag.to_string())];
        if let Some(d) = &options.dockerfile {
            query.push(("dockerfile", d.clone()));
        }
        if !options.build_args.is_empty() {
            let args = serde_json::to_string(&options.build_args).unwrap_or_default();
            query.push(("buildArgs", args));
        }
        if let Some(n) = &options.network {
            query.push(("network", n.clone()));
        }
        let rb = self
            .request_typed(
                Method::POST,
                &["v1", "images", "build"],
                "application/x-tar",
            )
            .query(&query)
            .body(context);
        let resp = self.send(rb).await?;
        Ok(BuildLog {
            resp,
            buffer: Vec::new(),
        })
    }

    /// `POST /v1/images?name&tag`: streams an OCI image layout or `docker
    /// save` tarball from `local` (never held whole in memory) and returns the image.
    pub async fn image_import(
        &self,
        name: &str,
        tag: &str,
        local: impl AsRef<Path>,
    ) -> Result<Image, ClientError> {
        let file = tokio::fs::File::open(local.as_ref()).await?;
        let rb = self
            .request_typed(Method::POST, &["v1", "images"], "application/x-tar")
            .query(&[("name", name), ("tag", tag)])
            .body(reqwest::Body::wrap_stream(crate::files::reader_stream(
                file,
            )));
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/images`: the default image, then the tenant's by name and tag.
    pub async fn image_list(&self) -> Result<Vec<Image>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "images"]))
            .await?;
        let list: ImageList = Self::data(resp).await?;
        Ok(list.images)
    }

    /// `GET /v1/images/{ref}` (`name:tag`, `name` or a digest).
    pub async fn image_get(&self, reference: &str) -> Result<Image, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "images", reference]))
            .await?;
        Self::data(resp).await
    }

    /// `DELETE /v1/images/{ref}`: refused while a sandbox or snapshot uses it.
    pub async fn image_delete(&self, reference: &str) -> Result<(), ClientError> {
        let rb = self.request(Method::DELETE, &["v1", "images", reference]);
        self.send(rb).await.map(drop)
    }

    /// `POST /v1/images/{ref}/tag`: another `name:tag` for an image's content
    /// (`default` makes it the workspace's default image).
    pub async fn image_tag(
        &self,
        image: &str,
        name: &str,
        tag: &str,
    ) -> Result<Image, ClientError> {
        let req = ImageTagRequest {
            name: Some(name.to_string()),
            tag: Some(tag.to_string()),
        };
        let rb = self
            .request(Method::POST, &["v1", "images", image, "tag"])
            .json(&req);
        Self::data(self.send(rb).await?).await
    }

    /// `POST /v1/sandboxes/{id}/image`: the running sandbox's files as image `name:tag`.
    pub async fn image_from_sandbox(
        &self,
        id: Uuid,
        name: &str,
        tag: &str,
    ) -> Result<Image, ClientError> {
        let req = ImageFromSandboxRequest {
            name: Some(name.to_string()),
            tag: Some(tag.to_string()),
        };
        let rb = self
            .request(Method::POST, &["v1", "sandboxes", &id.to_string(), "image"])
            .json(&req);
        Self::data(self.send(rb).await?).await
    }
}

/// A running build's NDJSON log.
pub struct BuildLog {
    resp: reqwest::Response,
    buffer: Vec<u8>,
}

impl BuildLog {
    /// The next event (`None`: the log ended).
    pub async fn next(&mut self) -> Result<Option<BuildEvent>, ClientError> {
        loop {
            if let Some(i) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line)
                    .map(Some)
                    .map_err(|e| crate::decode_err("build log line", e, &None));
            }
            match self.resp.chunk().await.map_err(ClientError::Transport)? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None if self.buffer.is_empty() => return Ok(None),
                None => self.buffer.push(b'\n'),
            }
        }
    }
}
