//! Traces, judged by a real OTLP/HTTP receiver (`tests/interop/otlp_receiver.py`, which decodes
//! what `peergate serve` exports with the official `opentelemetry-proto` messages): one server
//! span per call on every binding, refusals included; a partner's trace context linked or, for
//! a trusted peer, continued; the context carried to an agent behind the door (the official
//! Python SDK's agent, with its own telemetry on) and never to a model's API; an endpoint that
//! is down or hangs changing no answer; and `OTEL_SDK_DISABLED` exporting nothing.

use crate::common::*;
use serde_json::{Value, json};

const PARTNER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARTNER_SPAN: &str = "00f067aa0ba902b7";

/// The environment that sends `peergate serve`'s spans to `receiver`, every call sampled.
fn exporting(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_SERVICE_NAME", "edge-under-test".to_owned()),
    ]
}

fn env_of<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The server spans received, by the A2A method they name.
fn server_spans<'a>(spans: &'a [Value], method: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|span| span["kind"] == "SPAN_KIND_SERVER" && span["name"] == method)
        .collect()
}

/// POSTs a JSON-RPC request with `headers`; the status.
async fn post_with(door: &str, token: &str, body: &Value, headers: &[(&str, &str)]) -> u16 {
    let mut request = reqwest::Client::new()
        .post(door)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .bearer_auth(token)
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status().as_u16()
}

fn send(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": {
        "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "parts": [{"text": text}]}}})
}

