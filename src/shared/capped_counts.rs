//! How many of something each key holds at once, against a cap: places taken and given back
//! when dropped, and a key that holds none forgotten, so the table holds only live keys. Open
//! streams per peer and open connections per address count with it.

use crate::locks::Locked;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// Counts per key, against a cap given at each take.
#[derive(Debug)]
pub struct CappedCounts<K>(Arc<Mutex<HashMap<K, u32>>>);

impl<K> Clone for CappedCounts<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K> Default for CappedCounts<K> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: Hash + Eq + Clone> CappedCounts<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, u32>> {
        self.0.locked()
    }

    /// One more place for `key`, unless it holds `cap` already; given back when dropped.
    pub fn take(&self, key: K, cap: u32) -> Option<Place<K>> {
        let mut counts = self.lock();
        let held = counts.entry(key.clone()).or_insert(0);
        if *held >= cap {
            if *held == 0 {
                counts.remove(&key);
            }
            return None;
        }
        *held += 1;
        Some(Place {
            counts: self.clone(),
            key,
        })
    }

    /// How many places `key` holds.
    pub fn held(&self, key: &K) -> u32 {
        self.lock().get(key).copied().unwrap_or(0)
    }

    /// How many keys hold a place.
    pub fn keys(&self) -> usize {
        self.lock().len()
    }
}

/// One place taken in [`CappedCounts`].
#[derive(Debug)]
pub struct Place<K: Hash + Eq + Clone> {
    counts: CappedCounts<K>,
    key: K,
}

impl<K: Hash + Eq + Clone> Drop for Place<K> {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(held) = counts.get_mut(&self.key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_cap_and_is_forgotten_when_it_holds_none() {
        let counts = CappedCounts::default();
        let held: Vec<_> = (0..3).map(|_| counts.take("a", 3).unwrap()).collect();
        assert!(counts.take("a", 3).is_none());
        let other = counts.take("b", 3).unwrap();
        assert!(counts.take("c", 0).is_none());
        assert_eq!((counts.held(&"a"), counts.keys()), (3, 2));
        drop(held);
        drop(other);
        assert_eq!(counts.keys(), 0, "keys with no place are forgotten");
    }
}
