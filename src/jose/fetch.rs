//! Fetching a remote document (a card or a JWKS) without being turned against the network
//! behind the verifier.
//!
//! * `https://` only. Plain `http://` to a loopback address is possible only with the
//!   dangerously named switch, for tests and local development.
//! * No redirects, no proxy, credentials in the URL refused, a timeout, and a size cap.
//! * Every address a name resolves to is checked *after* resolution, in the only resolver the
//!   client uses: loopback, private, link-local (including cloud metadata at 169.254.169.254),
//!   shared, documentation, multicast and unspecified addresses are refused, and so are IPv4
//!   addresses hidden in IPv6. An address written directly in the URL gets the same check.
//!   Name resolution goes through a [`Lookup`], so tests can control it without ever
//!   connecting to such an address.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Largest document fetched.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// Resolves a host name to addresses.
pub trait Lookup: Send + Sync + 'static {
    /// All addresses of `host`.
    fn lookup(
        &self,
        host: String,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;
}

/// The operating system's resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(
        &self,
        host: String,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// How documents may be fetched.
#[derive(Clone)]
pub struct FetchPolicy {
    /// DANGEROUS: allow loopback addresses, and `http://` to them (tests, local development).
    pub dangerous_allow_http_loopback: bool,
    /// Allow `https://` to private-side addresses ([`is_private_side`]): an agent on the
    /// caller's own network. Plain `http` stays loopback-only.
    pub allow_private_network: bool,
    /// How long a fetch may take.
    pub timeout: Duration,
    /// The resolver.
    pub lookup: Arc<dyn Lookup>,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            dangerous_allow_http_loopback: false,
            allow_private_network: false,
            timeout: Duration::from_secs(5),
            lookup: Arc::new(SystemLookup),
        }
    }
}

/// Why a document was not fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot fetch {url}: {reason}")]
pub struct FetchError {
    /// The URL, without any query.
    pub url: String,
    /// What went wrong.
    pub reason: String,
}

/// Whether `ip` may be fetched from: a public unicast address (or loopback, when allowed).
pub fn is_allowed(ip: IpAddr, allow_loopback: bool) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_allowed(v4, allow_loopback),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_allowed(v4, allow_loopback);
            }
            if v6.is_loopback() {
                return allow_loopback;
            }
            let first = v6.segments()[0];
            !(v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // deprecated site-local fec0::/10
                || first == 0x2002 // 6to4, which embeds an IPv4 address
                || (first == 0x2001 && v6.segments()[1] == 0) // Teredo, which embeds one too
                || v6.segments()[..5] == [0, 0, 0, 0, 0xffff] // IPv4-translated ::ffff:0:a.b.c.d
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || (first == 0x0064 && v6.segments()[1] == 0xff9b) // NAT64 to v4
                || v6.segments()[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible
        }
    }
}

fn v4_allowed(ip: Ipv4Addr, allow_loopback: bool) -> bool {
    if ip.is_loopback() {
        return allow_loopback;
    }
    let [a, b, c, _] = ip.octets();
    !(ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240)
}

/// Whether `ip` is on the private side of the network: loopback, a private range (RFC 1918,
/// unique local), or shared address space (carrier-grade NAT, overlay networks). Link-local
/// addresses (cloud metadata at 169.254.169.254 among them) are not.
pub fn is_private_side(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback() || v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// Which addresses a guarded client may connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Public unicast addresses only.
    Public,
    /// Public addresses and loopback (under a dangerous test switch).
    PublicOrLoopback,
    /// Loopback only (plain `http` under a dangerous test switch).
    Loopback,
    /// The private side only ([`is_private_side`]): plain `http` to a model or an agent that
    /// the operator runs, which must never leave the private network unencrypted.
    PrivateSide,
    /// Public addresses and the private side (loopback included): `https` from a client the
    /// caller pointed at an agent on their own network.
    PublicOrPrivateSide,
}

impl Reach {
    fn admits(self, ip: IpAddr) -> bool {
        // Loopback, IPv4-mapped forms included: what the switch alone lets through.
        let loopback = is_allowed(ip, true) && !is_allowed(ip, false);
        match self {
            Self::Public => is_allowed(ip, false),
            Self::PublicOrLoopback => is_allowed(ip, true),
            Self::Loopback => loopback,
            Self::PrivateSide => is_private_side(ip),
            Self::PublicOrPrivateSide => is_allowed(ip, false) || is_private_side(ip),
        }
    }

    fn refusal(self, host: &str) -> String {
        match self {
            Self::Loopback => {
                format!("{host} resolves to no loopback address (plain http goes to loopback only)")
            }
            Self::PrivateSide => format!(
                "{host} resolves to no loopback or private address (plain http stays on the private network; use https)"
            ),
            Self::PublicOrPrivateSide => format!(
                "{host} resolves to no public or private-network address (link-local and metadata addresses are refused)"
            ),
            Self::Public | Self::PublicOrLoopback => format!(
                "{host} resolves to no public address (private, loopback, link-local and metadata addresses are refused)"
            ),
        }
    }
}

