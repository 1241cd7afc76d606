//! Who may do what, as code: the operator's Cedar policies, validated against a schema, decide
//! each A2A call and each admin API request once, after authentication and before anything is
//! read (docs/authorization.md).
//!
//! Cedar (`cedar-policy`) was chosen for a formal semantics, a validator that refuses a policy
//! naming an action, attribute or type the schema lacks, and deterministic evaluation with no
//! I/O: a decision depends only on what the call carries.
//!
//! | part | file |
//! |---|---|
//! | the schema peergate's requests follow | `peergate.cedarschema`, [`schema`] |
//! | reading, checking and slicing the files | [`load`] |
//! | decisions remembered by the facts the policies read | `remembered.rs` |
//! | a call or a request as Cedar sees it | [`ask`] |
//! | the policies in force, swapped whole on reload | [`Authorization`] |

pub mod ask;
pub mod load;
mod remembered;
pub mod schema;
#[cfg(test)]
mod tests;

pub use ask::{AdminAsk, CallAsk, PeerFacts};
pub use load::{LoadError, Loaded, PolicyFiles};

use std::sync::{Arc, RwLock};

/// The policies in force: read by every call, replaced whole by a reload (a call sees the old
/// set or the new, never a mixture).
#[derive(Debug)]
pub struct Authorization {
    loaded: RwLock<Arc<Loaded>>,
}

impl Authorization {
    /// Reads and checks `files`: what is wrong with them, naming the key, the policy and the
    /// problem.
    pub fn load(files: &PolicyFiles) -> Result<Self, LoadError> {
        Ok(Self {
            loaded: RwLock::new(Arc::new(Loaded::read(files)?)),
        })
    }

    /// The policies in force.
    pub fn current(&self) -> Arc<Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts `loaded` in force, for every call that starts after this returns.
    pub fn replace(&self, loaded: Loaded) {
        *self
            .loaded
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(loaded);
    }
}

/// What the policies decided about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the call may go on.
    pub allowed: bool,
    /// The ids of the policies that decided it: the permits that allowed it, or the forbids
    /// that denied it (none when nothing permitted it: Cedar's default is to deny).
    pub policies: Arc<[Arc<str>]>,
}

impl Decision {
    /// The policy ids, comma-separated, or `default` when no policy decided (for the access log,
    /// the audit and the span).
    pub fn policy_list(&self) -> String {
        if self.policies.is_empty() {
            return "default".to_owned();
        }
        self.policies
            .iter()
            .map(|id| id.as_ref())
            .collect::<Vec<_>>()
            .join(",")
    }
}