#[test]
fn every_binding_exports_one_server_span_per_call_with_its_a2a_attributes() {
    let receiver = OtlpReceiver::start(false);
    let vars = exporting(&receiver);
    let full = repo_root().join("policies/full.toml");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A peer a binding: one client's whole flow is most of a peer's minute.
    let tokens: Vec<String> = ["alice", "bob", "carol"]
        .iter()
        .map(|name| add_peer(&data, name))
        .collect();
    let server = ServeProcess::start_with(
        dir.path(),
        &data,
        &["--policy", full.to_str().unwrap()],
        &env_of(&vars),
    );
    let python = python_with_sdk();
    let script = repo_root().join("tests/interop/a2a_python_full.py");
    for (binding, token) in ["JSONRPC", "GRPC", "HTTP+JSON"].into_iter().zip(&tokens) {
        let output = std::process::Command::new(&python)
            .arg(&script)
            .args(["--base-url", &format!("http://{}", server.addr)])
            .args(["--token", token, "--binding", binding])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{binding}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(post_with(&server.door(), "made-up", &send("hi"), &[]));
    assert_eq!(status, 401);
    let spans = runtime.block_on(receiver.spans_when(|spans| {
        ["jsonrpc", "grpc", "http_json"].iter().all(|binding| {
            spans.iter().any(|span| {
                attribute(span, "a2a.protocol.binding") == binding && span["name"] == "CancelTask"
            })
        }) && spans
            .iter()
            .any(|s| attribute(s, "peergate.refusal.reason") == "unauthenticated")
    }));
    let peer_ids: Vec<String> = {
        let (_, out, _) = cli_on(&data, &["peer", "list"]);
        out.split_whitespace()
            .filter(|w| w.starts_with("peer_"))
            .map(str::to_owned)
            .collect()
    };
    for (binding, rpc_system) in [
        ("jsonrpc", json!("jsonrpc")),
        ("grpc", json!("grpc")),
        ("http_json", Value::Null),
    ] {
        let of_binding: Vec<&Value> = spans
            .iter()
            .filter(|s| attribute(s, "a2a.protocol.binding") == binding)
            .collect();
        // The streamed message: one span for the whole stream, its events counted.
        let streamed = of_binding
            .iter()
            .find(|s| s["name"] == "SendStreamingMessage")
            .unwrap_or_else(|| panic!("{binding}: no stream span in {of_binding:#?}"));
        assert!(
            attribute(streamed, "peergate.stream.events").as_i64() > Some(2),
            "{binding}: {streamed}"
        );
        assert!(
            streamed["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["name"] == "peergate.stream.first_event")),
            "{binding}: {streamed}"
        );
        let state = attribute(streamed, "a2a.task.state");
        assert!(state.is_null() || state.is_string(), "{streamed}");
        // A finished task's cancel: the protocol's refusal, the caller's doing — the status
        // stays unset, error.type says what it was.
        let cancel = of_binding
            .iter()
            .find(|s| s["name"] == "CancelTask")
            .unwrap();
        assert_eq!(cancel["kind"], "SPAN_KIND_SERVER");
        assert!(!attribute(cancel, "error.type").is_null(), "{cancel}");
        assert_ne!(cancel["status"]["code"], "STATUS_CODE_ERROR", "{cancel}");
        assert!(attribute(cancel, "a2a.task.id").is_string(), "{cancel}");
        assert_eq!(
            attribute(cancel, "rpc.system.name"),
            &rpc_system,
            "{cancel}"
        );
        assert_eq!(
            attribute(cancel, "rpc.method"),
            "lf.a2a.v1.A2AService/CancelTask"
        );
        // Who asked: the peer's id and how it signed in, never its name or token.
        let peer = attribute(cancel, "peergate.peer.id")
            .as_str()
            .unwrap_or_default();
        assert!(peer_ids.iter().any(|id| id == peer), "{cancel}");
        assert_eq!(attribute(cancel, "peergate.auth.scheme"), "bearer");
        assert_eq!(attribute(cancel, "gen_ai.agent.name"), "peergate");
        assert_eq!(attribute(cancel, "a2a.protocol.version"), "1.0");
        assert_eq!(cancel["resource"]["service.name"], "edge-under-test");
    }
    // A message answered on the JSON-RPC door names its message, context and state.
    let sent = server_spans(&spans, "SendMessage");
    let sent = sent
        .iter()
        .find(|s| attribute(s, "a2a.protocol.binding") == "jsonrpc")
        .expect("a SendMessage span");
    assert!(attribute(sent, "a2a.message.id").is_string(), "{sent}");
    assert!(
        attribute(sent, "gen_ai.conversation.id").is_string(),
        "{sent}"
    );
    // Refused before any call: a span all the same, named by its route.
    let refused = spans
        .iter()
        .find(|s| attribute(s, "peergate.refusal.reason") == "unauthenticated")
        .unwrap();
    assert_eq!(attribute(refused, "http.response.status_code"), 401);
    assert_eq!(attribute(refused, "error.type"), "unauthenticated");
    assert!(attribute(refused, "peergate.peer.id").is_null());
    // No secret and no address by default, on any span.
    let text = serde_json::to_string(&spans).unwrap();
    for token in &tokens {
        assert!(!text.contains(token.as_str()), "a token reached a span");
    }
    assert!(
        !text.contains("made-up"),
        "a refused credential reached a span"
    );
    assert!(!text.contains("alice"), "the peer's name reached a span");
    assert!(!text.contains("127.0.0.1\"") || !text.contains("client.address"));
    assert!(
        spans
            .iter()
            .all(|s| attribute(s, "client.address").is_null())
    );
}

#[test]
fn a_partners_trace_is_linked_unless_its_peer_is_trusted_and_never_steers_sampling() {
    let receiver = OtlpReceiver::start(false);
    let mut vars = exporting(&receiver);
    // Half of new traces sampled: a partner's own sampled flag decides nothing unless trusted.
    vars.push(("OTEL_TRACES_SAMPLER", "parentbased_always_off".to_owned()));
    let served = ServedPolicy::start(
        &PolicyEdit::default(),
        &["partner", "trusted"],
        &env_of(&vars),
    );
    let (code, _, stderr) = cli_on(&served.data, &["peer", "trace", "trusted", "trusted"]);
    assert_eq!(code, 0, "{stderr}");
    let traceparent = format!("00-{PARTNER_TRACE}-{PARTNER_SPAN}-01");
    let door = served.server.door();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let headers = [
        ("traceparent", traceparent.as_str()),
        ("baggage", "secret=1"),
    ];
    // The untrusted partner: under parentbased_always_off a trace of peergate's own is not
    // sampled at all, whatever the partner's flag says.
    let untrusted = runtime.block_on(post_with(&door, &served.tokens[0], &send("a"), &headers));
    assert_eq!(untrusted, 200);
    // The trusted one continues its sampled trace.
    let trusted = runtime.block_on(async {
        // The credential cache may hold the peer as it was before the change.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        post_with(&door, &served.tokens[1], &send("b"), &headers).await
    });
    assert_eq!(trusted, 200);
    let spans = runtime
        .block_on(receiver.spans_when(|spans| !server_spans(spans, "SendMessage").is_empty()));
    let calls = server_spans(&spans, "SendMessage");
    assert_eq!(
        calls.len(),
        1,
        "only the trusted peer's call is sampled: {calls:#?}"
    );
    let call = calls[0];
    assert_eq!(call["trace_id"], PARTNER_TRACE);
    assert_eq!(call["parent_span_id"], PARTNER_SPAN);
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("secret=1"), "baggage reached a span");

    // Every call sampled: the untrusted partner's call is a trace of its own, linked.
    let receiver = OtlpReceiver::start(false);
    let vars = exporting(&receiver);
    let served = ServedPolicy::start(&PolicyEdit::default(), &["partner"], &env_of(&vars));
    let door = served.server.door();
    let status = runtime.block_on(post_with(&door, &served.tokens[0], &send("c"), &headers));
    assert_eq!(status, 200);
    let spans = runtime
        .block_on(receiver.spans_when(|spans| !server_spans(spans, "SendMessage").is_empty()));
    let call = server_spans(&spans, "SendMessage")[0];
    assert_ne!(call["trace_id"], PARTNER_TRACE, "{call}");
    assert!(
        call["parent_span_id"].as_str().is_none_or(str::is_empty),
        "{call}"
    );
    assert_eq!(call["links"][0]["trace_id"], PARTNER_TRACE, "{call}");
    assert_eq!(call["links"][0]["span_id"], PARTNER_SPAN, "{call}");
    // Its children: the store's writes and the model's call, in peergate's trace.
    let children: Vec<&Value> = spans
        .iter()
        .filter(|s| s["parent_span_id"] == call["span_id"])
        .collect();
    assert!(
        children.iter().any(|s| s["name"] == "peergate.store.write"),
        "{children:#?}"
    );

    // With partner_context = "drop", not even a link.
    let receiver = OtlpReceiver::start(false);
    let vars = exporting(&receiver);
    let policy = PolicyEdit::default().set("telemetry.partner_context", "drop");
    let served = ServedPolicy::start(&policy, &["partner"], &env_of(&vars));
    let status = runtime.block_on(post_with(
        &served.server.door(),
        &served.tokens[0],
        &send("d"),
        &headers,
    ));
    assert_eq!(status, 200);
    let spans = runtime
        .block_on(receiver.spans_when(|spans| !server_spans(spans, "SendMessage").is_empty()));
    let call = server_spans(&spans, "SendMessage")[0];
    assert!(call["links"].as_array().is_none_or(Vec::is_empty), "{call}");
}

#[tokio::test]
async fn a_model_api_is_sent_no_trace_context_unless_the_policy_says_so() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let receiver = OtlpReceiver::start(false);
    let vars = exporting(&receiver);
    let policy = PolicyEdit::default().openai(&model.base_url, "test-model");
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    let status = post_with(&served.server.door(), &served.tokens[0], &send("hi"), &[]).await;
    assert_eq!(status, 200);
    assert!(
        model
            .headers()
            .iter()
            .all(|h| h.get("traceparent").is_none()),
        "a hosted model's API learned the trace"
    );
    // The model's call is a GenAI client span, with its tokens.
    let spans = receiver
        .spans_when(|spans| spans.iter().any(|s| s["name"] == "chat test-model"))
        .await;
    let chat = spans
        .iter()
        .find(|s| s["name"] == "chat test-model")
        .unwrap();
    assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
    assert_eq!(attribute(chat, "gen_ai.operation.name"), "chat");
    assert_eq!(attribute(chat, "gen_ai.request.model"), "test-model");
    assert!(
        attribute(chat, "gen_ai.usage.output_tokens")
            .as_i64()
            .is_some(),
        "{chat}"
    );
    assert!(
        attribute(chat, "gen_ai.input.messages").is_null(),
        "no prompt text by default"
    );

    let policy = policy.insert("model.openai.trace_context", true);
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    let before = model.headers().len();
    let status = post_with(&served.server.door(), &served.tokens[0], &send("hi"), &[]).await;
    assert_eq!(status, 200);
    let sent = &model.headers()[before..];
    assert!(
        sent.iter().any(|h| h.get("traceparent").is_some()),
        "switched on, the context goes along"
    );
}

