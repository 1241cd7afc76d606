//! The call-duration series by peer, only when the policy asks for them
//! (`telemetry.peer_series`): a label per peer multiplies every series by the number of peers,
//! so the first `cap` peers seen get series of their own and every later one shares
//! `peer_id="other"`. The label is the peer's stable id, never its name (a name can say more
//! about a partner than an operator means to put in a dashboard). Calls refused before a peer
//! was known (a 401) have no peer and are not in these series.

use super::histogram::{Histogram, SECONDS};
use crate::protocol::call::{CallOutcome, CallRecord};
use crate::protocol::jsonrpc::Method;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

const SERIES: usize = Method::ALL.len() * CallOutcome::ALL.len();

/// One peer's series: by operation and outcome (the binding left out, to keep them few).
type PeerRow = Box<[Histogram]>;

fn row() -> PeerRow {
    (0..SERIES).map(|_| Histogram::new(&SECONDS)).collect()
}

fn index(method: Method, outcome: CallOutcome) -> usize {
    method as usize * CallOutcome::ALL.len() + outcome as usize
}

/// `peergate_peer_call_duration_seconds`.
#[derive(Debug)]
pub struct PeerCalls {
    cap: usize,
    peers: RwLock<HashMap<Arc<str>, PeerRow>>,
    other: PeerRow,
}

impl PeerCalls {
    /// Series for at most `cap` peers of their own.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            peers: RwLock::new(HashMap::new()),
            other: row(),
        }
    }

    /// A call of `peer`'s answered after `took`.
    pub fn call(&self, peer: &Arc<str>, record: &CallRecord, took: Duration) {
        let at = index(record.call.method, record.outcome);
        let seconds = took.as_secs_f64();
        {
            let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
            if let Some(row) = peers.get(peer) {
                row[at].observe(seconds);
                return;
            }
            if peers.len() >= self.cap {
                self.other[at].observe(seconds);
                return;
            }
        }
        let mut peers = self.peers.write().unwrap_or_else(|e| e.into_inner());
        let full = peers.len() >= self.cap && !peers.contains_key(peer);
        match full {
            true => self.other[at].observe(seconds),
            false => peers.entry(peer.clone()).or_insert_with(row)[at].observe(seconds),
        }
    }

    /// The series that counted anything.
    pub fn write(&self, out: &mut String) {
        out.push_str("# HELP peergate_peer_call_duration_seconds A2A calls' duration by peer (its id; past the policy's cap, \"other\"), operation and outcome.\n# TYPE peergate_peer_call_duration_seconds histogram\n");
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        let mut named: Vec<(&str, &PeerRow)> = peers.iter().map(|(p, r)| (&**p, r)).collect();
        named.sort_by_key(|(peer, _)| *peer);
        named.push(("other", &self.other));
        for (peer, row) in named {
            for method in Method::ALL {
                for outcome in CallOutcome::ALL {
                    let labels = format!(
                        "peer_id=\"{peer}\",rpc_method=\"lf.a2a.v1.A2AService/{}\",outcome=\"{}\"",
                        method.name(),
                        outcome.label()
                    );
                    row[index(method, outcome)].write(
                        out,
                        "peergate_peer_call_duration_seconds",
                        &labels,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::call::{A2aCall, Binding};

    fn record() -> CallRecord {
        CallRecord {
            call: A2aCall {
                binding: Binding::JsonRpc,
                method: Method::GetTask,
            },
            task: None,
            outcome: CallOutcome::Answered,
            peer: None,
            seen: None,
        }
    }

    #[test]
    fn peers_past_the_cap_share_one_series() {
        let calls = PeerCalls::new(2);
        for peer in ["p-1", "p-2", "p-3", "p-4", "p-1"] {
            calls.call(&Arc::from(peer), &record(), Duration::from_millis(3));
        }
        let mut out = String::new();
        calls.write(&mut out);
        let count = |peer: &str| {
            let needle = format!(
                "peergate_peer_call_duration_seconds_count{{peer_id=\"{peer}\",rpc_method=\"lf.a2a.v1.A2AService/GetTask\",outcome=\"answered\"}} "
            );
            out.lines()
                .find_map(|line| line.strip_prefix(needle.as_str()))
                .map(str::to_owned)
        };
        assert_eq!(count("p-1").as_deref(), Some("2"), "{out}");
        assert_eq!(count("p-2").as_deref(), Some("1"), "{out}");
        assert_eq!(count("other").as_deref(), Some("2"), "{out}");
        assert_eq!(count("p-3"), None, "{out}");
    }
}
