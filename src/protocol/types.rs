//! The A2A 1.0 objects peergate reads and writes, in their ProtoJSON shapes.
//!
//! Incoming objects are parsed into typed structs (so a duplicated known key is an error, and
//! unknown keys are ignored as ProtoJSON asks); both the camelCase and the snake_case names are
//! accepted, and the 0.3 spellings of roles and parts where they are unambiguous. Outgoing
//! objects always use the 1.0 camelCase names and enum spellings.

use super::ids::{ContextId, MessageId, TaskId};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `Role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Role {
    /// `ROLE_UNSPECIFIED`
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// `ROLE_USER`
    #[serde(rename = "ROLE_USER")]
    User,
    /// `ROLE_AGENT`
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

impl Role {
    /// The role's ProtoJSON number.
    pub fn number(self) -> i32 {
        match self {
            Self::Unspecified => 0,
            Self::User => 1,
            Self::Agent => 2,
        }
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // ProtoJSON accepts the enum's name or its number; 0.3 used lowercase names.
        match Value::deserialize(deserializer)? {
            Value::String(s) => match s.as_str() {
                "ROLE_USER" | "user" => Ok(Self::User),
                "ROLE_AGENT" | "agent" => Ok(Self::Agent),
                "ROLE_UNSPECIFIED" => Ok(Self::Unspecified),
                _ => Err(de::Error::custom("unknown role")),
            },
            Value::Number(n) => match n.as_u64() {
                Some(0) => Ok(Self::Unspecified),
                Some(1) => Ok(Self::User),
                Some(2) => Ok(Self::Agent),
                _ => Err(de::Error::custom("unknown role")),
            },
            _ => Err(de::Error::custom("role must be a string")),
        }
    }
}

/// `TaskState`, as far as peergate produces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Accepted, not yet worked on: peergate stores a task working at once, but an agent
    /// behind the door may report it, and `ListTasks` may filter by it.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Stored, the model being asked (only ever seen after a crash turned it `Failed`, or by
    /// a concurrent `GetTask`).
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// The model answered.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// The model could not answer.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Refused by policy (owner quotas).
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Canceled by the peer while it was being answered.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// An upstream agent asks the peer for more input: the peer answers with a message naming
    /// the task.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// An upstream agent asks the peer to authenticate to it before it goes on.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// The ProtoJSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "TASK_STATE_SUBMITTED",
            Self::Working => "TASK_STATE_WORKING",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Failed => "TASK_STATE_FAILED",
            Self::Rejected => "TASK_STATE_REJECTED",
            Self::Canceled => "TASK_STATE_CANCELED",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            Self::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    /// Whether nothing more happens to a task in this state.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Rejected | Self::Canceled
        )
    }

    /// Whether the task waits for the peer (input or authentication) before it goes on.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// Every state, in the order of their ProtoJSON numbers from 1 (0 is the unspecified
    /// state, which no task is in).
    pub const BY_NUMBER: [Self; 8] = [
        Self::Submitted,
        Self::Working,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
        Self::InputRequired,
        Self::Rejected,
        Self::AuthRequired,
    ];

    /// The state a stored name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::BY_NUMBER
            .into_iter()
            .find(|state| state.as_str() == name)
    }

    /// The state's ProtoJSON number (1 to 8).
    pub fn number(self) -> i32 {
        let i = Self::BY_NUMBER.iter().position(|state| *state == self);
        i.map_or(0, |i| i as i32 + 1)
    }

    /// The state with ProtoJSON number `n` (1 to 8).
    pub fn from_number(n: u64) -> Option<Self> {
        let i = usize::try_from(n.checked_sub(1)?).ok()?;
        Self::BY_NUMBER.get(i).copied()
    }
}

/// `SendMessageRequest`.
#[derive(Debug, Deserialize)]
pub struct SendMessageRequest {
    /// The peer's message.
    pub message: IncomingMessage,
    /// `SendMessageConfiguration`.
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
    /// The request's own `metadata` (a JSON object), relayed to an agent behind the door as
    /// sent.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// A `contextId` or `taskId` beside `message` instead of inside it: refused by
    /// [`SendMessageRequest::misplaced_ids`] rather than ignored, which silently started a new
    /// conversation.
    #[serde(default, rename = "contextId")]
    misplaced_context_id: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "taskId")]
    misplaced_task_id: Option<serde::de::IgnoredAny>,
    /// The message as the partner sent it (A2A 1.0's ProtoJSON form), kept when the gateway
    /// changed it before the operation read it (the content guard masked some of it): what a
    /// receipt digests as the request.
    #[serde(skip)]
    pub as_received: Option<Value>,
    /// The rules that masked some of the message (the content guard's ids), so the task tells
    /// the partner its message was changed, and by which rules.
    #[serde(skip)]
    pub masked_by: Vec<String>,
}

impl SendMessageRequest {
    /// A request as a binding with no room for misplaced ids (a protobuf message) reads it.
    pub fn new(
        message: IncomingMessage,
        configuration: Option<SendMessageConfiguration>,
        metadata: Option<Value>,
    ) -> Self {
        Self {
            message,
            configuration,
            metadata,
            as_received: None,
            masked_by: Vec::new(),
            misplaced_context_id: None,
            misplaced_task_id: None,
        }
    }

    /// The name of an id given beside `message` instead of inside it, if any.
    pub fn misplaced_id(&self) -> Option<&'static str> {
        if self.misplaced_context_id.is_some() {
            Some("contextId")
        } else if self.misplaced_task_id.is_some() {
            Some("taskId")
        } else {
            None
        }
    }
}

/// `SendMessageConfiguration`; only what peergate honours.
#[derive(Debug, Default, Deserialize)]
pub struct SendMessageConfiguration {
    /// How many history messages the returned task carries.
    #[serde(default, rename = "historyLength", alias = "history_length")]
    pub history_length: Option<i64>,
    /// Answer with the working task at once instead of waiting for the model.
    #[serde(default, rename = "returnImmediately", alias = "return_immediately")]
    pub return_immediately: Option<bool>,
    /// A push-notification config for the new task (its `taskId` left empty).
    #[serde(
        default,
        rename = "taskPushNotificationConfig",
        alias = "task_push_notification_config",
        alias = "pushNotificationConfig"
    )]
    pub push_config: Option<PushConfigParams>,
}

/// `TaskPushNotificationConfig` as a peer sends it (`CreateTaskPushNotificationConfig`, or
/// inside `SendMessageConfiguration`).
#[derive(Debug, Default, Deserialize)]
pub struct PushConfigParams {
    /// The task (empty or absent inside `SendMessageConfiguration`).
    #[serde(default, rename = "taskId", alias = "task_id")]
    pub task_id: Option<String>,
    /// The config's id; peergate makes one when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Where notifications go.
    #[serde(default)]
    pub url: Option<String>,
    /// Sent back with every notification as `X-A2A-Notification-Token`.
    #[serde(default)]
    pub token: Option<String>,
    /// Sent as `Authorization: <scheme> <credentials>`.
    #[serde(default)]
    pub authentication: Option<PushAuthentication>,
    /// The 0.3 shape nests the config.
    #[serde(default, rename = "pushNotificationConfig")]
    pub nested: Option<Box<PushConfigParams>>,
}

/// `AuthenticationInfo`.
#[derive(Debug, Default, Deserialize)]
pub struct PushAuthentication {
    /// The HTTP authentication scheme, such as `Bearer`.
    #[serde(default)]
    pub scheme: Option<String>,
    /// The 0.3 shape lists schemes; the first is used.
    #[serde(default)]
    pub schemes: Option<Vec<String>>,
    /// Its credentials.
    #[serde(default)]
    pub credentials: Option<String>,
}

/// `GetTaskPushNotificationConfigRequest` / `DeleteTaskPushNotificationConfigRequest` (`taskId`
/// and `id`), and `ListTaskPushNotificationConfigsRequest` (`taskId`). The 0.3 shape names the
/// task `id` and the config `pushNotificationConfigId`.
#[derive(Debug, Deserialize)]
pub struct PushConfigRef {
    /// The task (1.0).
    #[serde(default, rename = "taskId", alias = "task_id")]
    pub task_id: Option<String>,
    /// The config (1.0), or the task (0.3).
    #[serde(default)]
    pub id: Option<String>,
    /// The config (0.3).
    #[serde(
        default,
        rename = "pushNotificationConfigId",
        alias = "push_notification_config_id"
    )]
    pub config_id: Option<String>,
    /// Page size (list).
    #[serde(default, rename = "pageSize", alias = "page_size")]
    pub page_size: Option<i64>,
    /// Page token (list).
    #[serde(default, rename = "pageToken", alias = "page_token")]
    pub page_token: Option<String>,
}

impl PushConfigRef {
    /// The task and config this names, in either shape.
    pub fn task_and_config(&self) -> (Option<&str>, Option<&str>) {
        match &self.task_id {
            Some(task) => (Some(task), self.id.as_deref()),
            None => (self.id.as_deref(), self.config_id.as_deref()),
        }
    }
}

/// A `Message` sent by a peer.
#[derive(Debug, Deserialize)]
pub struct IncomingMessage {
    /// `messageId`
    #[serde(rename = "messageId", alias = "message_id")]
    pub message_id: MessageId,
    /// `contextId`
    #[serde(default, rename = "contextId", alias = "context_id")]
    pub context_id: Option<ContextId>,
    /// `taskId`
    #[serde(default, rename = "taskId", alias = "task_id")]
    pub task_id: Option<TaskId>,
    /// `role`
    pub role: Role,
    /// `parts`
    pub parts: Vec<IncomingPart>,
    /// `metadata` (a JSON object), relayed to an agent behind the door as sent.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// `extensions`: the extension URIs the message uses, relayed to an agent as sent.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// `referenceTaskIds`: the tasks the message refers to (kept for its receipt's digest).
    #[serde(default, rename = "referenceTaskIds", alias = "reference_task_ids")]
    pub reference_task_ids: Vec<String>,
}

/// A `Part` sent by a peer: exactly one content member, and the optional ones.
#[derive(Debug, Deserialize)]
pub struct IncomingPart {
    /// Text content.
    #[serde(default)]
    pub text: Option<String>,
    /// A file's bytes, base64 as ProtoJSON writes them.
    #[serde(default)]
    pub raw: Option<String>,
    /// A file's URL.
    #[serde(default)]
    pub url: Option<String>,
    /// Structured data, passed on as compact JSON text.
    #[serde(default, deserialize_with = "present")]
    pub data: Option<Value>,
    /// 0.3's file part: its bytes or URI, and its name and media type.
    #[serde(default)]
    pub file: Option<LegacyFile>,
    /// A file's name.
    #[serde(default)]
    pub filename: Option<String>,
    /// The content's media type.
    #[serde(default, rename = "mediaType", alias = "media_type")]
    pub media_type: Option<String>,
    /// The part's `metadata` (a JSON object).
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// A 0.3 `FilePart`'s `file`: bytes or a URI.
#[derive(Debug, Deserialize)]
pub struct LegacyFile {
    /// Base64 bytes.
    #[serde(default)]
    pub bytes: Option<String>,
    /// A URL.
    #[serde(default)]
    pub uri: Option<String>,
    /// The media type.
    #[serde(default, rename = "mimeType", alias = "mime_type")]
    pub mime_type: Option<String>,
    /// The file's name.
    #[serde(default)]
    pub name: Option<String>,
}

/// Keeps a present `null` distinguishable from an absent member.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl IncomingPart {
    /// How many content members the part carries; ProtoJSON's oneof allows exactly one.
    pub fn content_members(&self) -> usize {
        [
            self.text.is_some(),
            self.raw.is_some(),
            self.url.is_some(),
            self.data.is_some(),
            self.file.is_some(),
        ]
        .iter()
        .filter(|present| **present)
        .count()
    }

    /// The content member's name: `text`, `raw`, `url`, `data`, or `file` (0.3).
    pub fn kind(&self) -> &'static str {
        match self {
            Self { text: Some(_), .. } => "text",
            Self { data: Some(_), .. } => "data",
            Self { raw: Some(_), .. } => "raw",
            Self { url: Some(_), .. } => "url",
            _ => "file",
        }
    }

    /// Whether a model reads it: text and data are read, files are not.
    pub fn readable(&self) -> bool {
        self.text.is_some() || self.data.is_some()
    }

    /// The part as sent, in 1.0's shape (a 0.3 file as `raw` or `url` with its name and media
    /// type); `None` for a 0.3 file with neither bytes nor a URI.
    pub fn as_sent(&self) -> Option<Part> {
        let (content, filename, media_type) = match self {
            Self {
                text: Some(text), ..
            } => (PartContent::Text(text.clone()), None, None),
            Self {
                data: Some(data), ..
            } => (PartContent::Data(data.clone()), None, None),
            Self { raw: Some(raw), .. } => (PartContent::Raw(raw.clone()), None, None),
            Self { url: Some(url), .. } => (PartContent::Url(url.clone()), None, None),
            Self {
                file: Some(file), ..
            } => {
                let content = match (&file.bytes, &file.uri) {
                    (Some(bytes), None) => PartContent::Raw(bytes.clone()),
                    (None, Some(uri)) => PartContent::Url(uri.clone()),
                    _ => return None,
                };
                (content, file.name.clone(), file.mime_type.clone())
            }
            _ => return None,
        };
        Some(Part {
            content,
            filename: self.filename.clone().or(filename),
            media_type: self.media_type.clone().or(media_type),
            metadata: self.metadata.clone(),
        })
    }
}

/// `GetTaskRequest`.
#[derive(Debug, Deserialize)]
pub struct GetTaskRequest {
    /// Task id.
    pub id: TaskId,
    /// How many history messages to return.
    #[serde(default, rename = "historyLength", alias = "history_length")]
    pub history_length: Option<i64>,
}

/// `CancelTaskRequest`.
#[derive(Debug, Deserialize)]
pub struct CancelTaskRequest {
    /// Task id.
    pub id: TaskId,
}

/// `SubscribeToTaskRequest`.
#[derive(Debug, Deserialize)]
pub struct SubscribeToTaskRequest {
    /// Task id.
    pub id: TaskId,
}

/// `ListTasksRequest`: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// Only this conversation's tasks.
    #[serde(default, alias = "context_id")]
    pub context_id: Option<ContextId>,
    /// A state's name or, as ProtoJSON allows for enums, its number; read by the service,
    /// which names what is wrong with it.
    #[serde(default)]
    pub status: Option<Value>,
    /// Tasks a page.
    #[serde(default, alias = "page_size")]
    pub page_size: Option<i64>,
    /// Where the page starts.
    #[serde(default, alias = "page_token")]
    pub page_token: Option<String>,
    /// History messages per task.
    #[serde(default, alias = "history_length")]
    pub history_length: Option<i64>,
    /// Only tasks whose status changed after this RFC 3339 time.
    #[serde(default, alias = "status_timestamp_after")]
    pub status_timestamp_after: Option<String>,
    /// Whether tasks carry their artifacts.
    #[serde(default, alias = "include_artifacts")]
    pub include_artifacts: Option<bool>,
}

/// A task as it was stored: typed to read, decoded once, and answered with the ProtoJSON it
/// was stored as, so an answer costs no second encoding.
#[derive(Debug, Clone)]
pub struct StoredTask {
    /// The task.
    pub task: Task,
    json: Box<serde_json::value::RawValue>,
}

impl StoredTask {
    /// A stored task's text, decoded.
    pub fn read(json: &str) -> Result<Self, serde_json::Error> {
        Ok(Self {
            task: serde_json::from_str(json)?,
            json: serde_json::value::RawValue::from_string(json.to_owned())?,
        })
    }

    /// `task` with `json`, the text it was stored as.
    pub fn new(task: Task, json: String) -> Result<Self, serde_json::Error> {
        Ok(Self {
            task,
            json: serde_json::value::RawValue::from_string(json)?,
        })
    }

    /// The ProtoJSON it is answered with.
    pub fn json(&self) -> &serde_json::value::RawValue {
        &self.json
    }

    /// The task with at most `n` history messages (`historyLength`), encoded again only when
    /// that drops some.
    pub fn with_history(mut self, n: Option<usize>) -> Result<Self, serde_json::Error> {
        match n {
            Some(n) if n < self.task.history.len() => {
                self.task.limit_history(n);
                let json = serde_json::to_string(&self.task)?;
                Self::new(self.task, json)
            }
            _ => Ok(self),
        }
    }
}

impl Serialize for StoredTask {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// `SendMessageResponse`: the task, or the agent's direct message.
// One is built per answer and moved, not kept: boxing the task would add an allocation to
// every answer to save a few hundred bytes on the stack (serde_json's insertion-ordered maps,
// which Cedar turns on, made `Task` larger).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    /// `{"task": …}`
    Task(StoredTask),
    /// `{"message": …}`
    Message(Message),
}

/// `ListTasksResponse`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page.
    pub tasks: Vec<Task>,
    /// Where the next page starts; always present, `""` on the last page.
    pub next_page_token: String,
    /// The page's size as asked (or the default).
    pub page_size: u32,
    /// The caller's matching tasks in all.
    pub total_size: u64,
}

/// `TaskPushNotificationConfig` as answered: its token and scheme, never its credentials.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    /// The task.
    pub task_id: TaskId,
    /// The config.
    pub id: String,
    /// Where notifications go.
    pub url: String,
    /// Sent back with every notification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The scheme of the `Authorization` header sent; its credentials are never read back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationScheme>,
}

/// `AuthenticationInfo` as answered: the scheme only.
#[derive(Debug, Clone, Serialize)]
pub struct AuthenticationScheme {
    /// Such as `Bearer`.
    pub scheme: String,
}

/// `ListTaskPushNotificationConfigsResponse`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsResponse {
    /// The page.
    pub configs: Vec<TaskPushNotificationConfig>,
    /// Where the next page starts; `""` on the last page.
    pub next_page_token: String,
}

/// `StreamResponse`: one event of a stream.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as it stands (a stream's first event).
    Task(Task),
    /// The agent's direct message.
    Message(Message),
    /// `TaskStatusUpdateEvent`
    StatusUpdate(TaskStatusUpdateEvent),
    /// `TaskArtifactUpdateEvent`
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// `TaskStatusUpdateEvent`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: TaskId,
    /// Its conversation.
    pub context_id: ContextId,
    /// The new status.
    pub status: TaskStatus,
    /// The event's metadata (the final one's: the task's receipt, when it has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// `TaskArtifactUpdateEvent`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: TaskId,
    /// Its conversation.
    pub context_id: ContextId,
    /// The artifact, whole.
    pub artifact: Artifact,
    /// Whether this is the artifact's last chunk (always: artifacts are sent whole).
    pub last_chunk: bool,
}

/// What a part carries: exactly one kind of content, as `Part`'s oneof in `a2a.proto` holds.
#[derive(Debug, Clone, PartialEq)]
pub enum PartContent {
    /// Text.
    Text(String),
    /// Bytes, base64 as ProtoJSON writes them.
    Raw(String),
    /// A file's URL.
    Url(String),
    /// Structured data.
    Data(Value),
}

impl PartContent {
    /// The member's name on the wire.
    pub fn member(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Raw(_) => "raw",
            Self::Url(_) => "url",
            Self::Data(_) => "data",
        }
    }

    /// The content as the model reads it: text as it is, data as compact JSON; files are
    /// nothing a model reads.
    pub fn readable_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Self::Text(text) => Some(std::borrow::Cow::Borrowed(text)),
            Self::Data(data) => Some(std::borrow::Cow::Owned(data.to_string())),
            Self::Raw(_) | Self::Url(_) => None,
        }
    }
}

/// An outgoing `Part`: text from peergate's own backends; any kind an upstream agent sent.
/// On the wire its content is one member (`text`, `raw`, `url` or `data`) beside the optional
/// ones, in that order; reading a part with no content or two kinds fails.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "WirePart")]
pub struct Part {
    /// The content.
    pub content: PartContent,
    /// A file's name.
    pub filename: Option<String>,
    /// The content's media type.
    pub media_type: Option<String>,
    /// Extension metadata.
    pub metadata: Option<Value>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(PartContent::Text(text.into()))
    }

    /// A part carrying `content` and nothing else.
    pub fn of(content: PartContent) -> Self {
        Self {
            content,
            filename: None,
            media_type: None,
            metadata: None,
        }
    }

    /// The part's text, if it is a text part.
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(text) => Some(text),
            _ => None,
        }
    }
}

impl Serialize for Part {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let optional = [
            self.filename.is_some(),
            self.media_type.is_some(),
            self.metadata.is_some(),
        ];
        let len = 1 + optional.iter().filter(|present| **present).count();
        let mut map = serializer.serialize_map(Some(len))?;
        match &self.content {
            PartContent::Text(text) | PartContent::Raw(text) | PartContent::Url(text) => {
                map.serialize_entry(self.content.member(), text)?;
            }
            PartContent::Data(data) => map.serialize_entry("data", data)?,
        }
        if let Some(filename) = &self.filename {
            map.serialize_entry("filename", filename)?;
        }
        if let Some(media_type) = &self.media_type {
            map.serialize_entry("mediaType", media_type)?;
        }
        if let Some(metadata) = &self.metadata {
            map.serialize_entry("metadata", metadata)?;
        }
        map.end()
    }
}

/// A `Part` as its members arrive, before its one content member is checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    url: Option<String>,
    /// `null` is no content, as ProtoJSON reads a message field.
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
}

impl TryFrom<WirePart> for Part {
    type Error = &'static str;

    fn try_from(wire: WirePart) -> Result<Self, Self::Error> {
        let content = match (wire.text, wire.raw, wire.url, wire.data) {
            (Some(text), None, None, None) => PartContent::Text(text),
            (None, Some(raw), None, None) => PartContent::Raw(raw),
            (None, None, Some(url), None) => PartContent::Url(url),
            (None, None, None, Some(data)) => PartContent::Data(data),
            _ => return Err("a part must carry exactly one of text, raw, url or data"),
        };
        Ok(Self {
            content,
            filename: wire.filename,
            media_type: wire.media_type,
            metadata: wire.metadata,
        })
    }
}

/// The text of `parts`: text parts as they are, data parts as compact JSON, joined by
/// newlines; files are left out.
pub fn parts_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|part| part.content.readable_text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// An outgoing `Message`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Unique id.
    pub message_id: MessageId,
    /// Conversation.
    pub context_id: ContextId,
    /// Task.
    pub task_id: TaskId,
    /// Author.
    pub role: Role,
    /// Content.
    pub parts: Vec<Part>,
}

/// `TaskStatus`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskStatus {
    /// State.
    pub state: TaskState,
    /// The agent's message for this state.
    pub message: Message,
    /// RFC 3339, milliseconds, UTC.
    pub timestamp: String,
}

/// `Artifact`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique within the task.
    pub artifact_id: String,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Content.
    pub parts: Vec<Part>,
    /// Extension metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// `Task`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Server-generated id.
    pub id: TaskId,
    /// Conversation.
    pub context_id: ContextId,
    /// Current status.
    pub status: TaskStatus,
    /// The answer, when there is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The peer's message and the agent's reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// What peergate says about the task (parts of the peer's message a model did not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Task {
    /// Keeps the `n` most recent history messages (`historyLength` semantics: 0 drops all).
    pub fn limit_history(&mut self, n: usize) {
        let len = self.history.len();
        if n < len {
            self.history.drain(..len - n);
        }
    }
}

/// Whether a client-chosen `contextId` is acceptable: 1–128 of letters, digits and `._:-`.
pub fn is_valid_context_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_one_content_member_then_its_optional_ones_in_the_wire_order() {
        let file = Part {
            filename: Some("r.pdf".to_owned()),
            media_type: Some("application/pdf".to_owned()),
            metadata: Some(serde_json::json!({"k": 1})),
            ..Part::of(PartContent::Url("https://files.example/r.pdf".to_owned()))
        };
        let text = r#"{"url":"https://files.example/r.pdf","filename":"r.pdf","mediaType":"application/pdf","metadata":{"k":1}}"#;
        assert_eq!(serde_json::to_string(&file).unwrap(), text);
        assert_eq!(serde_json::from_str::<Part>(text).unwrap(), file);
        for (part, text) in [
            (Part::text("hi"), r#"{"text":"hi"}"#),
            (
                Part::of(PartContent::Raw("aGk=".to_owned())),
                r#"{"raw":"aGk="}"#,
            ),
            (
                Part::of(PartContent::Data(serde_json::json!({"n": [1]}))),
                r#"{"data":{"n":[1]}}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(&part).unwrap(), text);
            assert_eq!(serde_json::from_str::<Part>(text).unwrap(), part);
        }
        for bad in [
            r#"{"filename":"r.pdf"}"#,
            r#"{"text":"a","raw":"aGk="}"#,
            r#"{"data":null}"#,
        ] {
            assert!(serde_json::from_str::<Part>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_model_reads_text_and_data_parts_and_not_files() {
        let parts = [
            Part::text("one"),
            Part::of(PartContent::Url("https://files.example/r.pdf".to_owned())),
            Part::of(PartContent::Data(serde_json::json!({"n": 2}))),
            Part::of(PartContent::Raw("aGk=".to_owned())),
        ];
        assert_eq!(parts_text(&parts), "one\n{\"n\":2}");
    }

    #[test]
    fn task_states_read_by_the_specifications_numbers_and_names() {
        for (n, name) in [
            (1, "TASK_STATE_SUBMITTED"),
            (2, "TASK_STATE_WORKING"),
            (3, "TASK_STATE_COMPLETED"),
            (4, "TASK_STATE_FAILED"),
            (5, "TASK_STATE_CANCELED"),
            (6, "TASK_STATE_INPUT_REQUIRED"),
            (7, "TASK_STATE_REJECTED"),
            (8, "TASK_STATE_AUTH_REQUIRED"),
        ] {
            let state = TaskState::from_number(n).unwrap();
            assert_eq!(state.as_str(), name);
            assert_eq!(TaskState::from_name(name), Some(state));
        }
        for n in [0, 9, u64::MAX] {
            assert_eq!(TaskState::from_number(n), None, "{n}");
        }
        assert_eq!(TaskState::from_name("TASK_STATE_UNSPECIFIED"), None);
    }
}
