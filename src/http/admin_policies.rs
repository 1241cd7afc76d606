//! The admin API under the authorization policies (docs/authorization.md): after sign-in and
//! the auditors' gate, before any handler, each administrator's request is put to the Cedar
//! policies as the administrator (with their role), the route's operation (its OpenAPI id), the
//! peer its path names and the request's client and time. A denial is 403 `permission_denied`
//! naming the operation, counted in the metrics and written to the audit log with the policies
//! that made it. The metrics scraper is no administrator and is not asked about.

use super::admin_api::openapi;
use crate::admin::{AccountService, AdminPrincipal, Caller};
use crate::authz::{AdminAsk, Authorization};
use crate::clock::Clock;
use crate::guard::refusal::Refusal;
use crate::layers::metrics::Metrics;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Arc;

/// What the middleware decides with.
pub(crate) struct AdminPolicies {
    authorization: Arc<Authorization>,
    /// Each route's operation id, by method and path template.
    operations: HashMap<(String, String), &'static str>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    accounts: AccountService,
}

impl AdminPolicies {
    /// The policies of `authorization` over the admin API's documented routes.
    pub(crate) fn new(
        authorization: Arc<Authorization>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        accounts: AccountService,
    ) -> Self {
        Self {
            authorization,
            operations: operations(),
            clock,
            metrics,
            accounts,
        }
    }
}

/// Every documented admin operation the policies know, by method and path template.
pub(crate) fn operations() -> HashMap<(String, String), &'static str> {
    let document = serde_json::to_value(openapi()).unwrap_or_default();
    let mut operations = HashMap::new();
    let paths = document["paths"].as_object().cloned().unwrap_or_default();
    for (path, methods) in paths {
        for (method, operation) in methods.as_object().into_iter().flatten() {
            let id = operation["operationId"].as_str().unwrap_or_default();
            if let Some(known) = crate::authz::schema::ADMIN_OPERATIONS
                .iter()
                .find(|known| **known == id)
            {
                operations.insert((method.to_uppercase(), path.clone()), *known);
            }
        }
    }
    operations
}

/// Refuses an administrator's request the policies do not permit (403), before its handler.
pub(crate) async fn decide(
    State(policies): State<Arc<AdminPolicies>>,
    request: Request,
    next: Next,
) -> Response {
    let auditor = match request.extensions().get::<AdminPrincipal>() {
        Some(AdminPrincipal::Administrator { auditor, .. }) => *auditor,
        _ => return next.run(request).await,
    };
    let (mut parts, body) = request.into_parts();
    let Ok(admin) = crate::admin::AuthenticatedAdmin::from_request_parts(&mut parts, &()).await
    else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    let template = parts
        .extensions
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_owned())
        .unwrap_or_default();
    let method = parts.method.as_str().to_owned();
    // A route the policies were not told of is denied: fail closed.
    let operation = policies
        .operations
        .get(&(method.replace("HEAD", "GET"), template))
        .copied()
        .unwrap_or("unknown");
    let params = RawPathParams::from_request_parts(&mut parts, &())
        .await
        .ok();
    let peer = params
        .as_ref()
        .and_then(|params| {
            params
                .iter()
                .find(|(key, _)| matches!(*key, "name" | "peer"))
        })
        .map(|(_, value)| value);
    // The address itself (not the /64 rate limits count by), unknown when it is.
    let client = parts
        .extensions
        .get::<crate::layers::client_addr::ClientAddr>()
        .map(|client| client.ip())
        .or_else(|| {
            let connected = parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>();
            connected.map(|info| info.0.ip())
        })
        .map(|ip| ip.to_canonical());
    let ask = AdminAsk {
        name: admin.name(),
        auditor,
        operation,
        method: &method,
        peer,
        client,
        now: policies.clock.now(),
    };
    let decision = policies.authorization.current().decide_admin(&ask);
    policies
        .metrics
        .decisions()
        .decided(true, decision.allowed, &decision.policies);
    if !decision.allowed {
        let caller = Caller {
            actor: crate::admin::Actor::Admin {
                id: admin.id().to_owned(),
                name: admin.name().to_owned(),
            },
            client: admin.client().to_string(),
        };
        let policy_list = decision.policy_list();
        let accounts = policies.accounts.clone();
        // Written before the answer: administrators are few, and their denials rare.
        accounts
            .record_denied(&caller, operation, &policy_list)
            .await;
        return Refusal::PolicyDenied { method: operation }.into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route behind sign-in is an action of the schema, a read exactly when it is a GET:
    /// a new route cannot be missed by the policies (it would be denied, "unknown").
    #[test]
    fn every_guarded_route_is_an_admin_action_and_reads_are_the_gets() {
        let public = ["openapi_document", "readiness", "health"];
        let document = serde_json::to_value(openapi()).unwrap();
        let mut documented = Vec::new();
        for (_, methods) in document["paths"].as_object().unwrap() {
            for (method, operation) in methods.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap();
                if !public.contains(&id) {
                    documented.push((method.to_uppercase(), id.to_owned()));
                }
            }
        }
        let mut known: Vec<&str> = crate::authz::schema::ADMIN_OPERATIONS.to_vec();
        let mut ids: Vec<&str> = documented.iter().map(|(_, id)| id.as_str()).collect();
        known.sort_unstable();
        ids.sort_unstable();
        assert_eq!(ids, known);
        assert_eq!(operations().len(), known.len());
        let schema = cedar_policy::Schema::from_cedarschema_str(crate::authz::schema::BUILT_IN)
            .unwrap()
            .0;
        let actions = schema.action_entities().unwrap();
        let reads = crate::authz::ask::action("admin.read");
        for (method, id) in &documented {
            let ancestors: Vec<_> = actions
                .ancestors(&crate::authz::ask::action(id))
                .unwrap()
                .collect();
            assert_eq!(
                ancestors.contains(&&reads),
                method == "GET",
                "{method} {id}"
            );
        }
    }
}
