//! The four push-notification config methods, and configs sent along with a message.
//!
//! A config belongs to a task, and a task to a peer: every method first loads the caller's own
//! task, so another peer's task answers `-32001` exactly like one that does not exist. The
//! callback URL is checked before anything is stored ([`crate::push::callback`]); the token
//! and credentials are sealed ([`crate::push::seal`]) and `credentials` is never read back.

use super::reads::TaskReads;
use super::{internal, invalid, new_id};
use crate::clock::Clock;
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::error::A2aError;
use crate::protocol::ids::TaskId;
use crate::protocol::types::{
    AuthenticationScheme, ListTaskPushNotificationConfigsResponse, PushConfigParams, PushConfigRef,
    TaskPushNotificationConfig, is_valid_context_id,
};
use crate::push::Push;
use crate::push::seal::PushSecrets;
use crate::store::{PushConfigId, PushConfigRecord, StoreError};
use base64::Engine;
use std::sync::Arc;

/// Largest `token`, in bytes.
const MAX_TOKEN_BYTES: usize = 1024;
/// Largest `authentication.credentials`, in bytes.
const MAX_CREDENTIALS_BYTES: usize = 4096;
/// Configs a list answers at most per page, and by default.
const MAX_PAGE: i64 = 100;
const DEFAULT_PAGE: i64 = 50;

/// The agent's part that keeps push-notification configs: the push engine (`None` when push
/// is off), the task reads that prove a task is the caller's, and the clock.
#[derive(Clone)]
pub(super) struct PushConfigs {
    push: Option<Arc<Push>>,
    reads: TaskReads,
    clock: Arc<dyn Clock>,
}

impl PushConfigs {
    pub(super) fn new(push: Option<Arc<Push>>, reads: TaskReads, clock: Arc<dyn Clock>) -> Self {
        Self { push, reads, clock }
    }

    fn push(&self) -> Result<&Arc<Push>, A2aError> {
        self.push
            .as_ref()
            .ok_or(A2aError::PushNotificationNotSupported)
    }

    pub(super) async fn create_push_config(
        &self,
        peer: &AuthenticatedPeer,
        params: PushConfigParams,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        let push = self.push()?;
        let task_id = params
            .task_id
            .clone()
            .filter(|t| !t.is_empty())
            .map(TaskId::from)
            .ok_or_else(|| invalid("taskId", "is required"))?;
        self.reads.load_task(peer, &task_id).await?;
        let record = self
            .push_config_record(push, peer, &task_id, params, "")
            .await?;
        push.store
            .put_push_config(&record, push.settings.max_configs_per_task)
            .await
            .map_err(|e| match e {
                StoreError::TooManyPushConfigs(most) => invalid(
                    "taskId",
                    &format!(
                        "the task already has {most} push notification configs; delete one first"
                    ),
                ),
                other => internal(other),
            })?;
        self.config_view(push, &record)
    }

    pub(super) async fn get_push_config(
        &self,
        peer: &AuthenticatedPeer,
        params: PushConfigRef,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        let push = self.push()?;
        let (task_id, config_id) = self.own_config(peer, &params).await?;
        let record = push
            .store
            .push_config(peer.id(), &task_id, &config_id)
            .await
            .map_err(internal)?
            .ok_or(A2aError::PushConfigNotFound)?;
        self.config_view(push, &record)
    }

