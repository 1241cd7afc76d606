//! The admin API: JSON over HTTP on its own listener (loopback by default), for administrators
//! only. Every route but `/openapi.json` sits behind [`AdminAuthLayer`]; every handler calls the
//! [`AccountService`], so the API and the command line follow the same rules.
//!
//! The OpenAPI document is generated from these handlers' annotations by the same router that
//! serves them, so a route cannot exist without its documentation or the other way round;
//! `openapi.json` in the repository is that document, and a test keeps them equal.

use crate::admin::auth::{AdminAuthLayer, AdminAuthenticator, AdminPrincipal, AuthenticatedAdmin};
use crate::admin::budget::{Budgets, day_and_month};
use crate::admin::reload::{PolicyReload, ReloadTrigger, Reloaded};
use crate::admin::service::{
    AccountService, Actor, Caller, NewPassword, NewPeer, PeerChange, ServiceError,
};
use crate::clock::{Clock, Timestamp, rfc3339_millis};
use crate::guard::refusal::Refusal;
use crate::layers::cross_site::CrossSiteLayer;
use crate::layers::metrics::{Metrics, MetricsLayer};
use crate::store::AuditOutcome;
use crate::store::{AuditRecord, IdentityKind, PeerIdentity, PeerRecord, StoreError};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use tower_http::limit::RequestBodyLimitLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What the admin API's handlers share.
#[derive(Clone)]
pub struct AdminState {
    service: AccountService,
    budgets: Arc<Budgets>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    openapi_json: Arc<OnceLock<String>>,
    readiness: Option<Arc<crate::http::ready::Readiness>>,
    reload: Option<Arc<dyn PolicyReload>>,
    /// The authorization policies every administrator's request is put to, when configured.
    policies: Option<Arc<super::admin_policies::AdminPolicies>>,
}

impl AdminState {
    /// The state for the admin routes.
    pub fn new(
        service: AccountService,
        budgets: Arc<Budgets>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            service,
            budgets,
            metrics,
            clock,
            openapi_json: Arc::default(),
            readiness: None,
            reload: None,
            policies: None,
        }
    }

    /// Answers `POST /v1/policy/reload` by reloading through `reload`.
    pub fn with_reload(mut self, reload: Arc<dyn PolicyReload>) -> Self {
        self.reload = Some(reload);
        self
    }

    /// Puts every administrator's request to `authorization`'s policies.
    pub fn with_authorization(mut self, authorization: Arc<crate::authz::Authorization>) -> Self {
        self.policies = Some(Arc::new(super::admin_policies::AdminPolicies::new(
            authorization,
            self.clock.clone(),
            self.metrics.clone(),
            self.service.clone(),
        )));
        self
    }

    /// Answers `GET /ready` with the state of each part.
    pub fn with_readiness(mut self, readiness: Arc<crate::http::ready::Readiness>) -> Self {
        self.readiness = Some(readiness);
        self
    }

    /// The account service the routes call.
    pub fn accounts(&self) -> &AccountService {
        &self.service
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "peergate admin API",
        description = "Administrators manage their partner agents (peers), read their conversations, usage and audit trail. Authenticate with HTTP Basic (administrator name and password) or an administrator token (`peergate admin token NAME`) as a Bearer token. Peer credentials open nothing here."
    ),
    modifiers(&SecuritySchemes),
    security(("basic" = []), ("adminToken" = [])),
    tags((name = "peers"), (name = "conversations"), (name = "account"), (name = "operations"))
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "basic",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
        );
        components.add_security_scheme(
            "adminToken",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The routes behind the administrator check.
fn guarded_routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list_peers, create_peer))
        .routes(routes!(show_peer))
        .routes(routes!(read_task))
        .routes(routes!(set_limit))
        .routes(routes!(set_streams))
        .routes(routes!(set_trace_trust))
        .routes(routes!(set_operations))
        .routes(routes!(set_peer_budget))
        .routes(routes!(bind_identity))
        .routes(routes!(unbind_identity))
        .routes(routes!(set_expiry))
        .routes(routes!(set_password))
        .routes(routes!(issue_api_key))
        .routes(routes!(rotate))
        .routes(routes!(revoke))
        .routes(routes!(reinstate))
        .routes(routes!(list_conversations))
        .routes(routes!(read_conversation, delete_conversation))
        .routes(routes!(usage))
        .routes(routes!(failed_deliveries))
        .routes(routes!(reload_policy))
        .routes(routes!(audit))
        .routes(routes!(prometheus_metrics))
}

/// The routes anyone on the admin listener may read.
fn public_routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(openapi_document))
        .routes(routes!(readiness))
        .routes(routes!(health))
}

/// The OpenAPI document of the admin API, generated from the routes that serve it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(guarded_routes())
        .merge(public_routes())
        .into_openapi()
}

