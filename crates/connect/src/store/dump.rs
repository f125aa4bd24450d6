//! Every Connect row of a store, to copy a single-node SQLite store into PostgreSQL
//! (`sbxd migrate-store`). Rows keep their ids and sequence numbers (record seqs are
//! readers' cursors), credentials stay sealed as they are, and times keep their
//! milliseconds.

use super::{Store, StoreError};

/// The type of a column, as both backends store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Text, never null.
    Text,
    /// Text or null.
    OptText,
    /// A 64-bit integer, never null.
    Int,
    /// A 64-bit integer or null.
    OptInt,
    /// Bytes (sealed credentials).
    Blob,
    /// A time (SQLite: ms since the epoch; PostgreSQL: timestamptz), never null.
    Time,
    /// A time or null.
    OptTime,
}

/// One table: its name without the PostgreSQL prefix, columns, and the order rows are read in.
#[derive(Debug)]
pub(crate) struct Table {
    /// Name (PostgreSQL: `connect_` + name).
    pub name: &'static str,
    /// Columns and their kinds.
    pub columns: &'static [(&'static str, Kind)],
    /// ORDER BY of the export (keeps sequences in order).
    pub order: &'static str,
    /// The column a PostgreSQL sequence fills, if any.
    pub serial: Option<&'static str>,
}

use Kind::*;

/// Every Connect table, parents first.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "packages",
        columns: &[("workspace", Text), ("name", Text), ("created_at", Time)],
        order: "workspace, name",
        serial: None,
    },
    Table {
        name: "package_versions",
        columns: &[
            ("workspace", Text),
            ("name", Text),
            ("version", Text),
            ("sha256", Text),
            ("size", Int),
            ("entry", Text),
            ("created_at", Time),
            ("build_id", OptText),
            ("definition", OptText),
        ],
        order: "workspace, name, version",
        serial: None,
    },
    Table {
        name: "builds",
        columns: &[
            ("id", Text),
            ("workspace", Text),
            ("name", Text),
            ("version", Text),
            ("status", Text),
            ("log", Text),
            ("artifact_dir", OptText),
            ("failure", OptText),
            ("created_at", Time),
            ("finished_at", OptTime),
        ],
        order: "id",
        serial: None,
    },
    Table {
        name: "connections",
        columns: &[
            ("id", Text),
            ("workspace", Text),
            ("name", Text),
            ("package", Text),
            ("version", Text),
            ("config", Text),
            ("origin", Text),
            ("auth_kind", Text),
            ("credentials", Blob),
            ("status", Text),
            ("schedule_secs", OptInt),
            ("created_at", Time),
            ("updated_at", Time),
        ],
        order: "id",
        serial: None,
    },
    Table {
        name: "oauth_pending",
        columns: &[
            ("state", Text),
            ("workspace", Text),
            ("connection_id", Text),
            ("verifier", Text),
            ("redirect_uri", Text),
            ("created_at", Time),
        ],
        order: "state",
        serial: None,
    },
    Table {
        name: "runs",
        columns: &[
            ("seq", Int),
            ("id", Text),
            ("workspace", Text),
            ("connection_id", OptText),
            ("package", Text),
            ("version", Text),
            ("kind", Text),
            ("sync", OptText),
            ("status", Text),
            ("attempt", Int),
            ("created_at", Time),
            ("started_at", OptTime),
            ("finished_at", OptTime),
            ("records_committed", Int),
            ("failure_category", OptText),
            ("failure_kind", OptText),
            ("result", OptText),
        ],
        order: "seq",
        serial: Some("seq"),
    },
    Table {
        name: "logs",
        columns: &[
            ("id", Int),
            ("workspace", Text),
            ("run_id", Text),
            ("connection_id", OptText),
            ("ts", Time),
            ("level", Text),
            ("message", Text),
        ],
        order: "id",
        serial: Some("id"),
    },
    Table {
        name: "sync_state",
        columns: &[
            ("id", Int),
            ("workspace", Text),
            ("connection_id", Text),
            ("sync", Text),
            ("checkpoint", OptText),
            ("updated_at", Time),
        ],
        order: "id",
        serial: Some("id"),
    },
    Table {
        name: "records",
        columns: &[
            ("seq", Int),
            ("dataset", Int),
            ("key", OptText),
            ("data", Text),
        ],
        order: "seq",
        serial: Some("seq"),
    },
    Table {
        name: "webhook_settings",
        columns: &[
            ("workspace", Text),
            ("connection_id", Text),
            ("scheme", Text),
            ("signature_header", OptText),
            ("signature_prefix", OptText),
            ("id_header", OptText),
            ("secret", Blob),
            ("updated_at", Time),
        ],
        order: "workspace, connection_id",
        serial: None,
    },
    Table {
        name: "webhook_tokens",
        columns: &[
            ("token_hash", Text),
            ("workspace", Text),
            ("connection_id", Text),
            ("webhook", Text),
            ("created_at", Time),
        ],
        order: "token_hash",
        serial: None,
    },
    Table {
        name: "webhook_deliveries",
        columns: &[
            ("seq", Int),
            ("id", Text),
            ("workspace", Text),
            ("connection_id", Text),
            ("webhook", Text),
            ("sender_id", Text),
            ("status", Text),
            ("attempts", Int),
            ("body", Blob),
            ("headers", Text),
            ("received_at", Time),
            ("next_attempt_at", Time),
            ("finished_at", OptTime),
            ("records_committed", Int),
            ("failure_category", OptText),
            ("failure_kind", OptText),
            ("run_id", OptText),
        ],
        order: "seq",
        serial: Some("seq"),
    },
];

/// One stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
    /// A time, ms since the epoch.
    Time(i64),
}

/// Every row of every Connect table, in [`TABLES`] order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dump {
    /// Rows per table, in [`TABLES`] order; each row in its table's column order.
    pub(crate) tables: Vec<Vec<Vec<Value>>>,
}

impl Dump {
    /// Rows in all tables.
    pub fn rows(&self) -> usize {
        self.tables.iter().map(Vec::len).sum()
    }
}

/// A row's value that does not fit its column.
pub(crate) fn mismatch(table: &str, column: &str) -> StoreError {
    StoreError::corrupt(format!("{table}.{column}: value does not fit the column"))
}

/// Copies every Connect row of `from` into `to`, which must hold none yet (`Conflict`
/// otherwise); the rows are written in one transaction on `to`. Returns how many.
///
/// The whole store is held in memory while it is copied.
pub fn copy_store(from: &dyn Store, to: &dyn Store) -> Result<usize, StoreError> {
    let dump = from.export()?;
    to.import(&dump)?;
    Ok(dump.rows())
}
