//! A local HTTPS test API with its own CA (rcgen), serving a few fixed routes and recording
//! every request it gets.

#![allow(dead_code)]

pub mod echo;
pub mod harness;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// One request the server got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

pub struct TestServer {
    pub port: u16,
    /// `/wait` answers only after `/release` was called.
    pub release: Arc<tokio::sync::Notify>,
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestServer {
    pub fn origin(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.path_and_query).collect()
    }
}

fn json(status: u16, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<tokio::sync::Notify>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    let method = req.method().to_string();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let mut headers = BTreeMap::new();
    for (k, v) in req.headers() {
        headers.insert(
            k.as_str().to_string(),
            String::from_utf8_lossy(v.as_bytes()).into_owned(),
        );
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body = String::from_utf8_lossy(&body).into_owned();
    seen.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
        method: method.clone(),
        path_and_query: path_and_query.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });
    let query = req_query(&path_and_query);
    if let Some(r) = echo::respond(&path, query, &headers) {
        return Ok(r);
    }
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    let resp = match path.as_str() {
        "/echo" => json(
            200,
            serde_json::json!({"method": method, "url": path_and_query, "headers": headers, "body": body}),
        ),
        "/redirect" => {
            let mut r = json(302, serde_json::json!({}));
            r.headers_mut().insert(
                "location",
                hyper::header::HeaderValue::from_static("https://elsewhere.example/steal"),
            );
            r
        }
        "/protected" => {
            if auth == "Bearer new-at" {
                json(200, serde_json::json!({"ok": true}))
            } else {
                json(401, serde_json::json!({"error": "unauthorized"}))
            }
        }
        "/wait" => {
            release.notified().await;
            json(200, serde_json::json!({"waited": true}))
        }
        "/release" => {
            release.notify_one();
            json(200, serde_json::json!({"released": true}))
        }
        "/big" => json(200, serde_json::json!({"data": "x".repeat(10_000)})),
        "/token" => {
            let form: BTreeMap<String, String> =
                serde_urlencoded::from_str(&body).unwrap_or_default();
            let grant = form.get("grant_type").map(String::as_str);
            match grant {
                Some("refresh_token")
                    if form.get("refresh_token").map(String::as_str) == Some("good-rt") =>
                {
                    json(
                        200,
                        serde_json::json!({"access_token": "new-at", "refresh_token": "rt2", "expires_in": 3600, "token_type": "Bearer"}),
                    )
                }
                Some("authorization_code")
                    if form.get("code").map(String::as_str) == Some("c0de")
                        && form.contains_key("code_verifier") =>
                {
                    json(
                        200,
                        serde_json::json!({"access_token": "new-at", "refresh_token": "good-rt", "expires_in": 3600}),
                    )
                }
                _ => json(400, serde_json::json!({"error": "invalid_grant"})),
            }
        }
        _ => json(404, serde_json::json!({"error": "not found"})),
    };
    Ok(resp.map(BodyExt::boxed))
}

fn req_query(path_and_query: &str) -> &str {
    path_and_query
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
}

/// Starts the server on 127.0.0.1 with a certificate for `localhost` and 127.0.0.1.
pub async fn start() -> TestServer {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sbx connect test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
    let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let seen2 = seen.clone();
    let release: Arc<tokio::sync::Notify> = Arc::default();
    let release2 = release.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = seen2.clone();
            let release = release2.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    handle(req, seen.clone(), release.clone())
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    TestServer {
        port,
        release,
        ca_pem: ca.pem(),
        seen,
    }
}
