//! Policies for tests.

use peergate::config::{EMBEDDED_DEFAULT, Policy, PolicySource};

/// The embedded default policy with `edit` applied to its text.
pub fn policy_with(edit: impl FnOnce(String) -> String) -> Policy {
    Policy::parse(&edit(EMBEDDED_DEFAULT.to_owned()), &PolicySource::Embedded).expect("policy")
}

/// Policy text with the credential cache off, so changes written by the CLI apply to the very
/// next request.
pub fn without_credential_cache(policy: String) -> String {
    policy.replace(
        "credential_cache_seconds = 2",
        "credential_cache_seconds = 0",
    )
}
