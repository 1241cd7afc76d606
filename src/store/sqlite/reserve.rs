//! Room kept on the store's disk for the writes that must still be made when it fills.
//!
//! A full disk must not stop a revocation: a leaked token has to stop working even while
//! SQLite cannot grow. So the store keeps [`RESERVE_BYTES`] in a file of its own beside the
//! database (`peergate.reserve`), and exchanges (SendMessage's task writes, by far the bulk of
//! what fills a disk) are written only while that file exists and the disk has
//! [`LOW_WATER_BYTES`] free:
//!
//! - When the free space falls below the low-water mark, or an exchange or an account change
//!   fails for lack of space, the file is deleted. Its room is then there for account changes (revocations, new
//!   credentials, expiries) and the audit records that go with them, which are not checked.
//!   Exchanges are refused, before the model is asked, while the reserve is gone.
//! - Once the disk has room for the reserve and the low-water mark again, the file is written
//!   again and exchanges resume: the store recovers by itself, without a restart.
//!
//! The free space is read with `statvfs` on the data directory, at most every
//! [`CHECK_EVERY`] on the exchange path, and before every account change.

use crate::locks::Locked;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The size of the reserve file.
pub(super) const RESERVE_BYTES: u64 = 4 << 20;
/// Below this much free space the disk counts as full.
pub(super) const LOW_WATER_BYTES: u64 = 1 << 20;
/// How often the exchange path reads the free space.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// The reserve file's name in the data directory.
pub(super) const RESERVE_FILE: &str = "peergate.reserve";

/// The reserve of one store.
#[derive(Debug)]
pub(super) struct Reserve {
    dir: PathBuf,
    file: PathBuf,
    present: AtomicBool,
    /// When the exchange path last read the free space, and what it decided.
    last_check: Mutex<Option<(Instant, bool)>>,
}

impl Reserve {
    /// The reserve for the store in `data_dir`, written now if the disk has room.
    pub(super) fn open(data_dir: &Path) -> Self {
        let reserve = Self {
            dir: data_dir.to_owned(),
            file: data_dir.join(RESERVE_FILE),
            present: AtomicBool::new(false),
            last_check: Mutex::new(None),
        };
        if reserve.file_is_whole() {
            reserve.present.store(true, Ordering::SeqCst);
        } else if !reserve.refill() {
            tracing::error!(
                dir = %data_dir.display(),
                "the disk holding the store has less than {} MiB free: SendMessage is refused until there is room",
                (RESERVE_BYTES + LOW_WATER_BYTES) >> 20
            );
        }
        reserve
    }

    /// Whether an exchange may be written now: the reserve is in place and the disk is not
    /// full. Releases the reserve when the disk has filled, and puts it back when room returns.
    pub(super) fn admits_exchanges(&self) -> bool {
        let mut last = self.last_check.locked();
        // A cached answer holds only while the reserve is as it was then: released since (by an
        // account change, a failed write) means no exchange until it is back.
        if let Some((at, admitted)) = *last
            && at.elapsed() < CHECK_EVERY
            && admitted == self.present.load(Ordering::SeqCst)
        {
            return admitted;
        }
        // Another process (the command line) may have released it: the file is the truth.
        if self.present.load(Ordering::SeqCst) && !self.file_is_whole() {
            self.present.store(false, Ordering::SeqCst);
        }
        let admitted = if self.present.load(Ordering::SeqCst) {
            if self.free_bytes() < LOW_WATER_BYTES {
                self.release("the free space fell below the low-water mark");
                false
            } else {
                true
            }
        } else if self.refill() {
            tracing::info!(
                "the store's disk has room again: its reserve is back and SendMessage is served"
            );
            true
        } else {
            false
        };
        *last = Some((Instant::now(), admitted));
        admitted
    }

    /// Before a write that must be made (an account change): frees the reserve if the disk is
    /// full, so that write has room.
    pub(super) fn before_essential_write(&self) {
        if self.present.load(Ordering::SeqCst) && self.free_bytes() < LOW_WATER_BYTES {
            self.release("an account change found the disk full");
        }
    }

    /// A write failed for lack of space: frees the reserve for the writes that must be made.
    pub(super) fn on_full(&self) {
        if self.present.load(Ordering::SeqCst) {
            self.release("a write failed for lack of space");
        }
    }

    fn file_is_whole(&self) -> bool {
        std::fs::metadata(&self.file).is_ok_and(|m| m.len() >= RESERVE_BYTES)
    }

    fn release(&self, why: &str) {
        if self.present.swap(false, Ordering::SeqCst) {
            let _ = std::fs::remove_file(&self.file);
            tracing::error!(
                reason = why,
                "the disk holding the store is full: its reserve is released for revocations and other account changes, and SendMessage is refused until there is room again"
            );
        }
    }

    /// Writes the reserve file if the disk has room for it and the low-water mark.
    fn refill(&self) -> bool {
        if self.free_bytes() < RESERVE_BYTES + LOW_WATER_BYTES {
            return false;
        }
        let written = std::fs::File::create(&self.file).and_then(|mut file| {
            // Written, not only sized, and not zeros: a sparse file, or zeros on a compressing
            // file system, would reserve nothing.
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut chunk = vec![0u8; 64 << 10];
            for _ in 0..RESERVE_BYTES / chunk.len() as u64 {
                for byte in chunk.iter_mut() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    *byte = state as u8;
                }
                file.write_all(&chunk)?;
            }
            file.sync_all()
        });
        match written {
            Ok(()) => {
                self.present.store(true, Ordering::SeqCst);
                true
            }
            Err(_) => {
                let _ = std::fs::remove_file(&self.file);
                false
            }
        }
    }

    /// Free bytes on the data directory's file system for this (unprivileged) process; when it
    /// cannot be read, as much as is needed, so a failing `statvfs` never stops the store.
    fn free_bytes(&self) -> u64 {
        rustix::fs::statvfs(&self.dir)
            .map(|stat| stat.f_bavail.saturating_mul(stat.f_frsize))
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_put_back_when_released_here_or_by_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Reserve::open(dir.path());
        let file = dir.path().join(RESERVE_FILE);
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(bytes.len() as u64, RESERVE_BYTES);
        assert!(
            bytes.iter().filter(|b| **b == 0).count() < bytes.len() / 64,
            "zeros reserve nothing on a compressing file system"
        );
        assert!(reserve.admits_exchanges());
        // Released here (a write found the disk full) while a "yes" is cached: the next
        // question sees it, and with room on this disk writes it again.
        reserve.on_full();
        assert!(!file.exists());
        assert!(reserve.admits_exchanges());
        assert!(file.exists(), "a cached answer outlived the release");
        // Released by another process (the command line): the file is the truth.
        std::fs::remove_file(&file).unwrap();
        std::thread::sleep(CHECK_EVERY);
        assert!(reserve.admits_exchanges());
        assert!(
            file.exists(),
            "the reserve another process released was not put back"
        );
    }
}
