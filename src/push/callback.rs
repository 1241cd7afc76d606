//! Where push notifications may go.
//!
//! A callback URL is checked when its config is stored and again before every delivery, and
//! the delivering client resolves names only through [`GuardedResolver`], so a name that
//! resolved to a public address at the check cannot be rebound to an internal one at connect:
//!
//! * `https://` only, no credentials in the URL, at most 2048 bytes;
//! * every address the host resolves to must be public: loopback, private, link-local
//!   (including cloud metadata at 169.254.169.254), shared, documentation, multicast and
//!   unspecified addresses are refused, and so are IPv4 addresses hidden in IPv6;
//! * redirects are not followed (a 3xx is a failed delivery) and no proxy is used;
//! * IPv4 hidden in IPv6 (mapped, compatible, translated, 6to4, Teredo, NAT64) counts as the
//!   address it hides, or is refused.
//!
//! `push.dangerous_allow_loopback_callbacks` lets callbacks reach loopback addresses, over
//! `http://` too, for tests and local development; private and metadata addresses stay
//! refused even then.

use crate::jose::fetch::{GuardedResolver, Lookup, Reach, SystemLookup, is_allowed};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Longest callback URL accepted.
pub const MAX_URL_BYTES: usize = 2048;

/// Why a callback URL is refused. The message never repeats the URL: it may carry a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallbackRefused(pub String);

/// The rules callbacks are checked against.
#[derive(Clone)]
pub struct CallbackPolicy {
    /// DANGEROUS: loopback callbacks (and `http://` to them) are allowed.
    pub dangerous_allow_loopback: bool,
    /// The resolver.
    pub lookup: Arc<dyn Lookup>,
}

impl std::fmt::Debug for CallbackPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackPolicy")
            .field("dangerous_allow_loopback", &self.dangerous_allow_loopback)
            .finish_non_exhaustive()
    }
}

impl CallbackPolicy {
    /// Callbacks checked against names the operating system resolves; loopback addresses
    /// too when `dangerous_allow_loopback` (`push.dangerous_allow_loopback_callbacks`).
    pub fn resolving(dangerous_allow_loopback: bool) -> Self {
        Self {
            dangerous_allow_loopback,
            lookup: Arc::new(SystemLookup),
        }
    }

    /// Checks `url` now: its shape, and every address its host resolves to.
    pub async fn check(&self, url: &str) -> Result<reqwest::Url, CallbackRefused> {
        let refuse = |why: &str| Err(CallbackRefused(why.to_owned()));
        if url.len() > MAX_URL_BYTES {
            return refuse("is longer than 2048 bytes");
        }
        let Ok(parsed) = reqwest::Url::parse(url) else {
            return refuse("is not an absolute URL");
        };
        let loopback_only = match parsed.scheme() {
            "https" => false,
            "http" if self.dangerous_allow_loopback => true,
            "http" => return refuse("must be https"),
            _ => return refuse("must be an https URL"),
        };
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return refuse("must not carry credentials (send them in authentication)");
        }
        let Some(host) = parsed.host_str() else {
            return refuse("has no host");
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addresses = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => match tokio::time::timeout(
                Duration::from_secs(5),
                self.lookup.lookup(host.to_owned()),
            )
            .await
            {
                Ok(Ok(found)) if !found.is_empty() => found,
                _ => return refuse("names a host that does not resolve"),
            },
        };
        for ip in addresses {
            let ip = canonical(ip);
            if loopback_only && !ip.is_loopback() {
                return refuse("may use http only to a loopback address");
            }
            if !is_allowed(ip, self.dangerous_allow_loopback) {
                return refuse(
                    "resolves to an address that is not public (loopback, private, link-local and metadata addresses are refused)",
                );
            }
        }
        Ok(parsed)
    }

    /// A client deliveries go through: no redirects, no proxy, `timeout` per delivery (3 s at
    /// most to connect, so an address that drops packets frees its slot sooner), and names
    /// resolved only to addresses [`is_allowed`] accepts, or (`loopback_only`, for `http://`
    /// callbacks under the dangerous switch) only to loopback addresses.
    pub fn client(
        &self,
        timeout: Duration,
        loopback_only: bool,
    ) -> Result<reqwest::Client, String> {
        let tls = crate::net::tls::default_client_config().map_err(|e| e.to_string())?;
        crate::net::client::keeping_connections(crate::net::tls::client_builder(&tls))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(3)))
            .dns_resolver(Arc::new(GuardedResolver {
                lookup: self.lookup.clone(),
                reach: match (loopback_only, self.dangerous_allow_loopback) {
                    (true, _) => Reach::Loopback,
                    (false, true) => Reach::PublicOrLoopback,
                    (false, false) => Reach::Public,
                },
            }))
            .build()
            .map_err(|e| e.to_string())
    }
}

