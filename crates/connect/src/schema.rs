//! A JSON Schema subset for connection config: type, properties, required, enum, items,
//! minimum/maximum, minLength/maxLength, pattern, default (applied), additionalProperties:false.

use serde_json::{Map, Value};

/// Errors of the schema module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The value does not match; the path names where (`config.port`).
    #[error("{path}: {message}")]
    Invalid {
        /// Path of the offending value.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The schema itself uses something this subset cannot check.
    #[error("config schema at {path}: {message}")]
    BadSchema {
        /// Path inside the schema.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Several values do not match: every problem, in document order (never empty).
    #[error("{}", join(.0))]
    Several(Vec<SchemaError>),
}

fn join(errors: &[SchemaError]) -> String {
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

/// Collects the problems of a value's parts so one answer lists all of them.
#[derive(Default)]
struct Problems(Vec<SchemaError>);

impl Problems {
    /// Keeps a mismatch; a bad schema is returned at once (nothing more can be checked).
    fn keep(&mut self, r: Result<(), SchemaError>) -> Result<(), SchemaError> {
        match r {
            Ok(()) => Ok(()),
            Err(e @ SchemaError::BadSchema { .. }) => Err(e),
            Err(SchemaError::Several(list)) => {
                self.0.extend(list);
                Ok(())
            }
            Err(e) => {
                self.0.push(e);
                Ok(())
            }
        }
    }

    fn finish(mut self) -> Result<(), SchemaError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(SchemaError::Several(self.0)),
        }
    }
}

fn invalid(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::Invalid {
        path: path.to_string(),
        message: message.into(),
    }
}

fn bad_schema(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::BadSchema {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Validates `value` against `schema`, filling in defaults of missing properties.
/// The root path is `config`.
pub fn validate(schema: &Value, value: &mut Value) -> Result<(), SchemaError> {
    check(schema, value, "config")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(wanted: &str, value: &Value) -> bool {
    match wanted {
        "number" => value.is_number(),
        // 3.0 is an integer in JSON Schema.
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        other => type_name(value) == other,
    }
}

fn check(schema: &Value, value: &mut Value, path: &str) -> Result<(), SchemaError> {
    let schema = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(invalid(path, "no value is allowed here")),
        Value::Object(map) => map,
        _ => return Err(bad_schema(path, "a schema must be an object")),
    };
    if let Some(t) = schema.get("type") {
        let wanted: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            _ => {
                return Err(bad_schema(
                    path,
                    "type must be a string or a list of strings",
                ))
            }
        };
        if !wanted.iter().any(|w| type_matches(w, value)) {
            return Err(invalid(
                path,
                format!(
                    "must be of type {}, not {}",
                    wanted.join(" or "),
                    type_name(value)
                ),
            ));
        }
    }
    if let Some(options) = schema.get("enum") {
        let Value::Array(options) = options else {
            return Err(bad_schema(path, "enum must be a list"));
        };
        if !options.contains(value) {
            let shown: Vec<String> = options.iter().map(Value::to_string).collect();
            return Err(invalid(
                path,
                format!("must be one of {}", shown.join(", ")),
            ));
        }
    }
    match value {
        Value::Number(n) => check_number(schema, n.as_f64().unwrap_or(f64::NAN), path)?,
        Value::String(s) => check_string(schema, s, path)?,
        Value::Array(items) => check_array(schema, items, path)?,
        Value::Object(map) => check_object(schema, map, path)?,
        Value::Null | Value::Bool(_) => {}
    }
    Ok(())
}

fn number_keyword(
    schema: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, SchemaError> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad_schema(path, format!("{key} must be a number"))),
    }
}

fn check_number(schema: &Map<String, Value>, n: f64, path: &str) -> Result<(), SchemaError> {
    if let Some(min) = number_keyword(schema, "minimum", path)? {
        if n < min {
            return Err(invalid(path, format!("must be >= {min}")));
        }
    }
    if let Some(max) = number_keyword(schema, "maximum", path)? {
        if n > max {
            return Err(invalid(path, format!("must be <= {max}")));
        }
    }
    Ok(())
}

fn check_string(schema: &Map<String, Value>, s: &str, path: &str) -> Result<(), SchemaError> {
    // JSON Schema counts characters (code points), not bytes.
    let len = s.chars().count() as f64;
    if let Some(min) = number_keyword(schema, "minLength", path)? {
        if len < min {
            return Err(invalid(
                path,
                format!("must be at least {min} characters long"),
            ));
        }
    }
    if let Some(max) = number_keyword(schema, "maxLength", path)? {
        if len > max {
            return Err(invalid(
                path,
                format!("must be at most {max} characters long"),
            ));
        }
    }
    if let Some(pattern) = schema.get("pattern") {
        let Some(pattern) = pattern.as_str() else {
            return Err(bad_schema(path, "pattern must be a string"));
        };
        let re = regex::Regex::new(pattern)
            .map_err(|e| bad_schema(path, format!("pattern does not compile: {e}")))?;
        if !re.is_match(s) {
            return Err(invalid(path, format!("must match the pattern {pattern}")));
        }
    }
    Ok(())
}

