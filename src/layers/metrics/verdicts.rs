//! `peergate_content_verdicts_total{direction,rule,action}`: what the content guard's rules
//! did, by rule and action (never what they matched), and
//! `peergate_content_failures_total{direction,mode}`: inspections that could not be made,
//! by the failure mode that decided the call. Rule ids are the policy's and the outside
//! inspector's: past [`MAX_SERIES`] series, new ones share `rule="other"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The most series of verdicts; later rules count under `rule="other"`.
pub const MAX_SERIES: usize = 1024;

static OTHER: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("other"));

/// (direction, rule, action)
type Key = (&'static str, Arc<str>, &'static str);

/// The verdicts counted so far.
#[derive(Debug, Default)]
pub struct Verdicts {
    counts: RwLock<BTreeMap<Key, AtomicU64>>,
    failures: RwLock<BTreeMap<(&'static str, &'static str), AtomicU64>>,
}

impl Verdicts {
    /// Counts `count` matches of `rule` in `direction` that did `action`.
    pub fn matched(
        &self,
        direction: &'static str,
        rule: &Arc<str>,
        action: &'static str,
        count: u64,
    ) {
        {
            let counts = self.counts.read().unwrap_or_else(|e| e.into_inner());
            if let Some(counter) = counts.get(&(direction, rule.clone(), action)) {
                counter.fetch_add(count, Ordering::Relaxed);
                return;
            }
        }
        let mut counts = self.counts.write().unwrap_or_else(|e| e.into_inner());
        if let Some(counter) = counts.get(&(direction, rule.clone(), action)) {
            counter.fetch_add(count, Ordering::Relaxed);
            return;
        }
        // The inspector names its own rules: past the bound, new names share one series.
        let rule = if counts.len() >= MAX_SERIES {
            std::sync::LazyLock::force(&OTHER).clone()
        } else {
            rule.clone()
        };
        (counts.entry((direction, rule, action)).or_default()).fetch_add(count, Ordering::Relaxed);
    }

    /// Counts an inspection in `direction` that could not be made, decided by `mode`.
    pub fn failed(&self, direction: &'static str, mode: &'static str) {
        let mut failures = self.failures.write().unwrap_or_else(|e| e.into_inner());
        (failures.entry((direction, mode)).or_default()).fetch_add(1, Ordering::Relaxed);
    }

    /// The series, when any was counted.
    pub fn write(&self, out: &mut String) {
        let counts = self.counts.read().unwrap_or_else(|e| e.into_inner());
        if !counts.is_empty() {
            out.push_str("# HELP peergate_content_verdicts_total Matches of the content guard's rules, by direction, rule and action.\n# TYPE peergate_content_verdicts_total counter\n");
            for ((direction, rule, action), count) in counts.iter() {
                let _ = writeln!(
                    out,
                    "peergate_content_verdicts_total{{direction=\"{direction}\",rule=\"{}\",action=\"{action}\"}} {}",
                    rule.replace('\\', "\\\\").replace('"', "\\\""),
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let failures = self.failures.read().unwrap_or_else(|e| e.into_inner());
        if !failures.is_empty() {
            out.push_str("# HELP peergate_content_failures_total Inspections the content guard could not make, by direction and the failure mode that decided the call.\n# TYPE peergate_content_failures_total counter\n");
            for ((direction, mode), count) in failures.iter() {
                let _ = writeln!(
                    out,
                    "peergate_content_failures_total{{direction=\"{direction}\",mode=\"{mode}\"}} {}",
                    count.load(Ordering::Relaxed)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_past_the_bound_share_one_series() {
        let verdicts = Verdicts::default();
        for n in 0..MAX_SERIES + 10 {
            let rule: Arc<str> = Arc::from(format!("inspector/r{n}"));
            verdicts.matched("inbound", &rule, "mask", 1);
        }
        // A rule counted before the bound goes on counting in its own series.
        verdicts.matched("inbound", &Arc::from("inspector/r0"), "mask", 1);
        let mut out = String::new();
        verdicts.write(&mut out);
        let series = out.lines().filter(|l| l.starts_with("peergate_")).count();
        assert_eq!(series, MAX_SERIES + 1);
        assert!(out.contains(r#"rule="other",action="mask"} 10"#), "{out}");
        assert!(out.contains(r#"rule="inspector/r0",action="mask"} 2"#));
    }
}