/// The largest body an admin request may carry; one announced larger is refused with 413 before
/// it is read. The biggest request (a password) is far smaller.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The admin routes: refused when a browser sends them for another site, authenticated,
/// counted in the state's metrics. Pages of `allowed_origins` may send to them (no CORS headers
/// are sent, so only a page served on the API's own origin can read the answers).
pub fn router(
    state: AdminState,
    authenticator: Arc<AdminAuthenticator>,
    cross_site: CrossSiteLayer,
) -> Router {
    let _ = state
        .openapi_json
        .set(openapi().to_pretty_json().unwrap_or_default());
    let metrics = state.metrics.clone();
    let mut guarded = guarded_routes();
    if let Some(policies) = state.policies.clone() {
        guarded = guarded.layer(axum::middleware::from_fn_with_state(
            policies,
            super::admin_policies::decide,
        ));
    }
    let (router, _) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(
            guarded
                .layer(axum::middleware::from_fn(
                    crate::admin::roles::auditors_only_read,
                ))
                .layer(AdminAuthLayer::shared(authenticator)),
        )
        .merge(public_routes())
        .split_for_parts();
    router
        .fallback(not_found)
        .method_not_allowed_fallback(crate::http::door::method_not_allowed)
        .with_state(state)
        .layer(cross_site)
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(MetricsLayer::admin(metrics))
}

// ---- errors: the one place a failure becomes a response ----

/// A failed admin request.
#[derive(Debug)]
enum ApiError {
    Service(ServiceError),
    Body(String),
    /// A policy reload kept the policy in force.
    Reload(String),
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        Self::Service(e)
    }
}

// Built by the refusal map (`crate::guard::refusal`); this type only documents it.
/// The error body of every failed admin request.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct ErrorDetail {
    /// A stable code: `invalid`, `not_found`, `conflict`, `forbidden`, `internal`, …
    code: String,
    /// What was wrong, in one sentence.
    message: String,
    /// For internal errors: the id the log shows with the detail.
    #[serde(rename = "requestId", skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let refusal = match self {
            Self::Body(message) => Refusal::Invalid {
                code: "invalid_body",
                message,
            },
            Self::Reload(message) => Refusal::Invalid {
                code: "policy_refused",
                message,
            },
            Self::Service(error) => match error {
                ServiceError::Invalid { .. } => Refusal::Invalid {
                    code: "invalid",
                    message: error.to_string(),
                },
                ServiceError::NotFound(_) => Refusal::NotFound(error.to_string()),
                ServiceError::Conflict(_) => Refusal::Conflict(error.to_string()),
                ServiceError::Forbidden(_) => Refusal::Forbidden(error.to_string()),
                ServiceError::Store(StoreError::DiskFull) => Refusal::Unavailable(
                    "the disk holding the store is full; nothing was changed: free some space and try again".to_owned(),
                ),
                other => Refusal::internal(&other, "admin request failed"),
            },
        };
        refusal.into_response()
    }
}

/// Parses a JSON body strictly, naming what was wrong without echoing any value.
fn parse_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        let text = e.to_string();
        let message = if e.is_data()
            && (text.starts_with("unknown field") || text.starts_with("missing field"))
        {
            // Field names only: `unknown field `x`, expected one of …`.
            text.split(" at line").next().unwrap_or("").to_owned()
        } else if e.is_data() {
            format!(
                "a value has the wrong type or range (line {}, column {})",
                e.line(),
                e.column()
            )
        } else {
            format!(
                "the body is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            )
        };
        ApiError::Body(message)
    })
}

fn caller(admin: &AuthenticatedAdmin) -> Caller {
    Caller {
        actor: Actor::Admin {
            id: admin.id().to_owned(),
            name: admin.name().to_owned(),
        },
        client: admin.client().to_string(),
    }
}

async fn not_found() -> Response {
    ApiError::Service(ServiceError::NotFound("no such route".to_owned())).into_response()
}

// ---- peers ----

/// A peer as its owner sees it. Never holds a secret.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PeerView {
    name: String,
    id: String,
    /// `active`, `expired` (past its `expiresAt`: nothing of it is let in) or `revoked`.
    status: String,
    /// The owning administrator.
    owner: String,
    rate_per_minute: u32,
    /// Streams it may hold open at once; `null`: the policy's `limits.streams_per_peer`.
    max_streams: Option<u32>,
    /// Its own daily token budget, besides its owner's; `null`: none of its own.
    tokens_per_day: Option<u64>,
    /// Its own `traceparent` is continued when traces are exported; otherwise a call starts
    /// a trace of peergate's own, linked to the partner's.
    trusts_trace: bool,
    created_at: String,
    last_used_at: Option<String>,
    expires_at: Option<String>,
    /// The credentials peergate issued it that still open the door: `token`, `api_key`,
    /// `password`.
    credentials: Vec<String>,
    /// The A2A operations it may call, by their 1.0 names; `null`: every one offered.
    operations: Option<Vec<&'static str>>,
    /// The identities bound to it besides the credentials peergate issues.
    identities: Vec<IdentityView>,
}

/// An identity bound to a peer: an identity provider's subject, or a client certificate.
#[derive(Serialize, Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct IdentityView {
    /// The identity provider, as `[[auth.issuers]]` names it (with `subject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
    /// The token's `client_id` (else its `sub`) that names the peer (with `issuer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    /// A client certificate's URI or DNS subject alternative name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    certificate_san: Option<String>,
    /// A client certificate's SHA-256, 64 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    certificate_sha256: Option<String>,
}

