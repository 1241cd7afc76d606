//! `[server]`: where the gateway listens and how long it waits.

use super::{Invalid, invalid};
use crate::guard::cidr::Cidr;
use crate::units::{Bounded, Seconds};
use serde::Deserialize;
use std::net::SocketAddr;

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerPolicy {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Public base URL the card advertises; the listen address when absent.
    #[serde(default)]
    pub public_base_url: Option<String>,
    /// Path of the JSON-RPC door.
    #[serde(default = "default_a2a_path")]
    pub a2a_path: String,
    /// Largest request body accepted, in bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: Bounded<1024, 67_108_864>,
    /// Proxies whose `X-Forwarded-For` is believed.
    #[serde(default)]
    pub trusted_proxies: Vec<Cidr>,
    /// Address of the admin API's own listener (loopback).
    #[serde(default = "default_admin_listen")]
    pub admin_listen: SocketAddr,
    /// Seconds a client may take to send a request's head.
    #[serde(default = "default_header_read_timeout_seconds")]
    pub header_read_timeout_seconds: Seconds<1, 300>,
    /// Connections open at once, per listener.
    #[serde(default = "default_max_connections")]
    pub max_connections: Bounded<1, 1_000_000>,
    /// Connections open at once from one client address (IPv6 by /64), per listener; trusted
    /// proxies are exempt.
    #[serde(default = "default_max_connections_per_address")]
    pub max_connections_per_address: Bounded<1, 1_000_000>,
    /// Seconds a write may wait for the client to read before the connection is closed.
    #[serde(default = "default_write_stall_seconds")]
    pub write_stall_seconds: Seconds<1, 600>,
    /// Seconds one request may take, start to answer.
    #[serde(default = "default_request_timeout_seconds")]
    pub request_timeout_seconds: Seconds<1, 3600>,
    /// Seconds requests in flight get to finish after SIGTERM.
    #[serde(default = "default_shutdown_grace_seconds")]
    pub shutdown_grace_seconds: Seconds<0, 3600>,
    /// The environment variable holding the scrape token: a Bearer secret that opens the admin
    /// listener's `GET /metrics` and nothing else.
    #[serde(default)]
    pub metrics_token_env: Option<String>,
    /// A listener of its own for `GET /metrics` and nothing else, on any address (a scraper in
    /// another container); it takes only the scrape token, so `metrics_token_env` is required
    /// with it.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Web origins (`https://host[:port]`) whose pages may send requests to the admin API (a
    /// console on its own origin behind a proxy: no CORS headers are ever sent); requests from
    /// any other page are refused.
    #[serde(default)]
    pub admin_allowed_origins: Vec<String>,
    /// Host names the admin API answers besides this machine's (`localhost`, loopback
    /// addresses) and the hosts of `admin_allowed_origins`: a name a TLS proxy on this host
    /// forwards. A request naming any other `Host` is refused (DNS rebinding).
    #[serde(default)]
    pub admin_hosts: Vec<String>,
    /// `[server.tls]`: the door serves TLS itself, and may ask for client certificates.
    #[serde(default)]
    pub tls: Option<crate::http::server_tls::ServerTlsSettings>,
}

/// `server.admin_hosts`: host names or IP addresses, nothing more.
fn check_admin_hosts(hosts: &[String]) -> Result<(), Invalid> {
    let usable = |host: &String| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok()
            || (!host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')))
    };
    if hosts.iter().all(usable) {
        return Ok(());
    }
    Err(invalid(
        "server.admin_hosts",
        "holds host names or IP addresses only (no scheme, port or path)",
    ))
}

impl crate::http::server_tls::ServerTlsSettings {
    fn validate(&self) -> Result<(), Invalid> {
        if self.client_ca_file.is_none()
            && (self.require_client_certificate || !self.client_crl_files.is_empty())
        {
            return Err(invalid(
                "server.tls.client_ca_file",
                "is needed to ask for client certificates (require_client_certificate, client_crl_files)",
            ));
        }
        Ok(())
    }
}

fn default_header_read_timeout_seconds() -> Seconds<1, 300> {
    const { Seconds::of(10) }
}
fn default_max_connections() -> Bounded<1, 1_000_000> {
    const { Bounded::of(1024) }
}
fn default_max_connections_per_address() -> Bounded<1, 1_000_000> {
    const { Bounded::of(64) }
}
fn default_write_stall_seconds() -> Seconds<1, 600> {
    const { Seconds::of(30) }
}
fn default_request_timeout_seconds() -> Seconds<1, 3600> {
    const { Seconds::of(200) }
}
fn default_shutdown_grace_seconds() -> Seconds<0, 3600> {
    const { Seconds::of(30) }
}

