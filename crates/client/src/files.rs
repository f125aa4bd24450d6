//! File transfer (streamed upload and download) and the `/v1` filesystem calls.

use crate::{Client, ClientError, Env};
use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, Stream, StreamExt};
use reqwest::header::CONTENT_LENGTH;
use reqwest::{Method, RequestBuilder};
use sbx_api_types::FileInfo;
use serde::Deserialize;
use std::path::Path;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

/// A stream of raw bytes (file downloads).
pub type ByteStream = BoxStream<'static, Result<Bytes, ClientError>>;

/// Read size when streaming an upload body.
const UPLOAD_CHUNK: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUpload {
    #[serde(default)]
    bytes_written: u64,
}

/// Streams an `AsyncRead` without holding more than one read buffer.
pub(crate) fn reader_stream<R>(
    reader: R,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static
where
    R: AsyncRead + Send + 'static,
{
    futures::stream::unfold(Some(Box::pin(reader)), |state| async move {
        let mut reader = state?;
        let mut buf = BytesMut::with_capacity(UPLOAD_CHUNK);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(reader))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

impl Client {
    /// `PUT /v2/sandboxes/{id}/files?path&mode`: streams `body` (never held whole in
    /// memory) into `path`, replacing it atomically. Returns the bytes written.
    pub async fn upload<R>(
        &self,
        id: Uuid,
        path: &str,
        mode: Option<u32>,
        body: R,
    ) -> Result<u64, ClientError>
    where
        R: AsyncRead + Send + 'static,
    {
        let mut q = vec![("path", path.to_string())];
        if let Some(m) = mode {
            q.push(("mode", format!("{m:04o}")));
        }
        let rb = self
            .request_typed(
                Method::PUT,
                &["v2", "sandboxes", &id.to_string(), "files"],
                "application/octet-stream",
            )
            .query(&q)
            .body(reqwest::Body::wrap_stream(reader_stream(body)));
        let w: WireUpload = Self::data(self.send(rb).await?).await?;
        Ok(w.bytes_written)
    }

    /// [`Client::upload`] from a local file.
    pub async fn upload_file(
        &self,
        id: Uuid,
        path: &str,
        mode: Option<u32>,
        local: impl AsRef<Path>,
    ) -> Result<u64, ClientError> {
        let file = tokio::fs::File::open(local.as_ref()).await?;
        self.upload(id, path, mode, file).await
    }

    /// `GET /v2/sandboxes/{id}/files?path`: the file's bytes as a stream, plus its length
    /// when the server sent one. A stream that ends early is an error of the stream.
    pub async fn download(
        &self,
        id: Uuid,
        path: &str,
    ) -> Result<(ByteStream, Option<u64>), ClientError> {
        let rb = self
            .request(Method::GET, &["v2", "sandboxes", &id.to_string(), "files"])
            .query(&[("path", path)]);
        let resp = self.send(rb).await?;
        let len = resp
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let stream = resp
            .bytes_stream()
            .map(|r| r.map_err(ClientError::Transport))
            .boxed();
        Ok((stream, len))
    }

    /// [`Client::download`] into a writer; checks the length and flushes. Returns the bytes copied.
    pub async fn download_to<W>(
        &self,
        id: Uuid,
        path: &str,
        out: &mut W,
    ) -> Result<u64, ClientError>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        let (mut stream, len) = self.download(id, path).await?;
        let mut copied = 0u64;
        while let Some(bytes) = stream.next().await {
            let bytes = bytes?;
            out.write_all(&bytes).await?;
            copied += bytes.len() as u64;
        }
        out.flush().await?;
        if let Some(expected) = len.filter(|l| *l != copied) {
            return Err(ClientError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("download ended after {copied} of {expected} bytes"),
            )));
        }
        Ok(copied)
    }

    fn fs_request(&self, method: Method, id: Uuid, op: &str) -> RequestBuilder {
        self.request(method, &["v1", "sandboxes", &id.to_string(), "fs", op])
    }

    /// `GET /v1/sandboxes/{id}/fs/stat?path`.
    pub async fn stat(&self, id: Uuid, path: &str) -> Result<FileInfo, ClientError> {
        let rb = self
            .fs_request(Method::GET, id, "stat")
            .query(&[("path", path)]);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/sandboxes/{id}/fs/list?path`: the entries of a directory.
    pub async fn list_dir(&self, id: Uuid, path: &str) -> Result<Vec<FileInfo>, ClientError> {
        let rb = self
            .fs_request(Method::GET, id, "list")
            .query(&[("path", path)]);
        let env: Env<Vec<FileInfo>> = Self::envelope(self.send(rb).await?).await?;
        Ok(env.data.unwrap_or_default())
    }

    /// `POST /v1/sandboxes/{id}/fs/mkdir?path` (with parents).
    pub async fn mkdir(&self, id: Uuid, path: &str) -> Result<(), ClientError> {
        let rb = self
            .fs_request(Method::POST, id, "mkdir")
            .query(&[("path", path)]);
        self.send(rb).await.map(drop)
    }

    /// `POST /v1/sandboxes/{id}/fs/remove?path&recursive`.
    pub async fn remove(&self, id: Uuid, path: &str, recursive: bool) -> Result<(), ClientError> {
        let rb = self.fs_request(Method::POST, id, "remove").query(&[
            ("path", path),
            ("recursive", if recursive { "true" } else { "false" }),
        ]);
        self.send(rb).await.map(drop)
    }

    /// `POST /v1/sandboxes/{id}/fs/rename` with `{from, to}`.
    pub async fn rename(&self, id: Uuid, from: &str, to: &str) -> Result<(), ClientError> {
        let rb = self
            .fs_request(Method::POST, id, "rename")
            .json(&serde_json::json!({ "from": from, "to": to }));
        self.send(rb).await.map(drop)
    }
}