impl IdentityView {
    fn of(identity: &PeerIdentity) -> Self {
        let mut view = Self::default();
        match identity.kind {
            IdentityKind::Token => {
                view.issuer = Some(identity.issuer.clone());
                view.subject = Some(identity.subject.clone());
            }
            IdentityKind::CertificateSan => view.certificate_san = Some(identity.subject.clone()),
            _ => view.certificate_sha256 = Some(identity.subject.clone()),
        }
        view
    }

    /// The identity this names: exactly one of its forms.
    fn identity(&self) -> Result<PeerIdentity, ApiError> {
        PeerIdentity::one_of(
            self.issuer.as_deref(),
            self.subject.as_deref(),
            self.certificate_san.as_deref(),
            self.certificate_sha256.as_deref(),
        )
        .unwrap_or_else(|| {
            Err("give issuer and subject, or certificateSan, or certificateSha256".to_owned())
        })
        .map_err(ApiError::Body)
    }
}

/// What the peers a caller sees hold, by peer id: the credentials peergate issued (their
/// kinds), and the identities bound.
struct Holdings {
    credentials: std::collections::HashMap<String, Vec<String>>,
    identities: std::collections::HashMap<String, Vec<PeerIdentity>>,
}

impl Holdings {
    async fn of(state: &AdminState, caller: &Caller) -> Result<Self, ApiError> {
        Ok(Self {
            credentials: state.service.credential_kinds(caller).await?,
            identities: state.service.identities(caller).await?,
        })
    }
}

impl PeerView {
    /// The peer as it stands at `now`, with what it holds.
    fn at(p: PeerRecord, now: Timestamp, holdings: &Holdings) -> Self {
        let identities = &holdings.identities;
        Self {
            credentials: holdings
                .credentials
                .get(p.id.as_str())
                .cloned()
                .unwrap_or_default(),
            identities: identities
                .get(p.id.as_str())
                .into_iter()
                .flatten()
                .map(IdentityView::of)
                .collect(),
            status: p.standing(now).to_owned(),
            operations: p.operations.map(|set| set.names()),
            name: p.name,
            id: p.id.to_string(),
            owner: p.owner_name,
            rate_per_minute: p.rate_per_minute,
            max_streams: p.max_streams,
            trusts_trace: p.trusts_trace,
            tokens_per_day: p.tokens_per_day,
            created_at: rfc3339_millis(p.created_at),
            last_used_at: p.last_used_at.map(rfc3339_millis),
            expires_at: p.expires_at.map(rfc3339_millis),
        }
    }
}

#[derive(Serialize, ToSchema)]
struct PeerList {
    peers: Vec<PeerView>,
}

/// A new peer.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreatePeerRequest {
    /// 1 to 64 of letters, digits and `._-`; unique across the gateway.
    name: String,
    /// Requests per minute; the policy's default when absent.
    #[serde(default)]
    rate_per_minute: Option<u32>,
    /// RFC 3339 (`2027-01-31T00:00:00Z`) or a date; never expires when absent.
    #[serde(default)]
    expires_at: Option<String>,
    /// `false` issues no bearer token (the peer signs in with a password, an API key or an
    /// identity); a token is issued when absent.
    #[serde(default)]
    issue_token: Option<bool>,
}

/// A created peer and its token. The token is in this response and nowhere else, ever.
#[derive(Serialize, ToSchema)]
struct CreatedPeerView {
    peer: PeerView,
    /// Absent when `issueToken` was `false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

/// A time in the one syntax the command line takes too ([`crate::clock::parse_time`]).
fn parse_time(
    field: &'static str,
    text: &str,
    now: Timestamp,
    relative: crate::clock::Relative,
) -> Result<Timestamp, ApiError> {
    crate::clock::parse_time(text, now, relative).ok_or_else(|| {
        ApiError::Service(ServiceError::Invalid {
            field,
            reason: format!("use {}", crate::clock::TIME_SYNTAX),
        })
    })
}

#[utoipa::path(get, path = "/v1/peers", tag = "peers",
    responses((status = 200, description = "The caller's peers", body = PeerList)))]
async fn list_peers(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
) -> Result<Json<PeerList>, ApiError> {
    let caller = caller(&admin);
    let peers = state.service.list_peers(&caller).await?;
    let holdings = Holdings::of(&state, &caller).await?;
    Ok(Json(PeerList {
        peers: peers
            .into_iter()
            .map(|p| PeerView::at(p, state.clock.now(), &holdings))
            .collect(),
    }))
}

#[utoipa::path(post, path = "/v1/peers", tag = "peers",
    request_body = CreatePeerRequest,
    responses(
        (status = 201, description = "Created; the token is shown only here", body = CreatedPeerView),
        (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn create_peer(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedPeerView>), ApiError> {
    let request: CreatePeerRequest = parse_body(&body)?;
    let now = state.clock.now();
    let expires_at = request
        .expires_at
        .as_deref()
        .map(|t| parse_time("expiresAt", t, now, crate::clock::Relative::FromNow))
        .transpose()?;
    let caller = caller(&admin);
    let created = state
        .service
        .create_peer(
            &caller,
            NewPeer {
                name: request.name,
                owner: None,
                rate_per_minute: request.rate_per_minute,
                expires_at,
                without_token: request.issue_token == Some(false),
            },
        )
        .await?;
    let holdings = Holdings::of(&state, &caller).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedPeerView {
            peer: PeerView::at(created.peer, state.clock.now(), &holdings),
            token: created.token,
        }),
    ))
}

