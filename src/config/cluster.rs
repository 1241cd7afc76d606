//! `[cluster]`: how instances serving one store together tell the live from the gone. Read
//! only when a gateway serves a PostgreSQL store with Redis (several instances).

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterPolicy {
    /// How long an instance's lease lasts; it is renewed every third of that. An instance
    /// whose lease lapsed a whole lease ago is gone: a survivor fails its working tasks as
    /// interrupted within about `lease_seconds` × 7/3 of its death.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u32,
}

impl Default for ClusterPolicy {
    fn default() -> Self {
        Self {
            lease_seconds: default_lease_seconds(),
        }
    }
}

fn default_lease_seconds() -> u32 {
    15
}

impl ClusterPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        // Shorter leases lapse on a busy store's hiccup; longer ones leave a dead instance's
        // peers waiting.
        if !(2..=300).contains(&self.lease_seconds) {
            return Err(invalid(
                "cluster.lease_seconds",
                "must be between 2 and 300",
            ));
        }
        Ok(())
    }
}
