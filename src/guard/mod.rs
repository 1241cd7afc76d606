//! What the guard decides, as types: why a request is refused ([`refusal::Refusal`], with the
//! [`refusal::RefusalReason`] metrics count it under), the one place a refusal becomes an HTTP
//! answer, and the one response future every guard layer returns ([`future::GuardFuture`]). The
//! guard layers, the handlers and the admin API import it; it imports none of them, so the
//! answer to a refusal is decided below everything that refuses.

pub mod admission;
pub mod certificate;
pub mod challenges;
pub mod cidr;
pub mod future;
pub mod limited;
pub mod reason;
pub mod refusal;
pub mod scheme;
pub mod scopes;
pub mod unauthenticated;
