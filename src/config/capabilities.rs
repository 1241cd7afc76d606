//! `[capabilities]`: which parts of A2A 1.0 beyond the narrow door are switched on. Each is
//! off by default; the card advertises exactly what is on, and what is off answers the error
//! the specification names for it.

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[capabilities]`
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapabilitiesPolicy {
    /// `SendStreamingMessage` (Server-Sent Events).
    #[serde(default)]
    pub streaming: bool,
    /// `SubscribeToTask` (needs `streaming`).
    #[serde(default)]
    pub subscriptions: bool,
    /// `SendMessage` with `configuration.returnImmediately`: the answer is the working task.
    #[serde(default)]
    pub non_blocking: bool,
    /// `CancelTask` on a task still being answered stops the model call.
    #[serde(default)]
    pub cancel_running: bool,
    /// Push-notification configurations and their deliveries (`[push]`).
    #[serde(default)]
    pub push_notifications: bool,
    /// The HTTP+JSON binding beside JSON-RPC.
    #[serde(default)]
    pub http_json: bool,
}

impl CapabilitiesPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if self.subscriptions && !self.streaming {
            return Err(invalid(
                "capabilities.subscriptions",
                "needs capabilities.streaming (a subscription is a stream)",
            ));
        }
        Ok(())
    }
}
