//! The delivery loop: claims due deliveries from the store's queue, POSTs each to its callback,
//! and records the outcome.
//!
//! * At most `push.deliveries_at_once` deliveries are in flight, and at most
//!   `push.deliveries_per_peer` of one peer's tasks (the rest of that peer's wait a second at a
//!   time); the rest wait in the queue.
//! * A failed attempt (not 2xx, a redirect, a timeout, no connection, a callback that no
//!   longer passes its check) is tried again after 1 s, 2 s, 4 s … (at most 5 min between
//!   attempts); after `push.max_attempts` it is kept as a dead letter that the task owner's
//!   administrator sees (`GET /v1/push/failed`).
//! * A claim lasts the delivery timeout and 15 s more: if the instance dies mid-attempt, the
//!   delivery is due again once the claim lapses, on whichever instance claims it.
//! * Each request carries `Content-Type: application/a2a+json`, `Authorization: <scheme>
//!   <credentials>` when the config has authentication, and `X-A2A-Notification-Token` when it
//!   has a token, so the receiver can tell the notification is for a config it made.

use super::Push;
use crate::clock::later;
use crate::locks::Locked;
use crate::store::{DeliveryOutcome, PushDelivery};
use crate::telemetry::conventions as names;
use opentelemetry::KeyValue;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// How often the queue is read when nothing rang.
const POLL: Duration = Duration::from_secs(1);

/// Longest wait between two attempts of one delivery.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The wait before attempt `attempts + 1`, once `attempts` have failed.
pub fn backoff(attempts: u32) -> Duration {
    let doubled = Duration::from_secs(1).saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    doubled.min(MAX_BACKOFF)
}

/// The two clients deliveries go through: `https` callbacks resolve to public addresses
/// (and loopback with the dangerous switch); `http` callbacks, only possible with that switch,
/// resolve to loopback alone, so a name rebound after its check cannot carry credentials in
/// clear text to a public host.
#[derive(Clone)]
struct Clients {
    https: reqwest::Client,
    http_loopback: reqwest::Client,
}

/// Runs the delivery loop until the returned handle is aborted.
pub fn spawn(push: Arc<Push>) -> Result<tokio::task::JoinHandle<()>, String> {
    let clients = Clients {
        https: push.callbacks.client(push.settings.timeout, false)?,
        http_loopback: push.callbacks.client(push.settings.timeout, true)?,
    };
    Ok(tokio::spawn(run(push, clients)))
}

async fn run(push: Arc<Push>, clients: Clients) {
    let slots = Arc::new(Semaphore::new(push.settings.deliveries_at_once as usize));
    // Attempts belong to the loop: when it is stopped they stop too, and their claims lapse
    // (due again after the restart) instead of outliving the store they record into.
    let mut attempts = tokio::task::JoinSet::new();
    let busy = PeersInFlight::default();
    // Longer than an attempt can take: the callback's check (at most 5 s to resolve) and the
    // request's timeout.
    let claim = push
        .settings
        .timeout
        .saturating_add(Duration::from_secs(15));
    let mut store_down = false;
    loop {
        while attempts.try_join_next().is_some() {}
        let free = u32::try_from(slots.available_permits()).unwrap_or(u32::MAX);
        if free > 0 {
            let now = push.clock.now();
            match push
                .store
                .claim_deliveries(now, later(now, claim), free)
                .await
            {
                Ok(due) => {
                    store_down = false;
                    for delivery in due {
                        // A peer at its share waits a second, so one peer whose callbacks
                        // hang cannot hold every slot; the others' deliveries go first.
                        if busy.count(&delivery.peer_id) >= push.settings.deliveries_per_peer {
                            let deferred =
                                DeliveryOutcome::Deferred(later(now, Duration::from_secs(1)));
                            if let Err(error) = push
                                .store
                                .record_delivery(
                                    delivery.id,
                                    delivery.claimed_until,
                                    deferred,
                                    "",
                                    now,
                                )
                                .await
                            {
                                tracing::debug!(%error, "a deferred push notification waits for its claim to lapse");
                            }
                            continue;
                        }
                        let Ok(slot) = slots.clone().acquire_owned().await else {
                            return;
                        };
                        let peer = busy.enter(&delivery.peer_id);
                        let (push, clients) = (push.clone(), clients.clone());
                        attempts.spawn(async move {
                            attempt(&push, &clients, delivery).await;
                            drop(peer);
                            drop(slot);
                            push.wake();
                        });
                    }
                }
                Err(error) if !store_down => {
                    store_down = true;
                    tracing::warn!(%error, "push notifications wait: the store does not answer");
                }
                Err(_) => {}
            }
        }
        tokio::select! {
            () = push.wake.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Deliveries in flight per peer.
#[derive(Clone, Default)]
struct PeersInFlight(Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>);

impl PeersInFlight {
    fn count(&self, peer: &str) -> u32 {
        let map = self.0.locked();
        map.get(peer).copied().unwrap_or(0)
    }

    /// Counts one more in flight for `peer` until the guard drops.
    fn enter(&self, peer: &str) -> InFlight {
        let mut map = self.0.locked();
        *map.entry(peer.to_owned()).or_default() += 1;
        InFlight {
            peers: self.clone(),
            peer: peer.to_owned(),
        }
    }
}

/// One delivery in flight for its peer.
struct InFlight {
    peers: PeersInFlight,
    peer: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut map = self.peers.0.locked();
        if let Some(n) = map.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.peer);
            }
        }
    }
}

