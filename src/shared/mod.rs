//! State that several gateway instances would share, each behind a seam with its in-process
//! engine. Nothing outside these engines knows whether there is one instance or ten.
//!
//! | seam | used by | in process |
//! |---|---|---|
//! | [`rate_limit::RateLimiter`] | per-IP, per-peer and failed-authentication limits | GCRA on the monotonic clock; across instances, [`redis::limit::RedisLimiter`] |
//! | [`admission::SharedAdmission`] | the guard and the agent: one request's limits, budget read and turn lock in one question | none (each check answers where it is made) |
//! | [`turns::TurnLocks`] | the agent: one turn at a time per (peer, context) | a mutex per context |
//! | [`changes::ChangeNotifier`] | caches of peers and administrators (credentials, budgets) | direct calls |
//! | [`events::TaskEvents`] | whoever waits on a task (streaming, subscriptions, push) | a broadcast channel |
//! | [`ownership::TaskOwnership`] | start-up and housekeeping sweeps of working tasks | this process only; across instances, leases in the store |
//! | [`cancels::CancelRequests`] | `CancelTask` for a turn another instance answers | none (one instance); across instances, Redis pub/sub |
//! | [`spend::SharedSpend`] | budgets: tokens spent | none (each process counts); across instances, [`redis::spend::RedisSpend`] |
//! | [`streams::OpenStreams`] | the agent: each peer's open streams against its cap | a count per peer; across instances, [`redis::streams::RedisOpenStreams`] |
//!
//! The engines for several instances are in [`redis`], with what each does while Redis is away.

pub mod admission;
pub mod cancels;
pub mod capped_counts;
pub mod changes;
pub mod events;
pub mod gcra;
pub mod ownership;
pub mod rate_limit;
pub mod redis;
pub mod spend;
pub mod streams;
pub mod turns;
