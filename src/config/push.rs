//! `[push]`: how push notifications are kept and delivered (`capabilities.push_notifications`).

use super::{Invalid, invalid};
use crate::units::{Bounded, Seconds};
use serde::Deserialize;

/// `[push]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushPolicy {
    /// Environment variable holding the base64url 32-byte key that encrypts configs' tokens
    /// and credentials at rest.
    #[serde(default)]
    pub key_env: Option<String>,
    /// File holding that key. With neither, the first start generates one in the data
    /// directory (one instance only).
    #[serde(default)]
    pub key_file: Option<String>,
    /// Configs one task may have.
    #[serde(default = "default_max_configs_per_task")]
    pub max_configs_per_task: Bounded<1, 100>,
    /// Attempts per notification before it becomes a dead letter.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: Bounded<1, 50>,
    /// Deliveries in flight at once, per instance.
    #[serde(default = "default_deliveries_at_once")]
    pub deliveries_at_once: Bounded<1, 1024>,
    /// Deliveries of one peer's tasks in flight at once, per instance, so a peer whose
    /// callbacks hang cannot hold every slot.
    #[serde(default = "default_deliveries_per_peer")]
    pub deliveries_per_peer: Bounded<1, 1024>,
    /// How long one delivery may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: Seconds<1, 120>,
    /// DANGEROUS: callbacks to loopback addresses, over http too (tests and local development
    /// only; it lets any peer make peergate POST to services on this host).
    #[serde(default)]
    pub dangerous_allow_loopback_callbacks: bool,
}

impl Default for PushPolicy {
    fn default() -> Self {
        Self {
            key_env: None,
            key_file: None,
            max_configs_per_task: default_max_configs_per_task(),
            max_attempts: default_max_attempts(),
            deliveries_at_once: default_deliveries_at_once(),
            deliveries_per_peer: default_deliveries_per_peer(),
            timeout_seconds: default_timeout_seconds(),
            dangerous_allow_loopback_callbacks: false,
        }
    }
}

fn default_max_configs_per_task() -> Bounded<1, 100> {
    const { Bounded::of(10) }
}
fn default_max_attempts() -> Bounded<1, 50> {
    const { Bounded::of(8) }
}
fn default_deliveries_at_once() -> Bounded<1, 1024> {
    const { Bounded::of(8) }
}
fn default_deliveries_per_peer() -> Bounded<1, 1024> {
    const { Bounded::of(2) }
}
fn default_timeout_seconds() -> Seconds<1, 120> {
    const { Seconds::of(10) }
}

impl PushPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.key_env.is_some() && self.key_file.is_some() {
            return Err(invalid(
                "push.key_env",
                "set one of push.key_env or push.key_file, not both",
            ));
        }
        if self.deliveries_per_peer > self.deliveries_at_once {
            return Err(invalid(
                "push.deliveries_per_peer",
                "must be at most push.deliveries_at_once",
            ));
        }
        Ok(())
    }
}