#[utoipa::path(get, path = "/v1/peers/{name}", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    responses((status = 200, body = PeerView), (status = 404, body = ErrorBody)))]
async fn show_peer(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
) -> Result<Json<PeerView>, ApiError> {
    peer_view(&state, &caller(&admin), &name).await
}

/// The peer `name` as the caller sees it now (after a change).
async fn peer_view(
    state: &AdminState,
    caller: &Caller,
    name: &str,
) -> Result<Json<PeerView>, ApiError> {
    let peer = state.service.show_peer(caller, name).await?;
    let holdings = Holdings::of(state, caller).await?;
    Ok(Json(PeerView::at(peer, state.clock.now(), &holdings)))
}

#[utoipa::path(post, path = "/v1/peers/{name}/identities", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = IdentityView,
    responses((status = 200, description = "Bound: the identity opens the door as this peer", body = PeerView),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Bound to a peer already (one identity names one peer)", body = ErrorBody)))]
async fn bind_identity(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    let identity = parse_body::<IdentityView>(&body)?.identity()?;
    let caller = caller(&admin);
    let change = PeerChange::BindIdentity(identity);
    state.service.change_peer(&caller, &name, change).await?;
    peer_view(&state, &caller, &name).await
}

#[utoipa::path(post, path = "/v1/peers/{name}/identities/unbind", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = IdentityView,
    responses((status = 200, description = "Unbound: it opens nothing from the next request", body = PeerView),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn unbind_identity(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    let identity = parse_body::<IdentityView>(&body)?.identity()?;
    let caller = caller(&admin);
    let change = PeerChange::UnbindIdentity(identity);
    state.service.change_peer(&caller, &name, change).await?;
    peer_view(&state, &caller, &name).await
}

/// A `PUT /v1/peers/{name}/…` body: the one change to the peer it asks for.
trait PeerChangeRequest: DeserializeOwned + Default {
    /// The change, or what is wrong with the body (`now` for times given relative to it).
    fn change(self, now: crate::clock::Timestamp) -> Result<PeerChange, ApiError>;
}

/// The one shape of the `PUT` family on a peer: the body read as `R`, the change applied by
/// the one audited method, and the peer as it is now.
async fn change_peer<R: PeerChangeRequest>(
    state: AdminState,
    admin: AuthenticatedAdmin,
    name: String,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    let change = parse_body::<R>(&body)?.change(state.clock.now())?;
    let caller = caller(&admin);
    state.service.change_peer(&caller, &name, change).await?;
    peer_view(&state, &caller, &name).await
}

/// A member that must be present, `null` allowed: `missing` says what to send instead.
fn required<T>(member: Option<T>, missing: &str) -> Result<T, ApiError> {
    member.ok_or_else(|| ApiError::Body(missing.to_owned()))
}

impl PeerChangeRequest for LimitRequest {
    fn change(self, _: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        Ok(PeerChange::Limit(self.rate_per_minute))
    }
}

impl PeerChangeRequest for StreamsRequest {
    fn change(self, _: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        let missing = "maxStreams is required: a number, or null for the policy's default";
        Ok(PeerChange::Streams(required(self.max_streams, missing)?))
    }
}

impl PeerChangeRequest for TraceTrustRequest {
    fn change(self, _: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        let missing = "trusted is required: true or false";
        Ok(PeerChange::TraceTrust(required(self.trusted, missing)?))
    }
}

impl PeerChangeRequest for PeerBudgetRequest {
    fn change(self, _: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        let missing = "tokensPerDay is required: a number, or null for none of its own";
        Ok(PeerChange::Budget(required(self.tokens_per_day, missing)?))
    }
}

impl PeerChangeRequest for OperationsRequest {
    fn change(self, _: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        use crate::protocol::operations::OperationSet;
        let asked = required(
            self.operations,
            "operations is required (null for every one)",
        )?;
        let set = asked
            .map(|names| OperationSet::parse(&names.join(",")))
            .transpose()
            .map_err(|why| invalid_owned("operations", why))?;
        Ok(PeerChange::Operations(set))
    }
}

impl PeerChangeRequest for ExpiryRequest {
    fn change(self, now: crate::clock::Timestamp) -> Result<PeerChange, ApiError> {
        let missing = "missing field `expiresAt` (use null for never)";
        let at = required(self.expires_at, missing)?
            .as_deref()
            .map(|t| parse_time("expiresAt", t, now, crate::clock::Relative::FromNow))
            .transpose()?;
        Ok(PeerChange::Expiry(at))
    }
}

/// A new quota.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LimitRequest {
    /// Requests per minute.
    rate_per_minute: u32,
}

#[utoipa::path(put, path = "/v1/peers/{name}/limit", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = LimitRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_limit(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<LimitRequest>(state, admin, name, body).await
}

