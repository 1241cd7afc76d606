//! Reloading the policy while serving, as the admin API asks for it: the seam the composition
//! root implements (it holds what a reload replaces) and what a reload answers.

use serde::Serialize;

/// Who asked for a reload.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ReloadTrigger {
    /// `SIGHUP`.
    Signal,
    /// An administrator through the admin API.
    Admin(super::Caller),
    /// Another instance reloaded (or changes may have been missed): this one reads its file
    /// again and applies it only if its text changed.
    Heard,
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reloaded {
    /// The dotted keys now in force with their new values.
    pub applied: Vec<String>,
    /// The dotted keys whose new values wait for a restart (listeners, the store, the
    /// backend, …): the old values stay in force until then.
    pub restart_needed: Vec<String>,
    /// What else to know (a level `RUST_LOG` decides, …).
    pub notes: Vec<String>,
}

/// Why a reload kept the policy in force: the file could not be read, did not check, or a
/// part it describes could not be built. Never the file's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the policy was not reloaded, the one in force is kept: {0}")]
pub struct ReloadRefused(pub String);

/// Reads the policy file again and applies what can change while serving, atomically.
#[async_trait::async_trait]
pub trait PolicyReload: Send + Sync {
    /// Reloads, as `trigger` asks; one asked for (an administrator, `SIGHUP`) is audited.
    async fn reload(&self, trigger: ReloadTrigger) -> Result<Reloaded, ReloadRefused>;

    /// Whether the administrator named `admin_name` may reload through the admin API: the
    /// policy in force lists them in `admin.reloaders`.
    async fn may_reload(&self, admin_name: &str) -> bool;
}
