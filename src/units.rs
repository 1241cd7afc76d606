//! Bounded numbers of the policy (durations and counts), read into their types: a value out of
//! range is refused while the file is read, naming the key and its line, and the code below is handed a `Duration`,
//! never a count of seconds to convert and check again.

use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// A number from `MIN` to `MAX` (both allowed) read into its own type, with what a value out
/// of range is told (`{n}` and the bounds are filled in).
macro_rules! bounded_number {
    ($(#[$doc:meta])* $name:ident, $out_of_range:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name<const MIN: u64, const MAX: u64>(u64);

        impl<const MIN: u64, const MAX: u64> $name<MIN, MAX> {
            /// `n`, checked where it is written (a default: in a `const` block, so a default
            /// out of its own range does not compile).
            pub const fn of(n: u64) -> Self {
                assert!(n >= MIN && n <= MAX, "a default outside its range");
                Self(n)
            }

            /// `n`, if within the bounds.
            pub fn checked(n: u64) -> Option<Self> {
                (MIN..=MAX).contains(&n).then_some(Self(n))
            }

            /// How many.
            pub const fn get(self) -> u64 {
                self.0
            }
        }

        impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for $name<MIN, MAX> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let n = u64::deserialize(deserializer)?;
                let refused: fn(u64, u64, u64) -> String = $out_of_range;
                Self::checked(n).ok_or_else(|| serde::de::Error::custom(refused(n, MIN, MAX)))
            }
        }
    };
}

bounded_number!(
    /// A number of seconds from `MIN` to `MAX` (both allowed).
    Seconds,
    |n, min, max| match min {
        0 => format!("{n} seconds: must be at most {max}"),
        _ => format!("{n} seconds: must be from {min} to {max}"),
    }
);

bounded_number!(
    /// A count from `MIN` to `MAX` (both allowed): connections, attempts, bytes, entries.
    Bounded,
    |n, min, max| format!("{n}: must be between {min} and {max}")
);

impl<const MIN: u64, const MAX: u64> Seconds<MIN, MAX> {
    /// As a duration.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.0)
    }
}

impl<const MIN: u64, const MAX: u64> Bounded<MIN, MAX> {
    /// How many, as a `u32` (a range past `u32::MAX` does not compile).
    pub const fn u32(self) -> u32 {
        const { assert!(MAX <= u32::MAX as u64, "a range past u32") };
        self.0 as u32
    }

    /// How many, as a `usize` (a range past 32 bits does not compile).
    pub const fn usize(self) -> usize {
        const { assert!(MAX <= u32::MAX as u64, "a range past 32 bits") };
        self.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Keys {
        grace: Seconds<0, 3600>,
        read: Seconds<1, 300>,
    }

    fn read(text: &str) -> Result<Keys, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn seconds_within_their_bounds_read_and_others_are_refused_naming_the_range() {
        let keys = read("grace = 0\nread = 300").unwrap();
        assert_eq!(keys.grace.duration(), Duration::ZERO);
        assert_eq!(keys.read.get(), 300);
        let too_long = read("grace = 3601\nread = 1").unwrap_err();
        assert!(
            too_long.contains("3601 seconds: must be at most 3600"),
            "{too_long}"
        );
        let none = read("grace = 1\nread = 0").unwrap_err();
        assert!(none.contains("0 seconds: must be from 1 to 300"), "{none}");
        assert!(read("grace = -1\nread = 1").is_err());
        assert_eq!(Seconds::<1, 300>::checked(0), None);
        assert_eq!(const { Seconds::<1, 300>::of(10) }.get(), 10);
    }

    #[test]
    fn counts_within_their_bounds_read_and_others_are_refused_naming_the_range() {
        #[derive(Debug, Deserialize)]
        struct Counts {
            attempts: Bounded<1, 50>,
        }
        let read = |text: &str| toml::from_str::<Counts>(text).map_err(|e| e.to_string());
        assert_eq!(read("attempts = 50").unwrap().attempts.u32(), 50);
        let over = read("attempts = 51").unwrap_err();
        assert!(over.contains("51: must be between 1 and 50"), "{over}");
        assert!(over.contains("attempts"), "{over}");
        assert!(read("attempts = 0").is_err() && read("attempts = -1").is_err());
        assert_eq!(const { Bounded::<1, 50>::of(8) }.usize(), 8);
    }
}
