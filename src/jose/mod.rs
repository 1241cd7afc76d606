//! JOSE for the Agent Card: signing, the signing keys and their JWKS, verification, fetching
//! remote cards and key sets.

pub mod access_token;
pub mod caller;
pub mod fetch;
pub mod jwks_cache;
pub mod keys;
pub mod receipt;
pub mod sign;
pub mod verify;