/// An IPv4 address written in IPv6 (`::ffff:127.0.0.1`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;

    /// Resolves every name to the addresses it was given.
    struct Fixed(Vec<IpAddr>);

    impl Lookup for Fixed {
        fn lookup(
            &self,
            _: String,
        ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
            let found = self.0.clone();
            Box::pin(async move { Ok(found) })
        }
    }

    fn policy(loopback: bool, resolves_to: &[&str]) -> CallbackPolicy {
        CallbackPolicy {
            dangerous_allow_loopback: loopback,
            lookup: Arc::new(Fixed(
                resolves_to.iter().map(|a| a.parse().unwrap()).collect(),
            )),
        }
    }

    #[tokio::test]
    async fn only_https_to_public_addresses_passes() {
        let public = policy(false, &["93.184.216.34"]);
        assert!(
            public
                .check("https://hooks.example.com/a2a?x=1")
                .await
                .is_ok()
        );
        for (url, why) in [
            ("http://hooks.example.com/", "must be https"),
            ("ftp://hooks.example.com/", "must be an https URL"),
            ("https://user:pw@hooks.example.com/", "credentials"),
            ("not a url", "absolute URL"),
            ("https://127.0.0.1/", "not public"),
            ("https://169.254.169.254/latest/meta-data", "not public"),
            ("https://[::ffff:10.0.0.1]/", "not public"),
            ("https://10.1.2.3:8443/", "not public"),
        ] {
            let refused = public.check(url).await.unwrap_err().0;
            assert!(refused.contains(why), "{url}: {refused}");
            assert!(!refused.contains("pw"), "{refused}");
        }
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(public.check(&long).await.is_err());
    }

    #[tokio::test]
    async fn a_name_with_any_internal_address_is_refused() {
        let mixed = policy(false, &["93.184.216.34", "10.0.0.7"]);
        let refused = mixed.check("https://hooks.example.com/").await.unwrap_err();
        assert!(refused.0.contains("not public"), "{refused}");
        let metadata = policy(false, &["169.254.169.254"]);
        assert!(
            metadata
                .check("https://rebound.example.com/")
                .await
                .is_err()
        );
        let nothing = policy(false, &[]);
        assert!(nothing.check("https://nowhere.example.com/").await.is_err());
    }

    #[tokio::test]
    async fn the_dangerous_switch_opens_loopback_only() {
        let local = policy(true, &["127.0.0.1"]);
        assert!(local.check("http://localhost:9000/hook").await.is_ok());
        assert!(local.check("https://127.0.0.1:9000/hook").await.is_ok());
        let private = policy(true, &["10.0.0.1"]);
        assert!(private.check("https://hooks.internal/").await.is_err());
        assert!(private.check("http://hooks.internal/").await.is_err());
        assert!(local.check("https://169.254.169.254/").await.is_err());
        // http stays loopback-only even for a public address.
        let public = policy(true, &["93.184.216.34"]);
        let refused = public.check("http://hooks.example.com/").await.unwrap_err();
        assert!(refused.0.contains("loopback"), "{refused}");
    }
}
