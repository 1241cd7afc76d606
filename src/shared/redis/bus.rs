//! Change notifications and task events across instances, over Redis pub/sub.
//!
//! Each instance delivers what it publishes to its own subscribers at once (a revocation made
//! here applies to the very next request here) and publishes it on a Redis channel; one
//! subscription per instance hears what the others published and delivers it locally. A
//! revocation on one instance therefore reaches the others in one Redis round trip, not the
//! credential cache time.
//!
//! Task events hold the task's contents, so they go to Redis only while some instance has a
//! subscriber: every instance announces its presence every [`PRESENCE_EVERY`] (and at once when
//! it gains its first subscriber), saying whether anyone there listens, and an instance
//! publishes events to Redis only while another announced listeners within
//! [`INTEREST_LASTS`]. A subscriber therefore hears the events stored after its announcement
//! reached the publishing instance (one Redis round trip); what came before is in the store.
//!
//! The presence announcements are also this instance's check on its own subscription: one that
//! has not heard its own announcement for [`INTEREST_LASTS`] is taken for dead (a connection
//! cut without a reset) and made again.
//!
//! While the subscription is down, other instances' changes arrive only as their caches
//! expire (`auth.credential_cache_seconds`), and events stay on the instance that stored the
//! task. When it is up again, this instance's caches forget everything, since changes may have
//! been missed meanwhile; the subscription is retried every half second.

use super::{Degradation, Redis};
use crate::locks::ReadWriteLocked;
use crate::protocol::types::TaskState;
use crate::shared::changes::{Change, ChangeListener, ChangeNotifier, LocalChanges};
use crate::shared::events::{LocalTaskEvents, TaskEvent, TaskEvents, TaskSubscription};
use crate::store::PeerId;
use futures_util::StreamExt as _;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Where changes are published.
const CHANGES: &str = "peergate:changes";
/// Where task events are published.
const EVENTS: &str = "peergate:events";
/// Where cancel requests are published.
const CANCELS: &str = "peergate:cancels";
/// Where instances announce their presence and whether they have task subscribers.
const PRESENCE: &str = "peergate:presence";
/// How often an instance announces its presence.
pub const PRESENCE_EVERY: Duration = Duration::from_secs(3);
/// How long an announcement of listeners lasts (and how long a silent subscription is trusted).
pub const INTEREST_LASTS: Duration = Duration::from_secs(10);

/// The local deliveries and the connection that publishes, shared by both seams.
#[derive(Debug)]
struct Shared {
    instance: Arc<str>,
    connection: ConnectionManager,
    changes: LocalChanges,
    events: LocalTaskEvents,
    subscribed: AtomicBool,
    health: Degradation,
    /// Who stops this instance's turns when another instance asks.
    cancels: CancelListeners,
    /// The clock of the two instants below, in milliseconds since this.
    started: tokio::time::Instant,
    /// Until when another instance has task subscribers (ms since `started`).
    interest_until: AtomicU64,
    /// When this instance last heard its own announcement (ms since `started`).
    heard_self: AtomicU64,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Announces this instance, and whether it has task subscribers.
    fn announce(self: &Arc<Self>) {
        let wire = WirePresence {
            from: Cow::Borrowed(&self.instance),
            listening: self.events.listening(),
        };
        if let Ok(payload) = serde_json::to_string(&wire) {
            self.publish(PRESENCE, payload);
        }
    }

    /// Publishes `payload` on `channel` without making anyone wait.
    fn publish(self: &Arc<Self>, channel: &'static str, payload: String) {
        // Sent even while the breaker is open: nobody waits on it, and a revocation or a
        // cancel that arrives late, once Redis answers again, still arrives.
        let shared = self.clone();
        tokio::spawn(async move {
            let mut connection = shared.connection.clone();
            let sent: Result<i64, _> = redis::cmd("PUBLISH")
                .arg(channel)
                .arg(payload)
                .query_async(&mut connection)
                .await;
            match sent {
                Ok(_) => shared.health.answered(),
                Err(error) => shared.health.failed(&error),
            }
        });
    }
}

/// Who stops this instance's turns when another instance asks.
#[derive(Default)]
struct CancelListeners(std::sync::RwLock<Vec<crate::shared::cancels::CancelListener>>);

impl std::fmt::Debug for CancelListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CancelListeners")
    }
}

/// A cancel request on the wire.
#[derive(Serialize, Deserialize)]
struct WireCancel<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    peer: Cow<'a, str>,
    #[serde(borrow)]
    task: Cow<'a, str>,
}

