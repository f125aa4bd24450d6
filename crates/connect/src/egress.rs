//! Host-side HTTPS egress for the broker and OAuth: https only, one allowed port, every resolved
//! address checked by the operator's filter, and the connection pinned to the checked addresses.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use url::{Host, Url};

/// Decides whether the host may connect to an address (the daemon: public addresses only).
pub type AddressFilter = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// Errors of the egress module.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The destination is not allowed.
    #[error("destination denied: {0}")]
    Denied(String),
    /// Name resolution or client set-up failed.
    #[error("network: {0}")]
    Network(String),
    /// A configured root certificate does not parse.
    #[error("root certificate: {0}")]
    BadCertificate(String),
}

/// Configuration of the broker's HTTP client.
#[derive(Clone)]
pub struct BrokerConfig {
    /// The only port requests may use (443; tests use their server's port).
    pub allowed_port: u16,
    /// Extra trusted roots (tests: their own CA).
    pub extra_roots: Vec<reqwest::Certificate>,
    /// Address filter applied to every resolved address.
    pub address_filter: AddressFilter,
    /// Longest single request (further bounded by the job deadline).
    pub request_timeout: Duration,
    /// Largest response body handed to a package.
    pub max_response_bytes: u64,
}

impl std::fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConfig")
            .field("allowed_port", &self.allowed_port)
            .field("extra_roots", &self.extra_roots.len())
            .field("request_timeout", &self.request_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

impl BrokerConfig {
    /// Port 443, no extra roots, the given filter, 60 s per request, 11 MiB bodies (base64 in a
    /// `fetch_reply` line that must fit the runner's 16 MiB line limit).
    pub fn new(address_filter: AddressFilter) -> Self {
        BrokerConfig {
            allowed_port: 443,
            extra_roots: Vec::new(),
            address_filter,
            request_timeout: Duration::from_secs(60),
            max_response_bytes: crate::limits::MAX_RESPONSE_BYTES,
        }
    }

    /// Adds trusted roots from PEM text.
    pub fn add_roots_pem(&mut self, pem: &[u8]) -> Result<(), EgressError> {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| EgressError::BadCertificate(e.to_string()))?;
        self.extra_roots.extend(certs);
        Ok(())
    }

    /// Checks scheme and port of a URL.
    pub fn check_url(&self, url: &Url) -> Result<(), EgressError> {
        if url.scheme() != "https" {
            return Err(EgressError::Denied(format!(
                "scheme {} is not https",
                url.scheme()
            )));
        }
        if url.port_or_known_default() != Some(self.allowed_port) {
            return Err(EgressError::Denied("port not allowed".into()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Denied("URL carries user info".into()));
        }
        Ok(())
    }

    /// A client for this URL's host, connecting only to addresses that passed the filter.
    pub async fn client_for(&self, url: &Url) -> Result<reqwest::Client, EgressError> {
        self.check_url(url)?;
        let port = self.allowed_port;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            // Never use the host's proxy settings: the broker talks to the origin itself.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.request_timeout)
            .connect_timeout(Duration::from_secs(10));
        for root in &self.extra_roots {
            builder = builder.add_root_certificate(root.clone());
        }
        match url.host() {
            Some(Host::Ipv4(ip)) => self.check_addr(IpAddr::V4(ip))?,
            Some(Host::Ipv6(ip)) => self.check_addr(IpAddr::V6(ip))?,
            Some(Host::Domain(name)) => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
                    .await
                    .map_err(|e| EgressError::Network(format!("resolving {name}: {e}")))?
                    .collect();
                if addrs.is_empty() {
                    return Err(EgressError::Network(format!("{name} has no address")));
                }
                for a in &addrs {
                    self.check_addr(a.ip())?;
                }
                // Pinning to the checked addresses: a second lookup by the HTTP client could
                // answer differently (DNS rebinding).
                builder = builder.resolve_to_addrs(name, &addrs);
            }
            None => return Err(EgressError::Denied("URL has no host".into())),
        }
        builder
            .build()
            .map_err(|e| EgressError::Network(format!("HTTP client: {e}")))
    }

    fn check_addr(&self, ip: IpAddr) -> Result<(), EgressError> {
        if (self.address_filter)(ip) {
            Ok(())
        } else {
            Err(EgressError::Denied(format!("address {ip} is not allowed")))
        }
    }
}

/// The origin (`scheme://host[:port]`) of a URL, with the default port left out.
pub fn origin_of(url: &Url) -> String {
    url.origin().ascii_serialization()
}