/// The admin API's address must be loopback and not the door's: it takes passwords and has no
/// TLS of its own. Checked on the policy and again on the addresses actually bound.
pub fn check_admin_listen(admin: SocketAddr, door: SocketAddr) -> Result<(), &'static str> {
    if !admin.ip().is_loopback() {
        return Err(
            "must be a loopback address: the admin API takes passwords and has no TLS of its own (put a TLS proxy on this host in front of it)",
        );
    }
    if admin.port() != 0
        && admin.port() == door.port()
        && (door.ip().is_unspecified() || door.ip() == admin.ip())
    {
        return Err("must not be the door's address: the admin API has its own port");
    }
    Ok(())
}

/// An origin as a browser sends it in `Origin`: `http(s)://host[:port]`, nothing after.
fn check_origin(origin: &str) -> Result<(), &'static str> {
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or("each must start with https:// or http://")?;
    let host_and_port_only = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !host_and_port_only {
        return Err(
            "each must be an origin as browsers send it: scheme, host and optional port, no path or trailing /, e.g. https://console.example.com",
        );
    }
    Ok(())
}

fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}

fn default_a2a_path() -> String {
    "/a2a/v1".to_owned()
}
fn default_max_body_bytes() -> Bounded<1024, 67_108_864> {
    const { Bounded::of(1024 * 1024) }
}

impl ServerPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        self.validate_a2a_path()?;
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        // The card publishes it: a user or password in it would be published too.
        if let Some(url) = &self.public_base_url
            && (!(url.starts_with("https://") || url.starts_with("http://"))
                || url.ends_with('/')
                || url.contains('@'))
        {
            return Err(invalid(
                "server.public_base_url",
                "must be an http(s) URL without a trailing `/` or a user, e.g. https://gateway.example.com",
            ));
        }
        if let Err(reason) = check_admin_listen(self.admin_listen, self.listen) {
            return Err(invalid("server.admin_listen", reason));
        }
        self.validate_metrics()?;
        for origin in &self.admin_allowed_origins {
            check_origin(origin)
                .map_err(|reason| invalid("server.admin_allowed_origins", reason))?;
        }
        check_admin_hosts(&self.admin_hosts)?;
        Ok(())
    }

    /// `/metrics` on a listener of its own, behind a scrape token.
    fn validate_metrics(&self) -> Result<(), Invalid> {
        if let Some(name) = &self.metrics_token_env
            && (name.is_empty()
                || name.starts_with(|c: char| c.is_ascii_digit())
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(invalid(
                "server.metrics_token_env",
                "must name an environment variable: letters, digits and _, not starting with a digit",
            ));
        }
        if let Some(metrics) = self.metrics_listen {
            if self.metrics_token_env.is_none() {
                return Err(invalid(
                    "server.metrics_listen",
                    "needs server.metrics_token_env: the metrics listener opens /metrics to the scrape token only",
                ));
            }
            if metrics.port() != 0
                && [self.listen, self.admin_listen]
                    .iter()
                    .any(|other| other.port() == metrics.port())
            {
                return Err(invalid(
                    "server.metrics_listen",
                    "must use a port of its own, not the door's or the admin API's",
                ));
            }
        }
        Ok(())
    }

    fn validate_a2a_path(&self) -> Result<(), Invalid> {
        let path = &self.a2a_path;
        if !path.starts_with('/') || path.len() < 2 || path.ends_with('/') || path.contains("//") {
            return Err(invalid(
                "server.a2a_path",
                "must start with `/`, not end with `/`, and name a path such as /a2a/v1",
            ));
        }
        // Plain segments only: axum treats `{`, `}`, `:` and `*` as route syntax.
        if !path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'~' | b'-'))
        {
            return Err(invalid(
                "server.a2a_path",
                "may hold only letters, digits and /._~-",
            ));
        }
        if path.starts_with("/.well-known") || path == "/health" || path == "/ready" {
            return Err(invalid("server.a2a_path", "collides with a built-in route"));
        }
        Ok(())
    }
}
