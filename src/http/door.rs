//! The door's routes: the Agent Card and its key set, the A2A bindings, `/health` and `/ready`,
//! behind the guard layers in their order.

use super::content_type::is_json;
use crate::a2a::jsonrpc_binding::{self, Answer};
use crate::a2a::pipeline::Pipeline;
use crate::guard::refusal::{self, Refusal};
use crate::http::document::CachedDocument;
use crate::layers::auth::{AuthLayer, AuthMode, AuthenticatedPeer, PeerAuthenticator};
use crate::layers::client_addr::ClientAddrLayer;
use crate::layers::gate::GateLayer;
use crate::layers::limit::{PerIpLimitLayer, PerPeerLimitLayer, SettleLayer};
use crate::layers::metrics::{Metrics, MetricsLayer};
use crate::locks::ReadWriteLocked;
use crate::protocol::call::JsonRpcErrorCode;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// What the door's handlers share.
#[derive(Clone)]
pub(crate) struct DoorState {
    /// The call pipeline every binding asks.
    pub(crate) pipeline: Pipeline,
    /// How long a stream, and its connection, may last.
    pub(crate) bounds: crate::http::sse::StreamBounds,
    /// The cards, replaced whole when the policy is reloaded.
    pub(crate) cards: Arc<std::sync::RwLock<Arc<CardDocuments>>>,
    /// Rebuilt when the day changes, so a retiring key leaves on its date.
    pub(crate) jwks: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    /// What `/ready` asks.
    pub(crate) readiness: Arc<super::ready::Readiness>,
    /// The authorization policies, which decide an authenticated peer's extended card at the
    /// card URL as they decide `GetExtendedAgentCard`.
    pub(crate) policies: Option<Arc<crate::a2a::authorize::PolicyStage>>,
    /// The answer log, read under `/a2a-receipts/` when receipts are on.
    pub(crate) log: Option<crate::a2a::answer_log::AnswerLog>,
}

/// The signed cards the door serves, built together so a reload replaces them together.
pub(crate) struct CardDocuments {
    /// The public card.
    pub(crate) card: CachedDocument,
    /// The extended card, for a request with a valid credential.
    pub(crate) extended: CachedDocument,
    /// The extended card by the identity provider a peer signed in with, when the public card
    /// does not list it.
    pub(crate) issuer_extended: std::collections::HashMap<String, CachedDocument>,
    /// The extended card narrowed to a limited peer's operations.
    pub(crate) peer_cards: Arc<crate::a2a::peer_card::PeerCards>,
    /// The door's RFC 9728 protected-resource metadata, with the `"jwt"` scheme.
    pub(crate) resource_metadata: Option<CachedDocument>,
}

/// The guard layers the door's routes share with housekeeping.
pub(crate) struct DoorGuards {
    pub(crate) per_ip: PerIpLimitLayer,
    pub(crate) per_peer: PerPeerLimitLayer,
    pub(crate) authenticator: Arc<PeerAuthenticator>,
    /// The Cedar policies every call is put to, with `[authorization]`.
    pub(crate) authorization: Option<Arc<crate::authz::Authorization>>,
    /// The content guard a partner's message passes, with `[content_guard]` rules.
    pub(crate) content: Option<Arc<crate::a2a::inspect::ContentGuard>>,
}

/// What the door's routes and guard are told by the policy; the composition root builds it,
/// so nothing here reads the policy itself.
#[derive(Debug, Clone)]
pub struct DoorSettings {
    /// The JSON-RPC door's path (`server.a2a_path`).
    pub a2a_path: String,
    /// The HTTP+JSON binding's path, when `capabilities.http_json` is on.
    pub http_json_path: Option<String>,
    /// Where the RFC 9728 metadata is served: before the path of the door's public URL.
    pub resource_metadata_path: String,
    /// Whether a call must name `A2A-Version` (`gate.require_version_header`).
    pub require_version_header: bool,
    /// The card's extensions, each with whether a call must name it.
    pub extensions: Vec<(String, bool)>,
    /// How long a request may take (`server.request_timeout_seconds`).
    pub request_timeout: std::time::Duration,
    /// The largest body read (`server.max_body_bytes`).
    pub max_body_bytes: usize,
    /// Proxies whose `X-Forwarded-For` is believed (`server.trusted_proxies`).
    pub trusted_proxies: Vec<crate::guard::cidr::Cidr>,
    /// The header a trusted proxy forwards client certificates in, when it does.
    pub forwarded_certificates: Option<axum::http::HeaderName>,
    /// Whether each request is logged (`log.access`).
    pub access_log: bool,
}

