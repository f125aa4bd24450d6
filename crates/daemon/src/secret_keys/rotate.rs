//! `sbxd rotate-secret-key`: re-encrypts every stored value under a new key.
//!
//! Each kind of stored ciphertext is a [`CiphertextSource`]; [`rotate_source`]
//! reads every value, opens it with the old keys, seals it with the new one and
//! writes it back with a compare-and-set, so that a value another node changed
//! meanwhile is read again rather than overwritten. A value already under the
//! new key is left alone, which makes a rerun (after a crash, or to catch values
//! nodes wrote with the old key during the roll-out) finish the job.

use super::{SecretKeyArgs, SecretKeysError};
use crate::service::SecretBox;
use sbx_connect::crypto::CredentialBox;
use sbx_connect::service::WEBHOOK_SECRET_SCOPE;
use sbx_secrets::{Key, KeyRing};
use sbx_store::{SecretRecord, Store};
use std::path::PathBuf;

/// How often one value is re-read after losing its compare-and-set before the
/// rotation gives up on it (a rerun picks it up).
const MAX_ATTEMPTS: usize = 10;

/// `sbxd rotate-secret-key`: re-encrypts every workspace secret under a new key.
#[derive(clap::Parser, Debug)]
#[command(name = "sbxd rotate-secret-key")]
pub struct RotateArgs {
    /// Data directory (holds the SQLite database and the default key file).
    #[arg(long, env = "SBX_DATA_DIR", default_value = "/var/lib/sbx")]
    pub data_dir: PathBuf,
    /// PostgreSQL holding the secrets, as given to sbxd (then the data dir's SQLite is not used).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// The keys the values are sealed with now, as given to sbxd.
    #[command(flatten)]
    pub keys: SecretKeyArgs,
    /// The new key (32 random bytes or their base64); it must exist.
    #[arg(long)]
    pub new_key_file: PathBuf,
}

/// One kind of stored ciphertext that a rotation re-encrypts.
pub trait CiphertextSource {
    /// One stored value as read (its identity and its ciphertext).
    type Item;
    /// What the report calls these values, e.g. `workspace secrets`.
    fn kind(&self) -> &'static str;
    /// Every stored value.
    fn list(&self) -> Result<Vec<Self::Item>, SecretKeysError>;
    /// Names one value in messages (never its content).
    fn label(&self, item: &Self::Item) -> String;
    /// The value sealed again with the current key; `None` when it already is;
    /// `Err` (why) when no key opens it.
    fn reseal(&self, item: &Self::Item) -> Result<Option<Self::Item>, String>;
    /// Writes `new` if the stored value is still `old`; false if it changed.
    fn replace(&self, old: &Self::Item, new: &Self::Item) -> Result<bool, SecretKeysError>;
    /// The stored value now, `None` if it was deleted.
    fn reread(&self, old: &Self::Item) -> Result<Option<Self::Item>, SecretKeysError>;
}

/// What a rotation did to one source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RotationReport {
    /// The source's kind.
    pub kind: &'static str,
    /// Values re-encrypted under the new key.
    pub rewritten: usize,
    /// Values already under the new key.
    pub already_current: usize,
    /// Values deleted while the rotation ran.
    pub deleted: usize,
    /// Values no key opens: (label, why). They are left as they are.
    pub unreadable: Vec<(String, String)>,
    /// Values that kept changing under the rotation: rerun it.
    pub busy: Vec<String>,
}

impl RotationReport {
    /// The one-line summary printed by the command.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} re-encrypted, {} already under the new key, {} deleted meanwhile, {} unreadable, {} still changing",
            self.kind,
            self.rewritten,
            self.already_current,
            self.deleted,
            self.unreadable.len(),
            self.busy.len()
        )
    }
}

