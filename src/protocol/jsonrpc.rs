//! The JSON-RPC 2.0 envelope of the A2A door.
//!
//! [`parse_request`] turns raw bytes into a [`RpcRequest`] or the error to answer with; it never
//! panics on any input (the `jsonrpc_envelope` fuzz target holds it to that). [`A2aError`] is
//! the single place where JSON-RPC errors get their code, message and `data`; every error goes
//! out inside HTTP 200, because the official clients lose the code under any other status.

use super::error::A2aError;
use super::json::StrictError;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// How deeply `params` may nest; deeper requests are refused before any handler parses them.
pub const MAX_PARAMS_DEPTH: usize = 64;
/// What a request nesting deeper than [`MAX_PARAMS_DEPTH`] is told, on every binding.
pub(crate) const TOO_DEEP: &str = "params nest deeper than 64 levels";

/// The largest integer id that survives a round trip through an IEEE double (2^53 − 1).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// The longest string id, in bytes, a request may carry. Every answer echoes the id, so an
/// unbounded one would let a request make its error answer as large as the body limit allows
/// (and fill the logs that name it); clients use UUIDs or counters, far below this.
pub const MAX_ID_BYTES: usize = 256;

/// A request id, echoed with the same JSON type it arrived with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcId {
    /// No id (or `null`): still answered, with `"id": null`.
    Null,
    /// A string id.
    Str(String),
    /// An integer id within ±(2^53 − 1).
    Int(i64),
}

impl RpcId {
    /// The id as JSON.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Str(s) => Value::String(s.clone()),
            Self::Int(n) => Value::from(*n),
        }
    }
}

/// The A2A methods, by their 1.0 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `SendMessage` / `message/send`
    SendMessage,
    /// `SendStreamingMessage` / `message/stream`
    SendStreamingMessage,
    /// `GetTask` / `tasks/get`
    GetTask,
    /// `ListTasks` / `tasks/list`
    ListTasks,
    /// `CancelTask` / `tasks/cancel`
    CancelTask,
    /// `SubscribeToTask` / `tasks/resubscribe`
    SubscribeToTask,
    /// `CreateTaskPushNotificationConfig` / `tasks/pushNotificationConfig/set`
    CreatePushConfig,
    /// `GetTaskPushNotificationConfig` / `tasks/pushNotificationConfig/get`
    GetPushConfig,
    /// `ListTaskPushNotificationConfigs` / `tasks/pushNotificationConfig/list`
    ListPushConfigs,
    /// `DeleteTaskPushNotificationConfig` / `tasks/pushNotificationConfig/delete`
    DeletePushConfig,
    /// `GetExtendedAgentCard` / `agent/getAuthenticatedExtendedCard`
    GetExtendedAgentCard,
}

impl Method {
    /// Every method, in declaration order: `ALL[m as usize] == m`.
    pub const ALL: [Self; 11] = [
        Self::SendMessage,
        Self::SendStreamingMessage,
        Self::GetTask,
        Self::ListTasks,
        Self::CancelTask,
        Self::SubscribeToTask,
        Self::CreatePushConfig,
        Self::GetPushConfig,
        Self::ListPushConfigs,
        Self::DeletePushConfig,
        Self::GetExtendedAgentCard,
    ];

