//! `sbx connect dev DIR --origin URL --auth ...`: the package author's loop. Uploads
//! the directory as a dev version (`VERSION-dev.HASH` of its files, so that an
//! unchanged directory is the same version and its build is reused), builds it,
//! replaces the connection `dev NAME` with a new one, runs `verify` and one sync,
//! and prints their logs and the records committed.

use super::args::DevCommand;
use super::{credentials_from, log_line, parse_config, stdin_secret, wait_run};
use crate::tarball;
use anyhow::{bail, Context};
use sbx_client::connect::{CreateConnection, Run};
use sbx_client::Client;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a build is polled.
const POLL: Duration = Duration::from_secs(1);

/// 64-bit FNV-1a: a stable fingerprint of the packed files (not a security boundary:
/// the server stores what is uploaded whatever its version says).
fn fingerprint(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// `version` (its build metadata dropped) with a `dev.HASH` pre-release part.
pub fn dev_version(version: &str, hash: &str) -> String {
    let base = version.split('+').next().unwrap_or(version);
    if base.contains('-') {
        format!("{base}.dev.{hash}")
    } else {
        format!("{base}-dev.{hash}")
    }
}

/// The tarball of `dir` as a dev version: (name, dev version, tarball).
fn dev_tarball(dir: &Path) -> anyhow::Result<(String, String, Vec<u8>)> {
    let read_json = |file: &str| -> anyhow::Result<Option<Value>> {
        let path = dir.join(file);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Ok(Some(value))
    };
    let mut manifest = read_json("package.json")?
        .with_context(|| format!("{} has no package.json", dir.display()))?;
    let text = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (Some(name), Some(version)) = (text("name"), text("version")) else {
        bail!("package.json needs \"name\" and \"version\"");
    };
    let dev = dev_version(&version, &fingerprint(&tarball::pack_dir(dir)?));
    manifest["version"] = Value::String(dev.clone());
    let mut replaced = vec![("package.json", serde_json::to_vec_pretty(&manifest)?)];
    // npm ci compares the lockfile's root with package.json.
    if let Some(mut lock) = read_json("package-lock.json")? {
        lock["version"] = Value::String(dev.clone());
        if let Some(root) = lock
            .pointer_mut("/packages/")
            .and_then(Value::as_object_mut)
        {
            root.insert("version".into(), Value::String(dev.clone()));
        }
        replaced.push(("package-lock.json", serde_json::to_vec_pretty(&lock)?));
    }
    Ok((name, dev, tarball::pack_dir_with(dir, &replaced)?))
}

/// Runs the loop; exit code 0 when the build, `verify` and the sync succeeded.
pub async fn dev(c: &Client, a: DevCommand) -> anyhow::Result<u8> {
    let Some(creds) = credentials_from(&a.credentials, &mut stdin_secret)? else {
        bail!("--auth is required (api-key, bearer, basic, oauth2 or none)");
    };
    let config = parse_config(&a.config)?;
    let (name, version, tgz) = dev_tarball(&a.dir)?;
    let up = c.connect_upload_package(tgz).await?;
    eprintln!(
        "== package {name}@{version} {}",
        if up.created { "uploaded" } else { "unchanged" }
    );

    // A version is built once: an unchanged directory reuses its successful build.
    let mut built = c.connect_version(&name, &version).await?;
    if built.definition.is_none() {
        let mut b = c.connect_build_start(&name, &version).await?;
        eprintln!("== build {} ...", b.id);
        let deadline = Instant::now() + a.timeout;
        while !b.is_finished() {
            if Instant::now() >= deadline {
                bail!("build {} still {} after {:?}", b.id, b.status, a.timeout);
            }
            tokio::time::sleep(POLL).await;
            b = c.connect_build(&b.id).await?;
        }
        if b.status != "succeeded" {
            eprint!("{}", b.log);
            eprintln!(
                "== build {}: {} {}",
                b.id,
                b.status,
                b.failure.as_deref().unwrap_or("")
            );
            return Ok(1);
        }
        eprintln!("== build {}: {}", b.id, b.status);
        built = c.connect_version(&name, &version).await?;
    } else {
        eprintln!(
            "== build: reused ({})",
            built.build_id.as_deref().unwrap_or("-")
        );
    }
    let syncs: Vec<String> = built
        .definition
        .as_ref()
        .and_then(|d| d.get("syncs"))
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let sync = match a.sync {
        Some(s) if syncs.contains(&s) => s,
        Some(s) => bail!(
            "the package has no sync {s:?} (it has: {})",
            syncs.join(", ")
        ),
        None => syncs
            .first()
            .cloned()
            .context("the package defines no sync")?,
    };

    // The dev connection starts afresh each time: no records or checkpoint of an
    // earlier version get in the way.
    let conn_name = format!("dev {name}");
    for old in c.connect_connections().await? {
        if old.name == conn_name {
            c.connect_connection_delete(&old.id).await?;
        }
    }
    let conn = c
        .connect_connection_create(&CreateConnection {
            name: conn_name,
            package: name.clone(),
            version: version.clone(),
            config,
            origin: a.origin,
            credentials: creds,
            schedule_interval_seconds: None,
        })
        .await?;
    eprintln!("== connection {} ({})", conn.id, conn.name);

    let verify = c.connect_test(&conn.id).await?;
    if !print_run(c, "verify", &verify).await? {
        return Ok(1);
    }
    let run = c.connect_run_sync(&conn.id, &sync).await?;
    let run = wait_run(c, run, a.timeout).await?;
    if !print_run(c, &format!("sync {sync}"), &run).await? {
        return Ok(1);
    }
    println!(
        "== records of {sync} (first {} of {} committed)",
        a.records.min(run.records_committed),
        run.records_committed
    );
    let mut cursor: Option<String> = None;
    let mut printed = 0u64;
    while printed < a.records {
        let page = c
            .connect_records(&conn.id, &sync, Some(1000), cursor.as_deref())
            .await?;
        for r in page.records.iter().take((a.records - printed) as usize) {
            println!("{}", serde_json::to_string(r)?);
            printed += 1;
        }
        match page.next_cursor {
            Some(next) if printed < a.records => cursor = Some(next),
            _ => break,
        }
    }
    Ok(0)
}

/// Prints a finished run's outcome and its whole log; whether it succeeded.
async fn print_run(c: &Client, what: &str, run: &Run) -> anyhow::Result<bool> {
    let ok = run.status == "succeeded";
    let failure = match (&run.failure_category, &run.failure_kind) {
        (Some(cat), kind) => format!(": {cat} {}", kind.as_deref().unwrap_or("")),
        _ => String::new(),
    };
    println!(
        "== {what}: {} ({} records){failure}",
        run.status, run.records_committed
    );
    let mut cursor: Option<String> = None;
    loop {
        let (lines, page) = c
            .connect_run_logs(&run.id, Some(1000), cursor.as_deref())
            .await?;
        for l in lines {
            println!("{}", log_line(&l.ts, &l.level, &l.message));
        }
        match page.cursor.filter(|_| page.has_more) {
            Some(next) => cursor = Some(next),
            None => return Ok(ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_versions_are_prereleases_of_the_version() {
        assert_eq!(dev_version("0.1.0", "ab12"), "0.1.0-dev.ab12");
        assert_eq!(dev_version("1.0.0-beta.2", "ab12"), "1.0.0-beta.2.dev.ab12");
        assert_eq!(dev_version("1.0.0+build.7", "ab12"), "1.0.0-dev.ab12");
        assert_eq!(fingerprint(b""), "cbf29ce484222325");
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }

    #[test]
    fn the_dev_tarball_names_the_dev_version_and_follows_the_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = super::super::init::init("crm", Some(&tmp.path().join("crm"))).unwrap();
        let (name, v1, _) = dev_tarball(&dir).unwrap();
        assert_eq!(name, "crm");
        assert!(v1.starts_with("0.1.0-dev."), "{v1}");
        assert_eq!(
            dev_tarball(&dir).unwrap().1,
            v1,
            "unchanged files, same version"
        );
        std::fs::write(dir.join("src/extra.mjs"), "export {};\n").unwrap();
        let (_, v2, tgz) = dev_tarball(&dir).unwrap();
        assert_ne!(v2, v1, "a changed file is a new version");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz.as_slice()));
        let mut manifests = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut e = entry.unwrap();
            let path = e.path().unwrap().display().to_string();
            if path.starts_with("package") {
                let v: Value = serde_json::from_reader(&mut e).unwrap();
                manifests.push((path, v));
            }
        }
        assert_eq!(manifests.len(), 2);
        for (path, v) in manifests {
            assert_eq!(v["version"], v2.as_str(), "{path}");
        }
    }
}
