//! Each binding against a scripted service (no store, no backend): every operation's answer and
//! a refusal of each kind, decoded and encoded by the binding alone; and every stage of the
//! call pipeline reached on every binding, for a plain answer and a stream, refused or not.

use crate::a2a::events::{EventStream, LastEvent, StreamEvent, StreamRefused};
use crate::a2a::jsonrpc_binding::{self, Answer};
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::pipeline::Pipeline;
use crate::a2a::service::{A2aService, Caller, SignedCard};
use crate::a2a::stages::{CallStages, CallView, Outcome};
use crate::guard::refusal::RefusalReason;
use crate::http::grpc::GrpcState;
use crate::http::rest::RestState;
use crate::http::sse::StreamBounds;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::gate::ProtocolAsked;
use crate::protocol::call::{CallOutcome, CallRecord};
use crate::protocol::error::A2aError;
use crate::protocol::grpc as messages;
use crate::protocol::jsonrpc::Method;
use crate::protocol::types::{
    CancelTaskRequest, GetTaskRequest, ListTaskPushNotificationConfigsResponse, ListTasksRequest,
    ListTasksResponse, PushConfigParams, PushConfigRef, SendMessageRequest, SendMessageResponse,
    StoredTask, SubscribeToTaskRequest, TaskPushNotificationConfig,
};
use crate::shared::streams::StreamPermit;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::ServiceExt;

fn task_json(state: &str) -> String {
    json!({"id": "t-1", "contextId": "c-1", "status": {"state": state, "message":
        {"messageId": "m-2", "contextId": "c-1", "taskId": "t-1", "role": "ROLE_AGENT",
         "parts": [{"text": "done"}]},
        "timestamp": "2026-12-05T00:00:00.000Z"}})
    .to_string()
}

fn task(state: &str) -> StoredTask {
    StoredTask::read(&task_json(state)).unwrap()
}

fn raw(value: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

/// A stream of `events`, the last one final.
fn stream(events: Vec<Value>) -> EventStream {
    let (sender, receiver) = tokio::sync::mpsc::channel(8);
    let last = events.len() - 1;
    for (i, event) in events.into_iter().enumerate() {
        let event = if i == last {
            StreamEvent::Last(Box::new(LastEvent::Final(raw(event))))
        } else {
            StreamEvent::Response(raw(event))
        };
        sender.try_send(event).unwrap();
    }
    EventStream::from_receiver(receiver, StreamPermit::new(()))
}

fn config() -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        task_id: "t-1".into(),
        id: "p-1".to_owned(),
        url: "https://hooks.example/a2a".to_owned(),
        token: None,
        authentication: None,
    }
}

/// Answers each operation with a fixed value; the task `missing` is not found, a subscription
/// to `busy` is past the stream cap, a message `panic` panics.
struct Scripted;

#[async_trait::async_trait]
impl A2aService for Scripted {
    fn offered(&self, _method: Method) -> Result<(), A2aError> {
        Ok(())
    }

