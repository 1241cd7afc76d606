//! Open streams per peer: how many `SendStreamingMessage` and `SubscribeToTask` streams each
//! peer holds open, against its cap, so one peer cannot hold every connection the gateway
//! has (and every byte each buffers) while others wait.
//!
//! A stream takes a [`StreamPermit`] before its turn or subscription starts and gives it back
//! when the permit drops, which is when its response body is dropped: the stream ended, the
//! client left, or the connection was closed for not reading. The in-process engine counts in
//! memory; the engine for several instances counts in Redis
//! ([`crate::shared::redis::streams`]), so the cap holds across instances.

use crate::shared::capped_counts::CappedCounts;
use crate::store::PeerId;
use async_trait::async_trait;

/// Counts open streams per peer against a cap.
#[async_trait]
pub trait OpenStreams: Send + Sync + std::fmt::Debug {
    /// A place for one more open stream of `peer_id` if it holds fewer than `cap`, given back
    /// when the permit drops; `None` at the cap.
    async fn open(&self, peer_id: &PeerId, cap: u32) -> Option<StreamPermit>;
}

/// One open stream's place; given back when dropped.
pub struct StreamPermit(#[allow(dead_code)] Box<dyn Send + Sync>);

impl StreamPermit {
    /// A permit that gives its place back by dropping `release`.
    pub fn new(release: impl Send + Sync + 'static) -> Self {
        Self(Box::new(release))
    }
}

impl std::fmt::Debug for StreamPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamPermit")
    }
}

/// The in-process engine: a count per peer that holds any open stream.
#[derive(Debug, Default, Clone)]
pub struct LocalOpenStreams {
    counts: CappedCounts<PeerId>,
}

impl LocalOpenStreams {
    /// How many streams `peer_id` holds open here.
    pub fn held(&self, peer_id: &PeerId) -> u32 {
        self.counts.held(peer_id)
    }

    /// Takes a place at once, in memory.
    pub fn open_now(&self, peer_id: &PeerId, cap: u32) -> Option<StreamPermit> {
        self.counts
            .take(peer_id.clone(), cap)
            .map(StreamPermit::new)
    }
}

#[async_trait]
impl OpenStreams for LocalOpenStreams {
    async fn open(&self, peer_id: &PeerId, cap: u32) -> Option<StreamPermit> {
        self.open_now(peer_id, cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_peer_holds_at_most_its_cap_and_places_come_back_when_dropped() {
        let streams = LocalOpenStreams::default();
        let held: Vec<_> = (0..3)
            .map(|_| {
                streams
                    .open_now(&"mallory".into(), 3)
                    .expect("under the cap")
            })
            .collect();
        assert!(
            streams.open(&"mallory".into(), 3).await.is_none(),
            "past the cap"
        );
        assert!(
            streams.open(&"alice".into(), 3).await.is_some(),
            "another peer"
        );
        drop(held);
        assert_eq!(streams.held(&"mallory".into()), 0);
        assert_eq!(streams.counts.keys(), 0, "peers with none are forgotten");
        assert!(streams.open(&"mallory".into(), 3).await.is_some());
    }
}
