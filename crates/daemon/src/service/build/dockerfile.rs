//! Dockerfile parsing (pure): lines (comments, continuations) into
//! instructions, then a [`Plan`]: every step with `$VAR` substituted as
//! Docker does, the environment each `RUN` sees and the image config the
//! build ends with. Everything unsupported is an error naming its line.

use sbx_api_types::ImageConfig;
use std::collections::BTreeMap;

/// A Dockerfile that cannot be built, with the line it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line of the instruction (its first line when continued).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// A command as written: shell form or exec (JSON) form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `RUN echo hi`: run through the `SHELL`.
    Shell(String),
    /// `RUN ["echo", "hi"]`: run as it is.
    Exec(Vec<String>),
}

/// One instruction as written (before substitution).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Raw {
    line: usize,
    keyword: String,
    args: String,
}

/// What one step does when executed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing in the filesystem: `ENV`, `ARG`, `LABEL`, `CMD`, ... (and `FROM`).
    Meta,
    /// Run `argv` as `user` in `cwd` with `env` over the image's.
    Run {
        /// The command (the `SHELL` prepended for the shell form).
        argv: Vec<String>,
        /// ENV and ARG values the command sees.
        env: BTreeMap<String, String>,
        /// Working directory (`WORKDIR`, default `/`).
        cwd: String,
        /// `USER` (default root).
        user: Option<String>,
    },
    /// Copy context files into the sandbox.
    Copy(CopySpec),
    /// `WORKDIR`: create the directory.
    Mkdir(String),
}

/// A `COPY`/`ADD` after substitution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySpec {
    /// Context paths or globs.
    pub sources: Vec<String>,
    /// Absolute destination; a directory when it ends with `/` or there are several sources.
    pub dest: String,
    /// `--chown=user[:group]`.
    pub chown: Option<String>,
    /// `ADD`: local tar archives are extracted.
    pub add: bool,
}

/// One step of a build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line of the instruction.
    pub line: usize,
    /// The instruction as it ran (keyword upper-cased, variables substituted
    /// where Docker substitutes them); part of the cache key.
    pub instruction: String,
    /// What it does.
    pub action: Action,
}

/// A parsed, substituted Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The `FROM` image (`default`, `name:tag` or a digest).
    pub from: String,
    /// Every instruction from `FROM` on, `FROM` first.
    pub steps: Vec<Step>,
    /// The config of the image the build makes.
    pub config: ImageConfig,
}

/// Instructions that exist in Docker but not here.
const UNSUPPORTED: &[&str] = &[
    "VOLUME",
    "ONBUILD",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "MAINTAINER",
];

/// Splits the text into instructions (comments and blank lines dropped,
/// continuations joined).
fn lines(text: &str) -> Result<Vec<Raw>, ParseError> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        // Comments and blank lines inside a continuation are skipped, as Docker does.
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_none()) {
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        let (body, continued) = match trimmed.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (trimmed, false),
        };
        let (start, mut acc) = current.take().unwrap_or((n, String::new()));
        if !acc.is_empty() {
            acc.push(' ');
        }
        acc.push_str(body.trim_end());
        if continued {
            current = Some((start, acc));
        } else {
            out.push(split_keyword(start, &acc)?);
        }
    }
    if let Some((start, acc)) = current {
        out.push(split_keyword(start, &acc)?);
    }
    Ok(out)
}

fn split_keyword(line: usize, text: &str) -> Result<Raw, ParseError> {
    let text = text.trim();
    let (keyword, args) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    if !keyword.chars().all(|c| c.is_ascii_alphabetic()) {
        return err(line, format!("not an instruction: {text:?}"));
    }
    Ok(Raw {
        line,
        keyword: keyword.to_ascii_uppercase(),
        args: args.trim().to_string(),
    })
}