    async fn send_message(
        &self,
        _caller: &Caller,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2aError> {
        assert!(request.message.message_id != "panic", "a scripted panic");
        Ok(SendMessageResponse::Task(task("TASK_STATE_COMPLETED")))
    }

    async fn send_streaming_message(
        &self,
        _caller: &Caller,
        _request: SendMessageRequest,
    ) -> Result<EventStream, StreamRefused> {
        let working: Value = serde_json::from_str(&task_json("TASK_STATE_WORKING")).unwrap();
        let done = json!({"statusUpdate": {"taskId": "t-1", "contextId": "c-1",
            "status": working["status"].clone()}});
        Ok(stream(vec![json!({ "task": working }), done]))
    }

    async fn get_task(
        &self,
        _caller: &Caller,
        request: GetTaskRequest,
    ) -> Result<StoredTask, A2aError> {
        match request.id.as_str() {
            "missing" => Err(A2aError::TaskNotFound),
            _ => Ok(task("TASK_STATE_COMPLETED")),
        }
    }

    async fn list_tasks(
        &self,
        _caller: &Caller,
        _request: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2aError> {
        Ok(ListTasksResponse {
            tasks: vec![task("TASK_STATE_COMPLETED").task],
            next_page_token: String::new(),
            page_size: 50,
            total_size: 1,
        })
    }

    async fn cancel_task(
        &self,
        _caller: &Caller,
        _request: CancelTaskRequest,
    ) -> Result<StoredTask, A2aError> {
        Ok(task("TASK_STATE_CANCELED"))
    }

    async fn subscribe_to_task(
        &self,
        _caller: &Caller,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, StreamRefused> {
        if request.id.as_str() == "busy" {
            return Err(StreamRefused::AtCap(2));
        }
        let working: Value = serde_json::from_str(&task_json("TASK_STATE_WORKING")).unwrap();
        Ok(stream(vec![json!({ "task": working })]))
    }

    async fn create_push_config(
        &self,
        _caller: &Caller,
        _request: PushConfigParams,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        Ok(config())
    }

    async fn get_push_config(
        &self,
        _caller: &Caller,
        _request: PushConfigRef,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        Ok(config())
    }

    async fn list_push_configs(
        &self,
        _caller: &Caller,
        _request: PushConfigRef,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
        Ok(ListTaskPushNotificationConfigsResponse {
            configs: vec![config()],
            next_page_token: String::new(),
        })
    }

    async fn delete_push_config(
        &self,
        _caller: &Caller,
        _request: PushConfigRef,
    ) -> Result<(), A2aError> {
        Ok(())
    }

    async fn get_extended_agent_card(&self, _caller: &Caller) -> Result<SignedCard, A2aError> {
        Ok(SignedCard(raw(json!({"name": "scripted"}))))
    }
}

fn peer() -> AuthenticatedPeer {
    AuthenticatedPeer::for_tests("peer_1", "adm_1")
}

fn caller() -> Caller {
    Caller {
        peer: peer(),
        client: None,
        admission: None,
        note: None,
        protocol: Default::default(),
        trace: None,
        call: None,
    }
}

/// One operation as each binding asks it: JSON-RPC's method and params, HTTP+JSON's verb,
/// path and body, gRPC's method name and request (ProtoJSON).
struct Operation {
    method: &'static str,
    params: Value,
    rest: (&'static str, &'static str, Option<Value>),
    grpc: &'static str,
}

fn message(id: &str) -> Value {
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
}

/// Every operation, once each.
fn operations() -> Vec<Operation> {
    let op = |method, params, rest, grpc| Operation {
        method,
        params,
        rest,
        grpc,
    };
    let p = json!({"taskId": "t-1", "id": "p-1"});
    vec![
        op(
            "SendMessage",
            message("m-1"),
            ("POST", "/message:send", Some(message("m-1"))),
            "SendMessage",
        ),
        op(
            "SendStreamingMessage",
            message("m-1"),
            ("POST", "/message:stream", Some(message("m-1"))),
            "SendStreamingMessage",
        ),
        op(
            "GetTask",
            json!({"id": "t-1"}),
            ("GET", "/tasks/t-1", None),
            "GetTask",
        ),
        op("ListTasks", json!({}), ("GET", "/tasks", None), "ListTasks"),
        op(
            "CancelTask",
            json!({"id": "t-1"}),
            ("POST", "/tasks/t-1:cancel", None),
            "CancelTask",
        ),
        op(
            "SubscribeToTask",
            json!({"id": "t-1"}),
            ("POST", "/tasks/t-1:subscribe", None),
            "SubscribeToTask",
        ),
        op(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "t-1", "url": "https://hooks.example/a2a"}),
            (
                "POST",
                "/tasks/t-1/pushNotificationConfigs",
                Some(json!({"url": "https://hooks.example/a2a"})),
            ),
            "CreateTaskPushNotificationConfig",
        ),
        op(
            "GetTaskPushNotificationConfig",
            p.clone(),
            ("GET", "/tasks/t-1/pushNotificationConfigs/p-1", None),
            "GetTaskPushNotificationConfig",
        ),
        op(
            "ListTaskPushNotificationConfigs",
            json!({"taskId": "t-1"}),
            ("GET", "/tasks/t-1/pushNotificationConfigs", None),
            "ListTaskPushNotificationConfigs",
        ),
        op(
            "DeleteTaskPushNotificationConfig",
            p,
            ("DELETE", "/tasks/t-1/pushNotificationConfigs/p-1", None),
            "DeleteTaskPushNotificationConfig",
        ),
        op(
            "GetExtendedAgentCard",
            json!({}),
            ("GET", "/extendedAgentCard", None),
            "GetExtendedAgentCard",
        ),
    ]
}

/// What a binding answered: a status (HTTP for JSON-RPC and HTTP+JSON, gRPC's for gRPC) and
/// the answers it carried (one, or a stream's events), as JSON.
#[derive(Debug)]
struct Wire {
    status: u16,
    answers: Vec<Value>,
    /// The reason `/metrics` counts the answer under, as the response carries it.
    reason: Option<RefusalReason>,
    /// The pipeline's record of the call, as the response carries it.
    record: Option<CallRecord>,
}

async fn jsonrpc(pipeline: &Pipeline, method: &str, params: &Value) -> Wire {
    jsonrpc_as(pipeline, ProtocolAsked::default(), method, params).await
}

/// JSON-RPC, from a caller whose request named `protocol`.
async fn jsonrpc_as(
    pipeline: &Pipeline,
    protocol: ProtocolAsked,
    method: &str,
    params: &Value,
) -> Wire {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let body = jsonrpc_binding::Body {
        bytes: body.as_bytes(),
        json: true,
    };
    let caller = Caller {
        protocol,
        ..caller()
    };
    let (record, answer) = jsonrpc_binding::handle(pipeline, caller, body).await;
    let mut wire = match answer {
        Answer::Body(body) => Wire {
            status: 200,
            answers: vec![serde_json::from_str(&body).unwrap()],
            reason: None,
            record: None,
        },
        Answer::Failure { body, reason, .. } => Wire {
            status: 200,
            answers: vec![serde_json::from_str(&body).unwrap()],
            reason,
            record: None,
        },
        Answer::Events { id, mut events } => {
            let mut answers = Vec::new();
            while let Some(event) = events.next().await {
                answers.push(serde_json::from_str(&jsonrpc_binding::event(&id, event)).unwrap());
            }
            Wire {
                status: 200,
                answers,
                reason: None,
                record: None,
            }
        }
        Answer::Refused(refusal) => Wire {
            status: refusal.status().as_u16(),
            answers: vec![serde_json::from_str(&refusal.body()).unwrap()],
            reason: refusal.reason(),
            record: None,
        },
    };
    wire.record = record;
    wire
}

async fn rest(pipeline: &Pipeline, call: &(&str, &str, Option<Value>)) -> Wire {
    rest_as(pipeline, ProtocolAsked::default(), call).await
}

/// HTTP+JSON, the request naming `protocol` as the gate read it.
async fn rest_as(
    pipeline: &Pipeline,
    protocol: ProtocolAsked,
    (verb, path, body): &(&str, &str, Option<Value>),
) -> Wire {
    let state = RestState {
        pipeline: pipeline.clone(),
        bounds: StreamBounds {
            longest: Duration::from_secs(10),
            grace: Duration::from_secs(1),
        },
    };
    let router = crate::http::rest::routes::<RestState>("/rest").with_state(state);
    let mut request = Request::builder()
        .method(*verb)
        .uri(format!("/rest{path}"))
        .header("content-type", "application/json")
        .body(
            body.as_ref()
                .map_or_else(Body::empty, |b| Body::from(b.to_string())),
        )
        .unwrap();
    request.extensions_mut().insert(peer());
    request.extensions_mut().insert(protocol);
    let response = router.oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let reason = response.extensions().get::<RefusalReason>().copied();
    let record = response.extensions().get::<CallRecord>().cloned();
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let answers = match text.strip_prefix("data: ") {
        Some(_) => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect(),
        None => vec![serde_json::from_str(&text).unwrap()],
    };
    Wire {
        status,
        answers,
        reason,
        record,
    }
}

/// The gRPC request message's and answer message's full names for `method`.
fn grpc_types(method: &str) -> (&'static str, &'static str) {
    match method {
        "SendMessage" => ("SendMessageRequest", "SendMessageResponse"),
        "SendStreamingMessage" => ("SendMessageRequest", "StreamResponse"),
        "GetTask" => ("GetTaskRequest", "Task"),
        "ListTasks" => ("ListTasksRequest", "ListTasksResponse"),
        "CancelTask" => ("CancelTaskRequest", "Task"),
        "SubscribeToTask" => ("SubscribeToTaskRequest", "StreamResponse"),
        "CreateTaskPushNotificationConfig" => {
            ("TaskPushNotificationConfig", "TaskPushNotificationConfig")
        }
        "GetTaskPushNotificationConfig" => (
            "GetTaskPushNotificationConfigRequest",
            "TaskPushNotificationConfig",
        ),
        "ListTaskPushNotificationConfigs" => (
            "ListTaskPushNotificationConfigsRequest",
            "ListTaskPushNotificationConfigsResponse",
        ),
        "DeleteTaskPushNotificationConfig" => ("DeleteTaskPushNotificationConfigRequest", ""),
        _ => ("GetExtendedAgentCardRequest", "AgentCard"),
    }
}

async fn grpc(pipeline: &Pipeline, method: &str, params: &Value) -> Wire {
    grpc_as(pipeline, ProtocolAsked::default(), method, params).await
}

/// gRPC, the call naming `protocol` as the gate read it.
async fn grpc_as(
    pipeline: &Pipeline,
    protocol: ProtocolAsked,
    method: &str,
    params: &Value,
) -> Wire {
    let (request_type, response_type) = grpc_types(method);
    let descriptor = messages::descriptor(&format!("lf.a2a.v1.{request_type}")).unwrap();
    let message = messages::write(&descriptor, &params.to_string()).unwrap();
    let bytes = prost::Message::encode_to_vec(&message);
    let mut framed = vec![0];
    framed.extend_from_slice(&u32::try_from(bytes.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&bytes);
    let state = GrpcState {
        pipeline: pipeline.clone(),
        longest_stream: Duration::from_secs(10),
        max_message_bytes: 1 << 20,
    };
    let router = crate::http::grpc::a2a_routes().with_state(state);
    let mut request = Request::post(format!("/lf.a2a.v1.A2AService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::from(framed))
        .unwrap();
    request.extensions_mut().insert(peer());
    request.extensions_mut().insert(protocol);
    let response = router.oneshot(request).await.unwrap();
    let reason = response.extensions().get::<RefusalReason>().copied();
    let record = response.extensions().get::<CallRecord>().cloned();
    let headers = response.headers().clone();
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let status = trailers
        .get("grpc-status")
        .or(headers.get("grpc-status"))
        .map(|value| value.to_str().unwrap().parse().unwrap())
        .unwrap();
    let mut body = collected.to_bytes().to_vec();
    let mut answers = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        let frame: Vec<u8> = body.drain(..5 + len).skip(5).collect();
        answers.push(match response_type {
            "" => json!({}),
            name => {
                let descriptor = messages::descriptor(&format!("lf.a2a.v1.{name}")).unwrap();
                let decoded = prost_reflect::DynamicMessage::decode(descriptor, &frame[..]);
                serde_json::from_str(messages::read(&decoded.unwrap()).unwrap().get()).unwrap()
            }
        });
    }
    Wire {
        status,
        answers,
        reason,
        record,
    }
}

/// What each operation's answer holds whichever binding carried it.
fn check_answer(method: &str, answers: &[Value], binding: &str) {
    let first = &answers[0];
    let holds = |pointer: &str, expected: Value| {
        assert_eq!(
            first.pointer(pointer),
            Some(&expected),
            "{binding} {method}: {first}"
        );
    };
    match method {
        "SendMessage" => holds("/task/status/state", json!("TASK_STATE_COMPLETED")),
        "SendStreamingMessage" => {
            assert_eq!(answers.len(), 2, "{binding} {method}: {answers:?}");
            holds("/task/status/state", json!("TASK_STATE_WORKING"));
            let last = &answers[1];
            assert_eq!(last["statusUpdate"]["taskId"], "t-1", "{binding}: {last}");
        }
        "GetTask" => holds("/id", json!("t-1")),
        "ListTasks" => holds("/tasks/0/id", json!("t-1")),
        "CancelTask" => holds("/status/state", json!("TASK_STATE_CANCELED")),
        "SubscribeToTask" => holds("/task/id", json!("t-1")),
        "CreateTaskPushNotificationConfig" | "GetTaskPushNotificationConfig" => {
            holds("/url", json!("https://hooks.example/a2a"));
        }
        "ListTaskPushNotificationConfigs" => holds("/configs/0/id", json!("p-1")),
        "DeleteTaskPushNotificationConfig" => {
            assert!(first.is_null() || first == &json!({}), "{binding}: {first}");
        }
        _ => holds("/name", json!("scripted")),
    }
}

/// A JSON-RPC answer's `result`, or its events' results.
fn results(wire: &Wire) -> Vec<Value> {
    wire.answers
        .iter()
        .map(|answer| answer.get("result").cloned().unwrap_or(Value::Null))
        .collect()
}

#[tokio::test]
async fn every_operation_is_decoded_answered_and_encoded_by_each_binding() {
    let pipeline = Pipeline::new(Arc::new(Scripted));
    for operation in operations() {
        let answered = jsonrpc(&pipeline, operation.method, &operation.params).await;
        assert_eq!(answered.status, 200);
        check_answer(operation.method, &results(&answered), "jsonrpc");
        check_record(operation.method, &answered, "jsonrpc");

        let answered = rest(&pipeline, &operation.rest).await;
        assert_eq!(answered.status, 200, "http+json {}", operation.method);
        check_answer(operation.method, &answered.answers, "http+json");
        check_record(operation.method, &answered, "http+json");

        let answered = grpc(&pipeline, operation.grpc, &operation.params).await;
        assert_eq!(answered.status, 0, "grpc {}", operation.method);
        if operation.method != "DeleteTaskPushNotificationConfig" {
            check_answer(operation.method, &answered.answers, "grpc");
        }
        check_record(operation.method, &answered, "grpc");
    }
}

/// The pipeline's record of an answered call, whichever binding carried it: the operation, how
/// it ended, and the task it named or was answered with.
fn check_record(method: &str, wire: &Wire, binding: &str) {
    let record = wire.record.as_ref().expect("every call is recorded");
    assert_eq!(record.call.method.name(), method, "{binding}");
    assert_eq!(record.call.binding.label(), binding.replace('+', "_"));
    let streams = matches!(method, "SendStreamingMessage" | "SubscribeToTask");
    let outcome = match streams {
        true => CallOutcome::Streaming,
        false => CallOutcome::Answered,
    };
    assert_eq!(record.outcome, outcome, "{binding} {method}");
    let named = !matches!(
        method,
        "ListTasks" | "GetExtendedAgentCard" | "SendStreamingMessage"
    );
    let task = named.then_some("t-1");
    assert_eq!(record.task.as_deref(), task, "{binding} {method}");
}

#[tokio::test]
async fn a_refusal_is_answered_in_each_bindings_form() {
    let pipeline = Pipeline::new(Arc::new(Scripted));
    // The protocol's error: a task that is not the caller's, recorded as the operation's.
    let missing = json!({"id": "missing"});
    let failed = |wire: &Wire| {
        let record = wire.record.clone().unwrap();
        (record.task, record.outcome)
    };
    let expected = (Some("missing".into()), CallOutcome::Failed);
    let answered = jsonrpc(&pipeline, "GetTask", &missing).await;
    assert_eq!(answered.answers[0]["error"]["code"], -32001);
    assert_eq!(failed(&answered), expected);
    let answered = rest(&pipeline, &("GET", "/tasks/missing", None)).await;
    assert_eq!(answered.status, 404);
    assert_eq!(answered.answers[0]["error"]["status"], "NOT_FOUND");
    assert_eq!(failed(&answered), expected);
    let answered = grpc(&pipeline, "GetTask", &missing).await;
    assert_eq!((answered.status, failed(&answered)), (5, expected));

    // The guard's: a stream past the peer's cap.
    let busy = json!({"id": "busy"});
    let answered = jsonrpc(&pipeline, "SubscribeToTask", &busy).await;
    assert_eq!(answered.status, 429);
    assert_eq!(answered.answers[0]["error"]["code"], "too_many_streams");
    let streams = Some(RefusalReason::TooManyStreams);
    assert_eq!(answered.reason, streams, "counted by /metrics");
    let answered = rest(&pipeline, &("POST", "/tasks/busy:subscribe", None)).await;
    assert_eq!((answered.status, answered.reason), (429, streams));
    let answered = grpc(&pipeline, "SubscribeToTask", &busy).await;
    assert_eq!((answered.status, answered.reason), (8, streams));

    // An operation that panicked: an internal error naming the id its log line has.
    let answered = jsonrpc(&pipeline, "SendMessage", &message("panic")).await;
    assert_eq!(answered.answers[0]["error"]["code"], -32603);
    assert!(
        answered.answers[0]["error"]["data"]
            .to_string()
            .contains("requestId"),
        "{answered:?}"
    );
    let rest_call = ("POST", "/message:send", Some(message("panic")));
    assert_eq!(rest(&pipeline, &rest_call).await.status, 500);
    assert_eq!(
        grpc(&pipeline, "SendMessage", &message("panic"))
            .await
            .status,
        13
    );

    // A request that does not read as the operation's.
    let answered = jsonrpc(&pipeline, "GetTask", &json!({"id": 5})).await;
    assert_eq!(answered.answers[0]["error"]["code"], -32602);
    let answered = rest(
        &pipeline,
        &("POST", "/message:send", Some(json!({"message": 5}))),
    )
    .await;
    assert_eq!(answered.status, 400);
}

#[tokio::test]
async fn a_version_the_gate_refused_is_answered_first_in_each_bindings_form() {
    let pipeline = Pipeline::new(Arc::new(Scripted));
    let refused = || ProtocolAsked {
        activated: Vec::new(),
        refused: Some(A2aError::VersionNotSupported {
            requested: "0.3".to_owned(),
        }),
    };
    // Before anything else: a task that does not exist is not looked for.
    let missing = json!({"id": "missing"});
    let answered = jsonrpc_as(&pipeline, refused(), "GetTask", &missing).await;
    assert_eq!(answered.answers[0]["error"]["code"], -32009);
    assert_eq!(answered.answers[0]["id"], 7, "under the request's own id");
    let answered = rest_as(&pipeline, refused(), &("GET", "/tasks/missing", None)).await;
    assert_eq!(answered.status, 400);
    assert_eq!(
        answered.answers[0]["error"]["details"][0]["reason"],
        "VERSION_NOT_SUPPORTED"
    );
    let answered = grpc_as(&pipeline, refused(), "GetTask", &missing).await;
    assert_eq!(answered.status, 9, "FAILED_PRECONDITION");
    // Counted by /metrics under its reason on every binding.
    let version = Some(RefusalReason::VersionNotSupported);
    assert_eq!(answered.reason, version, "grpc");
    let answered = jsonrpc_as(&pipeline, refused(), "GetTask", &missing).await;
    assert_eq!(answered.reason, version, "jsonrpc");
    let answered = rest_as(&pipeline, refused(), &("GET", "/tasks/missing", None)).await;
    assert_eq!(answered.reason, version, "http+json");
    // Recorded as refused before the operation, not as its failure.
    let outcome = answered.record.map(|record| record.outcome);
    assert_eq!(outcome, Some(CallOutcome::Refused), "http+json");
}

/// Records every stage a call passes; refuses at *authorize* a request for the task `secret`.
#[derive(Default)]
struct Recording(Mutex<Vec<String>>);

impl Recording {
    fn note(&self, stage: &str, call: &CallView) {
        let method = call.call.method.name();
        self.0.lock().unwrap().push(format!("{stage} {method}"));
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl CallStages for Recording {
    async fn authorize(&self, call: &CallView, request: &A2aRequest) -> Result<(), CallRefused> {
        self.note("authorize", call);
        let secret = match request {
            A2aRequest::GetTask(request) => request.id.as_str() == "secret",
            A2aRequest::SubscribeToTask(request) => request.id.as_str() == "secret",
            _ => false,
        };
        match secret {
            true => Err(CallRefused::Protocol(A2aError::TaskNotFound)),
            false => Ok(()),
        }
    }

    async fn inspect_request(
        &self,
        call: &CallView,
        _request: &mut A2aRequest,
    ) -> Result<(), CallRefused> {
        self.note("inspect_request", call);
        Ok(())
    }

    async fn inspect_response(
        &self,
        call: &CallView,
        _response: &mut A2aResponse,
    ) -> Result<(), CallRefused> {
        self.note("inspect_response", call);
        Ok(())
    }

    fn inspect_event(&self, call: &CallView, event: StreamEvent) -> StreamEvent {
        self.note("inspect_event", call);
        event
    }

    fn seal(&self, call: &CallView, _delivered: &RawValue) {
        self.note("seal", call);
    }

    fn observe(&self, call: &CallView, outcome: Outcome<'_>) {
        let outcome = match outcome {
            Outcome::Answered => "answered",
            Outcome::Streaming => "streaming",
            Outcome::Refused(_) => "refused",
        };
        self.note(&format!("observe {outcome}"), call);
    }
}

#[tokio::test]
async fn every_stage_is_reached_on_every_binding() {
    let recording = Arc::new(Recording::default());
    let metrics = Arc::new(crate::layers::metrics::Metrics::default());
    let pipeline = Pipeline::new(Arc::new(Scripted))
        .with_metrics(metrics.clone())
        .with_stages(recording.clone());
    let plain = [
        "authorize SendMessage",
        "inspect_request SendMessage",
        "inspect_response SendMessage",
        "seal SendMessage",
        "observe answered SendMessage",
    ];
    let streamed = [
        "authorize SendStreamingMessage",
        "inspect_request SendStreamingMessage",
        "inspect_response SendStreamingMessage",
        "observe streaming SendStreamingMessage",
        "inspect_event SendStreamingMessage",
        "inspect_event SendStreamingMessage",
        "seal SendStreamingMessage",
    ];
    let refused = ["authorize GetTask", "observe refused GetTask"];
    let refused_stream = [
        "authorize SubscribeToTask",
        "observe refused SubscribeToTask",
    ];
    let secret = json!({"id": "secret"});
    for (streams, binding) in ["jsonrpc", "http+json", "grpc"].into_iter().enumerate() {
        let ask = |method: &'static str,
                   params: Value,
                   rest_call: (&'static str, &'static str, Option<Value>)| {
            let pipeline = pipeline.clone();
            async move {
                match binding {
                    "jsonrpc" => jsonrpc(&pipeline, method, &params).await,
                    "http+json" => rest(&pipeline, &rest_call).await,
                    _ => grpc(&pipeline, method, &params).await,
                }
            }
        };
        ask(
            "SendMessage",
            message("m-1"),
            ("POST", "/message:send", Some(message("m-1"))),
        )
        .await;
        assert_eq!(recording.take(), plain, "{binding}");
        let stream_call = ("POST", "/message:stream", Some(message("m-1")));
        ask("SendStreamingMessage", message("m-1"), stream_call).await;
        assert_eq!(recording.take(), streamed, "{binding}");
        // The stream's first event is timed on the staged path as on the plain one.
        let first_events = format!(
            "a2a_server_stream_time_to_first_event_seconds_count {}",
            streams + 1
        );
        assert!(metrics.render().contains(&first_events), "{binding}");
        let answered = ask("GetTask", secret.clone(), ("GET", "/tasks/secret", None)).await;
        assert_ne!(answered.status, 0, "{binding}: refused");
        assert_eq!(recording.take(), refused, "{binding}");
        let subscribe = ("POST", "/tasks/secret:subscribe", None);
        ask("SubscribeToTask", secret.clone(), subscribe).await;
        assert_eq!(recording.take(), refused_stream, "{binding}");
    }
}
