//! Remote key sets for a long-lived verifier: each URL fetched once and reused while its
//! server says it is fresh (within bounds), refetched early for a `kid` it lacks, and never
//! turned into a way to hammer the key server or to keep a key its owner removed.
//!
//! * **Freshness.** A set is used without asking again for as long as its `Cache-Control`
//!   says (`max-age` less `Age`), but never less than [`JwksCache::MIN_AGE`] nor more than
//!   [`JwksCache::MAX_AGE`]; [`JwksCache::DEFAULT_AGE`] when the server says nothing. So a key
//!   the provider removes stops being trusted within its own cache lifetime, at most ten
//!   minutes.
//! * **An unknown `kid`.** A token naming a `kid` the set lacks asks for the set again, unless
//!   a fetch ended within [`JwksCache::KID_FLOOR`] (a flood of made-up `kid`s costs the key
//!   server one fetch per floor, and a real rotation waits at most that long behind it), a
//!   fetch failed within [`JwksCache::COOLDOWN`], or a fetch within the cooldown already did
//!   not find that `kid` (the same junk never asks twice).
//! * **The good keys stay.** A refetch replaces the cached set only with a usable one. An
//!   error answer, a timeout or a garbled document leaves the last good set in use, for at most
//!   [`JwksCache::MAX_STALE`] after it was fetched; past that the verifier fails closed. A
//!   failed fetch is logged once, where it happened, not by every request it answers.
//! * **Nobody else waits.** Each URL has its own lock, taken only for that URL's fetch; the
//!   map of URLs is locked only to find the entry, never across a fetch.

use crate::clock::{Clock, Timestamp, elapsed, later};
use crate::jose::fetch::{
    Document, FetchError, FetchPolicy, Fetcher, fetch_document, file_name_digest, shown_url,
};
use crate::jose::verify::TrustedKeys;
use crate::locks::Locked;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a key set is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking<'a> {
    /// The cached set will do while it is fresh.
    Fresh,
    /// A token names this `kid`, which the cached set lacks: the provider may have rotated.
    ForKid(&'a str),
    /// A signature failed against the cached set: its signer may have rotated.
    AfterFailure,
}

/// A key set as the cache hands it out: the same `Arc` for as long as the set is the same.
#[derive(Debug, Clone)]
pub struct KeySet {
    /// The JWKS text.
    pub text: Arc<str>,
    /// Until when the cache would hand it out again without asking the server.
    pub fresh_until: Timestamp,
}

/// See the [module docs](self).
pub struct JwksCache {
    policy: FetchPolicy,
    /// The client to fetch with, when the caller brings one (its own roots, a client
    /// certificate); otherwise each fetch builds one from `policy`.
    fetcher: Option<Fetcher>,
    /// Where good sets are kept between runs of a short-lived process (`peergate call`):
    /// each URL in a file of its own, with the time it was fetched, named also by the
    /// `context` it was fetched under (which addresses and roots were trusted), so a run that
    /// trusts less never uses what a run trusting more fetched.
    directory: Option<(std::path::PathBuf, String)>,
    /// How long a good set stays in use while every refetch fails.
    max_stale: Duration,
    /// Whether a set is an identity provider's, which keeps its usable keys and skips the
    /// others ([`TrustedKeys::add_issuer_jwks`]), rather than a card signer's, refused whole
    /// for one bad key.
    issuer_keys: bool,
    clock: Arc<dyn Clock>,
    entries: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<CachedJwks>>>>,
}

#[derive(Default)]
struct CachedJwks {
    /// The last key set that was fetched and usable.
    good: Option<Good>,
    /// The last fetch, failed or not, and when.
    last_attempt: Option<(Result<(), FetchError>, Timestamp)>,
    /// `kid`s a fetch did not find, and when: not asked for again within the cooldown.
    missing: Vec<(String, Timestamp)>,
}