#[test]
fn one_trace_runs_through_the_gateway_into_the_python_sdk_agent_behind_it() {
    let receiver = OtlpReceiver::start(false);
    let agent = UpstreamAgent::start_traced(&receiver.endpoint);
    let vars = exporting(&receiver);
    let mut env = env_of(&vars);
    env.push((UPSTREAM_TOKEN_ENV, UPSTREAM_TOKEN));
    let policy = agent
        .policy()
        .set("log.access", true)
        .set("log.format", "json");
    let served = ServedPolicy::start(&policy, &["alice"], &env);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(post_with(
        &served.server.door(),
        &served.tokens[0],
        &send("hello"),
        &[],
    ));
    assert_eq!(status, 200);
    let of = |service: &'static str| move |s: &&Value| s["resource"]["service.name"] == service;
    let spans = runtime.block_on(receiver.spans_when(|spans| {
        spans.iter().any(|s| of("upstream-agent")(&s))
            && server_spans(spans, "SendMessage")
                .iter()
                .any(of("edge-under-test"))
    }));
    let names: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s["resource"]["service.name"], s["kind"], s["name"]
            )
        })
        .collect();
    let call = server_spans(&spans, "SendMessage")
        .into_iter()
        .find(of("edge-under-test"))
        .unwrap_or_else(|| {
            panic!(
                "the gateway's call: {names:#?}\n{}",
                served.server.log_text()
            )
        });
    let relay = spans
        .iter()
        .find(|s| s["kind"] == "SPAN_KIND_CLIENT" && s["parent_span_id"] == call["span_id"])
        .expect("the gateway's call to the agent");
    // The agent's card, read at start-up, is a trace of its own; what the message set off in
    // the agent (its server span, the SDK's request handler) is in the call's.
    let agent_spans: Vec<&Value> = spans
        .iter()
        .filter(|s| s["resource"]["service.name"] == "upstream-agent")
        .filter(|s| {
            !s["name"]
                .as_str()
                .unwrap_or_default()
                .contains("agent-card")
        })
        .collect();
    assert!(
        agent_spans.iter().any(|s| s["name"]
            .as_str()
            .is_some_and(|name| name.starts_with("a2a.server"))),
        "the SDK's own spans: {agent_spans:#?}"
    );
    assert!(
        agent_spans
            .iter()
            .all(|s| s["trace_id"] == call["trace_id"]),
        "the agent's spans are in the call's trace: {agent_spans:#?}"
    );
    assert!(
        agent_spans
            .iter()
            .any(|s| s["kind"] == "SPAN_KIND_SERVER" && s["parent_span_id"] == relay["span_id"]),
        "the agent's server span is the relay's child: {agent_spans:#?}"
    );
    // The agent's own task id, on the call's span and its access line.
    let agent_task = attribute(call, "peergate.upstream.task.id")
        .as_str()
        .unwrap();
    let lines = json_lines(&served.server, "\"a2a_method\":\"SendMessage\"");
    let access = lines
        .iter()
        .find(|l| l["target"] == "peergate::access" && l["a2a_method"] == "SendMessage")
        .unwrap();
    assert_eq!(access["agent_task"], agent_task, "{access}");
}