/// The door's listener: the card routes, the A2A door and `/health`, behind their layers.
pub(crate) fn door_router(
    settings: &DoorSettings,
    state: DoorState,
    guards: &DoorGuards,
    observers: Observers,
) -> Router {
    let a2a_path = &settings.a2a_path;
    let json_rpc = Router::new()
        .route(a2a_path, post(door))
        .route(&format!("{a2a_path}/"), post(door));
    // The HTTP+JSON binding, when on, under the same layers.
    let bindings = match &settings.http_json_path {
        Some(path) => json_rpc.merge(crate::http::rest::routes(path)),
        None => json_rpc,
    }
    .layer(gate(settings));
    // A credential on the card URL is checked by the same layer as on the door: a valid peer
    // gets the extended card, an invalid credential a 401.
    // The routes that are not A2A calls settle the request's shared admission innermost (an
    // A2A call's is settled by the call pipeline): behind the authentication, which settles
    // a failed credential's with its failed attempt in the same one call.
    let card_routes = Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .layer(SettleLayer)
        .layer(AuthLayer::shared(guards.authenticator.clone()).mode(AuthMode::Optional));
    let guarded = Router::new()
        .route("/.well-known/jwks.json", get(jwks_document))
        .route(&settings.resource_metadata_path, get(resource_metadata))
        .merge(crate::http::answer_log::routes())
        .layer(SettleLayer)
        .merge(card_routes)
        .merge(behind_peer_guard(bindings, settings, guards));
    let routes = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(behind_address_guard(guarded, settings, guards))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    observed(routes, settings, observers, a2a_path)
}

/// The protocol gate of the A2A bindings.
pub(crate) fn gate(settings: &DoorSettings) -> GateLayer {
    GateLayer::new(settings.require_version_header, settings.extensions.clone())
}

/// The guard's inner layers in front of every A2A binding, outer to inner (the layer added last
/// runs first): authentication, per-peer limit, request timeout, body limit.
pub(crate) fn behind_peer_guard<S>(
    routes: Router<S>,
    settings: &DoorSettings,
    guards: &DoorGuards,
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let request_timeout = settings.request_timeout;
    // Each `Router::layer` call boxes every route once more, and each box is cloned for every
    // request: layers are stacked with `ServiceBuilder` (outer first) where their types allow,
    // so a request clones one box per stack instead of one per layer. The body limit changes
    // the response body's type, which the layers outside it do not take: a box between.
    routes
        .layer(
            ServiceBuilder::new()
                // Only requests that got this far read a body or wait for the model; the card
                // and the refusals in front are answered from memory, so their floods pay for
                // no timer.
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    request_timeout,
                ))
                .layer(RequestBodyLimitLayer::new(settings.max_body_bytes))
                .layer(DefaultBodyLimit::disable()),
        )
        .layer(
            ServiceBuilder::new()
                .layer(AuthLayer::shared(guards.authenticator.clone()))
                .layer(guards.per_peer.clone())
                .layer(axum::middleware::map_response(
                    refusal::explain_layer_refusals,
                )),
        )
}

/// The guard's outer layers: the client's address (through trusted proxies), then the
/// per-address limit.
pub(crate) fn behind_address_guard<S>(
    routes: Router<S>,
    settings: &DoorSettings,
    guards: &DoorGuards,
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    routes.layer(
        ServiceBuilder::new()
            .layer(
                ClientAddrLayer::new(settings.trusted_proxies.clone())
                    .forwarding_certificates_in(settings.forwarded_certificates.clone()),
            )
            .layer(guards.per_ip.clone()),
    )
}

/// What watches a listener's requests: the metrics, and the traces when they are exported.
#[derive(Debug, Clone)]
pub(crate) struct Observers {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) tracing: Option<Arc<crate::telemetry::Tracing>>,
}

/// A listener's routes, with what every request passes on its way out: a caught panic, the
/// metrics, the access log when the policy keeps one, the request's span when traces are
/// exported (so it covers the whole answer, refusals included), and outermost its id.
pub(crate) fn observed(
    routes: Router,
    settings: &DoorSettings,
    observers: Observers,
    a2a_path: &str,
) -> Router {
    let traced = observers
        .tracing
        .map(|tracing| crate::layers::trace::TraceLayer::new(tracing, a2a_path));
    // One stack, one box per request (see `behind_peer_guard`); the caught panic's body is of
    // another type, made an axum body again inside the stack (one allocation, less than a box
    // of its own costs).
    routes.layer(
        ServiceBuilder::new()
            .layer(crate::layers::request_id::RequestIdLayer)
            .option_layer(traced)
            .option_layer(
                settings
                    .access_log
                    .then(|| crate::layers::access_log::AccessLogLayer::new(a2a_path)),
            )
            .layer(MetricsLayer::new(observers.metrics, a2a_path))
            .map_response(|response: Response<_>| response.map(axum::body::Body::new))
            .layer(CatchPanicLayer::custom(panic_response)),
    )
}

impl axum::extract::FromRef<DoorState> for crate::http::rest::RestState {
    fn from_ref(state: &DoorState) -> Self {
        Self {
            pipeline: state.pipeline.clone(),
            bounds: state.bounds.clone(),
        }
    }
}

