//! Secret calls (`/v1` only): set, list names, delete.

use crate::{Client, ClientError, Env, SecretInfo};
use reqwest::Method;

impl Client {
    /// `PUT /v1/secrets/{name}` with `{"value": ...}`: creates or replaces a secret.
    /// Returns the secret's names and times when the server sends them (never the value).
    pub async fn secret_set(
        &self,
        name: &str,
        value: &str,
    ) -> Result<Option<SecretInfo>, ClientError> {
        let rb = self
            .request(Method::PUT, &["v1", "secrets", name])
            .json(&serde_json::json!({ "value": value }));
        Self::optional_data(self.send(rb).await?).await
    }

    /// `GET /v1/secrets`: names and times (values are never returned).
    pub async fn secret_list(&self) -> Result<Vec<SecretInfo>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "secrets"]))
            .await?;
        let env: Env<Vec<SecretInfo>> = Self::envelope(resp).await?;
        Ok(env.data.unwrap_or_default())
    }

    /// `DELETE /v1/secrets/{name}`.
    pub async fn secret_delete(&self, name: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["v1", "secrets", name]))
            .await
            .map(drop)
    }
}
