//! `[peers]` and `[budgets]`: defaults for new peers and for administrators' model budgets.

use super::{Invalid, invalid};

use crate::units::Bounded;
use serde::Deserialize;

/// `[peers]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeersPolicy {
    /// Requests per minute for a peer added without `--rate`.
    #[serde(default = "default_rate_per_minute")]
    pub default_rate_per_minute: Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }>,
    /// Owner of peers added on the command line without `--owner`.
    #[serde(default)]
    pub default_owner: Option<String>,
}

impl Default for PeersPolicy {
    fn default() -> Self {
        Self {
            default_rate_per_minute: default_rate_per_minute(),
            default_owner: None,
        }
    }
}

/// `[budgets]`: model budgets of administrators who have none of their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsPolicy {
    /// Tokens per UTC day.
    #[serde(default = "default_tokens_per_day")]
    pub tokens_per_day: u64,
    /// Tokens per UTC month; months are not budgeted when absent.
    #[serde(default)]
    pub tokens_per_month: Option<u64>,
}

impl Default for BudgetsPolicy {
    fn default() -> Self {
        Self {
            tokens_per_day: default_tokens_per_day(),
            tokens_per_month: None,
        }
    }
}

fn default_tokens_per_day() -> u64 {
    1_000_000
}

fn default_rate_per_minute() -> Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }> {
    const { Bounded::of(30) }
}

impl PeersPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if let Some(owner) = &self.default_owner
            && !crate::admin::is_account_name(owner)
        {
            return Err(invalid(
                "peers.default_owner",
                "must be 1 to 64 of letters, digits and ._-",
            ));
        }
        Ok(())
    }
}

impl BudgetsPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.tokens_per_day == 0 || self.tokens_per_month == Some(0) {
            return Err(invalid(
                "budgets",
                "a budget must be at least 1 token (forbid the model per administrator with `peergate admin budget NAME --model forbid`)",
            ));
        }
        Ok(())
    }
}
