//! Host routing (contract §1.5): with `--e2b-domain D`, a request for
//! `{port}-{sandboxId}.D` is for that sandbox's port: 49983 is envd, any
//! other port a preview URL. The label is split at its first `-`; the rest
//! must be a whole sandbox id (a UUID, with or without its dashes), so
//! `49983-{id}-x.D`, `{id}.D` or `x@49983-{id}.D` name nothing.

use axum::http::{header, HeaderMap, Uri};

/// Where a request's Host sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRoute {
    /// Not under the E2B domain (or no domain configured): the APIs.
    Api,
    /// `{port}-{id}.{domain}`.
    Sandbox {
        /// Port in the sandbox.
        port: u16,
        /// Sandbox id as written in the label.
        id: String,
    },
    /// Under the domain but malformed (or ambiguous): refused with this reason.
    Refused(String),
}

/// Decides the route of a request from its Host (and absolute-form target).
pub fn route(headers: &HeaderMap, uri: &Uri, domain: Option<&str>) -> HostRoute {
    let Some(domain) = domain else {
        return HostRoute::Api;
    };
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => match h.to_str() {
            Ok(h) => h.to_ascii_lowercase(),
            Err(_) => return HostRoute::Refused("the Host header is not ASCII".into()),
        },
        (None, None) => match uri.authority() {
            Some(a) => a.as_str().to_ascii_lowercase(),
            None => return HostRoute::Api,
        },
        _ => return HostRoute::Refused("more than one Host header".into()),
    };
    // An absolute-form target must name the same host as Host; a proxy
    // that routes by one and forwards the other must not be fooled.
    if let Some(authority) = uri.authority() {
        if !authority.as_str().eq_ignore_ascii_case(&host) {
            return HostRoute::Refused("the request target and Host name different hosts".into());
        }
    }
    // Ports do not take part: a proxy in front may listen on another one.
    let domain = without_port(&domain.to_ascii_lowercase()).to_string();
    let Some(label) = without_port(&host)
        .strip_suffix(domain.as_str())
        .and_then(|rest| rest.strip_suffix('.'))
    else {
        // The domain itself (e.g. the API's own name) and other hosts.
        return HostRoute::Api;
    };
    sandbox_label(label)
}

/// `name:port` → `name` (an IPv6 literal keeps its brackets).
fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && !name.ends_with(':') =>
        {
            name
        }
        _ => host,
    }
}

fn sandbox_label(label: &str) -> HostRoute {
    let refused = |why: &str| HostRoute::Refused(format!("host label {label:?}: {why}"));
    if label.contains(['.', '@', ':', '/', '\\', '%']) {
        return refused("one label of the form PORT-SANDBOXID expected");
    }
    let Some((port, id)) = label.split_once('-') else {
        return refused("expected PORT-SANDBOXID");
    };
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && !port.starts_with('0');
    let port = match port.parse::<u32>() {
        Ok(p) if port_ok && (1..=65535).contains(&p) => p as u16,
        _ => return refused("the port must be 1-65535"),
    };
    let canonical = uuid::Uuid::parse_str(id).ok().filter(|u| {
        // Only the two spellings sbx hands out: no braces, no urn: prefix.
        id == u.hyphenated().to_string() || id == u.simple().to_string()
    });
    if canonical.is_none() {
        return refused("not a sandbox id");
    }
    HostRoute::Sandbox {
        port,
        id: id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const ID: &str = "0f3c2b1a-9d8e-4f00-8a11-223344556677";

    fn route_of(host: &str, uri: &str) -> HostRoute {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        route(&h, &uri.parse().unwrap(), Some("sbx.test:8443"))
    }

    #[test]
    fn sandbox_hosts_route_to_their_port() {
        let want = HostRoute::Sandbox {
            port: 49983,
            id: ID.into(),
        };
        assert_eq!(
            route_of(&format!("49983-{ID}.sbx.test:8443"), "/health"),
            want
        );
        assert_eq!(
            route_of(&format!("49983-{}.SBX.test:8443", ID.to_uppercase()), "/"),
            HostRoute::Sandbox {
                port: 49983,
                id: ID.into()
            }
        );
        let simple = ID.replace('-', "");
        assert_eq!(
            route_of(&format!("8000-{simple}.sbx.test:8443"), "/"),
            HostRoute::Sandbox {
                port: 8000,
                id: simple
            }
        );
        assert_eq!(route_of("sbx.test:8443", "/v2/sandboxes"), HostRoute::Api);
        // Behind a proxy on another port, or none.
        assert_eq!(route_of(&format!("49983-{ID}.sbx.test"), "/"), want);
        assert_eq!(route_of("evilsbx.test", "/"), HostRoute::Api);
        assert_eq!(route_of("127.0.0.1:8731", "/v2/sandboxes"), HostRoute::Api);
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("x"));
        assert_eq!(route(&h, &"/".parse().unwrap(), None), HostRoute::Api);
    }

    #[test]
    fn tricks_are_refused() {
        for host in [
            format!("49983-{ID}-x.sbx.test:8443"),
            format!("49983--{ID}.sbx.test:8443"),
            format!("user@49983-{ID}.sbx.test:8443"),
            format!("a.49983-{ID}.sbx.test:8443"),
            format!("0-{ID}.sbx.test:8443"),
            format!("65536-{ID}.sbx.test:8443"),
            format!("049983-{ID}.sbx.test:8443"),
            format!("+80-{ID}.sbx.test:8443"),
            format!("{ID}.sbx.test:8443"),
            format!("80-{{{ID}}}.sbx.test:8443"),
            "80-x.sbx.test:8443".to_string(),
        ] {
            assert!(
                matches!(route_of(&host, "/"), HostRoute::Refused(_)),
                "{host}"
            );
        }
        // Absolute-form target naming another host than Host.
        let got = route_of(
            &format!("49983-{ID}.sbx.test:8443"),
            "http://127.0.0.1:8731/health",
        );
        assert!(matches!(got, HostRoute::Refused(_)), "{got:?}");
        // Two Host headers.
        let mut h = HeaderMap::new();
        h.append(header::HOST, HeaderValue::from_static("sbx.test:8443"));
        h.append(
            header::HOST,
            HeaderValue::from_str(&format!("49983-{ID}.sbx.test:8443")).unwrap(),
        );
        assert!(matches!(
            route(&h, &"/".parse().unwrap(), Some("sbx.test:8443")),
            HostRoute::Refused(_)
        ));
    }
}