fn check_array(
    schema: &Map<String, Value>,
    items: &mut [Value],
    path: &str,
) -> Result<(), SchemaError> {
    let mut problems = Problems::default();
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter_mut().enumerate() {
            problems.keep(check(item_schema, item, &format!("{path}[{i}]")))?;
        }
    }
    problems.finish()
}

fn check_object(
    schema: &Map<String, Value>,
    map: &mut Map<String, Value>,
    path: &str,
) -> Result<(), SchemaError> {
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(bad_schema(path, "properties must be an object")),
    };
    let mut problems = Problems::default();
    // Defaults first, so a required property with a default is satisfied.
    for (name, prop) in properties {
        if !map.contains_key(name) {
            if let Some(default) = prop.get("default") {
                map.insert(name.clone(), default.clone());
            }
        }
    }
    if let Some(required) = schema.get("required") {
        let Value::Array(required) = required else {
            return Err(bad_schema(path, "required must be a list"));
        };
        for name in required {
            let Some(name) = name.as_str() else {
                return Err(bad_schema(path, "required must list strings"));
            };
            if !map.contains_key(name) {
                problems.keep(Err(invalid(&format!("{path}.{name}"), "is required")))?;
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        for extra in map.keys().filter(|k| !properties.contains_key(*k)) {
            problems.keep(Err(invalid(
                &format!("{path}.{extra}"),
                "is not an allowed property",
            )))?;
        }
    }
    for (name, value) in map.iter_mut() {
        if let Some(prop) = properties.get(name) {
            problems.keep(check(prop, value, &format!("{path}.{name}")))?;
        }
    }
    problems.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["account", "region"],
            "properties": {
                "account": {"type": "string", "minLength": 2, "maxLength": 8, "pattern": "^[a-z]+$"},
                "region": {"type": "string", "enum": ["eu", "us"], "default": "eu"},
                "pageSize": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
                "nested": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}
            }
        })
    }

    fn err(mut v: Value) -> String {
        match validate(&schema(), &mut v) {
            Ok(()) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn applies_defaults() {
        let mut v = json!({"account": "acme", "nested": {}});
        validate(&schema(), &mut v).expect("valid");
        assert_eq!(
            v,
            json!({"account": "acme", "region": "eu", "pageSize": 50, "nested": {"on": true}})
        );
    }

    #[test]
    fn errors_name_the_path() {
        assert_eq!(err(json!({})), "config.account: is required");
        assert_eq!(
            err(json!({"account": "a"})),
            "config.account: must be at least 2 characters long"
        );
        assert_eq!(
            err(json!({"account": "abcdefghi"})),
            "config.account: must be at most 8 characters long"
        );
        assert_eq!(
            err(json!({"account": "AB"})),
            "config.account: must match the pattern ^[a-z]+$"
        );
        assert_eq!(
            err(json!({"account": "ab", "region": "ap"})),
            "config.region: must be one of \"eu\", \"us\""
        );
        assert_eq!(
            err(json!({"account": "ab", "pageSize": 0})),
            "config.pageSize: must be >= 1"
        );
        assert_eq!(
            err(json!({"account": "ab", "pageSize": 101})),
            "config.pageSize: must be <= 100"
        );
        assert_eq!(
            err(json!({"account": "ab", "pageSize": 1.5})),
            "config.pageSize: must be of type integer, not number"
        );
        assert_eq!(
            err(json!({"account": "ab", "tags": ["abcd"]})),
            "config.tags[0]: must be at most 3 characters long"
        );
        assert_eq!(
            err(json!({"account": "ab", "extra": 1})),
            "config.extra: is not an allowed property"
        );
        assert_eq!(
            err(json!({"account": "ab", "nested": {"on": "yes"}})),
            "config.nested.on: must be of type boolean, not string"
        );
        assert_eq!(err(json!([])), "config: must be of type object, not array");
        assert_eq!(err(json!({"account": "ab"})), "ok");
    }

    #[test]
    fn every_problem_is_listed() {
        assert_eq!(
            err(json!({"region": "ap", "pageSize": 0, "extra": 1, "tags": ["abcd", 1]})),
            "config.account: is required; config.extra: is not an allowed property; \
             config.pageSize: must be >= 1; config.region: must be one of \"eu\", \"us\"; \
             config.tags[0]: must be at most 3 characters long; \
             config.tags[1]: must be of type string, not integer"
        );
    }

    #[test]
    fn bad_schema_is_reported() {
        let mut v = json!("x");
        let e = validate(&json!({"pattern": "("}), &mut v).expect_err("bad pattern");
        assert!(matches!(e, SchemaError::BadSchema { .. }));
    }
}