/// A peer's own cap on open streams.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StreamsRequest {
    /// Streams (SendStreamingMessage, SubscribeToTask) the peer may hold open at once, 1 to
    /// 10000; `null` for the policy's `limits.streams_per_peer`. Required.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>, required = true)]
    max_streams: Option<Option<u32>>,
}

#[utoipa::path(put, path = "/v1/peers/{name}/streams", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = StreamsRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_streams(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<StreamsRequest>(state, admin, name, body).await
}

/// Whether a peer's own trace context is continued.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TraceTrustRequest {
    /// `true`: the peer's `traceparent` becomes the parent of its calls' spans (it decides
    /// their trace id and sampling); `false`: a call starts a trace of peergate's own, linked
    /// to the peer's. Required.
    #[serde(default)]
    #[schema(required = true)]
    trusted: Option<bool>,
}

#[utoipa::path(put, path = "/v1/peers/{name}/trace", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = TraceTrustRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_trace_trust(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<TraceTrustRequest>(state, admin, name, body).await
}

/// A peer's own daily token budget.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PeerBudgetRequest {
    /// Tokens per UTC day, at least 1; `null` for none of its own (its owner's budget still
    /// applies either way). Required.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, required = true)]
    tokens_per_day: Option<Option<u64>>,
}

/// The operations a peer may call.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OperationsRequest {
    /// The A2A operations' names (1.0, e.g. `GetTask`, or 0.3), or `["read-only"]`
    /// (GetTask, ListTasks, SubscribeToTask, GetExtendedAgentCard); `null` for every one the
    /// policy offers. Required.
    #[serde(default, deserialize_with = "present")]
    operations: Option<Option<Vec<String>>>,
}

#[utoipa::path(put, path = "/v1/peers/{name}/operations", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = OperationsRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_operations(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<OperationsRequest>(state, admin, name, body).await
}

#[utoipa::path(put, path = "/v1/peers/{name}/budget", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = PeerBudgetRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_peer_budget(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<PeerBudgetRequest>(state, admin, name, body).await
}

/// A new expiry.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExpiryRequest {
    /// RFC 3339 or a date; `null` for never. Required: a missing field is not "never".
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, required = true)]
    expires_at: Option<Option<String>>,
}

