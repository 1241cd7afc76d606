//! What this instance shares with others serving the same store, chosen once at start.
//!
//! | store | `--redis` | serves | shared through Redis | leases |
//! |---|---|---|---|---|
//! | SQLite | no | alone | nothing | no |
//! | SQLite | yes | alone | the door's limits only | no |
//! | PostgreSQL | no | alone (a second instance is refused) | nothing | no |
//! | PostgreSQL | yes | with every instance on the same Redis | limits, changes, task events, turns, budgets | yes |
//!
//! Instances serving together must serve the same card, so that clients do not flap between
//! them: the card's URL (`server.public_base_url`) and its signing keys (`[signing] keys`,
//! the same files or secrets on every instance) are then required, and start-up stops naming
//! the missing one.

use super::{GatewayOptions, StartError};
use crate::a2a::agent::{Agent, SharedState};
use crate::shared::admission::SharedAdmission;
use crate::shared::changes::{ChangeNotifier, LocalChanges};
use crate::shared::ownership::{LeasedInstances, TaskOwnership};
use crate::shared::redis::admission::RedisAdmission;
use crate::shared::redis::bus::RedisBus;
use crate::shared::redis::limit::RedisLimiter;
use crate::shared::redis::spend::RedisSpend;
use crate::shared::redis::turns::RedisTurnLocks;
use crate::shared::redis::{Redis, RedisSetupError};
use crate::shared::spend::SharedSpend;
use crate::store::{InstanceRegistry, Serving, Store};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// The door's limits kept in Redis for every instance (`--redis`); none without it.
#[derive(Default)]
pub(super) struct SharedLimits {
    /// Each request's shared checks, asked in one call (the per-IP and per-peer limits, the
    /// failed attempts of a request that carries an admission, a message's budget and turn).
    pub admission: Option<Arc<dyn SharedAdmission>>,
    /// Failed attempts, and the in-process limiter that answers for them while Redis does not.
    pub failed_auth: Option<crate::layers::auth::SharedAttempts>,
}

/// The engines of every shared seam, for this instance.
pub(super) struct Sharing {
    pub serving: Serving,
    pub limits: SharedLimits,
    pub changes: Arc<dyn ChangeNotifier>,
    pub agent: SharedState,
    pub spend: Option<Arc<dyn SharedSpend>>,
    /// This instance's lease, when the store keeps leases.
    leases: Option<(Arc<LeasedInstances>, Arc<dyn InstanceRegistry>)>,
    bus: Option<RedisBus>,
    /// Redis, when configured: `/ready` asks it.
    pub redis: Option<Redis>,
}

impl Sharing {
    /// Connects to Redis (when given) and picks each seam's engine.
    pub async fn connect(options: &GatewayOptions, store: &Store) -> Result<Self, StartError> {
        let registry = store.instances();
        let alone = Self {
            serving: Serving::Alone,
            limits: SharedLimits::default(),
            changes: Arc::new(LocalChanges::default()),
            agent: SharedState::default(),
            spend: None,
            leases: None,
            bus: None,
            redis: None,
        };
        // Serving alone (a lock keeps others out), every working task at start is a leftover:
        // no leases needed.
        let Some(url) = &options.redis_url else {
            return Ok(alone);
        };
        if registry.is_none() {
            // The embedded store has one process: only the door's limits go to Redis.
            let redis = connect(options, url).await?;
            tracing::info!(
                "per-IP, per-peer and failed-authentication limits are kept in Redis, shared by every gateway using it"
            );
            return Ok(Self {
                limits: shared_limits(options, &redis),
                redis: Some(redis),
                ..alone
            });
        }
        same_card_everywhere(options)?;
        let redis = connect(options, url).await?;
        let leases = registry.map(|registry| {
            let leases = LeasedInstances::new(registry.clone(), lease(options));
            (Arc::new(leases), registry)
        });
        let ownership = leases
            .as_ref()
            .map(|(leases, _)| leases.clone() as Arc<dyn TaskOwnership>)
            .unwrap_or_else(|| SharedState::default().ownership);
        let bus = RedisBus::start(&redis, ownership.instance());
        // A turn is bounded by the backend's timeout; its lock outlives it with room to
        // store the answer, and lapses by itself if its instance dies.
        let timeout = options.policy.model.timeout_seconds;
        let hold = Duration::from_secs(timeout.get().saturating_mul(2) + 10);
        let spend = Arc::new(RedisSpend::new(&redis));
        let agent = SharedState {
            // A turn's spending goes to the counters with its release, in one call.
            turns: Arc::new(RedisTurnLocks::new(&redis, hold).with_spend(spend.clone())),
            events: bus.events(),
            ownership,
            cancels: bus.cancels(),
            streams: Arc::new(crate::shared::redis::streams::RedisOpenStreams::new(
                &redis,
                lease(options),
            )),
        };
        tracing::info!(
            "serving the store together with other instances: limits, change notifications, task events, turn order and budgets are shared through Redis; leases are kept in the store"
        );
        Ok(Self {
            serving: Serving::Shared,
            limits: shared_limits(options, &redis),
            changes: bus.changes(),
            agent,
            spend: Some(spend),
            leases,
            bus: Some(bus),
            redis: Some(redis),
        })
    }

