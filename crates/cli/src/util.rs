//! Pure helpers: argument parsing and output formatting.

use std::time::Duration;

/// Parses `K=V` for `-e`. A bare `K` takes its value from the local environment, as `docker -e` does.
pub fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some(("", _)) => Err(format!("{s:?}: the variable name is empty")),
        Some((k, v)) => Ok((k.to_string(), v.to_string())),
        None if s.is_empty() => Err("empty environment entry".into()),
        None => std::env::var(s)
            .map(|v| (s.to_string(), v))
            .map_err(|_| format!("{s:?}: expected K=V (and {s} is not set locally)")),
    }
}

/// Parses `--volume NAME:PATH[:ro]`. The server checks the path further
/// (absolute, normalised, outside system directories).
pub fn parse_volume_mount(s: &str) -> Result<sbx_client::api::VolumeMount, String> {
    let (name, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected NAME:/path or NAME:/path:ro"))?;
    let (path, read_only) = match rest.strip_suffix(":ro") {
        Some(path) => (path, true),
        None => (rest, false),
    };
    if name.is_empty() || !path.starts_with('/') || path.contains(':') {
        return Err(format!(
            "{s:?}: expected NAME:/path or NAME:/path:ro (an absolute path without ':')"
        ));
    }
    Ok(sbx_client::api::VolumeMount {
        name: name.to_string(),
        path: path.to_string(),
        read_only,
    })
}

/// Parses `--shape VCPUxMIB` (e.g. `2x4096`): a shape of the grid, 1, 2 or 4
/// vCPU with 1, 2 or 4 GiB per vCPU. A server may offer fewer (`sbx shapes`).
pub fn parse_shape(s: &str) -> Result<(u32, u32), String> {
    sbx_client::api::validate::parse_shape(s).map_err(|e| match e {
        sbx_client::api::validate::ValidationError::Format { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// Parses durations such as `30s`, `500ms`, `2m`, `1h`, `1m30s`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("{s:?}: missing unit after the last number"))?;
        if digits == 0 {
            return Err(format!("{s:?}: expected a number (like 30s, 500ms, 2m)"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            u => return Err(format!("{s:?}: unknown unit {u:?} (use ms, s, m or h)")),
        };
        total += part;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// A signal as a number (`15`) or a name (`TERM`, `SIGKILL`).
pub fn parse_signal(s: &str) -> Result<i64, String> {
    if let Ok(n) = s.parse::<i64>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(format!("signal {n}: must be from 1 to 64"))
        };
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    Ok(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        _ => return Err(format!("unknown signal {s:?}")),
    })
}

/// A file mode in octal: `644`, `0644` or `0o644`.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if (1..=0o777).contains(&m) => Ok(m),
        _ => Err(format!("mode {s:?}: expected octal from 1 to 0777")),
    }
}

/// The process exit status for a command's exit code: itself when it fits, else 255.
pub fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(255)
}

/// Where a `cp`/`ls`/`rm` argument points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local path (`-` is stdin or stdout).
    Local(String),
    /// `SANDBOX:/abs/path`.
    Remote {
        /// Sandbox id or name.
        sandbox: String,
        /// Absolute path inside the sandbox.
        path: String,
    },
}

/// `SANDBOX:/path` is remote (split at the first `:/`); anything starting with `/` or `.`,
/// or without `:/`, is local.
pub fn parse_location(s: &str) -> Location {
    if !s.starts_with('/') && !s.starts_with('.') {
        if let Some(pos) = s.find(":/") {
            if pos > 0 {
                return Location::Remote {
                    sandbox: s[..pos].to_string(),
                    path: s[pos + 1..].to_string(),
                };
            }
        }
    }
    Location::Local(s.to_string())
}

/// The last component of a `/`-separated path (empty for `/`).
pub fn base_name(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

/// argv for display: items with spaces or quotes are single-quoted.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A plain text table: columns separated by two spaces, the last one unpadded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i < last {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Bytes for humans: `512 B`, `1.5 KiB`, `20.0 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("10").is_ok());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1m30").is_err());
    }

    #[test]
    fn env_pairs() {
        assert_eq!(
            parse_env_pair("A=b=c"),
            Ok(("A".to_string(), "b=c".to_string()))
        );
        assert_eq!(parse_env_pair("A="), Ok(("A".to_string(), String::new())));
        assert!(parse_env_pair("=x").is_err());
        assert!(parse_env_pair("SBX_SURELY_UNSET_VARIABLE_1234").is_err());
    }

    #[test]
    fn signals_and_modes() {
        assert_eq!(parse_signal("9"), Ok(9));
        assert_eq!(parse_signal("term"), Ok(15));
        assert_eq!(parse_signal("SIGKILL"), Ok(9));
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("65").is_err());
        assert!(parse_signal("BOGUS").is_err());
        assert_eq!(parse_mode("644"), Ok(0o644));
        assert_eq!(parse_mode("0755"), Ok(0o755));
        assert_eq!(parse_mode("0o600"), Ok(0o600));
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("0").is_err());
    }

    #[test]
    fn exit_bytes() {
        assert_eq!(exit_byte(0), 0);
        assert_eq!(exit_byte(3), 3);
        assert_eq!(exit_byte(255), 255);
        assert_eq!(exit_byte(256), 255);
        assert_eq!(exit_byte(-1), 255);
    }

    #[test]
    fn locations() {
        let remote = |s: &str, p: &str| Location::Remote {
            sandbox: s.into(),
            path: p.into(),
        };
        assert_eq!(
            parse_location("web:/etc/hosts"),
            remote("web", "/etc/hosts")
        );
        assert_eq!(parse_location("a:b:/x"), remote("a:b", "/x"));
        assert_eq!(
            parse_location("b066bdf7-a57b-4d8b-a1a7-76eab1f91273:/"),
            remote("b066bdf7-a57b-4d8b-a1a7-76eab1f91273", "/")
        );
        assert_eq!(
            parse_location("file.txt"),
            Location::Local("file.txt".into())
        );
        assert_eq!(
            parse_location("/tmp/a:/b"),
            Location::Local("/tmp/a:/b".into())
        );
        assert_eq!(parse_location("./x:/y"), Location::Local("./x:/y".into()));
        assert_eq!(parse_location(":/y"), Location::Local(":/y".into()));
        assert_eq!(parse_location("-"), Location::Local("-".into()));
        assert_eq!(base_name("/a/b.txt"), "b.txt");
        assert_eq!(base_name("/a/dir/"), "dir");
        assert_eq!(base_name("/"), "");
    }

    #[test]
    fn formatting() {
        assert_eq!(
            shell_join(&[
                "echo".into(),
                "hello world".into(),
                "it's".into(),
                "".into()
            ]),
            r"echo 'hello world' 'it'\''s' ''"
        );
        let t = table(
            &["ID", "NAME"],
            &[vec!["1".into(), "web".into()], vec!["22".into(), "".into()]],
        );
        assert_eq!(t, "ID  NAME\n1   web\n22\n");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
