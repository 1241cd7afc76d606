//! Argon2id for the passwords people choose (Basic authentication).
//!
//! Every verification runs on the blocking pool behind a small semaphore, so a burst of login
//! attempts can occupy at most that many threads, never the async workers. Each slot owns its
//! Argon2 memory (19 MiB), allocated when the slot is first used and reused by every
//! verification after it: the memory Argon2 holds is at most `at_once` × 19 MiB, for the
//! life of the process, whatever the allocator does with freed blocks. Allocating it per
//! verification let the system allocator keep hundreds of MiB in per-thread arenas after a
//! burst of failed sign-ins. A stored hash asking for more memory than a slot holds is
//! refused, not given more. A name with no password (unknown, or never set) is verified
//! against a dummy hash made at start-up with the same parameters, so it costs the same as a
//! wrong password.
//!
//! Verifications wait for a slot in a bounded queue: at most [`QUEUE_PER_SLOT`] × the slots
//! wait at once (a few tens of milliseconds of Argon2 work). One past it is refused at once
//! ([`Busy`], answered 503 with `Retry-After`), so a flood of Basic logins makes a real one
//! retry a second later instead of waiting seconds behind the flood. Hashing a new password (the
//! admin API, authenticated) waits without that bound.
//!
//! A password that matched is known good for [`KNOWN_GOOD_FOR`]: its next verification against
//! the same stored hash takes no slot (the cache holds an HMAC of the hash and the password
//! under a key made at start-up, never either). So wrong passwords from many addresses fill the
//! queue for wrong passwords only, and a partner who signed in keeps signing in. A new password
//! is a new hash, so nothing of the old one matches; a revoked or disabled login is refused by
//! its record, read on every verification before this.

use crate::locks::Locked;
use argon2::{Algorithm, Argon2, Block, Params, PasswordHash, Version};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Verifications allowed to wait for a slot, per slot.
pub const QUEUE_PER_SLOT: usize = 4;

/// How long a password that matched takes no slot to match again.
pub const KNOWN_GOOD_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// The most passwords known good at once.
const KNOWN_GOOD_MOST: u64 = 10_000;

/// Every slot is busy and the queue for them is full: try again shortly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every password check slot is busy and the queue for them is full")]
pub struct Busy;

/// A random key for the known-good cache.
fn random_secret() -> Result<[u8; 32], String> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| format!("no randomness for the password cache: {e}"))?;
    Ok(secret)
}

/// Shortest password `peergate peer password` accepts.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// The parameters every hash is made with: Argon2id, m = 19 MiB, t = 2, p = 1 (OWASP's first
/// choice), and the memory one verification needs, in 1 KiB blocks.
fn parameters() -> Params {
    Params::default()
}

/// Hashes a password as an Argon2id PHC string (m = 19 MiB, t = 2, p = 1), with a random salt,
/// in memory of its own (the command line; the server hashes through [`PasswordChecker::hash`]).
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut memory = vec![Block::new(); parameters().block_count()];
    hash_in(&mut memory, password)
}

fn hash_in(memory: &mut [Block], password: &str) -> Result<String, String> {
    let params = parameters();
    let salt = argon2::password_hash::phc::Salt::generate();
    let mut output = [0u8; Params::DEFAULT_OUTPUT_LEN];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone())
        .hash_password_into_with_memory(password.as_bytes(), &salt, &mut output, memory)
        .map_err(|e| e.to_string())?;
    let hash = PasswordHash {
        algorithm: argon2::ARGON2ID_IDENT,
        version: Some(Version::V0x13.into()),
        params: (&params)
            .try_into()
            .map_err(|e: argon2::password_hash::Error| e.to_string())?,
        salt: Some(salt),
        hash: Some(argon2::password_hash::phc::Output::new(&output).map_err(|e| e.to_string())?),
    };
    Ok(hash.to_string())
}

