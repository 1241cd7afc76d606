//! The messages on the turn's path without reflection: a `SendMessageRequest` read straight
//! into the typed request, and the answers (SendMessage, GetTask, CancelTask, ListTasks)
//! written straight from the typed responses.
//!
//! A request is read as the ProtoJSON reader reads the same message: a field at its default
//! value is absent (ProtoJSON leaves it out), and a required one that is absent is refused in
//! the same words. A differential test holds both directions to the reflection path.
//!
//! The message types are the ones prost generates from the same descriptor set the reflection
//! path reads (`build.rs`), so the field numbers are the proto's, not written here. A task the
//! gateway answers with is always its typed [`Task`] encoded (the stored text is that task's
//! JSON), so nothing the reflection path would carry is missing. A value the proto cannot
//! hold (a part's `raw` that is not base64, metadata that is not an object, a status time that
//! is not RFC 3339) is an internal error, as it is on the reflection path.

use super::error::A2aError;
use super::types::{
    Artifact, IncomingMessage, IncomingPart, ListTasksResponse, Message, Part, PartContent,
    PushAuthentication, PushConfigParams, Role, SendMessageConfiguration, SendMessageRequest,
    SendMessageResponse, Task, TaskStatus,
};
use base64::Engine;
use prost::Message as _;
use serde_json::Value;

/// A2A's own package, generated.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.rs"));
}

/// A decoded `SendMessageRequest` as the typed request.
pub fn send_message_request(
    request: proto::SendMessageRequest,
) -> Result<SendMessageRequest, A2aError> {
    let message = request.message.ok_or_else(|| missing("message"))?;
    let configuration = request.configuration.map(configuration);
    let metadata = request.metadata.map(object).transpose()?;
    Ok(SendMessageRequest::new(
        incoming(message)?,
        configuration,
        metadata,
    ))
}

fn incoming(message: proto::Message) -> Result<IncomingMessage, A2aError> {
    if message.message_id.is_empty() {
        return Err(missing("messageId"));
    }
    let role = match message.role {
        0 => return Err(missing("role")),
        1 => Role::User,
        2 => Role::Agent,
        _ => return Err(invalid_params("unknown role")),
    };
    if message.parts.is_empty() {
        return Err(missing("parts"));
    }
    Ok(IncomingMessage {
        message_id: message.message_id.into(),
        context_id: non_empty(message.context_id).map(Into::into),
        task_id: non_empty(message.task_id).map(Into::into),
        role,
        parts: message
            .parts
            .into_iter()
            .map(incoming_part)
            .collect::<Result<_, _>>()?,
        metadata: message.metadata.map(object).transpose()?,
        extensions: message.extensions,
        reference_task_ids: message.reference_task_ids,
    })
}

/// A `google.protobuf.Struct` as the JSON object ProtoJSON writes for it.
fn object(structure: prost_types::Struct) -> Result<Value, A2aError> {
    json(prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(structure)),
    })
}

fn incoming_part(part: proto::Part) -> Result<IncomingPart, A2aError> {
    use proto::part::Content;
    let mut read = IncomingPart {
        text: None,
        raw: None,
        url: None,
        data: None,
        file: None,
        filename: non_empty(part.filename),
        media_type: non_empty(part.media_type),
        metadata: part.metadata.map(object).transpose()?,
    };
    match part.content {
        Some(Content::Text(text)) => read.text = Some(text),
        Some(Content::Raw(bytes)) => {
            read.raw = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        Some(Content::Url(url)) => read.url = Some(url),
        Some(Content::Data(data)) => read.data = Some(json(data)?),
        None => {}
    }
    Ok(read)
}

fn configuration(configuration: proto::SendMessageConfiguration) -> SendMessageConfiguration {
    SendMessageConfiguration {
        history_length: configuration.history_length.map(i64::from),
        return_immediately: configuration.return_immediately.then_some(true),
        push_config: configuration
            .task_push_notification_config
            .map(|config| PushConfigParams {
                task_id: non_empty(config.task_id),
                id: non_empty(config.id),
                url: non_empty(config.url),
                token: non_empty(config.token),
                authentication: config.authentication.map(|auth| PushAuthentication {
                    scheme: non_empty(auth.scheme),
                    schemes: None,
                    credentials: non_empty(auth.credentials),
                }),
                nested: None,
            }),
    }
}

/// `google.protobuf.Value` as JSON; a number JSON cannot hold is refused as ProtoJSON's writer
/// refuses it.
fn json(value: prost_types::Value) -> Result<Value, A2aError> {
    use prost_types::value::Kind;
    Ok(match value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| A2aError::InvalidParams {
                field: "request".to_owned(),
                description: "cannot be read as its ProtoJSON form".to_owned(),
            })?,
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .into_iter()
                .map(json)
                .collect::<Result<_, _>>()?,
        ),
        Some(Kind::StructValue(object)) => Value::Object(
            object
                .fields
                .into_iter()
                .map(|(name, member)| Ok((name, json(member)?)))
                .collect::<Result<_, A2aError>>()?,
        ),
    })
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// A required member absent, in the words the JSON reader uses.
fn missing(name: &str) -> A2aError {
    invalid_params(&format!("missing field `{name}`"))
}