#[tokio::test]
async fn an_exporter_that_is_down_or_hangs_changes_no_answer_and_says_so_once() {
    for hang in [false, true] {
        let receiver = OtlpReceiver::start(hang);
        // Down: a port nobody listens on. Hanging: a receiver that never answers.
        let endpoint = match hang {
            true => receiver.endpoint.clone(),
            false => "http://127.0.0.1:9".to_owned(),
        };
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
        ];
        let served = ServedPolicy::start(&PolicyEdit::default(), &["alice"], &vars);
        for i in 0..6 {
            let answer = send_text(
                &served.server.door(),
                &served.tokens[0],
                &format!("m{i}"),
                None,
            )
            .await;
            assert_eq!(
                task_of(&answer)["status"]["state"],
                "TASK_STATE_COMPLETED",
                "{answer}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        }
        let log = served.server.log_with("spans cannot be exported");
        assert_eq!(
            log.matches("spans cannot be exported").count(),
            1,
            "said once, not per span or batch: {log}"
        );
    }
}

#[tokio::test]
async fn with_the_sdk_disabled_nothing_is_exported() {
    let receiver = OtlpReceiver::start(false);
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_SDK_DISABLED", "true"),
    ];
    let served = ServedPolicy::start(&PolicyEdit::default(), &["alice"], &vars);
    let answer = send_text(&served.server.door(), &served.tokens[0], "hi", None).await;
    assert_eq!(task_of(&answer)["status"]["state"], "TASK_STATE_COMPLETED");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(receiver.spans().await.is_empty());
    assert!(receiver.metrics().await.is_empty());
}