/// Tells a member given as `null` (`Some(None)`) from a missing one (`None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[utoipa::path(put, path = "/v1/peers/{name}/expiry", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = ExpiryRequest,
    responses((status = 200, body = PeerView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_expiry(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<PeerView>, ApiError> {
    change_peer::<ExpiryRequest>(state, admin, name, body).await
}

/// A Basic password for the peer.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PasswordRequest {
    /// At least 12 characters; stored as an Argon2id hash.
    password: String,
}

#[utoipa::path(put, path = "/v1/peers/{name}/password", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = PasswordRequest,
    responses((status = 204, description = "Set"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_password(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let request: PasswordRequest = parse_body(&body)?;
    let change = PeerChange::Password(NewPassword(request.password));
    state
        .service
        .change_peer(&caller(&admin), &name, change)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new API key, shown only here.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ApiKeyView {
    api_key: String,
}

#[utoipa::path(post, path = "/v1/peers/{name}/api-key", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    responses((status = 200, description = "Issued; earlier keys stopped", body = ApiKeyView), (status = 404, body = ErrorBody)))]
async fn issue_api_key(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
) -> Result<Json<ApiKeyView>, ApiError> {
    let changed = state
        .service
        .change_peer(&caller(&admin), &name, PeerChange::ApiKey)
        .await?;
    Ok(Json(ApiKeyView {
        api_key: changed.secret.unwrap_or_default(),
    }))
}

/// How to rotate.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RotateRequest {
    /// How long the old token keeps working, in seconds (0, the default, stops it at once;
    /// at most 30 days).
    #[serde(default)]
    grace_seconds: u64,
}

/// A rotated token.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RotatedView {
    /// The new token; shown only here.
    token: String,
    /// Until when the old token works; `null` when it stopped at once.
    previous_token_valid_until: Option<String>,
}

#[utoipa::path(post, path = "/v1/peers/{name}/rotate", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    request_body = RotateRequest,
    responses((status = 200, body = RotatedView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn rotate(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<RotatedView>, ApiError> {
    let request: RotateRequest = parse_body(&body)?;
    let grace = std::time::Duration::from_secs(request.grace_seconds);
    let rotated = state
        .service
        .change_peer(&caller(&admin), &name, PeerChange::Rotate(grace))
        .await?;
    Ok(Json(RotatedView {
        token: rotated.secret.unwrap_or_default(),
        previous_token_valid_until: rotated.previous_valid_until.map(rfc3339_millis),
    }))
}

#[utoipa::path(post, path = "/v1/peers/{name}/revoke", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    responses((status = 200, body = PeerView), (status = 404, body = ErrorBody)))]
async fn revoke(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
) -> Result<Json<PeerView>, ApiError> {
    let caller = caller(&admin);
    state
        .service
        .change_peer(&caller, &name, PeerChange::Revoke)
        .await?;
    peer_view(&state, &caller, &name).await
}

/// A reinstated peer and its new token, shown only in this answer.
#[derive(Serialize, ToSchema)]
struct ReinstatedPeerView {
    peer: PeerView,
    token: String,
}

#[utoipa::path(post, path = "/v1/peers/{name}/reinstate", tag = "peers",
    params(("name" = String, Path, description = "The peer's name")),
    responses((status = 200, body = ReinstatedPeerView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn reinstate(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path(name): Path<String>,
) -> Result<Json<ReinstatedPeerView>, ApiError> {
    let caller = caller(&admin);
    let token = state
        .service
        .change_peer(&caller, &name, PeerChange::Reinstate)
        .await?
        .secret
        .unwrap_or_default();
    let peer = state.service.show_peer(&caller, &name).await?;
    let holdings = Holdings::of(&state, &caller).await?;
    Ok(Json(ReinstatedPeerView {
        peer: PeerView::at(peer, state.clock.now(), &holdings),
        token,
    }))
}

// ---- the policy ----

#[utoipa::path(post, path = "/v1/policy/reload", tag = "operations",
    responses(
        (status = 200, description = "The policy file was read again: the keys applied, the keys whose new values wait for a restart (the old ones stay in force), and notes", body = Reloaded),
        (status = 400, description = "The file could not be read, did not check, or describes a part that cannot be built: the policy in force is kept, and the message says why", body = ErrorBody),
        (status = 403, description = "The policy in force does not list this administrator in `admin.reloaders`", body = ErrorBody)))]
async fn reload_policy(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
) -> Result<Json<Reloaded>, ApiError> {
    let caller = caller(&admin);
    let Some(reload) = &state.reload else {
        return Err(
            ServiceError::NotFound("this gateway does not reload its policy".to_owned()).into(),
        );
    };
    // The file is the operator's; an administrator applies it only when the policy says so.
    if !reload.may_reload(admin.name()).await {
        let why = "this administrator may not reload the policy (admin.reloaders)";
        state
            .service
            .record_policy_reload(&caller, AuditOutcome::Denied(String::new()), why.to_owned())
            .await;
        return Err(ServiceError::Forbidden(why).into());
    }
    let outcome = reload.reload(ReloadTrigger::Admin(caller)).await;
    outcome
        .map(Json)
        .map_err(|refused| ApiError::Reload(refused.to_string()))
}

// ---- push notifications ----

/// A push notification given up after its last attempt.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct FailedDeliveryView {
    peer: String,
    task_id: String,
    config_id: String,
    /// Scheme, host and path of the callback (its query may carry a secret).
    url: String,
    attempts: u32,
    /// Why the last attempt failed (never the receiver's answer).
    last_error: String,
    queued_at: String,
    failed_at: String,
}

#[derive(Serialize, ToSchema)]
struct FailedDeliveryList {
    deliveries: Vec<FailedDeliveryView>,
}

#[utoipa::path(get, path = "/v1/push/failed", tag = "operations",
    responses((status = 200, description = "Push notifications to the caller's peers' callbacks that were given up (dead letters), newest first, at most 200; kept until their task expires", body = FailedDeliveryList)))]
async fn failed_deliveries(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
) -> Result<Json<FailedDeliveryList>, ApiError> {
    let failed = state.service.failed_deliveries(&caller(&admin)).await?;
    Ok(Json(FailedDeliveryList {
        deliveries: failed
            .into_iter()
            .map(|d| FailedDeliveryView {
                peer: d.peer_name,
                task_id: d.task_id,
                config_id: d.config_id.to_string(),
                url: crate::net::url::without_secrets(&d.url)
                    .map_or_else(|| "(not a URL)".to_owned(), |(url, _)| url),
                attempts: d.attempts,
                last_error: d.last_error,
                queued_at: rfc3339_millis(d.created_at),
                failed_at: rfc3339_millis(d.failed_at),
            })
            .collect(),
    }))
}

#[utoipa::path(get, path = "/v1/peers/{name}/tasks/{task_id}", tag = "peers",
    params(("name" = String, Path, description = "The peer's name"), ("task_id" = String, Path, description = "The task's id")),
    responses((status = 200, description = "The task as GetTask answers the peer (status, history, artifacts, metadata), while the gateway keeps it", body = Object), (status = 404, body = ErrorBody)))]
async fn read_task(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path((name, task_id)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let task = state.service.task(&caller(&admin), &name, &task_id).await?;
    Ok(Json(task))
}

// ---- conversations ----

/// A conversation as listed.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ConversationSummaryView {
    peer: String,
    context_id: String,
    created_at: String,
    updated_at: String,
    messages: i64,
}

#[derive(Serialize, ToSchema)]
struct ConversationList {
    conversations: Vec<ConversationSummaryView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ConversationQueryParams {
    /// Only this peer's.
    peer: Option<String>,
    /// Last message at or after (RFC 3339, a date, or a span ago such as `2h`).
    since: Option<String>,
    /// Last message before (same forms).
    until: Option<String>,
    /// At most this many (1 to 500; 100 when absent).
    limit: Option<u32>,
    /// Where the page starts: a previous page's `next`.
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/conversations", tag = "conversations",
    params(ConversationQueryParams),
    responses((status = 200, description = "Conversations of the caller's peers, latest first (then by peer and contextId), a page at a time", body = ConversationList), (status = 400, body = ErrorBody)))]
async fn list_conversations(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Query(params): Query<ConversationQueryParams>,
) -> Result<Json<ConversationList>, ApiError> {
    let now = state.clock.now();
    let when = |field, text: &Option<String>| {
        text.as_deref()
            .map(|t| parse_time(field, t, now, crate::clock::Relative::Ago))
            .transpose()
    };
    let limit = params.limit.unwrap_or(100);
    if !(1..=crate::admin::service::MAX_CONVERSATIONS_PAGE).contains(&limit) {
        return Err(invalid("limit", "must be 1 to 500"));
    }
    let query = crate::store::ConversationQuery {
        owner_id: None,
        peer: params.peer,
        since: when("since", &params.since)?,
        until: when("until", &params.until)?,
        after: params.cursor.as_deref().map(parse_cursor).transpose()?,
        limit,
    };
    let page = state.service.conversations(&caller(&admin), query).await?;
    Ok(Json(ConversationList {
        next: page.next.map(|next| next.to_text()),
        conversations: page
            .conversations
            .into_iter()
            .map(|c| ConversationSummaryView {
                peer: c.peer_name,
                context_id: c.context_id,
                created_at: rfc3339_millis(c.created_at),
                updated_at: rfc3339_millis(c.updated_at),
                messages: c.messages,
            })
            .collect(),
    }))
}

fn invalid_owned(field: &'static str, reason: String) -> ApiError {
    ApiError::Service(ServiceError::Invalid { field, reason })
}

fn invalid(field: &'static str, reason: &str) -> ApiError {
    ApiError::Service(ServiceError::Invalid {
        field,
        reason: reason.to_owned(),
    })
}

fn parse_cursor(cursor: &str) -> Result<crate::store::ConversationCursor, ApiError> {
    crate::store::ConversationCursor::parse(cursor).ok_or_else(|| {
        invalid(
            "cursor",
            "not a cursor this API gave: pass a page's `next` as it is",
        )
    })
}

/// One message of a conversation.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ConversationMessageView {
    /// `peer`, `agent`, or `withheld` (an answer the content guard withheld, kept as evidence).
    role: String,
    /// The text a model reads (text parts, data as JSON).
    text: String,
    /// Every part: `{"kind": "text", "text"}`, `{"kind": "data", "data"}`, or `{"kind":
    /// "file", "filename", "mediaType", "size", "sha256", "raw"}` (bytes up to 64 KiB, else
    /// `"contentOmitted": true`) or `{"kind": "file", "url"}`; an agent's artifact parts name
    /// their `artifactId`. Absent for messages kept before parts were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    parts: Option<serde_json::Value>,
    task_id: String,
    at: String,
}

