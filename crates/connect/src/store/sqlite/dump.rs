//! Export and import of every row (see [`crate::store::Dump`]).

use crate::store::dump::{mismatch, Kind, Value, TABLES};
use crate::store::{Dump, StoreError};
use rusqlite::types::Value as Sql;
use rusqlite::Connection;

fn read(kind: Kind, v: Sql, table: &str, column: &str) -> Result<Value, StoreError> {
    Ok(match (kind, v) {
        (Kind::OptText | Kind::OptInt | Kind::OptTime, Sql::Null) => Value::Null,
        (Kind::Text | Kind::OptText, Sql::Text(t)) => Value::Text(t),
        (Kind::Int | Kind::OptInt, Sql::Integer(i)) => Value::Int(i),
        (Kind::Time | Kind::OptTime, Sql::Integer(i)) => Value::Time(i),
        (Kind::Blob, Sql::Blob(b)) => Value::Blob(b),
        _ => return Err(mismatch(table, column)),
    })
}

fn write(v: &Value) -> Sql {
    match v {
        Value::Null => Sql::Null,
        Value::Int(i) | Value::Time(i) => Sql::Integer(*i),
        Value::Text(t) => Sql::Text(t.clone()),
        Value::Blob(b) => Sql::Blob(b.clone()),
    }
}

pub(super) fn export(conn: &Connection) -> Result<Dump, StoreError> {
    // One read transaction: a consistent picture even while sbxd writes.
    let tx = conn.unchecked_transaction()?;
    let mut tables = Vec::with_capacity(TABLES.len());
    for t in TABLES {
        let columns: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
        let mut stmt = tx.prepare(&format!(
            "SELECT {} FROM {} ORDER BY {}",
            columns.join(", "),
            t.name,
            t.order
        ))?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut values = Vec::with_capacity(t.columns.len());
            for (i, (column, kind)) in t.columns.iter().enumerate() {
                values.push(read(*kind, row.get(i)?, t.name, column)?);
            }
            out.push(values);
        }
        tables.push(out);
    }
    Ok(Dump { tables })
}

pub(super) fn import(conn: &mut Connection, dump: &Dump) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for t in TABLES {
        let used: bool = tx.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM {})", t.name),
            [],
            |r| r.get(0),
        )?;
        if used {
            return Err(StoreError::Conflict(
                format!("the target Connect store already holds {} rows", t.name).into(),
            ));
        }
    }
    for (t, rows) in TABLES.iter().zip(&dump.tables) {
        let columns: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
        let marks = vec!["?"; columns.len()].join(", ");
        let mut stmt = tx.prepare(&format!(
            "INSERT INTO {} ({}) VALUES ({marks})",
            t.name,
            columns.join(", ")
        ))?;
        for row in rows {
            stmt.execute(rusqlite::params_from_iter(row.iter().map(write)))?;
        }
    }
    tx.commit()?;
    Ok(())
}
