//! Export and import of every row (see [`crate::store::Dump`]).

use crate::store::dump::{mismatch, Kind, Table, Value, TABLES};
use crate::store::{Dump, StoreError};
use chrono::{DateTime, Utc};
use postgres::types::ToSql;
use postgres::{Client, Row};

/// Rows per INSERT: few round trips, far below PostgreSQL's 65,535 parameters.
const CHUNK: usize = 500;

fn read(row: &Row, i: usize, kind: Kind) -> Result<Value, StoreError> {
    let time = |t: DateTime<Utc>| Value::Time(t.timestamp_millis());
    Ok(match kind {
        Kind::Text => Value::Text(row.try_get(i)?),
        Kind::OptText => row
            .try_get::<_, Option<String>>(i)?
            .map_or(Value::Null, Value::Text),
        Kind::Int => Value::Int(row.try_get(i)?),
        Kind::OptInt => row
            .try_get::<_, Option<i64>>(i)?
            .map_or(Value::Null, Value::Int),
        Kind::Blob => Value::Blob(row.try_get(i)?),
        Kind::Time => time(row.try_get(i)?),
        Kind::OptTime => row
            .try_get::<_, Option<DateTime<Utc>>>(i)?
            .map_or(Value::Null, time),
    })
}

fn param(t: &Table, i: usize, v: &Value) -> Result<Box<dyn ToSql + Sync>, StoreError> {
    let (column, kind) = t.columns[i];
    let time = |ms: i64| {
        DateTime::<Utc>::from_timestamp_millis(ms).ok_or_else(|| mismatch(t.name, column))
    };
    Ok(match (kind, v) {
        (Kind::OptText, Value::Null) => Box::new(None::<String>),
        (Kind::OptInt, Value::Null) => Box::new(None::<i64>),
        (Kind::OptTime, Value::Null) => Box::new(None::<DateTime<Utc>>),
        (Kind::Text | Kind::OptText, Value::Text(s)) => Box::new(s.clone()),
        (Kind::Int | Kind::OptInt, Value::Int(n)) => Box::new(*n),
        (Kind::Blob, Value::Blob(b)) => Box::new(b.clone()),
        (Kind::Time | Kind::OptTime, Value::Time(ms)) => Box::new(time(*ms)?),
        _ => return Err(mismatch(t.name, column)),
    })
}

pub(super) fn export(client: &mut Client) -> Result<Dump, StoreError> {
    // One snapshot for every table: a consistent picture even while sbxd writes.
    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?;
    let mut tables = Vec::with_capacity(TABLES.len());
    for t in TABLES {
        let columns: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
        let rows = tx.query(
            &format!(
                "SELECT {} FROM connect_{} ORDER BY {}",
                columns.join(", "),
                t.name,
                t.order
            ),
            &[],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut values = Vec::with_capacity(t.columns.len());
            for (i, (_, kind)) in t.columns.iter().enumerate() {
                values.push(read(row, i, *kind)?);
            }
            out.push(values);
        }
        tables.push(out);
    }
    tx.commit()?;
    Ok(Dump { tables })
}

pub(super) fn import(client: &mut Client, dump: &Dump) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    for t in TABLES {
        // A lock per table: a Connect write meanwhile (another sbxd) cannot slip in.
        tx.batch_execute(&format!(
            "LOCK TABLE connect_{} IN SHARE ROW EXCLUSIVE MODE",
            t.name
        ))?;
        let used: bool = tx
            .query_one(
                &format!("SELECT EXISTS (SELECT 1 FROM connect_{})", t.name),
                &[],
            )?
            .try_get(0)?;
        if used {
            return Err(StoreError::Conflict(
                format!("the target Connect store already holds {} rows", t.name).into(),
            ));
        }
    }
    for (t, rows) in TABLES.iter().zip(&dump.tables) {
        let columns: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
        for chunk in rows.chunks(CHUNK) {
            let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::new();
            let mut tuples = Vec::with_capacity(chunk.len());
            for row in chunk {
                if row.len() != t.columns.len() {
                    return Err(mismatch(t.name, "*"));
                }
                let mut marks = Vec::with_capacity(row.len());
                for (i, v) in row.iter().enumerate() {
                    params.push(param(t, i, v)?);
                    marks.push(format!("${}", params.len()));
                }
                tuples.push(format!("({})", marks.join(", ")));
            }
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            tx.execute(
                &format!(
                    "INSERT INTO connect_{} ({}) VALUES {}",
                    t.name,
                    columns.join(", "),
                    tuples.join(", ")
                ),
                &refs,
            )?;
        }
        // Rows came with their ids: new rows continue after the highest.
        if let Some(serial) = t.serial {
            tx.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence('connect_{0}', '{serial}'),
                                   COALESCE(MAX({serial}), 0) + 1, false) FROM connect_{0}",
                    t.name
                ),
                &[],
            )?;
        }
    }
    tx.commit()?;
    Ok(())
}