/// Re-encrypts every value of `source` under its current key.
pub fn rotate_source<S: CiphertextSource>(source: &S) -> Result<RotationReport, SecretKeysError> {
    let mut report = RotationReport {
        kind: source.kind(),
        ..RotationReport::default()
    };
    'items: for item in source.list()? {
        let mut current = item;
        for _ in 0..MAX_ATTEMPTS {
            let new = match source.reseal(&current) {
                Ok(Some(new)) => new,
                Ok(None) => {
                    report.already_current += 1;
                    continue 'items;
                }
                Err(why) => {
                    report.unreadable.push((source.label(&current), why));
                    continue 'items;
                }
            };
            if source.replace(&current, &new)? {
                report.rewritten += 1;
                continue 'items;
            }
            // Changed meanwhile (a node wrote a new value, or another rotation
            // ran): start again from what is stored now.
            match source.reread(&current)? {
                Some(now) => current = now,
                None => {
                    report.deleted += 1;
                    continue 'items;
                }
            }
        }
        report.busy.push(source.label(&current));
    }
    Ok(report)
}

/// Workspace secrets in the main store.
pub struct WorkspaceSecrets<'a> {
    store: &'a dyn Store,
    secrets: SecretBox,
}

impl<'a> WorkspaceSecrets<'a> {
    /// The secrets of `store`, re-encrypted under `keys`' current key.
    pub fn new(store: &'a dyn Store, keys: KeyRing) -> Self {
        WorkspaceSecrets {
            store,
            secrets: SecretBox::new(keys),
        }
    }
}

impl CiphertextSource for WorkspaceSecrets<'_> {
    type Item = SecretRecord;

    fn kind(&self) -> &'static str {
        "workspace secrets"
    }

    fn list(&self) -> Result<Vec<SecretRecord>, SecretKeysError> {
        Ok(self.store.list_all_secrets()?)
    }

    fn label(&self, r: &SecretRecord) -> String {
        format!("secret {:?} of workspace {}", r.name, r.workspace)
    }

    fn reseal(&self, r: &SecretRecord) -> Result<Option<SecretRecord>, String> {
        let sealed = self.secrets.reseal(r).map_err(|e| e.to_string())?;
        Ok(sealed.map(|(nonce, ciphertext)| SecretRecord {
            nonce,
            ciphertext,
            ..r.clone()
        }))
    }

    fn replace(&self, old: &SecretRecord, new: &SecretRecord) -> Result<bool, SecretKeysError> {
        Ok(self
            .store
            .replace_secret_ciphertext(old, &new.nonce, &new.ciphertext)?)
    }

    fn reread(&self, old: &SecretRecord) -> Result<Option<SecretRecord>, SecretKeysError> {
        Ok(self.store.get_secret(&old.workspace, &old.name)?)
    }
}

/// The two calls a rotation needs from the Connect store (a trait, so that the
/// unit tests can race a stand-in against the rotation).
pub trait CredentialBlobs {
    /// Every connection's sealed credentials: (workspace, connection id, blob).
    fn credential_blobs(&self) -> Result<Vec<(String, String, Vec<u8>)>, String>;
    /// Writes `new` if the connection's credentials are still `old`; false if not.
    fn replace_credentials(
        &self,
        workspace: &str,
        connection_id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, String>;
}

impl CredentialBlobs for std::sync::Arc<dyn sbx_connect::store::Store> {
    fn credential_blobs(&self) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let blobs = sbx_connect::store::Connections::credential_blobs(self.as_ref())
            .map_err(|e| e.to_string())?;
        // Webhook signing secrets are sealed under "{connection}/webhook-secret": resealed
        // like credentials of that scope.
        let secrets = sbx_connect::store::Webhooks::webhook_secrets(self.as_ref())
            .map_err(|e| e.to_string())?;
        Ok(blobs
            .into_iter()
            .map(|b| (b.workspace, b.connection_id, b.blob))
            .chain(
                secrets
                    .into_iter()
                    .map(|(ws, conn, blob)| (ws, format!("{conn}{WEBHOOK_SECRET_SCOPE}"), blob)),
            )
            .collect())
    }

    fn replace_credentials(
        &self,
        workspace: &str,
        connection_id: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, String> {
        if let Some(conn) = connection_id.strip_suffix(WEBHOOK_SECRET_SCOPE) {
            return sbx_connect::store::Webhooks::replace_webhook_secret(
                self.as_ref(),
                workspace,
                conn,
                old,
                new,
            )
            .map_err(|e| e.to_string());
        }
        sbx_connect::store::Connections::replace_credentials(
            self.as_ref(),
            workspace,
            connection_id,
            old,
            new,
        )
        .map_err(|e| e.to_string())
    }
}

/// Connect connection credentials.
pub struct ConnectCredentials<'a, S: CredentialBlobs> {
    store: &'a S,
    crypto: CredentialBox,
}

