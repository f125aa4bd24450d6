//! Template calls (`/v1/templates`): create (and build), list, get, rebuild, delete.

use crate::{Client, ClientError};
use reqwest::Method;
use sbx_api_types::{Template, TemplateList, TemplateSpec};

impl Client {
    /// `POST /v1/templates`: records the template and starts its build;
    /// `wait`: returns once the build ended (READY or FAILED).
    pub async fn template_create(
        &self,
        spec: &TemplateSpec,
        wait: bool,
    ) -> Result<Template, ClientError> {
        let rb = self
            .request(Method::POST, &["v1", "templates"])
            .query(&[("wait", wait)])
            .json(spec);
        Self::data(self.send(rb).await?).await
    }

    /// `GET /v1/templates`: the tenant's templates by name.
    pub async fn template_list(&self) -> Result<Vec<Template>, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "templates"]))
            .await?;
        let list: TemplateList = Self::data(resp).await?;
        Ok(list.templates)
    }

    /// `GET /v1/templates/{name}`.
    pub async fn template_get(&self, name: &str) -> Result<Template, ClientError> {
        let resp = self
            .send(self.request(Method::GET, &["v1", "templates", name]))
            .await?;
        Self::data(resp).await
    }

    /// `POST /v1/templates/{name}/rebuild`.
    pub async fn template_rebuild(&self, name: &str, wait: bool) -> Result<Template, ClientError> {
        let rb = self
            .request(Method::POST, &["v1", "templates", name, "rebuild"])
            .query(&[("wait", wait)]);
        Self::data(self.send(rb).await?).await
    }

    /// `DELETE /v1/templates/{name}`: the template and its snapshot.
    pub async fn template_delete(&self, name: &str) -> Result<(), ClientError> {
        let rb = self.request(Method::DELETE, &["v1", "templates", name]);
        self.send(rb).await.map(drop)
    }
}
