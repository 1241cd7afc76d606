//! Locks taken whether or not a panic poisoned them, in one place. Every lock in peergate guards
//! state that is whole between statements (a counter, a map, a cache), so a panic while one was
//! held is a bug for the log, not a reason for every later request to panic too.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], poisoned or not.
pub trait Locked<T: ?Sized> {
    /// The guard.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], poisoned or not.
pub trait ReadWriteLocked<T: ?Sized> {
    /// The read guard.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> ReadWriteLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_a_panic_poisoned_is_taken_as_it_is() {
        let shared = std::sync::Arc::new((Mutex::new(1), RwLock::new(2)));
        let held = shared.clone();
        let _ = std::thread::spawn(move || {
            let _mutex = held.0.lock().unwrap();
            let _rw = held.1.write().unwrap();
            panic!("poisons both");
        })
        .join();
        assert!(shared.0.is_poisoned() && shared.1.is_poisoned());
        assert_eq!(*shared.0.locked(), 1);
        assert_eq!(*shared.1.read_locked(), 2);
        *shared.1.write_locked() = 3;
        assert_eq!(*shared.1.read_locked(), 3);
    }
}