/// The only resolver a guarded client uses: it hands the client only the addresses its
/// [`Reach`] admits, so the connection goes to an address that was checked, whatever the name
/// resolves to a moment later (DNS rebinding).
pub(crate) struct GuardedResolver {
    pub(crate) lookup: Arc<dyn Lookup>,
    pub(crate) reach: Reach,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let lookup = self.lookup.clone();
        let reach = self.reach;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = lookup.lookup(host.clone()).await?;
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|ip| reach.admits(*ip))
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if allowed.is_empty() {
                return Err(reach.refusal(&host).into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A file name for what `parts` name together: the first 16 bytes of the SHA-256 of the parts,
/// each ended by a NUL, in hex. What a name stands for cannot be read from it.
pub(crate) fn file_name_digest(parts: &[&[u8]]) -> String {
    use sha2::Digest as _;
    let mut digest = sha2::Sha256::new();
    for part in parts {
        digest.update(part);
        digest.update([0]);
    }
    digest
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `url` as errors show it: without credentials or query.
pub(crate) fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

/// Fetches a small text document under `policy`.
pub async fn fetch_text(url: &str, policy: &FetchPolicy) -> Result<String, FetchError> {
    fetch_document(url, policy)
        .await
        .map(|document| document.text)
}

/// A small text document, as [`fetch_text`], with how long its server says it stays fresh.
pub async fn fetch_document(url: &str, policy: &FetchPolicy) -> Result<Document, FetchError> {
    let tls = crate::net::tls::default_client_config().map_err(|e| FetchError {
        url: "<not fetched>".to_owned(),
        reason: e.to_string(),
    })?;
    Fetcher::new(policy.clone(), &tls)
        .map_err(|reason| FetchError {
            url: "<not fetched>".to_owned(),
            reason,
        })?
        .document(url)
        .await
}

/// A fetched document and how long its server says it stays fresh.
#[derive(Debug, Clone)]
pub struct Document {
    /// The text.
    pub text: String,
    /// `Cache-Control: max-age` less `Age`, zero for `no-store` or `no-cache`; `None` when the
    /// server says nothing usable. The caller bounds it.
    pub fresh_for: Option<Duration>,
}

/// How long a response stays fresh by its `Cache-Control` and `Age` (RFC 9111 §4.2.1, for a
/// private cache: `s-maxage` is a shared cache's and is not read).
pub fn freshness(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let mut max_age = None;
    for value in headers.get_all(reqwest::header::CACHE_CONTROL) {
        for directive in value.to_str().ok()?.split(',') {
            let directive = directive.trim().to_ascii_lowercase();
            if directive == "no-store" || directive == "no-cache" {
                return Some(Duration::ZERO);
            }
            if let Some(seconds) = directive.strip_prefix("max-age=") {
                max_age = Some(seconds.trim_matches('"').parse::<u64>().ok()?);
            }
        }
    }
    let age = headers
        .get(reqwest::header::AGE)
        .and_then(|age| age.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(0);
    max_age.map(|max_age| Duration::from_secs(max_age.saturating_sub(age)))
}

/// The one guarded HTTP client of a command that reads cards and key sets and then calls an
/// agent (`peergate call`, `peergate card verify`): every URL it is given, whoever named it,
/// passes the same checks and the same address guard.
///
/// * `https`, or `http` to a loopback address only under
///   [`FetchPolicy::dangerous_allow_http_loopback`], which also lets `https` reach loopback;
/// * `https` to a private-network address only under [`FetchPolicy::allow_private_network`];
/// * every address a name resolves to is checked after resolution, by the only resolver the
///   clients use ([`GuardedResolver`]); an address written in the URL gets the same check;
/// * no redirects, no proxy, no credentials in a URL.
#[derive(Clone)]
pub struct Fetcher {
    policy: FetchPolicy,
    /// For `https` URLs.
    https: reqwest::Client,
    /// For `http` URLs to loopback, when the policy allows them.
    loopback_http: Option<reqwest::Client>,
}

impl Fetcher {
    /// The clients for `policy`, their TLS `tls` (roots, and a client certificate when the
    /// caller presents one).
    pub fn new(policy: FetchPolicy, tls: &Arc<rustls::ClientConfig>) -> Result<Self, String> {
        let build = |reach: Reach| {
            crate::net::tls::client_builder(tls)
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(policy.timeout)
                .connect_timeout(policy.timeout.min(Duration::from_secs(10)))
                .dns_resolver(Arc::new(GuardedResolver {
                    lookup: policy.lookup.clone(),
                    reach,
                }))
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        };
        let https = build(policy.https_reach())?;
        let loopback_http = if policy.dangerous_allow_http_loopback {
            Some(build(Reach::Loopback)?)
        } else {
            None
        };
        Ok(Self {
            policy,
            https,
            loopback_http,
        })
    }

    /// The client for `url`, after its checks; the reason it may not be used otherwise.
    pub fn client_for(&self, url: &reqwest::Url) -> Result<&reqwest::Client, String> {
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials in the URL are refused".to_owned());
        }
        let host = url.host_str().ok_or("the URL has no host")?;
        let literal: Option<IpAddr> = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok();
        match url.scheme() {
            "https" => {
                let reach = self.policy.https_reach();
                if let Some(ip) = literal
                    && !reach.admits(ip)
                {
                    return Err(match reach {
                        Reach::PublicOrLoopback => "the address is neither public nor loopback",
                        Reach::PublicOrPrivateSide => {
                            "the address is neither public nor on the private network (link-local and metadata addresses are refused)"
                        }
                        _ => "the address is not a public one",
                    }
                    .to_owned());
                }
                Ok(&self.https)
            }
            "http" => {
                let Some(client) = &self.loopback_http else {
                    return Err(
                        "only https is fetched; for plain http to this machine's loopback (a local test) add --dangerous-allow-http-loopback"
                            .to_owned(),
                    );
                };
                let loopback = match literal {
                    Some(ip) => Reach::Loopback.admits(ip),
                    None => host == "localhost",
                };
                if !loopback {
                    return Err("http is allowed only to loopback".to_owned());
                }
                Ok(client)
            }
            other => Err(format!("scheme {other:?} is not fetched")),
        }
    }

    /// A small text document: status 200, at most [`MAX_DOCUMENT_BYTES`], UTF-8.
    pub async fn text(&self, url: &str) -> Result<String, FetchError> {
        self.document(url).await.map(|document| document.text)
    }

    /// A small text document, as [`Fetcher::text`], with how long its server says it stays
    /// fresh.
    pub async fn document(&self, url: &str) -> Result<Document, FetchError> {
        let (body, fresh_for, fail) = self.fetched(url).await?;
        let text = String::from_utf8(body).map_err(|_| fail("not UTF-8".to_owned()))?;
        Ok(Document { text, fresh_for })
    }

    /// A small document's bytes (status 200, at most [`MAX_DOCUMENT_BYTES`]).
    pub async fn bytes(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        Ok(self.fetched(url).await?.0)
    }

    /// The body, its freshness, and how to fail naming the URL shown.
    async fn fetched(
        &self,
        url: &str,
    ) -> Result<(Vec<u8>, Option<Duration>, impl Fn(String) -> FetchError), FetchError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| FetchError {
            url: "<not a URL>".to_owned(),
            reason: "not a URL".to_owned(),
        })?;
        let shown = shown_url(&parsed);
        let fail = move |reason: String| FetchError {
            url: shown.clone(),
            reason,
        };
        let client = self.client_for(&parsed).map_err(&fail)?;
        // The resolver's refusal is the useful part of the error chain.
        let mut response = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| fail(crate::net::client::innermost_reason(&e)))?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(fail(format!("HTTP status {}", response.status().as_u16())));
        }
        let fresh_for = freshness(response.headers());
        let body = crate::net::client::read_bounded(&mut response, MAX_DOCUMENT_BYTES)
            .await
            .map_err(|e| match e {
                crate::net::client::BodyError::TooLarge => {
                    fail(format!("larger than {MAX_DOCUMENT_BYTES} bytes"))
                }
                crate::net::client::BodyError::Broken(e) => {
                    fail(crate::net::client::innermost_reason(&e))
                }
            })?;
        Ok((body, fresh_for, fail))
    }
}

