//! Secret rows on PostgreSQL (the [`crate::Store`] methods delegate here).

use super::rows::{self, ms, SECRET_COLUMNS};
use super::PostgresStore;
use crate::{SecretRecord, StoreError};

impl PostgresStore {
    pub(super) fn put_secret_row(&self, record: &SecretRecord) -> Result<(), StoreError> {
        let r = record.clone();
        self.pool.run(move |c| {
            c.execute(
                &format!(
                    "INSERT INTO secrets ({SECRET_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6) \
                     ON CONFLICT (workspace, name) DO UPDATE SET nonce = EXCLUDED.nonce, \
                     ciphertext = EXCLUDED.ciphertext, updated_at_ms = EXCLUDED.updated_at_ms"
                ),
                &[
                    &r.workspace,
                    &r.name,
                    &r.nonce,
                    &r.ciphertext,
                    &ms(r.created_at),
                    &ms(r.updated_at),
                ],
            )?;
            Ok(())
        })
    }

    pub(super) fn get_secret_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Option<SecretRecord>, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            c.query_opt(
                &format!("SELECT {SECRET_COLUMNS} FROM secrets WHERE workspace = $1 AND name = $2"),
                &[&workspace, &name],
            )?
            .map(|row| rows::secret(&row))
            .transpose()
        })
    }

    pub(super) fn list_secrets_row(
        &self,
        workspace: &str,
    ) -> Result<Vec<SecretRecord>, StoreError> {
        let workspace = workspace.to_string();
        self.pool.run(move |c| {
            // COLLATE "C": byte order, as SQLite's default BINARY collation sorts.
            c.query(
                &format!(
                    "SELECT {SECRET_COLUMNS} FROM secrets WHERE workspace = $1 ORDER BY name COLLATE \"C\""
                ),
                &[&workspace],
            )?
            .iter()
            .map(rows::secret)
            .collect()
        })
    }

    pub(super) fn delete_secret_row(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<bool, StoreError> {
        let (workspace, name) = (workspace.to_string(), name.to_string());
        self.pool.run(move |c| {
            Ok(c.execute(
                "DELETE FROM secrets WHERE workspace = $1 AND name = $2",
                &[&workspace, &name],
            )? > 0)
        })
    }

    pub(super) fn list_all_secrets_row(&self) -> Result<Vec<SecretRecord>, StoreError> {
        self.pool.run(move |c| {
            c.query(
                &format!(
                    "SELECT {SECRET_COLUMNS} FROM secrets \
                     ORDER BY workspace COLLATE \"C\", name COLLATE \"C\""
                ),
                &[],
            )?
            .iter()
            .map(rows::secret)
            .collect()
        })
    }

    pub(super) fn replace_secret_ciphertext_row(
        &self,
        current: &SecretRecord,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<bool, StoreError> {
        let current = current.clone();
        let (nonce, ciphertext) = (nonce.to_vec(), ciphertext.to_vec());
        self.pool.run(move |c| {
            Ok(c.execute(
                "UPDATE secrets SET nonce = $1, ciphertext = $2 \
                 WHERE workspace = $3 AND name = $4 AND nonce = $5 AND ciphertext = $6",
                &[
                    &nonce,
                    &ciphertext,
                    &current.workspace,
                    &current.name,
                    &current.nonce,
                    &current.ciphertext,
                ],
            )? > 0)
        })
    }
}