    /// The registry of instances serving together (`None` when serving alone).
    pub fn registry(&self) -> Option<Arc<dyn InstanceRegistry>> {
        self.leases.as_ref().map(|(_, registry)| registry.clone())
    }

    /// Takes this instance's first lease, before it stores any task.
    pub async fn begin(&self) -> Result<(), StartError> {
        if let Some((leases, _)) = &self.leases {
            leases.renew().await?;
        }
        Ok(())
    }

    /// Renews the lease every third of its length; apart from that (so a slow sweep never
    /// delays a renewal), the instance leading housekeeping fails the working tasks of
    /// instances whose lease lapsed.
    pub fn keep(self, options: &GatewayOptions, agent: Arc<Agent>) -> Kept {
        let lease = lease(options);
        let mut tasks = Vec::new();
        if let Some((leases, registry)) = self.leases.clone() {
            let renewing = leases.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(lease / 3);
                loop {
                    tick.tick().await;
                    if let Err(e) = renewing.renew().await {
                        tracing::warn!(error = %e, "could not renew this instance's lease");
                    }
                }
            }));
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(lease / 3);
                loop {
                    tick.tick().await;
                    let leading = tokio::time::timeout(lease / 3, registry.lead_housekeeping());
                    if !matches!(leading.await, Ok(Ok(true))) || !leases.may_judge() {
                        continue;
                    }
                    match agent.fail_tasks_of_gone_instances().await {
                        Ok(0) => {}
                        Ok(n) => tracing::warn!(
                            tasks = n,
                            "tasks of instances whose lease lapsed are now failed (interrupted)"
                        ),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not fail the tasks of gone instances")
                        }
                    }
                }
            }));
        }
        Kept {
            leases: self.leases.map(|(leases, _)| leases),
            tasks,
            _bus: self.bus,
        }
    }
}

/// What keeps running for sharing while the gateway serves.
pub(super) struct Kept {
    leases: Option<Arc<LeasedInstances>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _bus: Option<RedisBus>,
}

impl Kept {
    /// Ends the lease: a clean stop leaves nothing for the others to fail.
    pub async fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
        if let Some(leases) = self.leases {
            leases.end().await;
        }
    }
}

/// The door's limits over `redis`.
fn shared_limits(options: &GatewayOptions, redis: &Redis) -> SharedLimits {
    let failed_auth = RedisLimiter::<IpAddr>::new(
        redis,
        "peergate:failed-auth",
        options.policy.limits.tracked_addresses.usize(),
        options.clock.clone(),
    );
    let local = failed_auth.fallback();
    SharedLimits {
        admission: Some(Arc::new(RedisAdmission::new(redis))),
        failed_auth: Some((Arc::new(failed_auth), local)),
    }
}

fn lease(options: &GatewayOptions) -> Duration {
    options.policy.cluster.lease_seconds.duration()
}

fn refused(e: RedisSetupError) -> StartError {
    StartError::Config(format!("--redis / PEERGATE_REDIS_URL: {e}"))
}

/// Refuses settings under which instances serving together would serve different cards.
fn same_card_everywhere(options: &GatewayOptions) -> Result<(), StartError> {
    match options.policy.missing_for_several_instances().first() {
        Some((setting, why)) => Err(StartError::Config(format!(
            "{setting} must be set when several instances serve one store (--redis with a PostgreSQL store): {why}"
        ))),
        None => Ok(()),
    }
}

/// Redis at `url`, with the policy's timeout and breaker.
async fn connect(options: &GatewayOptions, url: &str) -> Result<Redis, StartError> {
    let cluster = &options.policy.cluster;
    Redis::connect_with(
        url,
        Duration::from_millis(cluster.redis_timeout_ms.get()),
        cluster.redis_breaker_timeouts.u32(),
    )
    .await
    .map_err(refused)
}