/// Attempts one delivery and records what became of it.
async fn attempt(push: &Push, clients: &Clients, delivery: PushDelivery) {
    let span = push.tracing.as_ref().map(|tracing| {
        tracing.delivery_span(
            delivery.call_trace.as_deref(),
            vec![
                KeyValue::new(names::A2A_TASK_ID, delivery.task_id.clone()),
                KeyValue::new(names::PUSH_ATTEMPT, i64::from(delivery.attempts) + 1),
            ],
        )
    });
    let failure = send(push, clients, &delivery).await.err();
    if let Some(span) = span {
        // The reason is peergate's own words, never the receiver's body or the URL.
        span.finish(failure.as_ref().map(Failure::kind));
    }
    let now = push.clock.now();
    let attempts = delivery.attempts.saturating_add(1);
    let outcome = match &failure {
        None => DeliveryOutcome::Delivered,
        Some(Failure::Permanent(_)) => DeliveryOutcome::GiveUp,
        Some(_) if attempts >= push.settings.max_attempts => DeliveryOutcome::GiveUp,
        Some(_) => DeliveryOutcome::RetryAt(later(now, backoff(attempts))),
    };
    let reason = failure.as_ref().map(Failure::reason).unwrap_or_default();
    push.metrics.push_attempted(outcome);
    match outcome {
        DeliveryOutcome::Delivered => {
            tracing::debug!(task_id = %delivery.task_id, config = %delivery.config_id, "push notification delivered");
        }
        DeliveryOutcome::RetryAt(_) => {
            tracing::debug!(task_id = %delivery.task_id, config = %delivery.config_id, attempts, reason, "push notification will be tried again");
        }
        DeliveryOutcome::Deferred(_) => {}
        DeliveryOutcome::GiveUp => {
            tracing::warn!(task_id = %delivery.task_id, config = %delivery.config_id, attempts, reason, "push notification given up (a dead letter now)");
        }
    }
    if let Err(error) = push
        .store
        .record_delivery(delivery.id, delivery.claimed_until, outcome, reason, now)
        .await
    {
        // The claim lapses and the delivery is tried again: at-least-once.
        tracing::warn!(task_id = %delivery.task_id, %error, "a push notification's outcome could not be stored");
    }
}

/// Why an attempt failed. Never the receiver's body, never the URL (it may carry a secret).
#[derive(Debug)]
enum Failure {
    /// Worth another attempt.
    Transient(String),
    /// No attempt can succeed (the secrets do not open with this key).
    Permanent(String),
}

impl Failure {
    /// Its `error.type`.
    fn kind(&self) -> &'static str {
        match self {
            Self::Transient(_) => "push_attempt_failed",
            Self::Permanent(_) => "push_undeliverable",
        }
    }

    fn reason(&self) -> &str {
        match self {
            Self::Transient(reason) | Self::Permanent(reason) => reason,
        }
    }
}

async fn send(push: &Push, clients: &Clients, delivery: &PushDelivery) -> Result<(), Failure> {
    let secrets = push
        .key
        .open(&delivery.task_id, &delivery.config_id, &delivery.sealed)
        .map_err(|e| Failure::Permanent(e.to_string()))?;
    // Checked again: the name may resolve elsewhere now, and the policy may have changed.
    let url = push
        .callbacks
        .check(&delivery.url)
        .await
        .map_err(|refused| Failure::Transient(format!("the callback URL {refused}")))?;
    let client = match url.scheme() {
        "http" => &clients.http_loopback,
        _ => &clients.https,
    };
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/a2a+json")
        .body(delivery.body.clone());
    if let Some(scheme) = &secrets.scheme {
        let value = match &secrets.credentials {
            Some(credentials) => format!("{scheme} {credentials}"),
            None => scheme.clone(),
        };
        request = request.header(reqwest::header::AUTHORIZATION, value);
    }
    if let Some(token) = &secrets.token {
        request = request.header("X-A2A-Notification-Token", token);
    }
    let mut response = request.send().await.map_err(|e| {
        Failure::Transient(if e.is_timeout() {
            "the receiver did not answer in time".to_owned()
        } else {
            // The innermost cause names the refusal or the socket error, not the URL.
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            format!("no answer from the receiver: {cause}")
        })
    })?;
    let status = response.status();
    // Read past unseen (nothing a receiver says is kept), so the connection carries the next
    // delivery to it.
    crate::net::client::read_rest(&mut response).await;
    if status.is_success() {
        Ok(())
    } else {
        Err(Failure::Transient(format!(
            "the receiver answered HTTP {}",
            status.as_u16()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
