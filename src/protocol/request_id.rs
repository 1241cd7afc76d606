//! The one id that joins a request's answer, its access line, its log lines and its span: made
//! when the request arrives ([`crate::layers::request_id`]), sent back as `X-Request-Id`, and in
//! scope while the request is served, so an internal error names the same id its answer and its
//! log line show instead of making one of its own.

use std::sync::Arc;

tokio::task_local! {
    static CURRENT: Arc<Scope>;
}

/// What is in scope while a request is served: its id, and its trace id once its span is built.
#[derive(Debug)]
pub struct Scope {
    id: RequestId,
    /// Kept as the number and written only when a line is: most calls log nothing.
    trace_id: std::sync::OnceLock<u128>,
}

impl Scope {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// Its trace id, once its span is built.
    pub fn trace_id(&self) -> Option<TraceIdText> {
        self.trace_id.get().copied().map(TraceIdText)
    }
}

/// A trace id as W3C writes it: 32 lower-case hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceIdText(pub u128);

impl std::fmt::Display for TraceIdText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A request's id: a UUIDv4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub Arc<str>);

impl RequestId {
    /// A fresh one.
    pub fn new() -> Self {
        // Written on the stack and copied once: `to_string` would format through `fmt` and
        // allocate twice, on every request of every flood.
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        Self(Arc::from(
            &*uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text),
        ))
    }

    /// The id of the request being served here, when there is one.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|scope| scope.id.clone()).ok()
    }

    /// What is in scope for the request being served here, when there is one (what a log line
    /// names).
    pub fn scope_here() -> Option<Arc<Scope>> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Notes the trace id of the request being served here, once its span is built.
    pub fn note_trace_id(trace_id: u128) {
        let _ = CURRENT.try_with(|scope| scope.trace_id.set(trace_id));
    }

    /// The current request's id, or a fresh one outside any request.
    pub fn current_or_new() -> String {
        Self::current().map_or_else(|| Self::new().0.to_string(), |id| id.0.to_string())
    }

    /// `future`, with this id in scope.
    pub async fn scope<F: std::future::Future>(self, future: F) -> F::Output {
        self.scoped(|| future).await
    }

    /// `future` with the current request's id in scope, if any: what a task spawned for the
    /// request runs, so what it logs names the request.
    pub fn carry<F: std::future::Future>(
        future: F,
    ) -> futures_util::future::Either<tokio::task::futures::TaskLocalFuture<Arc<Scope>, F>, F> {
        // Not an `async` block: it would hold the future twice over, and a spawned task's
        // future is moved into its cell on every call.
        match Self::scope_here() {
            Some(scope) => futures_util::future::Either::Left(CURRENT.scope(scope, future)),
            None => futures_util::future::Either::Right(future),
        }
    }

    /// Spawns `future` as a task of the current request: its id in scope, so its log lines
    /// name the request.
    pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(Self::carry(future))
    }

    /// The future `call` makes, with this id in scope both while `call` runs (a layer may
    /// decide at once) and while the future is polled: a named future, for a layer's response
    /// future.
    pub fn scoped<F: std::future::Future>(
        self,
        call: impl FnOnce() -> F,
    ) -> tokio::task::futures::TaskLocalFuture<Arc<Scope>, F> {
        let scope = Arc::new(Scope {
            id: self,
            trace_id: std::sync::OnceLock::new(),
        });
        let future = CURRENT.sync_scope(scope.clone(), call);
        CURRENT.scope(scope, future)
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The request id a partner sent in its own `X-Request-Id`: kept beside peergate's, never taken
/// as it. Only an id-like text is kept (1 to 128 of letters, digits and `-._:`), so a partner
/// cannot write into the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerRequestId(pub Arc<str>);

impl PartnerRequestId {
    /// The partner's id from its header's value, when it is id-like.
    pub fn read(value: &[u8]) -> Option<Self> {
        let id_like = (1..=128).contains(&value.len())
            && value
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
        id_like.then(|| Self(String::from_utf8_lossy(value).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_id_in_scope_is_the_one_an_error_names() {
        assert!(RequestId::current().is_none());
        let id = RequestId::new();
        let named = id
            .clone()
            .scope(async { RequestId::current_or_new() })
            .await;
        assert_eq!(named, id.0.as_ref());
        assert_ne!(RequestId::current_or_new(), id.0.as_ref());
    }

    #[test]
    fn only_an_id_like_partner_id_is_kept() {
        assert!(PartnerRequestId::read(b"req-42:a.b_c").is_some());
        for bad in [
            &b""[..],
            b"two words",
            b"x\ny",
            &[b'a'; 129][..],
            "é".as_bytes(),
        ] {
            assert!(PartnerRequestId::read(bad).is_none(), "{bad:?}");
        }
    }
}