/// The points of the metric `name` the receiver got, with their attributes and counts.
fn points<'a>(metrics: &'a [Value], name: &str) -> Vec<&'a Value> {
    metrics
        .iter()
        .filter(|metric| metric["name"] == name)
        .flat_map(|metric| metric["points"].as_array().into_iter().flatten())
        .collect()
}

#[tokio::test]
async fn the_conventions_metrics_are_exported_over_otlp_too_unless_turned_off() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let receiver = OtlpReceiver::start(false);
    let policy = PolicyEdit::default().openai(&model.base_url, "test-model");
    let mut vars = exporting(&receiver);
    vars.push(("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()));
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    let answer = send_text(&served.server.door(), &served.tokens[0], "hi", None).await;
    assert_eq!(task_of(&answer)["status"]["state"], "TASK_STATE_COMPLETED");
    let calls = "rpc.server.call.duration";
    let metrics = receiver
        .metrics_when(|metrics| !points(metrics, calls).is_empty())
        .await;
    let call = points(&metrics, calls)
        .into_iter()
        .find(|point| point["attributes"]["rpc.method"] == "lf.a2a.v1.A2AService/SendMessage")
        .unwrap_or_else(|| panic!("{metrics:?}"));
    assert_eq!(call["attributes"]["rpc.system.name"], "jsonrpc");
    assert_eq!(call["attributes"]["a2a.protocol.binding"], "jsonrpc");
    assert_eq!(call["attributes"]["peergate.call.outcome"], "answered");
    assert_eq!(call["count"], 1);
    let model_call = points(&metrics, "gen_ai.client.operation.duration");
    assert_eq!(model_call[0]["attributes"]["gen_ai.operation.name"], "chat");
    let tokens = points(&metrics, "gen_ai.client.token.usage");
    assert!(
        tokens
            .iter()
            .any(|p| p["attributes"]["gen_ai.token.type"] == "output"),
        "{metrics:?}"
    );
    let unit = metrics.iter().find(|m| m["name"] == calls).unwrap();
    assert_eq!(unit["unit"], "s");
    assert_eq!(unit["resource"]["service.name"], "edge-under-test");
    drop(served);

    // Metrics off, traces still on.
    let receiver = OtlpReceiver::start(false);
    let mut vars = exporting(&receiver);
    vars.push(("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()));
    vars.push(("OTEL_METRICS_EXPORTER", "none".to_owned()));
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    send_text(&served.server.door(), &served.tokens[0], "hi", None).await;
    let spans = receiver.spans_when(|spans| !spans.is_empty()).await;
    assert!(!spans.is_empty());
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(receiver.metrics().await.is_empty());
}

#[test]
fn a_setting_peergate_would_not_honour_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = cli_with_env(
        dir.path(),
        &["serve", "--data", dir.path().join("data").to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_SAMPLER", "xray"),
        ],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("OTEL_TRACES_SAMPLER"), "{stderr}");
}

/// The JSON log lines of `server` once `needle` is among them.
fn json_lines(server: &ServeProcess, needle: &str) -> Vec<Value> {
    server
        .log_with(needle)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[tokio::test]
async fn one_id_joins_the_answer_its_access_line_its_log_lines_and_its_span() {
    let model = FakeModel::start(ModelBehaviour::ServerError).await;
    let receiver = OtlpReceiver::start(false);
    let vars = exporting(&receiver);
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("log.access", true)
        .set("log.format", "json");
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    let response = reqwest::Client::new()
        .post(served.server.door())
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header("x-request-id", "partner-req-7")
        .bearer_auth(&served.tokens[0])
        .body(send("the model fails").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let ours = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        ours.len(),
        36,
        "peergate's own id, not the partner's: {ours}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(task_of(&body)["status"]["state"], "TASK_STATE_FAILED");
    // A refusal carries one too.
    let refused = reqwest::Client::new()
        .post(served.server.door())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().contains_key("x-request-id"));

    let lines = json_lines(&served.server, "\"a2a_method\":\"SendMessage\"");
    let access = lines
        .iter()
        .find(|l| l["target"] == "peergate::access" && l["a2a_method"] == "SendMessage")
        .unwrap();
    assert_eq!(access["request_id"], ours.as_str(), "{access}");
    assert_eq!(access["partner_request_id"], "partner-req-7", "{access}");
    // The backend's failure is a failure, however plain the 200.
    assert_eq!(access["outcome"], "failed", "{access}");
    assert_eq!(access["task_state"], "TASK_STATE_FAILED", "{access}");
    assert!(
        access["context"].as_str().is_some_and(|c| c.len() == 36),
        "{access}"
    );
    // The line that says why names the request and its trace.
    let why = lines
        .iter()
        .find(|l| {
            l["fields"]["message"] == "backend gave no answer"
                || l["message"] == "backend gave no answer"
        })
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(why["request_id"], ours.as_str(), "{why}");
    let trace_id = why["trace_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{why}"))
        .to_owned();
    let spans = receiver
        .spans_when(|spans| !server_spans(spans, "SendMessage").is_empty())
        .await;
    let call = server_spans(&spans, "SendMessage")[0];
    assert_eq!(call["trace_id"], trace_id.as_str());
    assert_eq!(attribute(call, "peergate.request.id"), ours.as_str());
    assert_eq!(
        attribute(call, "peergate.partner.request_id"),
        "partner-req-7"
    );
    assert_eq!(attribute(call, "error.type"), "task_failed");
    assert_eq!(call["status"]["code"], "STATUS_CODE_ERROR", "{call}");
}

#[tokio::test]
async fn the_semantic_conventions_series_count_calls_model_calls_tokens_and_first_events() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("capabilities.streaming", true)
        .set("telemetry.peer_series", 1)
        .policy();
    let gw = TestGateway::start_with(policy).await;
    let (code, _, stderr) = gw.cli_with_stdin(&["admin", "add", "ada"], "ada's admin password 1\n");
    assert_eq!(code, 0, "{stderr}");
    let token = gw.add_peer("alice");
    let second = gw.add_peer("bob");
    let door = format!("http://{}/a2a/v1", gw.addr);
    assert_eq!(post_with(&door, &token, &send("hi"), &[]).await, 200);
    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": "none"}});
    assert_eq!(post_with(&door, &token, &get, &[]).await, 200);
    // Past the cap of one peer: bob's call is counted as "other".
    assert_eq!(post_with(&door, &second, &get, &[]).await, 200);
    let stream = json!({"jsonrpc": "2.0", "id": 4, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m-stream", "role": "ROLE_USER", "parts": [{"text": "s"}]}}});
    let mut response = open_stream(&door, &token, &stream).await;
    read_until(&mut response, "TASK_STATE_COMPLETED").await;
    let metrics = gw.metrics_as("ada", "ada's admin password 1").await;
    for needle in [
        r#"rpc_server_call_duration_seconds_count{a2a_protocol_binding="jsonrpc",rpc_method="lf.a2a.v1.A2AService/SendMessage",outcome="answered"} 1"#,
        r#"rpc_server_call_duration_seconds_count{a2a_protocol_binding="jsonrpc",rpc_method="lf.a2a.v1.A2AService/GetTask",outcome="failed"} 2"#,
        r#"rpc_server_call_duration_seconds_count{a2a_protocol_binding="jsonrpc",rpc_method="lf.a2a.v1.A2AService/SendStreamingMessage",outcome="streaming"} 1"#,
        r#"gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="chat"} 2"#,
        r#"gen_ai_client_token_usage_count{gen_ai_operation_name="chat",gen_ai_token_type="output"} 2"#,
        r#"a2a_server_stream_time_to_first_event_seconds_count 1"#,
        r#"peergate_peer_call_duration_seconds_count{peer_id="other",rpc_method="lf.a2a.v1.A2AService/GetTask",outcome="failed"} 1"#,
    ] {
        assert!(metrics.contains(needle), "{needle}\n{metrics}");
    }
    // Alice's calls under her id, one series per operation and outcome.
    let alices: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("peergate_peer_call_duration_seconds_count{"))
        .filter(|line| !line.contains(r#"peer_id="other""#))
        .collect();
    assert_eq!(alices.len(), 3, "{metrics}");
    // No peer's name, no secret, no text in a label.
    assert!(!metrics.contains("alice") && !metrics.contains("bob") && !metrics.contains(&token));
}

#[tokio::test]
async fn a_push_delivery_has_a_span_of_its_own_linked_to_the_call_that_made_its_task() {
    let otlp = OtlpReceiver::start(false);
    let receiver = PushReceiver::start().await;
    let policy = PolicyEdit::default()
        .set("capabilities.push_notifications", true)
        .set("push.dangerous_allow_loopback_callbacks", true);
    let vars = exporting(&otlp);
    let served = ServedPolicy::start(&policy, &["alice"], &env_of(&vars));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-push", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"taskPushNotificationConfig": {"url": receiver.url, "token": "t-1"}}}});
    let door = served.server.door();
    assert_eq!(post_with(&door, &served.tokens[0], &body, &[]).await, 200);
    receiver.wait_for(2).await;
    let delivered = |span: &&Value| span["name"] == "peergate.push.deliver";
    let spans = otlp
        .spans_when(|spans| spans.iter().filter(delivered).count() >= 2)
        .await;
    let call = server_spans(&spans, "SendMessage")[0];
    let deliveries: Vec<&Value> = spans.iter().filter(delivered).collect();
    assert_eq!(deliveries.len(), 2, "one span per delivery: {spans:?}");
    for (attempted, delivery) in deliveries.into_iter().enumerate() {
        assert_eq!(delivery["kind"], "SPAN_KIND_CLIENT", "{delivery}");
        // A trace of its own (it runs after the answer), linked to the call.
        assert_ne!(delivery["trace_id"], call["trace_id"], "{delivery}");
        assert_eq!(
            delivery["links"][0]["trace_id"], call["trace_id"],
            "{delivery}"
        );
        assert_eq!(
            delivery["links"][0]["span_id"], call["span_id"],
            "{delivery}"
        );
        assert_eq!(
            attribute(delivery, "a2a.task.id"),
            attribute(call, "a2a.task.id"),
            "{delivery} ({attempted})"
        );
        assert_eq!(attribute(delivery, "peergate.push.attempt"), 1);
        assert!(delivery["status"].get("code").is_none(), "{delivery}");
    }
}

#[tokio::test]
async fn a_full_span_queue_drops_spans_counts_them_and_answers_every_call() {
    // A collector that takes every export and never answers: the first batch waits on it,
    // the queue behind it fills.
    let receiver = OtlpReceiver::start(true);
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let policy = PolicyEdit::default()
        .set("telemetry.queue", 64)
        .set("limits.per_ip_per_minute", 1_000_000);
    let served = ServedPolicy::start(&policy, &[], &vars);
    // The public card: a span each, and no peer's quota in the way.
    let card = format!("http://{}/.well-known/agent-card.json", served.server.addr);
    // More than a batch (512) and the queue (64) hold.
    let callers = (0..8).map(|_| {
        let card = card.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let status = reqwest::get(&card).await.unwrap().status();
                assert_eq!(status, 200);
            }
        })
    });
    for caller in callers {
        caller.await.unwrap();
    }
    let password = "ada's admin password 1";
    let (code, _, stderr) = cli_with_stdin_on(
        &served.data,
        &["admin", "add", "ada"],
        &format!("{password}\n"),
    );
    assert_eq!(code, 0, "{stderr}");
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", served.server.admin_addr))
        .basic_auth("ada", Some(password))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix(r#"peergate_spans_total{outcome="queue_full"} "#))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(dropped >= 800 - 512 - 64, "{dropped} dropped\n{metrics}");
}
