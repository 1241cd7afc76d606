//! The OAuth scopes an identity provider's token grants, and the A2A operations each opens.
//!
//! A token can narrow what its peer may do, never widen it: a scope only lets an operation
//! through that the peer record and the policy allow anyway, and quotas, budgets and
//! capabilities never come from a token.

use crate::protocol::jsonrpc::Method;

/// The scope an A2A operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OperationScope {
    /// `a2a:message`: SendMessage, SendStreamingMessage.
    Message,
    /// `a2a:tasks:read`: GetTask, ListTasks, SubscribeToTask.
    TasksRead,
    /// `a2a:tasks:cancel`: CancelTask.
    TasksCancel,
    /// `a2a:push`: the push-notification config methods.
    Push,
}

impl OperationScope {
    /// Every scope, in the order the card lists them.
    pub const ALL: [Self; 4] = [
        Self::Message,
        Self::TasksRead,
        Self::TasksCancel,
        Self::Push,
    ];

    /// The scope's name in tokens and cards.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "a2a:message",
            Self::TasksRead => "a2a:tasks:read",
            Self::TasksCancel => "a2a:tasks:cancel",
            Self::Push => "a2a:push",
        }
    }

    /// What the scope opens, for the card.
    pub fn description(self) -> &'static str {
        match self {
            Self::Message => "Send messages (SendMessage, SendStreamingMessage)",
            Self::TasksRead => "Read this peer's tasks (GetTask, ListTasks, SubscribeToTask)",
            Self::TasksCancel => "Cancel this peer's tasks (CancelTask)",
            Self::Push => "Manage push-notification configs of this peer's tasks",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The operation scopes a token granted; names it does not know are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantedScopes(u8);

impl GrantedScopes {
    /// The operation scopes among `names`.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut granted = 0;
        for name in names {
            if let Some(scope) = OperationScope::ALL.iter().find(|s| s.as_str() == name) {
                granted |= scope.bit();
            }
        }
        Self(granted)
    }

    /// The names of the scopes granted, in the card's order.
    pub fn names(self) -> Vec<&'static str> {
        OperationScope::ALL
            .iter()
            .filter(|scope| self.allows(**scope))
            .map(|scope| scope.as_str())
            .collect()
    }

    /// Whether `scope` was granted.
    pub fn allows(self, scope: OperationScope) -> bool {
        self.0 & scope.bit() != 0
    }
}

/// The scopes are the guard's, so the protocol's method names its scope here, not in the
/// protocol folder (which imports nothing of the gateway).
impl Method {
    /// The scope an identity provider's token must grant for this method (the extended card
    /// needs none: any authenticated peer may read its own).
    pub fn scope(self) -> Option<OperationScope> {
        match self {
            Self::SendMessage | Self::SendStreamingMessage => Some(OperationScope::Message),
            Self::GetTask | Self::ListTasks | Self::SubscribeToTask => {
                Some(OperationScope::TasksRead)
            }
            Self::CancelTask => Some(OperationScope::TasksCancel),
            Self::CreatePushConfig
            | Self::GetPushConfig
            | Self::ListPushConfigs
            | Self::DeletePushConfig => Some(OperationScope::Push),
            Self::GetExtendedAgentCard => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_scopes_are_granted() {
        let granted = GrantedScopes::from_names(["a2a:message", "a2a:tasks", "openid", "A2A:PUSH"]);
        assert!(granted.allows(OperationScope::Message));
        for other in [
            OperationScope::TasksRead,
            OperationScope::TasksCancel,
            OperationScope::Push,
        ] {
            assert!(!granted.allows(other), "{other:?}");
        }
    }
}