/// Whether `password` matches the PHC string `phc`, computed in `memory`. A hash that cannot
/// be parsed, or needs more memory than `memory` holds, matches nothing.
fn verify_in(memory: &mut [Block], phc: &str, password: &str) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&hash.salt, &hash.hash) else {
        return false;
    };
    let (Ok(params), Ok(algorithm)) = (
        Params::try_from(&hash),
        Algorithm::try_from(hash.algorithm.as_str()),
    ) else {
        return false;
    };
    let version = match hash.version.map(Version::try_from).transpose() {
        Ok(version) => version.unwrap_or_default(),
        Err(_) => return false,
    };
    let Some(memory) = memory.get_mut(..params.block_count()) else {
        tracing::error!(
            needed_kib = params.block_count(),
            "a stored password hash needs more Argon2 memory than a verification is given; it matches nothing"
        );
        return false;
    };
    let mut output = [0u8; 64];
    let Some(output) = output.get_mut(..expected.len()) else {
        return false;
    };
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password.as_bytes(), salt, &mut *output, memory)
        .is_ok()
        // `Output`'s comparison is constant-time.
        && argon2::password_hash::phc::Output::new(output).is_ok_and(|computed| &computed == expected)
}

/// Verifies passwords off the async workers, a few at a time, each in memory it reuses.
#[derive(Debug, Clone)]
pub struct PasswordChecker {
    permits: Arc<Semaphore>,
    /// Verifications waiting for a permit, and how many may.
    waiting: Arc<AtomicUsize>,
    queue: usize,
    /// One Argon2 memory per permit: a holder of a permit always finds one here (or an empty
    /// place, the first time, where it allocates one and leaves it for the next).
    memories: Arc<Mutex<Vec<Vec<Block>>>>,
    dummy_hash: Arc<str>,
    verifications: Arc<AtomicU64>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    /// Passwords that matched their hash lately, by [`PasswordChecker::known_good_key`].
    known_good: moka::sync::Cache<[u8; 32], ()>,
    /// The key those are made under, random per process.
    known_good_secret: Arc<[u8; 32]>,
}

impl PasswordChecker {
    /// At most `at_once` verifications run concurrently, in at most `at_once` × 19 MiB, and
    /// [`QUEUE_PER_SLOT`] × `at_once` wait for them.
    pub fn new(at_once: usize) -> Result<Self, String> {
        let dummy = hash_password("peergate dummy password for unknown names")?;
        let at_once = at_once.max(1);
        Ok(Self {
            permits: Arc::new(Semaphore::new(at_once)),
            waiting: Arc::default(),
            queue: QUEUE_PER_SLOT * at_once,
            memories: Arc::default(),
            dummy_hash: dummy.into(),
            verifications: Arc::new(AtomicU64::new(0)),
            running: Arc::default(),
            peak: Arc::default(),
            known_good: moka::sync::Cache::builder()
                .max_capacity(KNOWN_GOOD_MOST)
                .time_to_live(KNOWN_GOOD_FOR)
                .build(),
            known_good_secret: Arc::new(random_secret()?),
        })
    }