impl<'a, S: CredentialBlobs> ConnectCredentials<'a, S> {
    /// The credentials of `store`, re-encrypted under `keys`' current key.
    pub fn new(store: &'a S, keys: KeyRing) -> Self {
        ConnectCredentials {
            store,
            crypto: CredentialBox::from_ring(keys),
        }
    }
}

impl<S: CredentialBlobs> CiphertextSource for ConnectCredentials<'_, S> {
    type Item = (String, String, Vec<u8>);

    fn kind(&self) -> &'static str {
        "Connect credentials"
    }

    fn list(&self) -> Result<Vec<Self::Item>, SecretKeysError> {
        self.store
            .credential_blobs()
            .map_err(|e| SecretKeysError::Rotation(format!("Connect store: {e}")))
    }

    fn label(&self, (workspace, id, _): &Self::Item) -> String {
        format!("credentials of connection {id} of workspace {workspace}")
    }

    fn reseal(&self, (workspace, id, blob): &Self::Item) -> Result<Option<Self::Item>, String> {
        let sealed = self
            .crypto
            .reseal(workspace, id, blob)
            .map_err(|e| e.to_string())?;
        Ok(sealed.map(|new| (workspace.clone(), id.clone(), new)))
    }

    fn replace(&self, old: &Self::Item, new: &Self::Item) -> Result<bool, SecretKeysError> {
        self.store
            .replace_credentials(&old.0, &old.1, &old.2, &new.2)
            .map_err(|e| SecretKeysError::Rotation(format!("Connect store: {e}")))
    }

    fn reread(&self, old: &Self::Item) -> Result<Option<Self::Item>, SecretKeysError> {
        // The Connect store lists only; a lost compare-and-set is rare enough.
        Ok(self
            .list()?
            .into_iter()
            .find(|(w, id, _)| *w == old.0 && *id == old.1))
    }
}

