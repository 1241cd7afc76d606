//! What `peergate call` and `peergate card verify` share to read cards and key sets: one guarded
//! client with one address guard and one loopback switch ([`Fetcher`]), and the JWKS cache
//! kept between runs ([`JwksCache`]), so the two commands cannot disagree about where they may
//! connect or which keys they trust.

use super::CliError;
use super::exit_status::{EXIT_OTHER, exit};
use crate::clock::SystemClock;
use crate::jose::fetch::{FetchPolicy, Fetcher};
use crate::jose::jwks_cache::{Asking, JwksCache};
use crate::jose::verify::{TrustedKeys, Verified, VerifyError, verify_card};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where a command may connect.
#[derive(Debug, Args)]
pub(super) struct ReachArgs {
    /// DANGEROUS, for tests and local development only: reach loopback addresses, and plain
    /// http:// to them.
    #[arg(long)]
    pub dangerous_allow_http_loopback: bool,
    /// Reach https:// addresses on your own network (RFC 1918, unique local, shared address
    /// space, loopback): an agent inside your organisation. Link-local and metadata addresses
    /// stay refused.
    #[arg(long)]
    pub allow_private_network: bool,
}

/// The keys a card is verified with, as both commands take them.
#[derive(Debug, Args)]
pub(super) struct CardKeyArgs {
    /// A JWKS that verifies the card: a file or a URL (repeatable). A URL's set is kept under
    /// $XDG_CACHE_HOME/peergate (0600) and used for 10 minutes without asking again, and asked
    /// for again at once when the card does not verify with it.
    #[arg(long = "jwks", value_name = "FILE|URL")]
    pub jwks: Vec<String>,
    /// An HS256 key that verifies the card, as KID=BASE64URL (at least 32 bytes; repeatable).
    #[arg(long = "secret", value_name = "KID=BASE64URL")]
    pub secrets: Vec<String>,
    /// When a key server does not answer, use the set kept from an earlier run for up to a
    /// day (by default a set older than 10 minutes is not used: a key withdrawn since stays
    /// withdrawn).
    #[arg(long)]
    pub use_stale_jwks: bool,
}

impl ReachArgs {
    /// What a kept key set was fetched under: a run trusting other addresses or other roots
    /// never uses it.
    pub fn trust(&self, ca_file: Option<&std::path::Path>) -> String {
        let roots = ca_file
            .and_then(|path| std::fs::read(path).ok())
            .map_or_else(
                || "system".to_owned(),
                |pem| crate::jose::fetch::file_name_digest(&[&pem]),
            );
        format!(
            "loopback={} private={} roots={roots}",
            self.dangerous_allow_http_loopback, self.allow_private_network
        )
    }

    /// The one client of a command, on `tls` (the roots and any client certificate).
    pub fn fetcher(&self, tls: &Arc<rustls::ClientConfig>) -> Result<Fetcher, CliError> {
        let policy = FetchPolicy {
            dangerous_allow_http_loopback: self.dangerous_allow_http_loopback,
            allow_private_network: self.allow_private_network,
            // SECURITY.md's promise for a card or a key set: 5 s, a key server that stalls
            // included. A message is sent with its own `--timeout`.
            timeout: Duration::from_secs(5),
            ..Default::default()
        };
        Fetcher::new(policy, tls).map_err(|reason| exit(EXIT_OTHER, reason))
    }
}

/// Whether a `FILE|URL` argument names a URL.
pub(super) fn is_url(source: &str) -> bool {
    source.starts_with("https://") || source.starts_with("http://")
}

/// A `FILE|URL` argument's document: fetched with `fetcher`, or read from the file.
pub(super) async fn document(fetcher: &Fetcher, source: &str) -> Result<String, CliError> {
    if is_url(source) {
        Ok(fetcher.text(source).await?)
    } else {
        std::fs::read_to_string(source)
            .map_err(|e| CliError::new(format!("cannot read {source}: {}", e.kind())))
    }
}

/// Where a command keeps what it learnt for the next run (`$XDG_CACHE_HOME/peergate`, else
/// `~/.cache/peergate`); `None` without a home directory.
pub(super) fn cache_directory() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("peergate"))
}

/// The keys a card is verified with: `--secret`s, and `--jwks` files and URLs, the URLs through
/// the JWKS cache (a set fetched within [`JwksCache::MAX_AGE`] is not asked for again; with
/// `--use-stale-jwks`, when the key server fails, the last good set stays in use for
/// [`JwksCache::MAX_STALE`]).
pub(super) struct CardKeys {
    secrets: Vec<String>,
    files: Vec<String>,
    urls: Vec<String>,
    cache: JwksCache,
}

impl CardKeys {
    /// The keys `args` name, URLs fetched with `fetcher` under `trust` ([`ReachArgs::trust`]).
    pub fn new(args: &CardKeyArgs, fetcher: Fetcher, trust: &str) -> Self {
        let (urls, files) = args.jwks.iter().cloned().partition(|s| is_url(s));
        let mut cache =
            JwksCache::new(FetchPolicy::default(), Arc::new(SystemClock)).fetching_with(fetcher);
        if !args.use_stale_jwks {
            cache = cache.stale_for(JwksCache::MAX_AGE);
        }
        if let Some(directory) = cache_directory() {
            cache = cache.kept_in(directory, trust.to_owned());
        }
        Self {
            secrets: args.secrets.clone(),
            files,
            urls,
            cache,
        }
    }

    /// Whether no key was named at all.
    pub fn none_named(&self) -> bool {
        self.secrets.is_empty() && self.files.is_empty() && self.urls.is_empty()
    }

    async fn load(&self, refetch: bool) -> Result<TrustedKeys, CliError> {
        let mut keys = TrustedKeys::new();
        for secret in &self.secrets {
            keys.add_secret_arg(secret)
                .map_err(|e| exit(EXIT_OTHER, e.to_string()))?;
        }
        for file in &self.files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| exit(EXIT_OTHER, format!("cannot read {file}: {}", e.kind())))?;
            keys.add_jwks(&text)
                .map_err(|e| exit(EXIT_OTHER, format!("{file}: {e}")))?;
        }
        for url in &self.urls {
            let asking = if refetch {
                Asking::AfterFailure
            } else {
                Asking::Fresh
            };
            let set = self
                .cache
                .get(url, asking)
                .await
                .map_err(|e| exit(EXIT_OTHER, e.to_string()))?;
            keys.add_jwks(&set.text)
                .map_err(|e| exit(EXIT_OTHER, e.to_string()))?;
        }
        Ok(keys)
    }

    /// The keys named, as one set (a URL's from the cache when it is fresh).
    pub async fn trusted(&self) -> Result<TrustedKeys, CliError> {
        self.load(false).await
    }

    /// Verifies `card_text`: the outer error is a key that could not be read, the inner one
    /// the verification's. When the card fails against key sets from the cache, they are
    /// fetched again (at most once per [`JwksCache::COOLDOWN`]) and the card checked once
    /// more: the signer may have rotated to a key the kept set does not hold yet.
    pub async fn verify(&self, card_text: &str) -> Result<Result<Verified, VerifyError>, CliError> {
        let keys = self.load(false).await?;
        if keys.is_empty() {
            return Err(exit(
                EXIT_OTHER,
                "no keys: the key sets given with --jwks hold no key (an empty \"keys\" array)",
            ));
        }
        Ok(match verify_card(card_text, &keys) {
            Err(VerifyError::NoValidSignature(_)) if !self.urls.is_empty() => {
                verify_card(card_text, &self.load(true).await?)
            }
            outcome => outcome,
        })
    }
}