/// A presence announcement on the wire.
#[derive(Serialize, Deserialize)]
struct WirePresence<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    /// Whether the instance has task subscribers.
    listening: bool,
}

/// A task event on the wire.
#[derive(Serialize, Deserialize)]
struct WireEvent<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    peer: Cow<'a, str>,
    #[serde(borrow)]
    task: Cow<'a, str>,
    state: TaskState,
    #[serde(borrow)]
    task_json: Cow<'a, str>,
}

/// One instance's end of the bus: its subscription runs until this drops.
#[derive(Debug)]
pub struct RedisBus {
    shared: Arc<Shared>,
    listener: tokio::task::JoinHandle<()>,
    announcer: tokio::task::JoinHandle<()>,
}

impl RedisBus {
    /// Subscribes this instance (`instance`, so it can skip what it published itself).
    pub fn start(redis: &Redis, instance: &str) -> Self {
        let shared = Arc::new(Shared {
            instance: instance.into(),
            connection: redis.connection(),
            changes: LocalChanges::default(),
            events: LocalTaskEvents::default(),
            subscribed: AtomicBool::new(false),
            health: redis.degradation("change notifications and task events"),
            cancels: CancelListeners::default(),
            started: tokio::time::Instant::now(),
            interest_until: AtomicU64::new(0),
            heard_self: AtomicU64::new(0),
        });
        let listener = tokio::spawn(listen(redis.client().clone(), shared.clone()));
        let announcing = shared.clone();
        let announcer = tokio::spawn(async move {
            let mut tick = tokio::time::interval(PRESENCE_EVERY);
            loop {
                tick.tick().await;
                announcing.announce();
            }
        });
        Self {
            shared,
            listener,
            announcer,
        }
    }

    /// The change notifier over this bus.
    pub fn changes(&self) -> Arc<dyn ChangeNotifier> {
        Arc::new(BusChanges(self.shared.clone()))
    }

    /// The task events over this bus.
    pub fn events(&self) -> Arc<dyn TaskEvents> {
        Arc::new(BusEvents(self.shared.clone()))
    }

    /// Cancel requests over this bus.
    pub fn cancels(&self) -> Arc<dyn crate::shared::cancels::CancelRequests> {
        Arc::new(BusCancels(self.shared.clone()))
    }

    /// Whether the subscription is up, so other instances' publications arrive.
    pub fn subscribed(&self) -> bool {
        self.shared.subscribed.load(Ordering::Relaxed)
    }

    /// Publications that could not reach Redis.
    pub fn local_answers(&self) -> u64 {
        self.shared.health.local_answers()
    }
}

impl Drop for RedisBus {
    fn drop(&mut self) {
        self.listener.abort();
        self.announcer.abort();
    }
}

/// Holds the subscription, delivering other instances' publications locally.
async fn listen(client: redis::Client, shared: Arc<Shared>) {
    let mut first = true;
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await
            && pubsub
                .subscribe(&[CHANGES, EVENTS, PRESENCE, CANCELS])
                .await
                .is_ok()
        {
            shared.subscribed.store(true, Ordering::Relaxed);
            shared.heard_self.store(shared.now_ms(), Ordering::Relaxed);
            shared.announce();
            // What others changed before the subscription was up (or while it was down) was
            // not heard: caches forget, and the known credential ids are read again.
            shared.changes.publish(Change::Everyone);
            if !first {
                tracing::warn!(
                    "Redis subscription restored: changes and task events are shared again; cached credentials and budgets forgotten"
                );
            }
            first = false;
            let mut messages = pubsub.into_on_message();
            let mut check = tokio::time::interval(Duration::from_secs(1));
            let silent_for = u64::try_from(INTEREST_LASTS.as_millis()).unwrap_or(u64::MAX);
            loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    _ = check.tick() => {
                        let heard = shared.heard_self.load(Ordering::Relaxed);
                        if shared.now_ms().saturating_sub(heard) > silent_for {
                            break;
                        }
                        continue;
                    }
                };
                let Some(message) = message else { break };
                let Ok(payload) = message.get_payload::<String>() else {
                    continue;
                };
                match message.get_channel_name() {
                    CHANGES => deliver_change(&shared, &payload),
                    EVENTS => deliver_event(&shared, &payload),
                    PRESENCE => hear_presence(&shared, &payload),
                    CANCELS => hear_cancel(&shared, &payload),
                    _ => {}
                }
            }
            shared.subscribed.store(false, Ordering::Relaxed);
            tracing::warn!(
                "Redis subscription lost: other instances' changes arrive within the credential cache time until it is back"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn hear_cancel(shared: &Shared, payload: &str) {
    let Ok(wire) = serde_json::from_str::<WireCancel<'_>>(payload) else {
        return;
    };
    if *wire.from == *shared.instance {
        return;
    }
    let peer = PeerId::from(&*wire.peer);
    let listeners = shared.cancels.0.read_locked();
    for listener in listeners.iter() {
        listener(&peer, &wire.task);
    }
}