struct Good {
    text: Arc<str>,
    /// When it was fetched.
    at: Timestamp,
    /// How long it is used without asking again, its server's word within bounds.
    fresh_for: Duration,
    /// Its keys' `kid`s.
    kids: Vec<String>,
}

impl JwksCache {
    /// The longest a fetched set is used without asking again, whatever its server says.
    pub const MAX_AGE: Duration = Duration::from_secs(600);
    /// The shortest, whatever its server says (`no-cache` included).
    pub const MIN_AGE: Duration = Duration::from_secs(30);
    /// How long a set whose server says nothing about it is used.
    pub const DEFAULT_AGE: Duration = Duration::from_secs(300);
    /// How long a failed fetch, or a `kid` a fetch did not find, holds off the next fetch.
    pub const COOLDOWN: Duration = Duration::from_secs(30);
    /// The least time between a fetch and one for a `kid` the set lacks.
    pub const KID_FLOOR: Duration = Duration::from_secs(2);
    /// How long a good set stays in use while every refetch fails.
    pub const MAX_STALE: Duration = Duration::from_secs(24 * 3600);
    /// The most missing `kid`s remembered per URL.
    const MISSING_KIDS: usize = 64;

    /// A cache fetching under `policy`, aging entries by `clock`.
    pub fn new(policy: FetchPolicy, clock: Arc<dyn Clock>) -> Self {
        Self {
            policy,
            fetcher: None,
            directory: None,
            max_stale: Self::MAX_STALE,
            issuer_keys: false,
            clock,
            entries: std::sync::Mutex::default(),
        }
    }

    /// The same cache fetching with `fetcher`.
    pub fn fetching_with(mut self, fetcher: Fetcher) -> Self {
        self.fetcher = Some(fetcher);
        self
    }

    /// The same cache keeping its good sets in `directory` (made 0700 when missing) between
    /// runs, for fetches under `context` (what was trusted: reach, roots). A file that cannot
    /// be read, is not this user's alone, or does not hold a usable set is only a cache miss.
    pub fn kept_in(mut self, directory: std::path::PathBuf, context: String) -> Self {
        self.directory = Some((directory, context));
        self
    }

    /// The same cache keeping a good set through failing refetches for `max_stale` only (at
    /// least [`JwksCache::MAX_AGE`]: a set is used that long anyway).
    pub fn stale_for(mut self, max_stale: Duration) -> Self {
        self.max_stale = max_stale.max(Self::MAX_AGE);
        self
    }

    /// The same cache for an identity provider's key sets (see [`JwksCache::issuer_keys`]).
    pub fn for_issuer_keys(mut self) -> Self {
        self.issuer_keys = true;
        self
    }

    /// The JWKS at `url`: from the cache while it is fresh, else (or for `asking`'s reason,
    /// within the module's bounds) fetched again.
    pub async fn get(&self, url: &str, asking: Asking<'_>) -> Result<KeySet, FetchError> {
        let slot = {
            let mut entries = self.entries.locked();
            entries.entry(url.to_owned()).or_default().clone()
        };
        let mut entry = slot.lock().await;
        let now = self.clock.now();
        self.check_reach(url)?;
        if entry.good.is_none() && entry.last_attempt.is_none() {
            entry.good = self.read_kept(url, now);
        }
        if !self.fetch_now(&mut entry, asking, now) {
            return self.cached(&entry, url, now);
        }
        let fetched = match &self.fetcher {
            Some(fetcher) => fetcher.document(url).await,
            None => fetch_document(url, &self.policy).await,
        };
        // Timed from the fetch's end: a slow key server must not make the floor and the
        // cooldowns shorter than they are.
        self.settle(&mut entry, url, asking, fetched, self.clock.now())
    }