/// A whole conversation.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ConversationView {
    peer: String,
    context_id: String,
    messages: Vec<ConversationMessageView>,
}

#[utoipa::path(get, path = "/v1/conversations/{peer}/{context_id}", tag = "conversations",
    params(("peer" = String, Path, description = "The peer's name"), ("context_id" = String, Path, description = "The conversation's contextId")),
    responses((status = 200, body = ConversationView), (status = 404, body = ErrorBody)))]
async fn read_conversation(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path((peer, context_id)): Path<(String, String)>,
) -> Result<Json<ConversationView>, ApiError> {
    let messages = state
        .service
        .conversation(&caller(&admin), &peer, &context_id)
        .await?;
    Ok(Json(ConversationView {
        peer,
        context_id,
        messages: messages
            .into_iter()
            .map(|m| ConversationMessageView {
                role: m.role,
                text: m.text,
                parts: m.parts,
                task_id: m.task_id,
                at: rfc3339_millis(m.at),
            })
            .collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/conversations/{peer}/{context_id}", tag = "conversations",
    params(("peer" = String, Path, description = "The peer's name"), ("context_id" = String, Path, description = "The conversation's contextId")),
    responses((status = 204, description = "Deleted, with the tasks that held its text"), (status = 404, body = ErrorBody)))]
async fn delete_conversation(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Path((peer, context_id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .service
        .delete_conversation(&caller(&admin), &peer, &context_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- account ----

/// Tokens one peer spent.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PeerUsageView {
    peer: String,
    tokens: u64,
    requests: u64,
}

/// The caller's model budget and what their peers spent.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct UsageView {
    administrator: String,
    model_allowed: bool,
    /// The UTC day, `YYYY-MM-DD`.
    day: String,
    tokens_today: u64,
    tokens_per_day: u64,
    /// The UTC month, `YYYY-MM`.
    month: String,
    tokens_this_month: u64,
    /// `null` when months are not budgeted.
    tokens_per_month: Option<u64>,
    /// Today's spending per peer.
    peers_today: Vec<PeerUsageView>,
    /// The period asked for (`period`, a UTC day or month; today when not asked).
    period: String,
    /// Tokens spent in it by all the caller's peers.
    tokens_in_period: u64,
    /// Its spending per peer.
    peers_in_period: Vec<PeerUsageView>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageQuery {
    /// A UTC day (`YYYY-MM-DD`) or month (`YYYY-MM`); today when absent.
    period: Option<String>,
}

#[utoipa::path(get, path = "/v1/usage", tag = "account",
    params(UsageQuery),
    responses((status = 200, body = UsageView), (status = 400, body = ErrorBody)))]
async fn usage(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Query(query): Query<UsageQuery>,
) -> Result<Json<UsageView>, ApiError> {
    let caller = caller(&admin);
    let (day, month) = day_and_month(state.clock.now());
    let period = match &query.period {
        Some(period) => crate::admin::service::read_period(period)?,
        None => day.into(),
    };
    let (tokens_today, peers) = state.service.usage(&caller, admin.id(), day).await?;
    let (tokens_this_month, _) = state.service.usage(&caller, admin.id(), month).await?;
    let (tokens_in_period, in_period) = state.service.usage(&caller, admin.id(), period).await?;
    let budget = state
        .budgets
        .budget(admin.id())
        .await
        .map_err(ServiceError::from)?;
    let views = |peers: Vec<crate::store::PeerUsage>| -> Vec<PeerUsageView> {
        peers
            .into_iter()
            .map(|p| PeerUsageView {
                peer: p.peer_name,
                tokens: p.tokens,
                requests: p.requests,
            })
            .collect()
    };
    Ok(Json(UsageView {
        administrator: admin.name().to_owned(),
        model_allowed: budget.model_allowed,
        day: day.to_string(),
        tokens_today,
        tokens_per_day: budget.tokens_per_day,
        month: month.to_string(),
        tokens_this_month,
        tokens_per_month: budget.tokens_per_month,
        peers_today: views(peers),
        period: period.to_string(),
        tokens_in_period,
        peers_in_period: views(in_period),
    }))
}

/// One audit record.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AuditView {
    seq: i64,
    at: String,
    actor: String,
    action: String,
    target: String,
    outcome: String,
    client: String,
    detail: String,
}

impl From<AuditRecord> for AuditView {
    fn from(r: AuditRecord) -> Self {
        Self {
            seq: r.seq,
            at: rfc3339_millis(r.entry.at),
            actor: r.entry.actor.to_string(),
            action: r.entry.action.to_string(),
            target: r.entry.target.to_string(),
            outcome: r.entry.outcome.to_string(),
            client: r.entry.client,
            detail: r.entry.detail,
        }
    }
}

#[derive(Serialize, ToSchema)]
struct AuditList {
    records: Vec<AuditView>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditQuery {
    /// RFC 3339 or a date; the whole log when absent.
    since: Option<String>,
}

#[utoipa::path(get, path = "/v1/audit", tag = "account",
    params(AuditQuery),
    responses((status = 200, description = "Audit records of the caller's account, oldest first", body = AuditList), (status = 400, body = ErrorBody)))]
async fn audit(
    State(state): State<AdminState>,
    admin: AuthenticatedAdmin,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let since = query
        .since
        .as_deref()
        .map(|t| {
            let now = state.clock.now();
            parse_time("since", t, now, crate::clock::Relative::Ago)
        })
        .transpose()?
        .unwrap_or(Timestamp::MIN);
    let records = state.service.audit(&caller(&admin), since).await?;
    Ok(Json(AuditList {
        records: records.into_iter().map(AuditView::from).collect(),
    }))
}

// ---- operations ----

#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String)))]
async fn prometheus_metrics(
    State(state): State<AdminState>,
    principal: Option<Extension<AdminPrincipal>>,
) -> Response {
    // Mounted behind the layer, an administrator or the scraper is always there; without
    // either, fail closed.
    if principal.is_none() {
        return Refusal::Forbidden("an administrator or the scrape token is needed".to_owned())
            .into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// Whether this instance can serve, part by part.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // built by `crate::http::ready`; this type only documents it
struct ReadinessView {
    /// `ready`, `degraded` (serving without Redis or the agent) or `not_ready`.
    status: String,
    /// `ok`, `disk_full` or `unreachable`.
    store: String,
    /// `ok`, `unreachable` or `not_configured`.
    redis: String,
    /// The backend's kind: `echo`, `openai` or `a2a`.
    backend: String,
    /// For an agent behind the door (`a2a`): `ok` or `unreachable`, as the last probe found it.
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
}

#[utoipa::path(get, path = "/ready", tag = "operations", security(()),
    responses(
        (status = 200, description = "This instance serves: ready, or degraded without Redis or the agent", body = ReadinessView),
        (status = 503, description = "It cannot serve: its store does not answer or is full (with Retry-After)", body = ReadinessView)))]
async fn readiness(State(state): State<AdminState>) -> Response {
    match &state.readiness {
        Some(readiness) => readiness.answer(true).await,
        None => not_found().await,
    }
}

/// Whether the process answers at all (a liveness probe), as the door's `/health` says it.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[allow(dead_code)] // documents the answer `health` writes
struct HealthView {
    /// Always `healthy`.
    status: String,
}

#[utoipa::path(get, path = "/health", tag = "operations", security(()),
    responses((status = 200, description = "The process answers (liveness); says nothing of its parts", body = HealthView)))]
async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "healthy"}))
}

#[utoipa::path(get, path = "/openapi.json", tag = "operations", security(()),
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
async fn openapi_document(State(state): State<AdminState>) -> Response {
    let body = state.openapi_json.get().cloned().unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}
