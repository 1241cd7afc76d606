//! The access log: one line per request on the door's listener, when `log.access` is on.
//!
//! Each line (target `peergate::access`, level INFO) holds the request id (for an internal
//! error, the `requestId` it answered and logged its cause under), the client address
//! (as the client-address layer decided it, behind trusted proxies), the peer id or `-`, the
//! peer's name or `-`, the HTTP method, the route (`door`, `card`, `jwks`, `health`, `other`: a
//! fixed label, never the raw path or its query), the binding and the A2A method the service
//! call named (or `-`), the status, the JSON-RPC error code of an error answered with 200 (or
//! `-`), the refusal reason when there is one (`unauthenticated`, `per_ip`, `body_too_large`,
//! …), the parts of a message a model did not read (`unread_parts`, as `kind@index`, or `-`),
//! the authorization policies' decision and the ids of the policies that made it (`authz`,
//! `allow:ID,…` or `deny:ID,…`, `deny:default` when none permitted it, or `-` without
//! policies), the content guard's verdicts inbound and outbound (`content_in`, `content_out`:
//! `rule:action,…`, or `-`), and the latency in milliseconds with at most three decimals. Never a credential, a
//! header, a body or a prompt. With `--log-format json` each is one JSON object.
//!
//! The layer is outermost; the layers inside it write what they decide into the request's
//! [`AccessNote`], which only exists while the log is on, so with it off they do nothing more.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}};
//! use peergate::layers::access_log::AccessLogLayer;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let app = Router::new()
//!     .route("/health", get(|| async { "ok" }))
//!     .layer(AccessLogLayer::new("/a2a/v1"));
//! let response = app.oneshot(Request::get("/health").body(Body::empty()).unwrap()).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # });
//! ```

use crate::guard::refusal::{LoggedRequestId, RefusalReason};
use crate::protocol::call::{CallRecord, JsonRpcErrorCode};
use crate::protocol::request_id::{PartnerRequestId, RequestId};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Extensions, Request};
use axum::response::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};

/// What the layers inside learn about a request, for its access line.
#[derive(Debug, Default)]
pub struct AccessNote {
    client: OnceLock<IpAddr>,
    peer: OnceLock<Box<str>>,
    peer_name: OnceLock<Box<str>>,
    unread_parts: OnceLock<Box<str>>,
    agent_task: OnceLock<Box<str>>,
    authz: OnceLock<Box<str>>,
    /// The content guard's verdicts, inbound and outbound.
    content: [OnceLock<Box<str>>; 2],
}

impl AccessNote {
    /// Notes the parts of the request's message its model did not read, as `kind@index`
    /// (`url@1,raw@2`).
    pub fn unread_parts(&self, parts: impl IntoIterator<Item = (&'static str, usize)>) {
        let listed: Vec<String> = parts
            .into_iter()
            .map(|(kind, index)| format!("{kind}@{index}"))
            .collect();
        if !listed.is_empty() {
            let _ = self.unread_parts.set(listed.join(",").into());
        }
    }
}

impl AccessNote {
    /// Notes the agent's own id of the task, in front of an agent.
    pub fn agent_task(&self, id: &str) {
        let _ = self.agent_task.set(id.into());
    }

    /// Notes the authorization policies' decision and the policies that made it
    /// (`allow:partners-read`, `deny:default`).
    pub fn authz(&self, allowed: bool, policies: &str) {
        let decision = if allowed { "allow" } else { "deny" };
        let _ = self.authz.set(format!("{decision}:{policies}").into());
    }

    /// Notes the content guard's verdict in one direction (`inbound` first, then
    /// `outbound`), as `rule:action,…`: never what matched.
    pub fn content(&self, outbound: bool, verdict: &str) {
        let _ = self.content[usize::from(outbound)].set(verdict.into());
    }
}

/// Notes the client address the client-address layer decided, if the access log is on.
pub fn note_client(extensions: &Extensions, client: IpAddr) {
    if let Some(note) = extensions.get::<Arc<AccessNote>>() {
        let _ = note.client.set(client);
    }
}

/// Notes the authenticated peer's (or administrator's) id and name, if the access log is on.
pub fn note_peer(extensions: &Extensions, peer_id: &str, peer_name: &str) {
    if let Some(note) = extensions.get::<Arc<AccessNote>>() {
        let _ = note.peer.set(peer_id.into());
        let _ = note.peer_name.set(peer_name.into());
    }
}

/// Writes one access line per request.
#[derive(Debug, Clone)]
pub struct AccessLogLayer {
    door_path: Arc<str>,
}

impl AccessLogLayer {
    /// An access log for a listener whose JSON-RPC door is at `door_path`.
    pub fn new(door_path: &str) -> Self {
        Self {
            door_path: door_path.into(),
        }
    }
}

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccessLog {
            inner,
            door_path: self.door_path.clone(),
        }
    }
}

/// The service made by [`AccessLogLayer`].
#[derive(Debug, Clone)]
pub struct AccessLog<S> {
    inner: S,
    door_path: Arc<str>,
}

