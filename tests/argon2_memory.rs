//! The memory Argon2 holds stays within `auth.password_checks_at_once` × 19 MiB, however many
//! verifications run. In a test binary of its own: it reads this process's resident size,
//! which other tests running beside it would move. This binary runs on the system allocator,
//! which (unlike the server's) keeps freed 19 MiB blocks in per-thread arenas: a checker that
//! allocated Argon2's memory per verification grew by hundreds of MiB here.

mod common;

use common::resident_mib as resident_mib_of;
use peergate::layers::auth::password::{PasswordChecker, hash_password};
use std::time::Duration;

/// This process's resident size, in MiB.
fn resident_mib() -> u64 {
    resident_mib_of(std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn argon2_memory_is_bounded_by_the_verifications_at_once() {
    const AT_ONCE: usize = 2;
    let phc = hash_password("the right password").unwrap();
    let checker = PasswordChecker::new(AT_ONCE).unwrap();
    let before = resident_mib();
    let mut after_each = Vec::new();
    for _ in 0..4 {
        let mut attempts = tokio::task::JoinSet::new();
        for n in 0..16 {
            let (checker, phc) = (checker.clone(), phc.clone());
            attempts.spawn(async move {
                let known = (n % 2 == 0).then_some(phc.as_str());
                checker.verify(known, "a wrong password").await
            });
        }
        while let Some(matched) = attempts.join_next().await {
            // Past the queue a verification is refused at once (Busy); none matches.
            assert_ne!(matched.unwrap(), Ok(true));
        }
        after_each.push(resident_mib());
        // Long enough for the runtime to start fresh blocking threads for the next round.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        checker.verify(Some(&phc), "the right password").await,
        Ok(true)
    );
    let bound = before + AT_ONCE as u64 * 19 + 16;
    assert!(
        after_each.iter().all(|&mib| mib <= bound),
        "resident size {before} MiB before, {after_each:?} MiB after each round of 16 verifications; the bound is {bound} MiB"
    );
}
