//! `peergate_authorization_decisions_total{listener,decision,policy}`: the authorization
//! policies' decisions, by the policies that made them (`default` when nothing permitted a
//! call). Policy ids are the operator's own and few; past [`MAX_POLICIES`] distinct ids (after
//! many reloads) later ones share `policy="other"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A label value as the text exposition writes it: `\`, `"` and newlines escaped.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The most policy ids with series of their own.
pub const MAX_POLICIES: usize = 1024;

/// The listeners whose requests the policies decide.
const LISTENERS: [&str; 2] = ["door", "admin"];

/// One policy's counts: by listener, then deny (0) and allow (1).
type Row = [[AtomicU64; 2]; 2];

/// The decisions counted so far.
#[derive(Debug, Default)]
pub struct Decisions {
    by_policy: RwLock<BTreeMap<Arc<str>, Row>>,
}

impl Decisions {
    /// Counts one decision on the door (`admin` false) or the admin API, under each of
    /// `policies`, or `default` when none.
    pub fn decided(&self, admin: bool, allowed: bool, policies: &[Arc<str>]) {
        static DEFAULT: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from("default"));
        let ids = if policies.is_empty() {
            std::slice::from_ref(&*DEFAULT)
        } else {
            policies
        };
        for id in ids {
            self.count(id, usize::from(admin), usize::from(allowed));
        }
    }

    fn count(&self, id: &Arc<str>, listener: usize, allowed: usize) {
        {
            let by_policy = self.by_policy.read().unwrap_or_else(|e| e.into_inner());
            if let Some(row) = by_policy.get(id) {
                row[listener][allowed].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut by_policy = self.by_policy.write().unwrap_or_else(|e| e.into_inner());
        let id = if by_policy.len() >= MAX_POLICIES && !by_policy.contains_key(id) {
            Arc::from("other")
        } else {
            id.clone()
        };
        by_policy.entry(id).or_default()[listener][allowed].fetch_add(1, Ordering::Relaxed);
    }

    /// The series, when any decision was counted.
    pub fn write(&self, out: &mut String) {
        let by_policy = self.by_policy.read().unwrap_or_else(|e| e.into_inner());
        if by_policy.is_empty() {
            return;
        }
        out.push_str("# HELP peergate_authorization_decisions_total The authorization policies' decisions, by listener, decision and the policy that made them.\n# TYPE peergate_authorization_decisions_total counter\n");
        for (id, row) in by_policy.iter() {
            for (listener, counts) in LISTENERS.iter().zip(row) {
                for (decision, count) in ["deny", "allow"].iter().zip(counts) {
                    let count = count.load(Ordering::Relaxed);
                    if count > 0 {
                        let _ = writeln!(
                            out,
                            "peergate_authorization_decisions_total{{listener=\"{listener}\",decision=\"{decision}\",policy=\"{}\"}} {count}",
                            escaped(id)
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_policy_ids_never_share_a_series() {
        let decisions = Decisions::default();
        decisions.decided(false, true, &[Arc::from("a\"b"), Arc::from("a\\b")]);
        let mut out = String::new();
        decisions.write(&mut out);
        assert!(out.contains(r#"policy="a\"b""#), "{out}");
        assert!(out.contains(r#"policy="a\\b""#), "{out}");
    }
}