impl<S> Service<Request<Body>> for AccessLog<S>
where
    S: Service<Request<Body>, Response = Response> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = AccessLogFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let note = Arc::new(AccessNote::default());
        request.extensions_mut().insert(note.clone());
        let socket = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        let seen = Seen {
            started: Instant::now(),
            note,
            socket,
            partner_request_id: request
                .extensions()
                .get::<PartnerRequestId>()
                .map(|id| id.0.clone()),
            request_id: RequestId::current().map(|id| id.0),
            method: request.method().clone(),
            route: crate::layers::metrics::route_label(&self.door_path, request.uri().path()),
        };
        AccessLogFuture {
            future: self.inner.call(request),
            seen: Some(seen),
        }
    }
}

/// What the access log knows of a request before its answer.
struct Seen {
    started: Instant,
    note: Arc<AccessNote>,
    socket: Option<IpAddr>,
    /// The partner's own `X-Request-Id`, when it sent an id-like one.
    partner_request_id: Option<Arc<str>>,
    /// The request's id, as its answer's `X-Request-Id` names it.
    request_id: Option<Arc<str>>,
    method: axum::http::Method,
    route: &'static str,
}

impl Seen {
    fn log(self, response: &Response) {
        let client = self.note.client.get().copied().or(self.socket);
        // The request's id, which an internal error was logged and answered under too.
        let request_id = match (
            response.extensions().get::<LoggedRequestId>(),
            &self.request_id,
        ) {
            (Some(logged), _) => logged.0.clone(),
            (None, Some(id)) => id.to_string(),
            (None, None) => uuid::Uuid::new_v4().to_string(),
        };
        // The operation as the binding's handler named it, whatever the path.
        let record = response.extensions().get::<CallRecord>();
        let call = record.map(|record| record.call);
        let seen = record.and_then(|record| record.seen.as_deref());
        tracing::info!(
            target: "peergate::access",
            request_id = %request_id,
            client = %client.map_or_else(|| "-".to_owned(), |ip| ip.to_string()),
            peer = self.note.peer.get().map_or("-", |peer| &**peer),
            peer_name = self.note.peer_name.get().map_or("-", |name| &**name),
            method = %self.method,
            route = self.route,
            binding = call.map_or("-", |call| call.binding.label()),
            a2a_method = call.map_or("-", |call| call.method.name()),
            task = record.and_then(|record| record.task.as_deref()).unwrap_or("-"),
            context = seen.and_then(|seen| seen.context.as_deref()).unwrap_or("-"),
            task_state = seen.and_then(|seen| seen.state).map_or("-", |state| state.as_str()),
            agent_task = self.note.agent_task.get().map_or("-", |id| &**id),
            outcome = record.map_or("-", |record| record.outcome.label()),
            partner_request_id = self.partner_request_id.as_deref().unwrap_or("-"),
            status = response.status().as_u16(),
            // A JSON-RPC error is answered with HTTP 200: its code says what went wrong.
            rpc_error = %response
                .extensions()
                .get::<JsonRpcErrorCode>()
                .map_or_else(|| "-".to_owned(), |code| code.0.to_string()),
            reason = response.extensions().get::<RefusalReason>().map_or("-", |r| r.label()),
            unread_parts = self.note.unread_parts.get().map_or("-", |parts| &**parts),
            authz = self.note.authz.get().map_or("-", |decided| &**decided),
            content_in = self.note.content[0].get().map_or("-", |v| &**v),
            content_out = self.note.content[1].get().map_or("-", |v| &**v),
            // Milliseconds to the microsecond: three decimals at most.
            latency_ms = self.started.elapsed().as_micros() as f64 / 1000.0,
            "request"
        );
    }
}

pin_project! {
    /// The response future of [`AccessLog`]: the inner answer, logged when it is ready.
    pub struct AccessLogFuture<F> {
        #[pin]
        future: F,
        seen: Option<Seen>,
    }
}

impl<F, E> Future for AccessLogFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.future.poll(cx))?;
        if let Some(seen) = this.seen.take() {
            seen.log(&response);
        }
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::refusal::Refusal;
    use axum::response::IntoResponse;
    use axum::{Router, routing::post};
    use std::sync::Mutex;
    use tower::ServiceExt;

    /// Log output kept in memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_internal_error_is_logged_under_the_id_it_answered_with() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let app = Router::new()
            .route(
                "/a2a/v1",
                post(|| async {
                    Refusal::internal(&"the cause", "a test failure").into_response()
                }),
            )
            .layer(AccessLogLayer::new("/a2a/v1"));
        let response = app
            .oneshot(Request::post("/a2a/v1").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 500);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let answered = body["error"]["requestId"].as_str().unwrap().to_owned();
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let access = log
            .lines()
            .find(|line| line.contains("peergate::access"))
            .expect("an access line");
        assert!(
            access.contains(&format!("request_id={answered}")),
            "{access}"
        );
        assert!(
            access.contains("status=500") && access.contains("route=\"door\""),
            "{access}"
        );
    }
}