async fn door(
    State(state): State<DoorState>,
    crate::http::rest::Caller { caller, deadline }: crate::http::rest::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = jsonrpc_binding::Body {
        bytes: &body,
        json: is_json(&headers),
    };
    let (record, answer) = jsonrpc_binding::handle(&state.pipeline, caller, body).await;
    let mut response = match answer {
        Answer::Body(answer) => json_rpc_body(answer),
        Answer::Failure {
            body,
            code,
            request_id,
            reason,
        } => {
            let mut response = json_rpc_body(body);
            response.extensions_mut().insert(JsonRpcErrorCode(code));
            if let Some(reason) = reason {
                response.extensions_mut().insert(reason);
            }
            // The access log names the id the -32603 answer names.
            if let Some(request_id) = request_id {
                response
                    .extensions_mut()
                    .insert(refusal::LoggedRequestId(request_id));
            }
            response
        }
        Answer::Events { id, events } => {
            let frame = move |event| jsonrpc_binding::event(&id, event);
            crate::http::sse::respond(events, frame, &state.bounds, deadline.as_ref())
        }
        Answer::Refused(refusal) => refusal.into_response(),
    };
    if let Some(record) = record {
        response.extensions_mut().insert(record);
    }
    response
}

/// A JSON-RPC response object as the answer.
fn json_rpc_body(body: String) -> Response {
    let json = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, json)], body).into_response()
}

/// The public card, or the extended card for a request that carries a valid credential. An
/// invalid credential is a 401, never a quiet downgrade to the public card.
async fn agent_card(
    State(state): State<DoorState>,
    peer: Option<Extension<AuthenticatedPeer>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    let cards = state.cards.read_locked().clone();
    // A peer the policies do not let read its extended card reads the public one.
    let peer = peer.filter(|Extension(peer)| may_read_extended(&state, peer, &extensions));
    if let Some(Extension(peer)) = &peer
        && let Some(operations) = peer.operations()
        && let Some(narrowed) = cards.peer_cards.for_peer(peer.issuer(), operations)
    {
        // Made for this peer's operations: served as the extended card is (private).
        let bytes = axum::body::Bytes::from(narrowed.to_string());
        return cards.extended.with_bytes(bytes).respond(&headers);
    }
    match peer {
        Some(Extension(peer)) => peer
            .issuer()
            .and_then(|issuer| cards.issuer_extended.get(issuer))
            .unwrap_or(&cards.extended)
            .respond(&headers),
        None => cards.card.respond(&headers),
    }
}

/// Whether the policies, when there are any, let `peer` read its extended card, as they decide
/// `GetExtendedAgentCard` (over HTTP+JSON: a GET with its credential).
fn may_read_extended(
    state: &DoorState,
    peer: &AuthenticatedPeer,
    extensions: &axum::http::Extensions,
) -> bool {
    let Some(policies) = &state.policies else {
        return true;
    };
    let view = crate::a2a::stages::CallView {
        call: crate::protocol::call::A2aCall {
            binding: crate::protocol::call::Binding::HttpJson,
            method: crate::protocol::jsonrpc::Method::GetExtendedAgentCard,
        },
        peer: peer.clone(),
        client: extensions
            .get::<crate::layers::client_addr::ClientAddr>()
            .map(|client| client.ip()),
        extensions: Vec::new(),
        note: extensions.get().cloned(),
        trace: extensions.get().cloned(),
    };
    let request = crate::a2a::operation::A2aRequest::GetExtendedAgentCard;
    policies.decided(&view, &request).is_ok()
}

/// RFC 9728 metadata, readable by any page (no credentials are involved), or 404 without the
/// `"jwt"` scheme (no token of a provider opens the door).
async fn resource_metadata(State(state): State<DoorState>, headers: HeaderMap) -> Response {
    let cards = state.cards.read_locked().clone();
    let Some(document) = &cards.resource_metadata else {
        return not_found().await;
    };
    let mut response = document.respond(&headers);
    response.headers_mut().insert(
        axum::http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        axum::http::HeaderValue::from_static("*"),
    );
    response
}

async fn jwks_document(State(state): State<DoorState>, headers: HeaderMap) -> Response {
    let document = state.jwks.read_locked().clone();
    document.respond(&headers)
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "healthy"}))
}

async fn ready(State(state): State<DoorState>) -> Response {
    // Anyone reaches the door: whether it can serve, and nothing about its parts.
    state.readiness.answer(false).await
}

async fn not_found() -> Response {
    Refusal::NoRoute.into_response()
}

/// A known path asked with a method it does not take: the refusal's JSON, and axum adds `Allow`.
pub(crate) async fn method_not_allowed() -> Response {
    Refusal::MethodNotAllowed.into_response()
}

pub(crate) fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    Refusal::internal(&"a panic", "a request handler panicked").into_response()
}