/// Substitutes `$VAR`, `${VAR}`, `${VAR:-default}` and `${VAR:+alt}`;
/// `\$` is a literal `$`. Unknown variables are empty, as in Docker.
pub fn substitute(
    line: usize,
    text: &str,
    vars: &BTreeMap<String, String>,
) -> Result<String, ParseError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'$') => {
                out.push('$');
                chars.next();
            }
            '$' => match chars.peek() {
                Some('{') => {
                    chars.next();
                    let mut inner = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        inner.push(c);
                    }
                    if !closed {
                        return err(line, format!("unterminated ${{ in {text:?}"));
                    }
                    let (name, op) = match inner.find(":-").or_else(|| inner.find(":+")) {
                        Some(i) => (&inner[..i], Some((&inner[i..i + 2], &inner[i + 2..]))),
                        None => (inner.as_str(), None),
                    };
                    if !is_name(name) {
                        return err(line, format!("bad variable name in ${{{inner}}}"));
                    }
                    let value = vars.get(name).filter(|v| !v.is_empty());
                    match (op, value) {
                        (None, v) => out.push_str(v.map_or("", String::as_str)),
                        (Some((":-", default)), None) => out.push_str(default),
                        (Some((":-", _)), Some(v)) => out.push_str(v),
                        (Some((_, alt)), Some(_)) => out.push_str(alt),
                        (Some(_), None) => {}
                    }
                }
                Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                    let mut name = String::new();
                    while let Some(&c) = chars.peek() {
                        if c.is_ascii_alphanumeric() || c == '_' {
                            name.push(c);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    out.push_str(vars.get(&name).map_or("", String::as_str));
                }
                _ => out.push('$'),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits on whitespace, honouring double and single quotes and backslash escapes.
fn words(line: usize, text: &str) -> Result<Vec<String>, ParseError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return err(line, format!("unterminated quote in {text:?}"));
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// `K=V K2="v 2"` pairs (also the legacy `ENV K value with spaces` form
/// when `legacy` and the first word has no `=`).
fn pairs(
    line: usize,
    keyword: &str,
    args: &str,
    legacy: bool,
) -> Result<Vec<(String, String)>, ParseError> {
    let first = args.split_whitespace().next().unwrap_or("");
    if first.is_empty() {
        return err(line, format!("{keyword} needs arguments"));
    }
    if legacy && !first.contains('=') {
        let value = args[first.len()..].trim();
        if value.is_empty() {
            return err(line, format!("{keyword} {first} needs a value"));
        }
        let value = words(line, value)?.join(" ");
        return Ok(vec![(first.to_string(), value)]);
    }
    words(line, args)?
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => err(line, format!("{keyword}: {w:?} is not KEY=value")),
        })
        .collect()
}

/// The exec form (`["a", "b"]`) when the text is a JSON array of strings.
fn json_form(args: &str) -> Option<Vec<String>> {
    if !args.starts_with('[') {
        return None;
    }
    serde_json::from_str(args).ok()
}

fn command(args: &str) -> Command {
    match json_form(args) {
        Some(argv) => Command::Exec(argv),
        None => Command::Shell(args.to_string()),
    }
}

/// Makes `path` absolute against `cwd` (Docker's WORKDIR and COPY
/// destination rule), `.` and `..` resolved lexically; a trailing `/` stays.
fn absolute(cwd: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    if (path.ends_with('/') || path.ends_with("/.") || path == ".") && out != "/" {
        out.push('/');
    }
    out
}