    /// A kept set is used only where this run may fetch it from itself.
    fn check_reach(&self, url: &str) -> Result<(), FetchError> {
        let Some(fetcher) = &self.fetcher else {
            return Ok(());
        };
        let parsed = reqwest::Url::parse(url).map_err(|_| FetchError {
            url: "<not a URL>".to_owned(),
            reason: "not a URL".to_owned(),
        })?;
        fetcher
            .client_for(&parsed)
            .map(|_| ())
            .map_err(|reason| FetchError {
                url: shown_url(&parsed),
                reason,
            })
    }

    /// Whether to ask the server now, for `asking`'s reason.
    fn fetch_now(&self, entry: &mut CachedJwks, asking: Asking<'_>, now: Timestamp) -> bool {
        entry
            .missing
            .retain(|(_, at)| elapsed(*at, now) < Self::COOLDOWN);
        let since = |at: Timestamp| elapsed(at, now);
        let failed_lately = matches!(
            &entry.last_attempt,
            Some((Err(_), at)) if since(*at) < Self::COOLDOWN
        );
        if failed_lately {
            return false;
        }
        let Some(good) = &entry.good else {
            return true;
        };
        let fresh = since(good.at) < good.fresh_for;
        match asking {
            Asking::Fresh => !fresh,
            Asking::ForKid(kid) => {
                let known = good.kids.iter().any(|k| k == kid);
                let tried = entry.missing.iter().any(|(k, _)| k == kid);
                !fresh || !(known || tried || since(good.at) < Self::KID_FLOOR)
            }
            Asking::AfterFailure => !fresh || since(good.at) >= Self::COOLDOWN,
        }
    }

    /// The cached set, as it is (fresh, or stale within [`JwksCache::MAX_STALE`] after a
    /// failed fetch), or the failure that left none.
    fn cached(&self, entry: &CachedJwks, url: &str, now: Timestamp) -> Result<KeySet, FetchError> {
        if let Some(good) = &entry.good
            && elapsed(good.at, now) < self.max_stale
        {
            return Ok(KeySet {
                text: good.text.clone(),
                fresh_until: fresh_until(good, entry, now),
            });
        }
        Err(match &entry.last_attempt {
            Some((Err(error), _)) => error.clone(),
            // Fetched and usable, but longer ago than the stale bound: failing closed.
            _ => FetchError {
                url: shown(url),
                reason: "the key set is out of date".to_owned(),
            },
        })
    }

    /// Takes what a fetch brought: a usable set replaces the cached one, anything else is
    /// logged once and leaves the cached one in use.
    fn settle(
        &self,
        entry: &mut CachedJwks,
        url: &str,
        asking: Asking<'_>,
        fetched: Result<Document, FetchError>,
        now: Timestamp,
    ) -> Result<KeySet, FetchError> {
        let fetched = fetched.and_then(|document| {
            let kids = self.usable(&document.text).map_err(|why| FetchError {
                url: shown(url),
                reason: format!("not a usable key set: {why}"),
            })?;
            Ok((document, kids))
        });
        match fetched {
            Ok((document, kids)) => {
                let fresh_for = bounded_age(document.fresh_for);
                self.keep(url, &document.text, now, fresh_for);
                if let Asking::ForKid(kid) = asking
                    && !kids.iter().any(|k| k == kid)
                    && entry.missing.len() < Self::MISSING_KIDS
                {
                    entry.missing.push((kid.to_owned(), now));
                }
                entry.good = Some(Good {
                    text: Arc::from(document.text),
                    at: now,
                    fresh_for,
                    kids,
                });
                entry.last_attempt = Some((Ok(()), now));
            }
            Err(error) => {
                match &entry.good {
                    Some(_) => {
                        tracing::warn!(%error, "refetching a key set failed; the last good one stays in use")
                    }
                    None => tracing::warn!(%error, "a key set cannot be fetched"),
                }
                entry.last_attempt = Some((Err(error), now));
            }
        }
        self.cached(entry, url, now)
    }

