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

pub use auth::{
    AdminAuthLayer, AdminAuthenticator, AdminPrincipal, AuthenticatedAdmin, ScrapeToken,
    admin_authenticator,
};
pub use service::{
    AccountDefaults, AccountService, Actor, AdminChange, BudgetChange, Caller, NewPassword,
    NewPeer, PeerChange, ServiceError,
};