    /// What the known-good cache holds for `password` against `phc`: an HMAC of both (the
    /// hash's length first, so no split of the two makes another pair).
    fn known_good_key(&self, phc: &str, password: &str) -> [u8; 32] {
        use hmac::{KeyInit as _, Mac as _};
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&*self.known_good_secret)
            .expect("HMAC takes a key of any length");
        mac.update(&(phc.len() as u64).to_be_bytes());
        mac.update(phc.as_bytes());
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A slot's permit: at once if one is free; else after waiting in the queue, when
    /// `bounded` only if the queue has room.
    async fn permit(&self, bounded: bool) -> Result<tokio::sync::OwnedSemaphorePermit, Busy> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leaves = Leaves(&self.waiting);
        if bounded && queued >= self.queue {
            return Err(Busy);
        }
        // The semaphore is never closed.
        self.permits.clone().acquire_owned().await.map_err(|_| Busy)
    }

    /// Runs `work` on the blocking pool with a permit and a slot's Argon2 memory.
    async fn in_a_slot<T: Send + 'static>(
        &self,
        bounded: bool,
        work: impl FnOnce(&mut [Block]) -> T + Send + 'static,
    ) -> Result<T, Busy> {
        // Owned and moved into the blocking task: a caller that goes away (a reset request)
        // must not free its slot while its verification still runs in that slot's memory.
        let permit = self.permit(bounded).await?;
        let memories = self.memories.clone();
        let running = self.running.clone();
        let peak = self.peak.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let taken = memories.locked().pop();
            let mut memory =
                taken.unwrap_or_else(|| vec![Block::new(); parameters().block_count()]);
            let result = work(&mut memory);
            memories.locked().push(memory);
            running.fetch_sub(1, Ordering::SeqCst);
            result
        })
        .await
        // A panic in Argon2 (never expected) matches nothing.
        .map_err(|_| Busy)
    }

    /// Whether `password` matches `phc`; with no hash, runs the same work and says no.
    /// [`Busy`] when every slot is taken and the queue for them is full.
    pub async fn verify(&self, phc: Option<&str>, password: &str) -> Result<bool, Busy> {
        self.verify_in_turn(true, phc, password).await
    }

    /// Like [`PasswordChecker::verify`], waiting for a slot however long the queue.
    pub async fn verify_waiting(&self, phc: Option<&str>, password: &str) -> Result<bool, Busy> {
        self.verify_in_turn(false, phc, password).await
    }

    async fn verify_in_turn(
        &self,
        bounded: bool,
        phc: Option<&str>,
        password: &str,
    ) -> Result<bool, Busy> {
        let good = phc.map(|phc| self.known_good_key(phc, password));
        if good.is_some_and(|key| self.known_good.contains_key(&key)) {
            return Ok(true);
        }
        let (hash, known) = match phc {
            Some(phc) => (phc.to_owned(), true),
            None => (self.dummy_hash.to_string(), false),
        };
        let password = password.to_owned();
        let counted = self.verifications.clone();
        let matched = self
            .in_a_slot(bounded, move |memory| {
                counted.fetch_add(1, Ordering::Relaxed);
                verify_in(memory, &hash, &password)
            })
            .await?;
        if let (true, Some(key)) = (matched && known, good) {
            self.known_good.insert(key, ());
        }
        Ok(matched && known)
    }

    /// Hashes a new password (the admin API) in one of the same slots, so setting passwords
    /// does not step outside the memory bound either; it waits for a slot however long the
    /// queue.
    pub async fn hash(&self, password: String) -> Result<String, String> {
        self.in_a_slot(false, move |memory| hash_in(memory, &password))
            .await
            .unwrap_or_else(|_| Err("password hashing failed".to_owned()))
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

/// Leaves the queue when dropped (a caller that went away too).
struct Leaves<'a>(&'a AtomicUsize);