fn invalid_params(description: &str) -> A2aError {
    A2aError::InvalidParams {
        field: "params".to_owned(),
        description: description.to_owned(),
    }
}

/// `SendMessageResponse`, encoded.
pub fn send_message_response(answer: &SendMessageResponse) -> Result<Vec<u8>, A2aError> {
    use proto::send_message_response::Payload;
    let payload = match answer {
        SendMessageResponse::Task(stored) => Payload::Task(task(&stored.task)?),
        SendMessageResponse::Message(message) => Payload::Message(self::message(message)?),
    };
    let answer = proto::SendMessageResponse {
        payload: Some(payload),
    };
    Ok(answer.encode_to_vec())
}

/// `Task`, encoded.
pub fn encoded_task(answer: &Task) -> Result<Vec<u8>, A2aError> {
    Ok(task(answer)?.encode_to_vec())
}

/// `ListTasksResponse`, encoded.
pub fn list_tasks_response(answer: &ListTasksResponse) -> Result<Vec<u8>, A2aError> {
    let answer = proto::ListTasksResponse {
        tasks: answer.tasks.iter().map(task).collect::<Result<_, _>>()?,
        next_page_token: answer.next_page_token.clone(),
        page_size: i32::try_from(answer.page_size).unwrap_or(i32::MAX),
        total_size: i32::try_from(answer.total_size).unwrap_or(i32::MAX),
    };
    Ok(answer.encode_to_vec())
}

fn task(task: &Task) -> Result<proto::Task, A2aError> {
    Ok(proto::Task {
        id: task.id.to_string(),
        context_id: task.context_id.to_string(),
        status: Some(status(&task.status)?),
        artifacts: task
            .artifacts
            .iter()
            .map(artifact)
            .collect::<Result<_, _>>()?,
        history: task.history.iter().map(message).collect::<Result<_, _>>()?,
        metadata: task.metadata.as_ref().map(structure).transpose()?,
    })
}

fn status(status: &TaskStatus) -> Result<proto::TaskStatus, A2aError> {
    let at: jiff::Timestamp = status
        .timestamp
        .parse()
        .map_err(|e| cannot("a status time", &e))?;
    Ok(proto::TaskStatus {
        state: status.state.number(),
        message: Some(message(&status.message)?),
        timestamp: Some(prost_types::Timestamp {
            seconds: at.as_second(),
            nanos: at.subsec_nanosecond(),
        }),
    })
}

fn message(message: &Message) -> Result<proto::Message, A2aError> {
    Ok(proto::Message {
        message_id: message.message_id.to_string(),
        context_id: message.context_id.to_string(),
        task_id: message.task_id.to_string(),
        role: message.role.number(),
        parts: message.parts.iter().map(part).collect::<Result<_, _>>()?,
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    })
}

fn artifact(artifact: &Artifact) -> Result<proto::Artifact, A2aError> {
    Ok(proto::Artifact {
        artifact_id: artifact.artifact_id.clone(),
        name: artifact.name.clone().unwrap_or_default(),
        description: artifact.description.clone().unwrap_or_default(),
        parts: artifact.parts.iter().map(part).collect::<Result<_, _>>()?,
        metadata: artifact.metadata.as_ref().map(structure).transpose()?,
        extensions: Vec::new(),
    })
}

fn part(part: &Part) -> Result<proto::Part, A2aError> {
    use proto::part::Content;
    let content = match &part.content {
        PartContent::Text(text) => Content::Text(text.clone()),
        PartContent::Raw(raw) => Content::Raw(
            base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|e| cannot("a part's raw bytes", &e))?,
        ),
        PartContent::Url(url) => Content::Url(url.clone()),
        PartContent::Data(data) => Content::Data(value(data)),
    };
    Ok(proto::Part {
        content: Some(content),
        metadata: part.metadata.as_ref().map(structure).transpose()?,
        filename: part.filename.clone().unwrap_or_default(),
        media_type: part.media_type.clone().unwrap_or_default(),
    })
}

/// A JSON object as `google.protobuf.Struct`.
fn structure(object: &Value) -> Result<prost_types::Struct, A2aError> {
    match object {
        Value::Object(members) => Ok(fields(members)),
        _ => Err(cannot("metadata", &"not an object")),
    }
}

