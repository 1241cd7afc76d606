//! Administrators: the people who register peers, own their conversations, carry their model
//! budgets, and answer for every change in the audit log.
//!
//! * [`service`]: the rules, shared by the command line and the API;
//! * [`budget`]: each administrator's model budget, checked before the model is asked;
//! * [`auth`]: who may use the admin API;
//! * [`reload`]: reloading the policy while serving, as the admin API asks;
//! * [`roles`]: what an auditor may not do;
//! * The admin API's routes and its OpenAPI document are HTTP, in `crate::http::admin_api`.

pub mod auth;
pub mod budget;
pub mod reload;
pub mod roles;
pub mod service;

/// The largest quota accepted anywhere, in requests per minute.
pub const MAX_RATE_PER_MINUTE: u32 = 1_000_000_000;

/// The most streams one peer may be allowed to hold open at once.
pub const MAX_STREAMS_PER_PEER: u32 = 10_000;

/// Whether `name` can name a peer or an administrator: 1 to 64 of letters, digits and `._-`.
pub fn is_account_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

pub use auth::{
    AdminAuthLayer, AdminAuthenticator, AdminPrincipal, AuthenticatedAdmin, ScrapeToken,
    admin_authenticator,
};
pub use service::{
    AccountDefaults, AccountService, Actor, AdminChange, BudgetChange, Caller, NewPassword,
    NewPeer, PeerChange, ServiceError,
};