fn hear_presence(shared: &Shared, payload: &str) {
    let Ok(wire) = serde_json::from_str::<WirePresence<'_>>(payload) else {
        return;
    };
    let now = shared.now_ms();
    if *wire.from == *shared.instance {
        shared.heard_self.store(now, Ordering::Relaxed);
    } else if wire.listening {
        let lasts = u64::try_from(INTEREST_LASTS.as_millis()).unwrap_or(u64::MAX);
        shared
            .interest_until
            .fetch_max(now + lasts, Ordering::Relaxed);
    }
}

fn deliver_change(shared: &Shared, payload: &str) {
    let Some((from, change)) = Change::from_wire(payload) else {
        return;
    };
    if *from != *shared.instance {
        shared.changes.publish(change);
    }
}

fn deliver_event(shared: &Shared, payload: &str) {
    if !shared.events.listening() {
        return;
    }
    let Ok(wire) = serde_json::from_str::<WireEvent<'_>>(payload) else {
        return;
    };
    if *wire.from == *shared.instance {
        return;
    }
    shared.events.publish(TaskEvent {
        peer_id: (&*wire.peer).into(),
        task_id: (&*wire.task).into(),
        state: wire.state,
        task_json: (&*wire.task_json).into(),
    });
}

/// Change notifications over the bus.
#[derive(Debug)]
struct BusChanges(Arc<Shared>);

impl ChangeNotifier for BusChanges {
    fn publish(&self, change: Change) {
        self.0.publish(CHANGES, change.to_wire(&self.0.instance));
        self.0.changes.publish(change);
    }

    fn tell_others(&self, change: Change) {
        self.0.publish(CHANGES, change.to_wire(&self.0.instance));
    }

    fn subscribe(&self, listener: Arc<dyn ChangeListener>) {
        self.0.changes.subscribe(listener);
    }
}

/// Cancel requests over the bus.
#[derive(Debug)]
struct BusCancels(Arc<Shared>);

impl crate::shared::cancels::CancelRequests for BusCancels {
    fn request(&self, peer_id: &PeerId, task_id: &str) {
        let wire = WireCancel {
            from: Cow::Borrowed(&self.0.instance),
            peer: Cow::Borrowed(peer_id),
            task: Cow::Borrowed(task_id),
        };
        if let Ok(payload) = serde_json::to_string(&wire) {
            self.0.publish(CANCELS, payload);
        }
    }

    fn subscribe(&self, listener: crate::shared::cancels::CancelListener) {
        self.0.cancels.0.write_locked().push(listener);
    }
}

/// Task events over the bus.
#[derive(Debug)]
struct BusEvents(Arc<Shared>);

impl TaskEvents for BusEvents {
    fn listening(&self) -> bool {
        self.0.events.listening() || self.0.now_ms() < self.0.interest_until.load(Ordering::Relaxed)
    }

    fn publish(&self, event: TaskEvent) {
        let state = event.state;
        let wire = WireEvent {
            from: Cow::Borrowed(&self.0.instance),
            peer: Cow::Borrowed(&event.peer_id),
            task: Cow::Borrowed(&event.task_id),
            state,
            task_json: Cow::Borrowed(&event.task_json),
        };
        let remote = self.0.now_ms() < self.0.interest_until.load(Ordering::Relaxed);
        if remote && let Ok(payload) = serde_json::to_string(&wire) {
            self.0.publish(EVENTS, payload);
        }
        self.0.events.publish(event);
    }

    fn subscribe(&self, peer_id: &PeerId, task_id: &str) -> TaskSubscription {
        let first = !self.0.events.listening();
        let subscription = self.0.events.subscribe(peer_id, task_id);
        if first {
            // The others publish to Redis once they hear it.
            self.0.announce();
        }
        subscription
    }
}
