//! `[gate]`: protocol checks at the door.

use serde::Deserialize;

/// `[gate]`: protocol checks at the door.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatePolicy {
    /// Refuse requests without an `A2A-Version` (the spec reads a missing one as 0.3).
    #[serde(default)]
    pub require_version_header: bool,
}
