//! The markdown the run prints: the header lines, the table in scenario order, and the notes.

use crate::cli::SCENARIOS;
use crate::stats::{Failure, TABLE_HEADER};
use crate::store::STORE_TABLE_HEADER;
use crate::warm::EXEC_BLOCK;
use crate::Bench;

/// The report: header, table, notes.
pub fn report(b: &Bench, machine: &str, url: &str, started: &str, interrupted: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("Machine: {machine}. Date: {started}.\n\n"));
    let interrupted = if interrupted {
        " **Interrupted: partial results.**"
    } else {
        ""
    };
    if !b.rows.is_empty() {
        out.push_str(&format!(
            "sbxd at {url}; {} timed iterations per scenario ({} for 100 MiB transfers) after {} untimed warm-up; sbx and raw iterations alternate.{interrupted}\n\n",
            b.n,
            b.big,
            b.warm,
        ));
        out.push_str(TABLE_HEADER);
        out.push('\n');
        for name in SCENARIOS {
            if let Some(row) = b.rows.get(name) {
                out.push_str(&row.markdown());
                out.push('\n');
            }
        }
        out.push('\n');
    }
    if !b.store_rows.is_empty() {
        out.push_str(&format!(
            "Store: the same operations on two sbxd that differ only in their store, SQLite \
             (the file in the data dir) and PostgreSQL (`--database-url`); {} timed \
             create/destroy iterations and {} timed execs per store after {} untimed \
             warm-up, the stores in turn.{interrupted}\n\n",
            b.store_n, b.store_execs, b.warm
        ));
        out.push_str(STORE_TABLE_HEADER);
        out.push('\n');
        for row in &b.store_rows {
            out.push_str(&row.markdown());
            out.push('\n');
        }
        out.push('\n');
    }
    if !b.cluster_rows.is_empty() {
        out.push_str(&format!(
            "Cluster: two sbxd nodes of one cluster on the same PostgreSQL and host; {} timed \
             `true` execs on one sandbox through the node that runs it and through the other \
             node (which forwards), in alternating blocks.\n\n",
            b.store_execs
        ));
        out.push_str(crate::store::CLUSTER_TABLE_HEADER);
        out.push('\n');
        for row in &b.cluster_rows {
            out.push_str(&row.markdown());
            out.push('\n');
        }
        out.push('\n');
    }
    if let Some(row) = &b.cluster_clone_row {
        out.push_str(&format!(
            "Clone with a cold vs a warm snapshot cache: snapshots in object storage (s3s-fs on \
             loopback); each of {} iterations takes a new snapshot of a sandbox on node A \
             (32 MiB written to its /tmp first) and clones it through node B onto B (A drained): \
             first with B's cache empty (fetched from S3 and verified), then with B's cache \
             holding it. Until RUNNING.\n\n",
            b.cluster_clone_n
        ));
        out.push_str(crate::cluster::CloneRow::HEADER);
        out.push('\n');
        out.push_str(&row.markdown());
        out.push_str("\n\n");
    }
    if let Some(row) = &b.cluster_create_row {
        out.push_str(&format!(
            "Create throughput: {} creates (1 vCPU / 1 GiB, until RUNNING) from {} concurrent \
             clients, against one node (the other two drained) and against three nodes (client i \
             talks to node i mod 3; placement spreads). All nodes share this machine's cores: a \
             report, no target.\n\n",
            row.count, row.clients
        ));
        out.push_str(crate::cluster::CreateRow::HEADER);
        out.push('\n');
        out.push_str(&row.markdown());
        out.push_str("\n\n");
    }
    let mut notes: Vec<String> = Vec::new();
    let sbx_vs_raw: Vec<String> = vec![
        "create: sbx = POST /v2/sandboxes {vcpu 1, memoryMb 1024} until RUNNING (201, or 202 then \
         GET every poll interval); it includes sbxd's agent handshake. raw = write the same OCI \
         bundle (SpecBuilder, agent dir bound at /.sbx, PID 1 `sbx-agent init`) + `runsc run \
         --detach` + `runsc state` until running. destroy: DELETE until TERMINATED vs `runsc \
         delete --force`."
            .into(),
        format!(
            "exec: POST .../exec `[\"true\"]` on a warm sandbox vs `runsc exec <cid> /bin/true`; \
             the sides alternate in blocks of {EXEC_BLOCK} timed execs, each block led by one \
             untimed exec (what a raw exec leaves running slowed the next sbx exec)."
        ),
        "Transfers: MB = 10^6 bytes; each throughput cell is the rate at that latency percentile \
         (so p95 is the slower tail); the ratio is sbx MB/s ÷ raw MB/s. Raw = `runsc exec sh -c \
         'cat > /tmp/x'` fed from memory / `runsc exec cat /tmp/x`."
            .into(),
    ];
    if !b.rows.is_empty() {
        notes.extend(sbx_vs_raw);
        notes.extend(b.notes.iter().cloned());
    }
    if !b.store_rows.is_empty() {
        notes.push(
            "store-*: create = POST /v2/sandboxes until RUNNING, destroy = DELETE until \
             TERMINATED (polled every 1 ms), exec = POST .../exec `[\"true\"]` on one warm \
             sandbox per store in alternating blocks; the difference is of the p50s, its \
             interval a bootstrap (2000 resamples of each side). Target from issue 14: \
             PostgreSQL adds at most 2 ms to a create (met when the whole interval is below) and nothing measurable (the interval \
             reaches 0) to an exec."
                .into(),
        );
        notes.push(
            "store-create-path: the store calls of one create (admission's read of the \
             sandboxes holding capacity, the insert, the compare-and-set to RUNNING), timed \
             in-process through AsyncStore as sbxd makes them, on a fresh SQLite file and on \
             the same PostgreSQL (fsync on); the sandbox is then ended untimed. store-create \
             times a whole boot, whose spread hides a 2 ms difference; this row isolates what \
             a store can add to a create."
                .into(),
        );
    }
    let sides = b
        .rows
        .values()
        .flat_map(|r| {
            [
                (r.name.as_str(), "sbx", &r.sbx),
                (r.name.as_str(), "raw", &r.raw),
            ]
        })
        .chain(b.store_rows.iter().flat_map(|r| {
            [
                (r.name, "SQLite", &r.sqlite),
                (r.name, "PostgreSQL", &r.postgres),
            ]
        }))
        .chain(b.cluster_rows.iter().flat_map(|r| {
            [
                (r.name, "its node", &r.sqlite),
                (r.name, "another node", &r.postgres),
            ]
        }));
    for (name, side, s) in sides {
        if let Some(Failure::Error(e)) = &s.failure {
            let e: String = e.replace('\n', " ").chars().take(400).collect();
            notes.push(format!("**{name} ({side}) error**: {e}"));
        }
    }
    for n in notes {
        out.push_str(&format!("- {n}\n"));
    }
    out
}