    pub(super) async fn list_push_configs(
        &self,
        peer: &AuthenticatedPeer,
        params: PushConfigRef,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
        let push = self.push()?;
        let (task_id, _) = named(&params)?;
        let task_id = TaskId::from(task_id);
        self.reads.load_task(peer, &task_id).await?;
        let size = params.page_size.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&size) {
            return Err(invalid("pageSize", "must be between 1 and 100"));
        }
        // The token is the last id of the page before; the query is scoped to the caller's
        // task, so no token reaches another task's configs.
        let after = match params.page_token.as_deref().filter(|t| !t.is_empty()) {
            None => None,
            Some(token) => Some(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(token)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .map(PushConfigId::from)
                    .ok_or_else(|| invalid("pageToken", "is not a token this server made"))?,
            ),
        };
        let limit = u32::try_from(size).unwrap_or(50);
        let mut records = push
            .store
            .push_configs(peer.id(), &task_id, after.as_ref(), limit + 1)
            .await
            .map_err(internal)?;
        let more = records.len() > limit as usize;
        records.truncate(limit as usize);
        let next = match records.last() {
            Some(last) if more => {
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last.id.as_bytes())
            }
            _ => String::new(),
        };
        let configs = records
            .iter()
            .map(|r| self.config_view(push, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListTaskPushNotificationConfigsResponse {
            configs,
            next_page_token: next,
        })
    }

    /// Deleting a config that is not there succeeds: the call is idempotent.
    pub(super) async fn delete_push_config(
        &self,
        peer: &AuthenticatedPeer,
        params: PushConfigRef,
    ) -> Result<(), A2aError> {
        let push = self.push()?;
        let (task_id, config_id) = self.own_config(peer, &params).await?;
        push.store
            .delete_push_config(peer.id(), &task_id, &config_id)
            .await
            .map_err(internal)
    }

    /// The task and config a get or delete names, once the task is known to be the caller's.
    async fn own_config(
        &self,
        peer: &AuthenticatedPeer,
        params: &PushConfigRef,
    ) -> Result<(TaskId, PushConfigId), A2aError> {
        let (task_id, config_id) = named(params)?;
        // The 0.3 shape may name the task `id`: the names are read as text, then typed here.
        let task_id = TaskId::from(task_id);
        self.reads.load_task(peer, &task_id).await?;
        let config_id = config_id.ok_or_else(|| invalid("id", "is required"))?;
        Ok((task_id, PushConfigId::from(config_id)))
    }

    /// A config for a message's new task (`configuration.taskPushNotificationConfig`).
    pub(super) async fn inline_push_config(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &str,
        params: PushConfigParams,
    ) -> Result<PushConfigRecord, A2aError> {
        let push = self.push()?;
        self.push_config_record(
            push,
            peer,
            task_id,
            params,
            "configuration.taskPushNotificationConfig.",
        )
        .await
    }

    /// Checks a config a peer sent and seals it for `task_id`; `field` prefixes the names of
    /// offending fields.
    async fn push_config_record(
        &self,
        push: &Push,
        peer: &AuthenticatedPeer,
        task_id: &str,
        params: PushConfigParams,
        field: &str,
    ) -> Result<PushConfigRecord, A2aError> {
        let params = match params.nested {
            Some(nested) => *nested,
            None => params,
        };
        let named = |name: &str| format!("{field}{name}");
        let bad = |name: &str, why: &str| invalid(&named(name), why);
        let id = match params.id.filter(|id| !id.is_empty()) {
            Some(id) if is_valid_context_id(&id) => id,
            Some(_) => {
                return Err(bad(
                    "id",
                    "must be 1 to 128 characters of letters, digits and ._:-",
                ));
            }
            None => new_id(),
        };
        let url = params.url.ok_or_else(|| bad("url", "is required"))?;
        push.callbacks
            .check(&url)
            .await
            .map_err(|refused| bad("url", &refused.0))?;
        if let Some(token) = &params.token
            && (token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(bad(
                "token",
                "must be at most 1024 visible ASCII characters (it travels in a header)",
            ));
        }
        let (scheme, credentials) = match params.authentication {
            None => (None, None),
            Some(auth) => {
                let scheme = auth
                    .scheme
                    .or_else(|| auth.schemes.and_then(|s| s.into_iter().next()))
                    .filter(|s| is_token(s))
                    .ok_or_else(|| {
                        bad(
                            "authentication.scheme",
                            "must be an HTTP authentication scheme such as Bearer",
                        )
                    })?;
                if let Some(credentials) = &auth.credentials
                    && (credentials.len() > MAX_CREDENTIALS_BYTES
                        || !credentials
                            .bytes()
                            .all(|b| b == b' ' || b.is_ascii_graphic()))
                {
                    return Err(bad(
                        "authentication.credentials",
                        "must be at most 4096 visible ASCII characters (they travel in a header)",
                    ));
                }
                (Some(scheme), auth.credentials)
            }
        };
        let secrets = PushSecrets {
            token: params.token,
            scheme,
            credentials,
        };
        Ok(PushConfigRecord {
            sealed: push.key.seal(task_id, &id, &secrets),
            task_id: task_id.to_owned(),
            id: id.into(),
            peer_id: peer.id().clone(),
            url,
            created_at: self.clock.now(),
        })
    }

    /// A config as answered: its token and scheme, never its credentials.
    fn config_view(
        &self,
        push: &Push,
        record: &PushConfigRecord,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        let secrets = push
            .key
            .open(&record.task_id, &record.id, &record.sealed)
            .map_err(internal)?;
        Ok(TaskPushNotificationConfig {
            task_id: TaskId::from(record.task_id.clone()),
            id: record.id.to_string(),
            url: record.url.clone(),
            token: secrets.token,
            authentication: secrets.scheme.map(|scheme| AuthenticationScheme { scheme }),
        })
    }
}

/// The task and config a request names.
fn named(params: &PushConfigRef) -> Result<(&str, Option<&str>), A2aError> {
    match params.task_and_config() {
        (Some(task), config) if !task.is_empty() => Ok((task, config.filter(|c| !c.is_empty()))),
        _ => Err(invalid("taskId", "is required")),
    }
}

/// An HTTP token (RFC 9110 §5.6.2), at most 64 characters: what an authentication scheme is.
fn is_token(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
