//! JSON-RPC over HTTP to the A2A door, and reading its answers.

use serde_json::{Value, json};

/// Posts raw bytes to `url` with an optional bearer token; returns (status, body as JSON).
pub async fn post_raw(
    url: &str,
    token: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A JSON-RPC call that must come back as HTTP 200; returns the response object.
pub async fn rpc(url: &str, token: &str, request: Value) -> Value {
    let (status, body) = post_raw(url, Some(token), request.to_string()).await;
    assert_eq!(status, 200, "HTTP status for {request}: {body}");
    body
}

/// `SendMessage` with text parts; returns the response object.
pub async fn send_text(url: &str, token: &str, text: &str, context_id: Option<&str>) -> Value {
    let mut message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    });
    if let Some(context_id) = context_id {
        message["contextId"] = json!(context_id);
    }
    rpc(
        url,
        token,
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}),
    )
    .await
}

/// The task of a successful `SendMessage` response.
pub fn task_of(response: &Value) -> &Value {
    response
        .pointer("/result/task")
        .unwrap_or_else(|| panic!("no task in {response}"))
}

/// The text of the agent's reply in a task.
pub fn reply_text(task: &Value) -> String {
    task.pointer("/status/message/parts/0/text")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no reply text in {task}"))
        .to_owned()
}

/// `GetTask`.
pub async fn get_task(url: &str, token: &str, id: &str, history_length: Option<i64>) -> Value {
    let mut params = json!({"id": id});
    if let Some(n) = history_length {
        params["historyLength"] = json!(n);
    }
    rpc(
        url,
        token,
        json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": params}),
    )
    .await
}

/// The error code of a JSON-RPC response.
pub fn error_code(response: &Value) -> i64 {
    response
        .pointer("/error/code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no error in {response}"))
}

/// Sends a streaming JSON-RPC request (SendStreamingMessage, SubscribeToTask) and returns the
/// response, its events still to be read.
pub async fn open_stream(url: &str, token: &str, request: &Value) -> reqwest::Response {
    open_stream_with(&reqwest::Client::new(), url, token, request)
        .await
        .unwrap()
}

/// Like [`open_stream`] with `client`; `None` when the connection was closed before an answer.
pub async fn open_stream_with(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    request: &Value,
) -> Option<reqwest::Response> {
    client
        .post(url)
        .bearer_auth(token)
        .header("a2a-version", "1.0")
        .header("content-type", "application/json")
        .body(request.to_string())
        .send()
        .await
        .ok()
}

/// Reads a stream until what was read contains `needle`; returns all of it. A stream that
/// sends nothing for a minute fails the test rather than holding it.
pub async fn read_until(response: &mut reqwest::Response, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(60), response.chunk())
            .await
            .unwrap_or_else(|_| panic!("nothing came for a minute before {needle:?}: {seen}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended before {needle:?}: {seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

/// The claims of a compact JWS (a receipt, a token), read without checking its signature: what
/// it states, for tests that check the signature elsewhere.
pub fn jws_claims(jws: &str) -> Value {
    use base64::Engine;
    let payload = jws
        .split('.')
        .nth(1)
        .unwrap_or_else(|| panic!("not a JWS: {jws}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Opens a stream with `request` and reads it to its end: the JSON of each event.
pub async fn stream_events(url: &str, token: &str, request: &Value) -> Vec<Value> {
    let text = open_stream(url, token, request).await.text().await.unwrap();
    sse_events(&text)
}

/// The JSON of each `data:` event of a server-sent event stream's text.
pub fn sse_events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str::<Value>(data).unwrap())
        .collect()
}