    /// The method's 1.0 name, which the metrics and the access log show whatever the binding.
    pub fn name(self) -> &'static str {
        match self {
            Self::SendMessage => "SendMessage",
            Self::SendStreamingMessage => "SendStreamingMessage",
            Self::GetTask => "GetTask",
            Self::ListTasks => "ListTasks",
            Self::CancelTask => "CancelTask",
            Self::SubscribeToTask => "SubscribeToTask",
            Self::CreatePushConfig => "CreateTaskPushNotificationConfig",
            Self::GetPushConfig => "GetTaskPushNotificationConfig",
            Self::ListPushConfigs => "ListTaskPushNotificationConfigs",
            Self::DeletePushConfig => "DeleteTaskPushNotificationConfig",
            Self::GetExtendedAgentCard => "GetExtendedAgentCard",
        }
    }

    /// Looks up a method by its 1.0 name or its 0.3 alias; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "SendMessage" | "message/send" => Self::SendMessage,
            "SendStreamingMessage" | "message/stream" => Self::SendStreamingMessage,
            "GetTask" | "tasks/get" => Self::GetTask,
            "ListTasks" | "tasks/list" => Self::ListTasks,
            "CancelTask" | "tasks/cancel" => Self::CancelTask,
            "SubscribeToTask" | "tasks/resubscribe" => Self::SubscribeToTask,
            "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => {
                Self::GetExtendedAgentCard
            }
            "CreateTaskPushNotificationConfig" | "tasks/pushNotificationConfig/set" => {
                Self::CreatePushConfig
            }
            "GetTaskPushNotificationConfig" | "tasks/pushNotificationConfig/get" => {
                Self::GetPushConfig
            }
            "ListTaskPushNotificationConfigs" | "tasks/pushNotificationConfig/list" => {
                Self::ListPushConfigs
            }
            "DeleteTaskPushNotificationConfig" | "tasks/pushNotificationConfig/delete" => {
                Self::DeletePushConfig
            }
            _ => return None,
        })
    }
}

/// The media type of the HTTP+JSON binding's bodies, answers and errors alike (A2A 1.0.1).
pub const HTTP_JSON_MEDIA_TYPE: &str = "application/a2a+json";

/// A well-formed request.
#[derive(Debug)]
pub struct RpcRequest {
    /// The id to echo.
    pub id: RpcId,
    /// The method.
    pub method: Method,
    /// The raw `params`, parsed by the method's handler.
    pub params: Option<Box<RawValue>>,
}

/// A request that cannot be served, with the id to answer under.
#[derive(Debug)]
pub struct RpcFailure {
    /// The id to echo (`Null` when it could not be read).
    pub id: RpcId,
    /// What to answer.
    pub error: A2aError,
}

#[derive(serde::Serialize)]
struct SuccessBody<'a> {
    jsonrpc: &'static str,
    id: Value,
    result: &'a RawValue,
}

/// A success response body around an already serialized result, copied as is.
pub fn success(id: &RpcId, result: &RawValue) -> String {
    let body = SuccessBody {
        jsonrpc: "2.0",
        id: id.to_json(),
        result,
    };
    serde_json::to_string(&body).unwrap_or_else(|_| failure(id, &A2aError::Parse))
}

/// An error response body.
pub fn failure(id: &RpcId, error: &A2aError) -> String {
    json!({"jsonrpc": "2.0", "id": id.to_json(), "error": error.to_json()}).to_string()
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
}

/// Reads one JSON-RPC request from a body.
pub fn parse_request(body: &[u8]) -> Result<RpcRequest, RpcFailure> {
    let fail = |id: RpcId, error: A2aError| RpcFailure { id, error };
    let (envelope, duplicated) = read_envelope(body).map_err(|e| fail(RpcId::Null, e))?;
    let id = request_id(envelope.id).map_err(|e| fail(RpcId::Null, e))?;
    if duplicated {
        return Err(fail(
            id,
            A2aError::InvalidRequest(
                "a member name is repeated in an object; each may appear once",
            ),
        ));
    }
    if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(fail(
            id,
            A2aError::InvalidRequest("jsonrpc must be \"2.0\""),
        ));
    }
    let Some(Value::String(method)) = envelope.method else {
        return Err(fail(
            id,
            A2aError::InvalidRequest("method must be a string"),
        ));
    };
    let Some(method) = Method::from_name(&method) else {
        return Err(fail(id, A2aError::MethodNotFound));
    };
    if envelope
        .params
        .as_ref()
        .is_some_and(|p| nesting_depth(p.get()) > MAX_PARAMS_DEPTH)
    {
        return Err(fail(id, A2aError::InvalidRequest(TOO_DEEP)));
    }
    Ok(RpcRequest {
        id,
        method,
        params: envelope.params,
    })
}

