//! `[authorization]`: Cedar policies that decide each A2A call and each admin API request
//! (docs/authorization.md). Absent, nothing is decided beyond what peers and tokens allow.

use serde::Deserialize;
use std::path::PathBuf;

/// `[authorization]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationPolicy {
    /// The Cedar policies (relative to the working directory), at most 1 MiB. A reload reads
    /// them again.
    pub policies: PathBuf,
    /// The Cedar schema they are validated against; peergate's own
    /// (`peergate policy schema`) when absent. An operator's schema must describe every
    /// request peergate makes.
    #[serde(default)]
    pub schema: Option<PathBuf>,
}