/// Parses `text` and substitutes it with `build_args` (`--build-arg`,
/// which override `ARG` defaults; a build arg no `ARG` declares is an error).
pub fn plan(text: &str, build_args: &BTreeMap<String, String>) -> Result<Plan, ParseError> {
    let raws = lines(text)?;
    let mut global_args: BTreeMap<String, String> = BTreeMap::new();
    let mut declared: Vec<String> = Vec::new();
    let mut iter = raws.into_iter().peekable();
    // ARGs before FROM are visible to FROM only.
    while let Some(raw) = iter.peek() {
        if raw.keyword != "ARG" {
            break;
        }
        let raw = iter.next().expect("peeked");
        let (name, value) = arg(&raw, build_args, &global_args)?;
        declared.push(name.clone());
        global_args.insert(name, value);
    }
    let Some(from) = iter.next() else {
        return err(1, "the Dockerfile has no FROM");
    };
    if from.keyword != "FROM" {
        return err(
            from.line,
            format!(
                "{} before FROM: a Dockerfile starts with FROM",
                from.keyword
            ),
        );
    }
    let from_args = substitute(from.line, &from.args, &global_args)?;
    let from_words = words(from.line, &from_args)?;
    let image = match from_words.as_slice() {
        [image] => image.clone(),
        [image, as_kw, _name] if as_kw.eq_ignore_ascii_case("as") => image.clone(),
        [flag, ..] if flag.starts_with("--") => {
            return err(from.line, format!("FROM {flag} is not supported"))
        }
        _ => return err(from.line, "FROM takes an image and an optional AS name"),
    };
    let image = if image == "scratch" {
        return err(
            from.line,
            "FROM scratch is not supported; start FROM default or an image of yours",
        );
    } else {
        image
    };
    let mut steps = vec![Step {
        line: from.line,
        instruction: format!("FROM {image}"),
        action: Action::Meta,
    }];
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut config = ImageConfig::default();
    let mut cwd = "/".to_string();
    let mut user: Option<String> = None;
    let mut shell = vec!["/bin/sh".to_string(), "-c".to_string()];
    for raw in iter {
        let line = raw.line;
        // Variables Docker substitutes in: ENV wins over ARG.
        let vars: BTreeMap<String, String> = args
            .iter()
            .chain(env.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let sub = |s: &str| substitute(line, s, &vars);
        let (instruction, action) = match raw.keyword.as_str() {
            "FROM" => return err(line, "multi-stage builds (a second FROM) are not supported"),
            "RUN" => {
                if raw.args.is_empty() {
                    return err(line, "RUN needs a command");
                }
                let argv = match command(&raw.args) {
                    Command::Exec(argv) if argv.is_empty() => {
                        return err(line, "RUN [] has no command")
                    }
                    Command::Exec(argv) => argv,
                    Command::Shell(s) => {
                        let mut argv = shell.clone();
                        argv.push(s);
                        argv
                    }
                };
                if raw.args.starts_with("--") {
                    return err(
                        line,
                        "RUN flags (--mount, --network, ...) are not supported",
                    );
                }
                let mut run_env = args.clone();
                run_env.extend(env.clone());
                (
                    format!("RUN {}", raw.args),
                    Action::Run {
                        argv,
                        env: run_env,
                        cwd: cwd.clone(),
                        user: user.clone(),
                    },
                )
            }
            "COPY" | "ADD" => {
                let add = raw.keyword == "ADD";
                let spec = copy(line, add, &sub(&raw.args)?, &cwd)?;
                let text = format!(
                    "{}{} {} {}",
                    raw.keyword,
                    spec.chown
                        .as_ref()
                        .map(|c| format!(" --chown={c}"))
                        .unwrap_or_default(),
                    spec.sources.join(" "),
                    spec.dest
                );
                (text, Action::Copy(spec))
            }
            "ENV" => {
                let kvs = pairs(line, "ENV", &raw.args, true)?;
                let mut shown = Vec::new();
                for (k, v) in kvs {
                    let v = substitute(line, &v, &vars)?;
                    shown.push(format!("{k}={v}"));
                    env.insert(k, v);
                }
                (format!("ENV {}", shown.join(" ")), Action::Meta)
            }
            "ARG" => {
                let (name, value) = arg(&raw, build_args, &global_args)?;
                declared.push(name.clone());
                let text = format!("ARG {name}={value}");
                args.insert(name, value);
                (text, Action::Meta)
            }
            "WORKDIR" => {
                let dir = sub(&raw.args)?;
                if dir.is_empty() {
                    return err(line, "WORKDIR needs a path");
                }
                cwd = absolute(&cwd, &dir);
                config.workdir = Some(cwd.clone());
                (format!("WORKDIR {cwd}"), Action::Mkdir(cwd.clone()))
            }
            "USER" => {
                let u = sub(&raw.args)?;
                if u.is_empty() || u.contains(char::is_whitespace) {
                    return err(line, "USER takes one user name (or user:group)");
                }
                user = Some(u.clone());
                config.user = Some(u.clone());
                (format!("USER {u}"), Action::Meta)
            }
            "SHELL" => {
                match json_form(&raw.args) {
                    Some(argv) if !argv.is_empty() => shell = argv,
                    _ => {
                        return err(
                            line,
                            "SHELL takes a JSON array, e.g. [\"/bin/bash\", \"-c\"]",
                        )
                    }
                }
                (format!("SHELL {}", raw.args), Action::Meta)
            }
            "LABEL" => {
                let mut shown = Vec::new();
                for (k, v) in pairs(line, "LABEL", &sub(&raw.args)?, false)? {
                    shown.push(format!("{k}={v}"));
                    config.labels.insert(k, v);
                }
                (format!("LABEL {}", shown.join(" ")), Action::Meta)
            }
            "CMD" | "ENTRYPOINT" => {
                if raw.args.is_empty() {
                    return err(line, format!("{} needs a command", raw.keyword));
                }
                let argv = match command(&raw.args) {
                    Command::Exec(argv) => argv,
                    Command::Shell(s) => {
                        let mut argv = shell.clone();
                        argv.push(s);
                        argv
                    }
                };
                if raw.keyword == "CMD" {
                    config.cmd = Some(argv);
                } else {
                    config.entrypoint = Some(argv);
                }
                (format!("{} {}", raw.keyword, raw.args), Action::Meta)
            }
            "EXPOSE" => {
                let ports = words(line, &sub(&raw.args)?)?;
                if ports.is_empty() {
                    return err(line, "EXPOSE needs a port");
                }
                for p in &ports {
                    let (num, proto) = p.split_once('/').unwrap_or((p, "tcp"));
                    if num.parse::<u16>().is_err() || !matches!(proto, "tcp" | "udp") {
                        return err(line, format!("EXPOSE {p}: not a port (8000 or 53/udp)"));
                    }
                }
                config.exposed_ports.extend(ports.iter().cloned());
                (format!("EXPOSE {}", ports.join(" ")), Action::Meta)
            }
            k if UNSUPPORTED.contains(&k) => {
                return err(line, format!("{k} is not supported"));
            }
            k => return err(line, format!("unknown instruction {k}")),
        };
        steps.push(Step {
            line,
            instruction,
            action,
        });
    }
    for name in build_args.keys() {
        if !declared.contains(name) {
            return err(
                1,
                format!("build arg {name:?} is not declared by any ARG in the Dockerfile"),
            );
        }
    }
    config.env = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Plan {
        from: image,
        steps,
        config,
    })
}