/// The body as one envelope, and whether some object in it repeats a member name (answered
/// under the request's id, so it is told, not refused, here). Errors here have no id to
/// answer under.
fn read_envelope(body: &[u8]) -> Result<(Envelope, bool), A2aError> {
    // The whole body must be UTF-8, including members the envelope would skip unread.
    let body = std::str::from_utf8(body).map_err(|_| A2aError::Parse)?;
    let first = body.bytes().find(|b| !b.is_ascii_whitespace());
    if first == Some(b'[') {
        // Batches are refused whole; a valid JSON array is still a batch.
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(body) {
            Ok(_) => A2aError::InvalidRequest("batch requests are not supported; send one object"),
            Err(_) => A2aError::Parse,
        });
    }
    // Every string decoded (a lone surrogate anywhere is a parse error, as in the envelope) and
    // every object checked for repeated member names, params included.
    let duplicated = match super::json::check(body) {
        Ok(()) => false,
        Err(StrictError::Syntax(_)) => return Err(A2aError::Parse),
        Err(_) => true,
    };
    match serde_json::from_str(body) {
        Ok(envelope) => Ok((envelope, duplicated)),
        Err(e) if e.is_data() => Err(A2aError::InvalidRequest(
            "the body must be one JSON object with jsonrpc, method and id, each at most once",
        )),
        Err(_) => Err(A2aError::Parse),
    }
}

/// The request's id: a string of at most 256 bytes, an integer JSON numbers hold exactly, or
/// none (`null`).
fn request_id(id: Option<Value>) -> Result<RpcId, A2aError> {
    match id {
        None | Some(Value::Null) => Ok(RpcId::Null),
        Some(Value::String(s)) if s.len() <= MAX_ID_BYTES => Ok(RpcId::Str(s)),
        Some(Value::String(_)) => Err(A2aError::InvalidRequest(
            "id must be at most 256 bytes long",
        )),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&i) => Ok(RpcId::Int(i)),
            _ => Err(A2aError::InvalidRequest(
                "id must be a string or an integer within ±(2^53−1)",
            )),
        },
        Some(_) => Err(A2aError::InvalidRequest(
            "id must be a string or an integer",
        )),
    }
}

/// The deepest nesting of arrays and objects in syntactically valid JSON text.
/// How deep `json`'s arrays and objects nest (strings skipped).
pub(crate) fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in json.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses a method's params into `T`, naming what is wrong on failure.
pub fn parse_params<'a, T: Deserialize<'a>>(params: Option<&'a RawValue>) -> Result<T, A2aError> {
    let Some(raw) = params else {
        return Err(A2aError::InvalidParams {
            field: "params".to_owned(),
            description: "params must be an object".to_owned(),
        });
    };
    if !raw.get().trim_start().starts_with('{') {
        return Err(A2aError::InvalidParams {
            field: "params".to_owned(),
            description: "params must be an object".to_owned(),
        });
    }
    serde_json::from_str(raw.get()).map_err(|e| A2aError::InvalidParams {
        field: "params".to_owned(),
        description: describe_serde_error(&e),
    })
}

