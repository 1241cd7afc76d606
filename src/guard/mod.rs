//! What the guard decides, as types: why a request is refused ([`refusal::Refusal`], with the
//! [`refusal::RefusalReason`] metrics count it under), and the one place a refusal becomes an
//! HTTP answer. The guard layers, the handlers and the admin API import it;
//! it imports none of them, so the answer to a refusal is decided below everything that refuses.

pub mod limited;
pub mod refusal;
pub mod unauthenticated;