/// An `ARG name[=default]`, overridden by a build arg; a default may use
/// earlier variables.
fn arg(
    raw: &Raw,
    build_args: &BTreeMap<String, String>,
    vars: &BTreeMap<String, String>,
) -> Result<(String, String), ParseError> {
    let words = words(raw.line, &raw.args)?;
    let [word] = words.as_slice() else {
        return err(raw.line, "ARG takes one NAME or NAME=default");
    };
    let (name, default) = match word.split_once('=') {
        Some((n, d)) => (n, substitute(raw.line, d, vars)?),
        None => (word.as_str(), String::new()),
    };
    if !is_name(name) {
        return err(raw.line, format!("ARG {name:?} is not a variable name"));
    }
    let value = build_args.get(name).cloned().unwrap_or(default);
    Ok((name.to_string(), value))
}

/// A `COPY`/`ADD`'s flags, sources and destination.
fn copy(line: usize, add: bool, args: &str, cwd: &str) -> Result<CopySpec, ParseError> {
    let kw = if add { "ADD" } else { "COPY" };
    let mut items = match json_form(args) {
        Some(items) => items,
        None => words(line, args)?,
    };
    let mut chown = None;
    while items.first().is_some_and(|w| w.starts_with("--")) {
        let flag = items.remove(0);
        match flag.split_once('=') {
            Some(("--chown", v)) if !v.is_empty() => chown = Some(v.to_string()),
            Some(("--from", _)) => {
                return err(line, format!("{kw} --from (multi-stage) is not supported"))
            }
            _ => return err(line, format!("{kw} {flag} is not supported")),
        }
    }
    // A JSON form can carry the flags before it: `COPY --chown=a ["x", "y"]`.
    if items.len() == 1 || (items.first().is_some_and(|w| w.starts_with('[')) && items.len() > 1) {
        if let Some(json) = json_form(&items.join(" ")) {
            items = json;
        }
    }
    if items.len() < 2 {
        return err(line, format!("{kw} needs a source and a destination"));
    }
    let dest_raw = items.pop().expect("len >= 2");
    for s in &items {
        if s.contains("://") || s.starts_with("git@") {
            return err(
                line,
                format!("{kw} {s}: URLs are not supported; download it in a RUN"),
            );
        }
        if s.starts_with('/') || s.split('/').any(|c| c == "..") {
            return err(
                line,
                format!("{kw} {s}: sources are paths inside the context"),
            );
        }
    }
    let dir_dest = dest_raw.ends_with('/') || items.len() > 1;
    let mut dest = absolute(cwd, &dest_raw);
    if dir_dest && !dest.ends_with('/') {
        dest.push('/');
    }
    Ok(CopySpec {
        sources: items,
        dest,
        chown,
        add,
    })
}

#[cfg(test)]
#[path = "dockerfile_tests.rs"]
mod tests;