/// serde's message without the position suffix and without echoing long input values.
fn describe_serde_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let text = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(head, _)| head);
    // A string the peer sent in the wrong place may be a secret (a credential where an object
    // belongs): its type is named, its value is not repeated.
    let redacted;
    let text = match (text.find("string \""), text.rfind('"')) {
        (Some(start), Some(end)) if end > start + 7 => {
            redacted = format!("{}string{}", &text[..start], &text[end + 1..]);
            redacted.as_str()
        }
        _ => text,
    };
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &[u8]) -> i64 {
        parse_request(body).unwrap_err().error.code()
    }

    #[test]
    fn a_misplaced_string_is_named_not_repeated() {
        #[derive(Debug, serde::Deserialize)]
        struct Params {
            #[allow(dead_code)]
            authentication: std::collections::HashMap<String, String>,
        }
        let e = serde_json::from_str::<Params>(r#"{"authentication":"Bearer sk-secret-1"}"#)
            .unwrap_err();
        let described = describe_serde_error(&e);
        assert!(!described.contains("sk-secret-1"), "{described}");
        assert!(
            described.contains("invalid type: string, expected a map"),
            "{described}"
        );
    }

    #[test]
    fn classifies_bad_envelopes() {
        assert_eq!(code(b"{"), -32700);
        assert_eq!(code(b"\xff\xfe"), -32700);
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\",\"x\":\"\xff\"}"),
            -32700
        );
        assert_eq!(code(b"[\"\xff\"]"), -32700);
        assert_eq!(code(b"[]"), -32600);
        assert_eq!(
            code(br#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#),
            -32600
        );
        assert_eq!(code(br#""hello""#), -32600);
        assert_eq!(
            code(br#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#),
            -32600
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}"#),
            -32600
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":9007199254740992,"method":"GetTask"}"#),
            -32600
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1,"method":"Nope"}"#), -32601);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"GetTask"}"#),
            -32600
        );
    }
    #[test]
    fn repeated_member_names_anywhere_are_refused_and_the_id_still_echoed() {
        for body in [
            r#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"a","id":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"parts":[{"data":{"k":1,"k":2}}]}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"metadata":{"x":[{"a":1,"a":1}]}}}"#,
        ] {
            let failure = parse_request(body.as_bytes()).unwrap_err();
            assert_eq!(failure.error.code(), -32600, "{body}");
            assert_eq!(failure.id, RpcId::Int(7), "{body}");
        }
        // The same name in different objects is fine.
        assert!(
            parse_request(
                br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"a","m":{"id":"b"}}}"#
            )
            .is_ok()
        );
    }

    #[test]
    fn a_string_id_past_its_bound_is_refused_and_not_echoed() {
        let longest = "i".repeat(MAX_ID_BYTES);
        let body = format!(r#"{{"jsonrpc":"2.0","id":"{longest}","method":"GetTask"}}"#);
        assert_eq!(
            parse_request(body.as_bytes()).unwrap().id,
            RpcId::Str(longest)
        );
        let too_long = "i".repeat(MAX_ID_BYTES + 1);
        let body = format!(r#"{{"jsonrpc":"2.0","id":"{too_long}","method":"GetTask"}}"#);
        let refused = parse_request(body.as_bytes()).unwrap_err();
        assert_eq!(refused.error.code(), -32600);
        assert_eq!(refused.id, RpcId::Null);
        assert!(!failure(&refused.id, &refused.error).contains(&too_long));
    }

    #[test]
    fn lone_surrogates_are_parse_errors_wherever_they_are() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\ud800"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"\udc00":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","x":["\ud83d"]}"#,
        ] {
            assert_eq!(code(body.as_bytes()), -32700, "{body}");
        }
        // A proper pair is text.
        assert!(
            parse_request(br#"{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"GetTask"}"#).is_ok()
        );
    }

    #[test]
    fn measures_nesting_outside_strings() {
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":"[[[\"]]"}]}"#), 3);
        assert_eq!(nesting_depth("1"), 0);
    }

    #[test]
    fn keeps_id_type_and_aliases() {
        let req = parse_request(br#"{"jsonrpc":"2.0","id":"7","method":"tasks/get"}"#).unwrap();
        assert_eq!(req.id, RpcId::Str("7".into()));
        assert_eq!(req.method, Method::GetTask);
        let req = parse_request(br#"{"jsonrpc":"2.0","id":-7,"method":"SendMessage"}"#).unwrap();
        assert_eq!(req.id, RpcId::Int(-7));
        let req = parse_request(br#"{"jsonrpc":"2.0","method":"ListTasks"}"#).unwrap();
        assert_eq!((req.id, req.method), (RpcId::Null, Method::ListTasks));
    }
}