impl FetchPolicy {
    /// Which addresses an `https` URL may reach.
    fn https_reach(&self) -> Reach {
        match (
            self.allow_private_network,
            self.dangerous_allow_http_loopback,
        ) {
            (true, _) => Reach::PublicOrPrivateSide,
            (false, true) => Reach::PublicOrLoopback,
            (false, false) => Reach::Public,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_is_max_age_less_age_and_nothing_for_no_cache() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in pairs {
                map.append(
                    reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            map
        };
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(freshness(&headers(&[])), None);
        assert_eq!(
            freshness(&headers(&[("cache-control", "public, max-age=60")])),
            secs(60)
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "max-age=60"), ("age", "45")])),
            secs(15)
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "max-age=60"), ("age", "90")])),
            secs(0)
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "no-cache, max-age=60")])),
            secs(0)
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "no-store")])),
            secs(0)
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "s-maxage=60")])),
            None
        );
        assert_eq!(
            freshness(&headers(&[("cache-control", "max-age=soon")])),
            None
        );
    }

    #[test]
    fn the_private_side_is_loopback_and_private_ranges_but_not_link_local() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_private_side(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "169.254.169.254",
            "fe80::1",
            "2001:4860::8888",
            "0.0.0.0",
            "224.0.0.1",
        ] {
            assert!(!is_private_side(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn refuses_every_non_public_range() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "2001:db8::1",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
            "fec0::1",
            "2002:7f00:1::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "::ffff:0:7f00:1",
        ] {
            assert!(!is_allowed(bad.parse().unwrap(), false), "{bad}");
        }
        for good in ["93.184.216.34", "2606:2800:220:1::1", "1.1.1.1"] {
            assert!(is_allowed(good.parse().unwrap(), false), "{good}");
        }
        assert!(is_allowed("127.0.0.1".parse().unwrap(), true));
        assert!(!is_allowed("10.0.0.1".parse().unwrap(), true));
    }
}