/// Runs the command on an open store: prints one line per source, and fails
/// when a value could not be re-encrypted (it stays readable with its old key only).
pub fn rotate_main(
    args: &RotateArgs,
    store: &dyn Store,
    connect: Option<&std::sync::Arc<dyn sbx_connect::store::Store>>,
) -> Result<(), SecretKeysError> {
    let old = args.keys.sources(&args.data_dir).ring(false)?;
    let new = Key::read_file(&args.new_key_file)?;
    let keys = old.rotated_to(new);
    eprintln!(
        "re-encrypting under key {} (opening with {})",
        keys.current_id(),
        keys.key_ids()
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut reports = vec![rotate_source(&WorkspaceSecrets::new(store, keys.clone()))?];
    if let Some(connect) = connect {
        reports.push(rotate_source(&ConnectCredentials::new(
            connect,
            keys.clone(),
        ))?);
    }
    let mut failed = Vec::new();
    for r in &reports {
        println!("{}", r.summary());
        for (label, why) in &r.unreadable {
            eprintln!("  unreadable: {label}: {why}");
            failed.push(label.clone());
        }
        for label in &r.busy {
            eprintln!("  still changing: {label}");
            failed.push(label.clone());
        }
    }
    if !failed.is_empty() {
        return Err(SecretKeysError::Rotation(format!(
            "{} values were not re-encrypted (listed above) and open only with the key \
             they were sealed with; keep that key as --previous-secret-key-file, fix them \
             and rerun (values already under the new key are skipped)",
            failed.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use sbx_store::SqliteStore;
    use std::cell::{Cell, RefCell};

    fn ring(byte: u8) -> KeyRing {
        KeyRing::new(Key::from_bytes([byte; 32]))
    }

    fn put(store: &dyn Store, keys: &KeyRing, workspace: &str, name: &str, value: &str) {
        let (nonce, ciphertext) = SecretBox::new(keys.clone())
            .seal(workspace, name, value)
            .expect("seal");
        store
            .put_secret(&SecretRecord {
                workspace: workspace.into(),
                name: name.into(),
                nonce,
                ciphertext,
                created_at: Utc::now(),
                updated_at: Utc::now(),
            })
            .expect("put");
    }

    fn value(store: &dyn Store, keys: &KeyRing, workspace: &str, name: &str) -> String {
        let r = store.get_secret(workspace, name).unwrap().expect("row");
        SecretBox::new(keys.clone()).open(&r).expect("opens")
    }

    #[test]
    fn every_secret_moves_to_the_new_key_and_a_rerun_does_nothing() {
        let store = SqliteStore::in_memory().unwrap();
        put(&store, &ring(1), "a/production", "X", "x1");
        put(&store, &ring(1), "b/staging", "Y", "y1");
        let rotation = ring(1).rotated_to(Key::from_bytes([2; 32]));
        // One written by a node already on the new key.
        put(&store, &rotation, "b/staging", "Z", "z1");
        let report = rotate_source(&WorkspaceSecrets::new(&store, rotation.clone())).unwrap();
        assert_eq!(
            (report.rewritten, report.already_current, report.deleted),
            (2, 1, 0),
            "{report:?}"
        );
        assert!(report.unreadable.is_empty() && report.busy.is_empty());
        // The new key alone opens everything; the old one nothing.
        for (w, n, v) in [
            ("a/production", "X", "x1"),
            ("b/staging", "Y", "y1"),
            ("b/staging", "Z", "z1"),
        ] {
            assert_eq!(value(&store, &ring(2), w, n), v);
            let r = store.get_secret(w, n).unwrap().unwrap();
            assert!(SecretBox::new(ring(1)).open(&r).is_err());
        }
        let again = rotate_source(&WorkspaceSecrets::new(&store, rotation)).unwrap();
        assert_eq!((again.rewritten, again.already_current), (0, 3));
    }

    #[test]
    fn a_secret_no_key_opens_is_reported_and_left_alone() {
        let store = SqliteStore::in_memory().unwrap();
        put(&store, &ring(1), "ws/production", "OK", "v");
        put(&store, &ring(9), "ws/production", "LOST", "w");
        let before = store.get_secret("ws/production", "LOST").unwrap();
        let report = rotate_source(&WorkspaceSecrets::new(
            &store,
            ring(1).rotated_to(Key::from_bytes([2; 32])),
        ))
        .unwrap();
        assert_eq!(report.rewritten, 1);
        assert_eq!(report.unreadable.len(), 1);
        let (label, why) = &report.unreadable[0];
        assert!(label.contains("\"LOST\""), "{label}");
        assert!(why.contains(&ring(9).current_id().to_string()), "{why}");
        assert!(!why.contains('w'.to_string().repeat(2).as_str()));
        assert_eq!(store.get_secret("ws/production", "LOST").unwrap(), before);
        assert!(
            report.summary().contains("1 re-encrypted"),
            "{}",
            report.summary()
        );
    }

    /// Secrets whose first write loses to a node writing the same secret under
    /// the old key (or deleting it) right after the rotation read it.
    struct Racing<'a> {
        inner: WorkspaceSecrets<'a>,
        store: &'a dyn Store,
        interfere: Cell<bool>,
    }

    impl CiphertextSource for Racing<'_> {
        type Item = SecretRecord;
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }
        fn list(&self) -> Result<Vec<SecretRecord>, SecretKeysError> {
            self.inner.list()
        }
        fn label(&self, r: &SecretRecord) -> String {
            self.inner.label(r)
        }
        fn reseal(&self, r: &SecretRecord) -> Result<Option<SecretRecord>, String> {
            self.inner.reseal(r)
        }
        fn replace(&self, old: &SecretRecord, new: &SecretRecord) -> Result<bool, SecretKeysError> {
            if self.interfere.replace(false) {
                put(
                    self.store,
                    &ring(1),
                    "ws/production",
                    "A",
                    "changed meanwhile",
                );
                self.store.delete_secret("ws/production", "B").unwrap();
            }
            self.inner.replace(old, new)
        }
        fn reread(&self, old: &SecretRecord) -> Result<Option<SecretRecord>, SecretKeysError> {
            self.inner.reread(old)
        }
    }

    #[test]
    fn a_value_changed_meanwhile_is_read_again_not_overwritten() {
        let store = SqliteStore::in_memory().unwrap();
        put(&store, &ring(1), "ws/production", "A", "first");
        put(&store, &ring(1), "ws/production", "B", "gone soon");
        let rotation = ring(1).rotated_to(Key::from_bytes([2; 32]));
        let racing = Racing {
            inner: WorkspaceSecrets::new(&store, rotation),
            store: &store,
            interfere: Cell::new(true),
        };
        let report = rotate_source(&racing).unwrap();
        assert_eq!((report.rewritten, report.deleted), (1, 1), "{report:?}");
        assert_eq!(
            value(&store, &ring(2), "ws/production", "A"),
            "changed meanwhile"
        );
        assert!(store.get_secret("ws/production", "B").unwrap().is_none());
    }

    /// A Connect store in memory, with the two calls of the real one.
    #[derive(Default)]
    struct FakeConnect {
        rows: RefCell<Vec<(String, String, Vec<u8>)>>,
        /// Rewritten by "another node" just before the first replace.
        interfere: RefCell<Option<Vec<u8>>>,
    }

    impl CredentialBlobs for FakeConnect {
        fn credential_blobs(&self) -> Result<Vec<(String, String, Vec<u8>)>, String> {
            Ok(self.rows.borrow().clone())
        }
        fn replace_credentials(
            &self,
            w: &str,
            id: &str,
            old: &[u8],
            new: &[u8],
        ) -> Result<bool, String> {
            let mut rows = self.rows.borrow_mut();
            if let Some(blob) = self.interfere.borrow_mut().take() {
                rows[0].2 = blob;
            }
            match rows
                .iter_mut()
                .find(|r| r.0 == w && r.1 == id && r.2 == old)
            {
                Some(r) => {
                    r.2 = new.to_vec();
                    Ok(true)
                }
                None => Ok(false),
            }
        }
    }

    #[test]
    fn connect_credentials_rotate_through_the_two_store_calls() {
        let old = CredentialBox::from_ring(ring(1));
        let fake = FakeConnect::default();
        for id in ["c1", "c2"] {
            let blob = old
                .seal("ws", id, format!("{{\"k\":\"{id}\"}}").as_bytes())
                .unwrap();
            fake.rows.borrow_mut().push(("ws".into(), id.into(), blob));
        }
        *fake.interfere.borrow_mut() = Some(old.seal("ws", "c1", b"{\"k\":\"new\"}").unwrap());
        let rotation = ring(1).rotated_to(Key::from_bytes([2; 32]));
        let report = rotate_source(&ConnectCredentials::new(&fake, rotation.clone())).unwrap();
        assert_eq!(
            (report.kind, report.rewritten),
            ("Connect credentials", 2),
            "{report:?}"
        );
        let new = CredentialBox::from_ring(ring(2));
        let rows = fake.rows.borrow().clone();
        assert_eq!(
            new.open("ws", "c1", &rows[0].2).unwrap(),
            b"{\"k\":\"new\"}"
        );
        assert_eq!(new.open("ws", "c2", &rows[1].2).unwrap(), b"{\"k\":\"c2\"}");
        let again = rotate_source(&ConnectCredentials::new(&fake, rotation)).unwrap();
        assert_eq!((again.rewritten, again.already_current), (0, 2));
    }

    #[test]
    fn webhook_secrets_rotate_with_the_connect_credentials() {
        use sbx_connect::store::Location;
        let dir = tempfile::tempdir().unwrap();
        let store = sbx_connect::store::open(&Location::Sqlite(dir.path().join("c.db"))).unwrap();
        let scope = format!("c1{WEBHOOK_SECRET_SCOPE}");
        let sealed = CredentialBox::from_ring(ring(1))
            .seal("ws", &scope, b"whsec_x")
            .unwrap();
        let settings = sbx_connect::store::WebhookSettings {
            scheme: sbx_connect::model::SignatureScheme::Standard,
            signature_header: None,
            signature_prefix: None,
            id_header: None,
            secret: sealed,
        };
        store.set_webhooks("ws", "c1", &settings, &[]).unwrap();
        let rotation = ring(1).rotated_to(Key::from_bytes([2; 32]));
        let report = rotate_source(&ConnectCredentials::new(&store, rotation)).unwrap();
        assert_eq!(report.rewritten, 1, "{report:?}");
        let now = store.webhook_settings("ws", "c1").unwrap().unwrap().secret;
        let new = CredentialBox::from_ring(ring(2));
        assert_eq!(new.open("ws", &scope, &now).unwrap(), b"whsec_x");
    }
}