impl Drop for Leaves<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_verification_keeps_its_slot_until_it_finishes() {
        let checker = PasswordChecker::new(1).unwrap();
        let phc = hash_password("correct horse battery").unwrap();
        // Cancelled while Argon2 runs on the blocking pool: the caller went away, the work did
        // not, and neither may its slot.
        let cancelled = tokio::time::timeout(
            std::time::Duration::from_millis(1),
            checker.verify(Some(&phc), "wrong"),
        )
        .await;
        assert!(cancelled.is_err(), "finished within a millisecond");
        assert!(!checker.verify(Some(&phc), "wrong").await.unwrap());
        assert_eq!(checker.peak_concurrency(), 1, "two ran in one slot's place");
        let held = checker.memories.lock().unwrap().len();
        assert_eq!(held, 1, "more Argon2 memories than slots");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_a_full_queue_a_verification_is_refused_at_once() {
        let checker = PasswordChecker::new(1).unwrap();
        let phc = Arc::new(hash_password("correct horse battery").unwrap());
        // One runs, four wait, and the rest of a burst of sixty-four is refused without waiting.
        let burst: Vec<_> = (0..64)
            .map(|_| {
                let (checker, phc) = (checker.clone(), phc.clone());
                tokio::spawn(async move { checker.verify(Some(&phc), "wrong").await })
            })
            .collect();
        let mut refused = 0;
        for verification in burst {
            match verification.await.unwrap() {
                Ok(matched) => assert!(!matched),
                Err(Busy) => refused += 1,
            }
        }
        assert!(
            refused >= 64 - 2 * (1 + QUEUE_PER_SLOT),
            "only {refused} refused"
        );
        assert!(checker.verifications() <= 2 * (1 + QUEUE_PER_SLOT as u64));
        // Once the queue drained, verifications are taken again.
        assert!(
            checker
                .verify(Some(&phc), "correct horse battery")
                .await
                .unwrap()
        );
        assert_eq!(checker.waiting.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_password_that_matched_needs_no_slot_while_wrong_ones_fill_the_queue() {
        let checker = PasswordChecker::new(1).unwrap();
        let phc = Arc::new(hash_password("correct horse battery").unwrap());
        assert!(
            checker
                .verify(Some(&phc), "correct horse battery")
                .await
                .unwrap()
        );
        let once = checker.verifications();
        // A flood of wrong passwords holds the slot and fills the queue…
        let flood: Vec<_> = (0..64)
            .map(|_| {
                let (checker, phc) = (checker.clone(), phc.clone());
                tokio::spawn(async move { checker.verify(Some(&phc), "wrong").await })
            })
            .collect();
        tokio::task::yield_now().await;
        // …and the known password still matches, at once, with no Argon2 run of its own.
        for _ in 0..10 {
            assert_eq!(
                checker.verify(Some(&phc), "correct horse battery").await,
                Ok(true)
            );
        }
        for wrong in flood {
            assert_ne!(wrong.await.unwrap(), Ok(true));
        }
        assert!(checker.verifications() - once <= 2 * (1 + QUEUE_PER_SLOT as u64));
        // Another hash (a new password) knows nothing of it; nor does a wrong password.
        let other = hash_password("correct horse battery").unwrap();
        let before = checker.verifications();
        assert!(
            checker
                .verify(Some(&other), "correct horse battery")
                .await
                .unwrap()
        );
        assert_eq!(checker.verifications(), before + 1);
        assert!(
            !checker
                .verify(Some(&phc), "correct horse batter")
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn verifies_and_unknown_names_never_match() {
        let checker = PasswordChecker::new(2).unwrap();
        let phc = hash_password("correct horse battery").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(
            checker
                .verify(Some(&phc), "correct horse battery")
                .await
                .unwrap()
        );
        assert!(!checker.verify(Some(&phc), "wrong").await.unwrap());
        // The dummy hash's own password does not open an unknown name.
        assert!(
            !checker
                .verify(None, "peergate dummy password for unknown names")
                .await
                .unwrap()
        );
        assert_eq!(checker.verifications(), 3);
    }

    #[tokio::test]
    async fn hashes_agree_with_the_argon2_crate_both_ways() {
        use argon2::{PasswordHasher as _, PasswordVerifier as _};
        let ours = hash_password("correct horse battery").unwrap();
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(
            Argon2::default()
                .verify_password(b"correct horse battery", &parsed)
                .is_ok()
        );
        let theirs = Argon2::default()
            .hash_password(b"correct horse battery")
            .unwrap()
            .to_string();
        let checker = PasswordChecker::new(1).unwrap();
        assert!(
            checker
                .verify(Some(&theirs), "correct horse battery")
                .await
                .unwrap()
        );
        assert!(
            !checker
                .verify(Some(&theirs), "correct horse batterY")
                .await
                .unwrap()
        );
        let pooled = checker
            .hash("another good password".to_owned())
            .await
            .unwrap();
        assert!(
            checker
                .verify(Some(&pooled), "another good password")
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_hash_needing_more_memory_than_a_slot_holds_matches_nothing() {
        let params = Params::new(64 * 1024, 1, 1, None).unwrap();
        let greedy = {
            use argon2::PasswordHasher as _;
            Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
                .hash_password(b"correct horse battery")
                .unwrap()
                .to_string()
        };
        let checker = PasswordChecker::new(1).unwrap();
        assert!(
            !checker
                .verify(Some(&greedy), "correct horse battery")
                .await
                .unwrap()
        );
        for broken in [
            "",
            "$argon2id$",
            "not a hash",
            "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ",
        ] {
            assert!(!checker.verify(Some(broken), "").await.unwrap(), "{broken}");
        }
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
