//! The A2A operations one peer may call: all of them (no set), or a set its administrator
//! gave it, such as `read-only`. A set narrows what the policy offers, as a token's scopes do;
//! it never widens it.

use crate::protocol::jsonrpc::Method;

/// A set of A2A operations (one bit per [`Method`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OperationSet(u16);

impl OperationSet {
    /// `read-only`: reading and following tasks and the extended card; no message, cancel or
    /// push-notification config.
    pub fn read_only() -> Self {
        Self::of(&[
            Method::GetTask,
            Method::ListTasks,
            Method::SubscribeToTask,
            Method::GetExtendedAgentCard,
        ])
    }

    /// The set of `methods`.
    pub fn of(methods: &[Method]) -> Self {
        Self(methods.iter().fold(0, |bits, m| bits | (1 << *m as u16)))
    }

    /// Whether `method` is in the set.
    pub fn contains(self, method: Method) -> bool {
        self.0 & (1 << method as u16) != 0
    }

    /// The methods in the set, by their 1.0 names, in declaration order.
    pub fn names(self) -> Vec<&'static str> {
        Method::ALL
            .iter()
            .filter(|m| self.contains(**m))
            .map(|m| m.name())
            .collect()
    }

    /// The set as stored: its 1.0 names, comma-separated.
    pub fn to_text(self) -> String {
        self.names().join(",")
    }

    /// `read-only`, or 1.0 (or 0.3) method names separated by commas; what is wrong otherwise.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim() == "read-only" {
            return Ok(Self::read_only());
        }
        let mut methods = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let method = Method::from_name(name).ok_or_else(|| {
                format!("{name:?} is no A2A operation (e.g. GetTask, SendMessage, or read-only)")
            })?;
            methods.push(method);
        }
        if methods.is_empty() {
            return Err("name at least one operation, or read-only".to_owned());
        }
        Ok(Self::of(&methods))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_reads_back_as_written_and_refuses_what_is_no_operation() {
        let read_only = OperationSet::read_only();
        assert!(read_only.contains(Method::GetTask) && !read_only.contains(Method::SendMessage));
        assert_eq!(OperationSet::parse(&read_only.to_text()), Ok(read_only));
        assert_eq!(
            OperationSet::parse("GetTask, message/send")
                .unwrap()
                .names(),
            ["SendMessage", "GetTask"]
        );
        assert!(
            OperationSet::parse("GetTasks")
                .unwrap_err()
                .contains("GetTasks")
        );
        assert!(OperationSet::parse(" , ").is_err());
    }
}
