//! Volume calls (`/v1/volumes`): create, list, get, delete.

use crate::{Client, ClientError};
use reqwest::Method;
use sbx_api_types::{CreateVolumeRequest, Volume, VolumeList};

impl Client {
    /// `POST /v1/volumes`: formats a new volume and returns it.
    pub async fn volume_create(&self, req: &CreateVolumeRequest) -> Result<Volume, ClientError> {
        let rb = self.request(Method::POST, &["v1", "volumes"]).json(req);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/volumes`: the tenant's volumes by name.
    pub async fn volume_list(&self) -> Result<Vec<Volume>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "volumes"]))
            .await?;
        let list: VolumeList = Self::data(resp).await?;
        Ok(list.volumes)
    }

    /// `GET /v1/volumes/{name}`: one volume with the bytes it uses.
    pub async fn volume_get(&self, name: &str) -> Result<Volume, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "volumes", name]))
            .await?;
        Self::data(resp).await
    }

    /// `DELETE /v1/volumes/{name}`: refused while mounted unless `force`.
    pub async fn volume_delete(&self, name: &str, force: bool) -> Result<(), ClientError> {
        let mut rb = self.request(Method::DELETE, &["v1", "volumes", name]);
        if force {
            rb = rb.query(&[("force", "true")]);
        }
        self.send(rb).await.map(drop)
    }
}