    /// The `kid`s of `text`, if it is a key set this cache may keep.
    fn usable(&self, text: &str) -> Result<Vec<String>, String> {
        let mut keys = TrustedKeys::new();
        let usable = if self.issuer_keys {
            keys.add_issuer_jwks(text).map(|_| ())
        } else {
            keys.add_jwks(text)
        };
        usable.map_err(|why| why.to_string())?;
        Ok(keys.kids().map(str::to_owned).collect())
    }

    /// The file `url`'s set is kept in.
    fn kept_file(&self, url: &str) -> Option<std::path::PathBuf> {
        let (directory, context) = self.directory.as_ref()?;
        let name = file_name_digest(&[url.as_bytes(), context.as_bytes()]);
        Some(directory.join(format!("jwks-{name}.json")))
    }

    /// The set kept for `url` by an earlier run: only from a file and directory this user owns
    /// and nobody else may write, fetched in the past, and usable.
    fn read_kept(&self, url: &str, now: Timestamp) -> Option<Good> {
        let file = self.kept_file(url)?;
        let kept: serde_json::Value =
            serde_json::from_slice(&crate::jose::keys::read_own_private(&file)?).ok()?;
        // A file for another URL or context (a collision, or a copy) is not used.
        let context = self.directory.as_ref().map(|(_, context)| context.as_str());
        if kept["url"] != url || kept["context"].as_str() != context {
            return None;
        }
        let at = Timestamp::from_second(kept["fetched_at"].as_i64()?).ok()?;
        if at > now {
            return None;
        }
        let text = kept["jwks"].as_str()?.to_owned();
        let kids = self.usable(&text).ok()?;
        // Files kept before freshness was kept say nothing: the default.
        let fresh_for = bounded_age(kept["fresh_for"].as_u64().map(Duration::from_secs));
        Some(Good {
            text: Arc::from(text),
            at,
            fresh_for,
            kids,
        })
    }

    fn keep(&self, url: &str, text: &str, at: Timestamp, fresh_for: Duration) {
        let Some(file) = self.kept_file(url) else {
            return;
        };
        let context = self.directory.as_ref().map(|(_, context)| context.as_str());
        let kept = serde_json::json!({
            "url": url,
            "context": context,
            "fetched_at": at.as_second(),
            "fresh_for": fresh_for.as_secs(),
            "jwks": text,
        });
        // Failing to keep it is no error: the next run fetches it again.
        let _ = crate::jose::keys::replace_private(&file, kept.to_string().as_bytes());
    }
}

/// `url` as errors show it: without credentials or query.
fn shown(url: &str) -> String {
    reqwest::Url::parse(url).map_or_else(|_| "<not a URL>".to_owned(), |u| shown_url(&u))
}

/// A server's word on freshness, within [`JwksCache::MIN_AGE`] and [`JwksCache::MAX_AGE`].
fn bounded_age(said: Option<Duration>) -> Duration {
    said.unwrap_or(JwksCache::DEFAULT_AGE)
        .clamp(JwksCache::MIN_AGE, JwksCache::MAX_AGE)
}

/// Until when `good` is handed out without asking: its freshness, or after a failed fetch the
/// end of the cooldown.
fn fresh_until(good: &Good, entry: &CachedJwks, now: Timestamp) -> Timestamp {
    let fresh = later(good.at, good.fresh_for);
    match &entry.last_attempt {
        Some((Err(_), at)) if fresh <= now => later(*at, JwksCache::COOLDOWN),
        _ => fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_word_on_freshness_is_kept_within_bounds() {
        let secs = Duration::from_secs;
        assert_eq!(bounded_age(None), JwksCache::DEFAULT_AGE);
        assert_eq!(bounded_age(Some(secs(0))), JwksCache::MIN_AGE);
        assert_eq!(bounded_age(Some(secs(120))), secs(120));
        assert_eq!(bounded_age(Some(secs(86_400))), JwksCache::MAX_AGE);
    }
}