/// Any JSON value as `google.protobuf.Value`.
fn value(json: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match json {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(value).collect(),
        }),
        Value::Object(members) => Kind::StructValue(fields(members)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn fields(members: &serde_json::Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: members
            .iter()
            .map(|(name, member)| (name.clone(), value(member)))
            .collect(),
    }
}

fn cannot(what: &str, error: &dyn std::fmt::Display) -> A2aError {
    A2aError::internal(
        &format!("{what} does not fit its protobuf field: {error}"),
        "a gRPC answer could not be encoded",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::grpc::{descriptor, write};
    use crate::protocol::types::{StoredTask, TaskState};
    use prost_reflect::DynamicMessage;
    use serde_json::json;

    /// A task with every kind of part, metadata at each level the typed objects hold, both
    /// roles in its history and a status time with milliseconds.
    fn every_kind() -> Task {
        let message = |id: &str, role: Role, parts: Vec<Part>| Message {
            message_id: id.into(),
            context_id: "c-1".into(),
            task_id: "t-1".into(),
            role,
            parts,
        };
        let data = Part {
            metadata: Some(json!({"source": "agent", "count": 3})),
            ..Part::of(PartContent::Data(
                json!({"n": 1.5, "list": [null, true, "x", {"deep": []}], "empty": {}}),
            ))
        };
        let file = Part {
            filename: Some("report.pdf".to_owned()),
            media_type: Some("application/pdf".to_owned()),
            ..Part::of(PartContent::Url(
                "https://files.example/report.pdf".to_owned(),
            ))
        };
        let raw = Part {
            media_type: Some("text/plain".to_owned()),
            ..Part::of(PartContent::Raw("aGVsbG8=".to_owned()))
        };
        let reply = message(
            "m-2",
            Role::Agent,
            vec![Part::text("the answer"), data.clone()],
        );
        Task {
            id: "t-1".into(),
            context_id: "c-1".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: reply.clone(),
                timestamp: "2026-12-02T06:40:01.123Z".to_owned(),
            },
            artifacts: vec![Artifact {
                artifact_id: "a-1".to_owned(),
                name: Some("answer".to_owned()),
                description: None,
                parts: vec![Part::text("the answer"), file, raw],
                metadata: Some(json!({"k": "v"})),
            }],
            history: vec![message("m-1", Role::User, vec![Part::text("hi")]), reply],
            metadata: Some(json!({"peergate": {"unreadParts": [{"index": 1, "content": "url"}]}})),
        }
    }

    /// The message `bytes` decode to, as message `name`.
    fn decoded(name: &str, bytes: &[u8]) -> DynamicMessage {
        DynamicMessage::decode(descriptor(name).unwrap(), bytes).unwrap()
    }

    /// What the reflection path writes for the typed answer's ProtoJSON.
    fn reflected(name: &str, answer: &impl serde::Serialize) -> DynamicMessage {
        write(
            &descriptor(name).unwrap(),
            &serde_json::to_string(answer).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_task_is_the_message_the_reflection_path_writes() {
        let task = every_kind();
        let direct = decoded("lf.a2a.v1.Task", &encoded_task(&task).unwrap());
        assert_eq!(direct, reflected("lf.a2a.v1.Task", &task));
        for state in TaskState::BY_NUMBER {
            let mut task = every_kind();
            task.status.state = state;
            let direct = decoded("lf.a2a.v1.Task", &encoded_task(&task).unwrap());
            assert_eq!(direct, reflected("lf.a2a.v1.Task", &task), "{state:?}");
        }
    }

    #[test]
    fn send_and_list_answers_are_the_messages_the_reflection_path_writes() {
        let task = every_kind();
        let json = serde_json::to_string(&task).unwrap();
        let stored = SendMessageResponse::Task(StoredTask::new(task.clone(), json).unwrap());
        let name = "lf.a2a.v1.SendMessageResponse";
        let direct = decoded(name, &send_message_response(&stored).unwrap());
        assert_eq!(direct, reflected(name, &stored));
        let direct_message = SendMessageResponse::Message(task.status.message.clone());
        let direct = decoded(name, &send_message_response(&direct_message).unwrap());
        assert_eq!(direct, reflected(name, &direct_message));

        let listed = ListTasksResponse {
            tasks: vec![task.clone(), task],
            next_page_token: "next".to_owned(),
            page_size: 2,
            total_size: 7,
        };
        let name = "lf.a2a.v1.ListTasksResponse";
        let direct = decoded(name, &list_tasks_response(&listed).unwrap());
        assert_eq!(direct, reflected(name, &listed));
    }

    #[test]
    fn what_the_proto_cannot_hold_is_refused_not_dropped() {
        let mut task = every_kind();
        task.artifacts[0].parts[2].content = PartContent::Raw("not base64!".to_owned());
        assert!(encoded_task(&task).is_err());
        let mut task = every_kind();
        task.artifacts[0].metadata = Some(json!(["not", "an", "object"]));
        assert!(encoded_task(&task).is_err());
        let mut task = every_kind();
        task.status.timestamp = "yesterday".to_owned();
        assert!(encoded_task(&task).is_err());
    }

    /// The typed request each path reads from `request`'s bytes, as text to compare: straight
    /// from the generated message, and from the ProtoJSON of the message reflection decodes.
    fn both_reads(request: &proto::SendMessageRequest) -> (String, String) {
        let bytes = request.encode_to_vec();
        let direct = send_message_request(proto::SendMessageRequest::decode(&bytes[..]).unwrap());
        let name = "lf.a2a.v1.SendMessageRequest";
        let reflected = crate::protocol::grpc::read(&decoded(name, &bytes)).and_then(|json| {
            crate::protocol::jsonrpc::parse_params::<SendMessageRequest>(Some(&json))
        });
        (format!("{direct:?}"), format!("{reflected:?}"))
    }

    fn text_part(text: &str) -> proto::Part {
        proto::Part {
            content: Some(proto::part::Content::Text(text.to_owned())),
            ..proto::Part::default()
        }
    }

    #[test]
    fn a_send_message_request_reads_as_its_proto_json_does() {
        use proto::part::Content;
        let number = |n: f64| prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(n)),
        };
        let data = prost_types::Value {
            kind: Some(prost_types::value::Kind::StructValue(prost_types::Struct {
                fields: [
                    ("whole".to_owned(), number(1.0)),
                    ("half".to_owned(), number(2.5)),
                    ("none".to_owned(), prost_types::Value { kind: None }),
                    (
                        "list".to_owned(),
                        value(&json!([null, true, "x", {"deep": []}])),
                    ),
                ]
                .into_iter()
                .collect(),
            })),
        };
        let full = proto::Message {
            message_id: "m-1".to_owned(),
            context_id: "c-1".to_owned(),
            task_id: "t-1".to_owned(),
            role: 1,
            parts: vec![
                text_part("hello"),
                text_part(""),
                proto::Part {
                    content: Some(Content::Raw(b"bytes".to_vec())),
                    media_type: "text/plain".to_owned(),
                    ..proto::Part::default()
                },
                proto::Part {
                    content: Some(Content::Url("https://files.example/a".to_owned())),
                    filename: "a".to_owned(),
                    ..proto::Part::default()
                },
                proto::Part {
                    content: Some(Content::Data(data)),
                    metadata: Some(structure(&json!({"k": "v"})).unwrap()),
                    ..proto::Part::default()
                },
                proto::Part::default(),
            ],
            metadata: Some(structure(&json!({"trace": 1})).unwrap()),
            extensions: vec!["https://ext.example/1".to_owned()],
            reference_task_ids: vec!["t-0".to_owned()],
        };
        let minimal = proto::Message {
            message_id: "m-2".to_owned(),
            role: 1,
            parts: vec![text_part("hi")],
            ..proto::Message::default()
        };
        let push = proto::TaskPushNotificationConfig {
            url: "https://hooks.example/a2a".to_owned(),
            token: "tok".to_owned(),
            authentication: Some(proto::AuthenticationInfo {
                scheme: "Bearer".to_owned(),
                credentials: "secret".to_owned(),
            }),
            ..proto::TaskPushNotificationConfig::default()
        };
        let configurations = [
            None,
            Some(proto::SendMessageConfiguration::default()),
            Some(proto::SendMessageConfiguration {
                accepted_output_modes: vec!["text/plain".to_owned()],
                task_push_notification_config: Some(push),
                history_length: Some(3),
                return_immediately: true,
            }),
            Some(proto::SendMessageConfiguration {
                task_push_notification_config: Some(proto::TaskPushNotificationConfig::default()),
                history_length: Some(0),
                ..proto::SendMessageConfiguration::default()
            }),
        ];
        let broken = |edit: fn(&mut proto::Message)| {
            let mut message = minimal.clone();
            edit(&mut message);
            Some(message)
        };
        let messages = [
            Some(full),
            Some(minimal.clone()),
            None,
            broken(|m| m.message_id.clear()),
            broken(|m| m.role = 0),
            broken(|m| m.role = 2),
            broken(|m| m.role = 7),
            broken(|m| m.parts.clear()),
        ];
        for message in &messages {
            for configuration in &configurations {
                let request = proto::SendMessageRequest {
                    tenant: "acme".to_owned(),
                    message: message.clone(),
                    configuration: configuration.clone(),
                    metadata: Some(structure(&json!({"x": 1})).unwrap()),
                };
                let (direct, reflected) = both_reads(&request);
                assert_eq!(direct, reflected, "{request:?}");
            }
        }
    }
}
