//! Argon2id for the passwords people choose (Basic authentication).
//!
//! Every verification runs on the blocking pool behind a small semaphore, so a burst of login
//! attempts can occupy at most that many threads and 19 MiB each, and never the async workers.
//! A name with no password (unknown, or never set) is verified against a dummy hash made at
//! start-up with the same parameters, so it costs the same as a wrong password.

use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::Semaphore;

/// Shortest password `peergate peer password` accepts.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// Hashes a password as an Argon2id PHC string (m = 19 MiB, t = 2, p = 1), with a random salt.
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.to_string())
        .map_err(|e| e.to_string())
}

/// Verifies passwords off the async workers, a few at a time.
#[derive(Debug, Clone)]
pub struct PasswordChecker {
    permits: Arc<Semaphore>,
    dummy_hash: Arc<str>,
    verifications: Arc<AtomicU64>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl PasswordChecker {
    /// At most `at_once` verifications run concurrently.
    pub fn new(at_once: usize) -> Result<Self, String> {
        let dummy = hash_password("peergate dummy password for unknown names")?;
        Ok(Self {
            permits: Arc::new(Semaphore::new(at_once.max(1))),
            dummy_hash: dummy.into(),
            verifications: Arc::new(AtomicU64::new(0)),
            running: Arc::default(),
            peak: Arc::default(),
        })
    }

    /// Whether `password` matches `phc`; with no hash, runs the same work and says no.
    pub async fn verify(&self, phc: Option<&str>, password: &str) -> bool {
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        self.verifications.fetch_add(1, Ordering::Relaxed);
        let (hash, known) = match phc {
            Some(phc) => (phc.to_owned(), true),
            None => (self.dummy_hash.to_string(), false),
        };
        let password = password.to_owned();
        let running = self.running.clone();
        let peak = self.peak.clone();
        let matched = tokio::task::spawn_blocking(move || {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let matched = Argon2::default()
                .verify_password(password.as_bytes(), hash.as_str())
                .is_ok();
            running.fetch_sub(1, Ordering::SeqCst);
            matched
        })
        .await
        .unwrap_or(false);
        matched && known
    }

    /// How many Argon2 verifications ran since start-up.
    pub fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// The most verifications that ever ran at the same moment.
    pub fn peak_concurrency(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn verifies_and_unknown_names_never_match() {
        let checker = PasswordChecker::new(2).unwrap();
        let phc = hash_password("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(checker.verify(Some(&phc), "correct horse battery").await);
        assert!(!checker.verify(Some(&phc), "wrong").await);
        // The dummy hash's own password does not open an unknown name.
        assert!(
            !checker
                .verify(None, "peergate dummy password for unknown names")
                .await
        );
        assert_eq!(checker.verifications(), 3);
    }

    #[test]
    fn the_dummy_hash_costs_what_a_real_one_costs() {
        let checker = PasswordChecker::new(1).unwrap();
        let real = hash_password("any password at all").unwrap();
        let params = |phc: &str| phc.split('$').nth(3).map(str::to_owned);
        // Same algorithm, version and m/t/p parameters: the same work per verification.
        assert_eq!(params(&checker.dummy_hash), params(&real));
        assert_eq!(checker.dummy_hash.split('$').nth(1), Some("argon2id"));
        assert_eq!(params(&real).as_deref(), Some("m=19456,t=2,p=1"));
    }
}
