//! `state` and `list`.

use serde::de::DeserializeOwned;

use crate::{Argv, ContainerState, ContainerSummary, Error, Result, Runsc};

/// Parses JSON stdout of a successful command into `T`.
fn parse<T: DeserializeOwned>(argv: &Argv, stdout: &[u8]) -> Result<T> {
    serde_json::from_slice(stdout).map_err(|source| Error::Parse {
        argv: argv.display(),
        source,
        stdout: String::from_utf8_lossy(stdout).into_owned(),
    })
}

impl Runsc {
    /// `runsc [global] state ID`. A missing container is
    /// [`Error::NotFound`]. The status of a sandbox whose processes were
    /// killed is refreshed by runsc (it reports `stopped`).
    pub async fn state(&self, id: &str) -> Result<ContainerState> {
        self.guard(id)?;
        let mut a = self.argv(None);
        a.arg("state").arg(id);
        let out = self.checked(&a, Some(id)).await?;
        let state: ContainerState = parse(&a, &out.stdout)?;
        if state.id != id {
            // runsc matched another container by prefix.
            return Err(Error::NotFound { id: id.to_string() });
        }
        Ok(state)
    }

    /// `runsc [global] list --format=json`: every container under the root.
    /// runsc prints `null` for an empty root; that is an empty list.
    pub async fn list(&self) -> Result<Vec<ContainerSummary>> {
        let mut a = self.argv(None);
        a.arg("list").arg("--format=json");
        let out = self.checked(&a, None).await?;
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let list: Option<Vec<ContainerSummary>> = parse(&a, &out.stdout)?;
        Ok(list.unwrap_or_default())
    }
}
