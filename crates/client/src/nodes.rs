//! Node calls (`/v1/nodes`, cluster mode): list, drain, undrain.

use crate::{Client, ClientError};
use reqwest::Method;
use sbx_api_types::Node;

impl Client {
    /// `GET /v1/nodes`: every node sharing the server's database, by id.
    pub async fn node_list(&self) -> Result<Vec<Node>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "nodes"]))
            .await?;
        Self::data(resp).await
    }

    /// `POST /v1/nodes/{id}/drain`: no new placements on the node (operator only).
    pub async fn node_drain(&self, id: &str) -> Result<Node, ClientError> {
        let resp = self
            .send(self.request(Method::POST, &["v1", "nodes", id, "drain"]))
            .await?;
        Self::data(resp).await
    }

    /// `POST /v1/nodes/{id}/undrain`: the node takes new placements again (operator only).
    pub async fn node_undrain(&self, id: &str) -> Result<Node, ClientError> {
        let resp = self
            .send(self.request(Method::POST, &["v1", "nodes", id, "undrain"]))
            .await?;
        Self::data(resp).await
    }
}
