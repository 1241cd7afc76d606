//! Who may do what, as Cedar policies (`[authorization]`, docs/authorization.md): decided once
//! per call on every binding before anything is read, from what the sign-in established (an
//! identity provider's group claims among it) and what the call carries; the admin API under the
//! same policies; decisions in the access log, the metrics and the audit; reloaded while serving
//! without losing a request; bad files refused with the policy and the problem named.

use crate::admin::{AdminClient, add_admin};
use crate::common::*;
use serde_json::{Value, json};
use std::time::Duration;

const AUDIENCE: &str = "https://gw.example.com/a2a/v1";
const PASSWORD_A: &str = "ada's admin password 1";
const PASSWORD_B: &str = "bob's admin password 22";

/// Partners change, viewers read, no one sends files; administrators (not auditors) do
/// everything on the admin API.
const POLICIES: &str = r#"
@id("partners-change")
permit (principal, action in Peergate::Action::"a2a", resource)
when { principal.hasTag("groups") && principal.getTag("groups").contains("partners") };

@id("viewers-read")
permit (principal, action in Peergate::Action::"read-only", resource)
when { principal.hasTag("groups") && principal.getTag("groups").contains("viewers") };

@id("no-files")
forbid (principal is Peergate::Peer, action, resource)
when { context.partKinds.contains("file") };

@id("administrators")
permit (principal is Peergate::Administrator, action in Peergate::Action::"admin", resource)
when { principal.role == "admin" };
"#;

fn message(parts: Value) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                       "parts": parts}})
}

fn request(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

/// An HTTP+JSON call: status and body.
async fn rest(gw: &TestGateway, path: &str, token: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(gw.url(&format!("/a2a/v1/rest{path}")))
        .bearer_auth(token)
        .header("a2a-version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn cedar_policies_read_group_claims_and_decide_every_binding_before_anything_is_read() {
    let key = TestKey::new("idp-1", 31);
    let clients = vec![
        json!({"client_id": "writer-app", "client_secret": "secret-w",
               "scope": "a2a:message a2a:tasks:read a2a:tasks:cancel a2a:push",
               "groups": ["partners"]}),
        json!({"client_id": "reader-app", "client_secret": "secret-r",
               "scope": "a2a:message a2a:tasks:read a2a:tasks:cancel a2a:push",
               "groups": ["viewers"]}),
    ];
    let Some(idp) = TestIdp::start_with_clients(AUDIENCE, clients, &[&key], 0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies.cedar");
    std::fs::write(&policies, POLICIES).unwrap();
    let policy = PolicyEdit::from_text(
        &std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap(),
    )
    .set("auth.schemes", ["bearer", "jwt"])
    .set("limits.failed_auth_per_ip_per_minute", 2)
    .push_table(
        "auth.issuers",
        &[
            ("name", "acme".into()),
            ("issuer", idp.issuer.as_str().into()),
            ("audience", AUDIENCE.into()),
            ("dangerous_allow_http_loopback", true.into()),
            (
                "claims",
                toml_edit::Value::Array(toml_edit::Array::from_iter(["groups"])),
            ),
        ],
    )
    .insert("authorization.policies", policies.to_str().unwrap());
    let gw = TestGateway::start_with(policy.policy()).await;
    for (peer, subject) in [("writer", "writer-app"), ("reader", "reader-app")] {
        gw.add_peer(peer);
        gw.bind(peer, &["--issuer", "acme", "--subject", subject]);
    }
    let stranger = gw.add_peer("stranger");
    let all = "a2a:message a2a:tasks:read a2a:tasks:cancel a2a:push";
    let writer = idp.token(("writer-app", "secret-w"), all).await;
    let reader = idp.token(("reader-app", "secret-r"), all).await;

    // JSON-RPC: the partner sends; a file part is forbidden by name, whoever sends it.
    let sent = rpc(
        &gw.door,
        &writer,
        serde_json::from_str(&request("SendMessage", message(json!([{"text": "hi"}])))).unwrap(),
    )
    .await;
    let task = task_of(&sent)["id"].as_str().unwrap().to_owned();
    let file = message(json!([{"raw": "aGVsbG8=", "mediaType": "text/plain"}]));
    let (status, body) = post_raw(&gw.door, Some(&writer), request("SendMessage", file)).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    let said = body["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("SendMessage") && !said.contains("no-files"),
        "{said}"
    );

    // The viewer reads and changes nothing, on JSON-RPC and HTTP+JSON …
    let text = || message(json!([{"text": "may I?"}]));
    for (method, params) in [
        ("SendMessage", text()),
        ("SendStreamingMessage", text()),
        ("CancelTask", json!({"id": task})),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "url": "https://hooks.example/a2a"}),
        ),
    ] {
        let (status, body) = post_raw(&gw.door, Some(&reader), request(method, params)).await;
        assert_eq!(status, 403, "{method}: {body}");
        assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    }
    let (status, body) = rest(&gw, "/message:send", &reader, text()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("permission_denied"))
    );
    let listed = rpc(
        &gw.door,
        &reader,
        serde_json::from_str(&request("ListTasks", json!({}))).unwrap(),
    )
    .await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");

    // … and gRPC, through the official stubs.
    let grpc = gw.grpc.expect("full.toml serves gRPC").to_string();
    let summary = run_interop_script(
        "a2a_python_grpc_policies.py",
        &[
            "--grpc",
            &grpc,
            "--token",
            &writer,
            "--reader-token",
            &reader,
        ]
        .map(str::to_owned),
    )
    .await;
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED", "{summary}");
    for change in ["send", "stream", "cancel", "push"] {
        assert_eq!(summary[change]["code"], "PERMISSION_DENIED", "{summary}");
        assert_eq!(
            summary[change]["reasons"],
            json!([["PERMISSION_DENIED", "peergate"]]),
            "{summary}"
        );
    }
    assert_eq!(summary["listed"], 0, "{summary}");

    // Decided before anything is read: to a peer no policy permits, another's task and no task
    // answer alike. Its denials are no failed sign-ins: a wrong credential afterwards is the
    // first of them (401), not past the limit of two (429).
    let get = |id: &str| request("GetTask", json!({"id": id}));
    let others = post_raw(&gw.door, Some(&stranger), get(&task)).await;
    let missing = post_raw(&gw.door, Some(&stranger), get("no-such-task")).await;
    assert_eq!(others.0, 403, "{others:?}");
    assert_eq!(others, missing);
    for _ in 0..4 {
        post_raw(&gw.door, Some(&stranger), get(&task)).await;
    }
    let wrong = post_raw(&gw.door, Some("pg_not_a_token"), get(&task)).await;
    assert_eq!(wrong.0, 401, "{wrong:?}");

    // The card URL decides an authenticated peer's extended card as GetExtendedAgentCard: the
    // stranger reads the public card, the partner its extended one.
    let card = |token: Option<String>| {
        let url = gw.url("/.well-known/agent-card.json");
        async move {
            let mut request = reqwest::Client::new().get(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.unwrap().text().await.unwrap()
        }
    };
    let public = card(None).await;
    assert_eq!(card(Some(stranger.clone())).await, public);
    assert_ne!(card(Some(writer.clone())).await, public);

    // The admin API: an administrator may, an auditor may not (no policy permits auditors).
    add_admin(gw.data.path(), "ada", PASSWORD_A);
    add_admin(gw.data.path(), "bob", PASSWORD_B);
    let (code, _, stderr) = gw.cli(&["admin", "role", "bob", "auditor"]);
    assert_eq!(code, 0, "{stderr}");
    let (ada, bob) = (
        AdminClient::basic(&gw, "ada", PASSWORD_A),
        AdminClient::basic(&gw, "bob", PASSWORD_B),
    );
    assert_eq!(ada.get("/v1/peers").await.0, 200);
    let (status, body) = bob.get("/v1/peers").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("list_peers")
    );

    // Counted by the policies that decided; audited with them, once a minute per peer and
    // operation (the stranger asked six times).
    let (_, metrics) = ada.get("/metrics").await;
    let metrics = metrics.as_str().unwrap().to_owned();
    for series in [
        r#"{listener="door",decision="allow",policy="partners-change"}"#,
        r#"{listener="door",decision="deny",policy="no-files"}"#,
        r#"{listener="door",decision="deny",policy="default"}"#,
        r#"{listener="admin",decision="allow",policy="administrators"}"#,
        r#"{listener="admin",decision="deny",policy="default"}"#,
    ] {
        let line = format!("peergate_authorization_decisions_total{series}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(metrics.contains(r#"peergate_rejections_total{reason="policy_denied"}"#));
    let records = audit_records(&gw, "denied_by_policy").await;
    let of = |actor: &str, outcome: &str| {
        records
            .iter()
            .filter(|r| r["actor"] == actor && r["outcome"] == outcome)
            .count()
    };
    assert_eq!(of("peer:stranger", "denied: GetTask"), 1, "{records:#?}");
    assert_eq!(of("peer:reader", "denied: SendMessage"), 1, "{records:#?}");
    assert_eq!(of("admin:bob", "denied: list_peers"), 1, "{records:#?}");
    let writers = records
        .iter()
        .find(|r| r["actor"] == "peer:writer")
        .expect("the file part's denial is audited");
    assert!(
        writers["detail"]
            .as_str()
            .unwrap()
            .contains("policies: no-files")
    );
}

/// The audit records whose action ends in `suffix`, as the operator reads them (the peer
/// denials are written off the call's path: waited for).
async fn audit_records(gw: &TestGateway, suffix: &str) -> Vec<Value> {
    let mut records = Vec::new();
    for _ in 0..100 {
        let (code, audit, stderr) = gw.cli(&["audit", "--json"]);
        assert_eq!(code, 0, "{stderr}");
        let audit: Value = serde_json::from_str(&audit).unwrap();
        records = audit
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"].as_str().unwrap().ends_with(suffix))
            .cloned()
            .collect();
        if records.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    records
}

/// Every peer may do everything; the version's id names the policy that decided.
fn everyone(version: usize) -> String {
    format!(
        "@id(\"v{version}\")\npermit (principal is Peergate::Peer, action, resource);\n\
         @id(\"admins\")\npermit (principal is Peergate::Administrator, action, resource);\n"
    )
}

/// Replaces the file at `path` whole (written aside, then renamed), as configuration
/// management does: a reload never reads it half written.
fn replace(path: &std::path::Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// The status of a SendMessage.
async fn send_status(door: &str, token: &str) -> u16 {
    let body = request("SendMessage", message(json!([{"text": "hello"}])));
    post_raw(door, Some(token), body).await.0
}

#[tokio::test(flavor = "multi_thread")]
async fn policies_reload_under_load_losing_no_request_and_a_bad_file_keeps_those_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let cedar = dir.path().join("policies.cedar");
    std::fs::write(&cedar, everyone(0)).unwrap();
    let edit = PolicyEdit::default()
        .set("log.access", true)
        .set("limits.per_ip_per_minute", 100_000)
        .insert("authorization.policies", cedar.to_str().unwrap());
    let served = ServedPolicy::start(&edit, &["alice"], &[("RUST_LOG", "")]);
    let (door, token) = (served.server.door(), served.tokens[0].clone());
    let (code, _, stderr) = cli_on(&served.data, &["peer", "limit", "alice", "100000/min"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(send_status(&door, &token).await, 200);

    // Four clients send while the policies are replaced twenty times: every answer is 200.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (door, token, stop) = (door.clone(), token.clone(), stop.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    statuses.push(send_status(&door, &token).await);
                }
                statuses
            })
        })
        .collect();
    for version in 1..=20 {
        replace(&cedar, &everyone(version));
        served.hang_up();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered = 0;
    for client in clients {
        let statuses = client.await.unwrap();
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        answered += statuses.len();
    }
    assert!(answered >= 20, "{answered}");
    // The reloads took effect while the clients sent: several versions decided.
    let log = served.server.log_text();
    let versions: std::collections::BTreeSet<&str> = log
        .lines()
        .filter_map(|line| line.split("authz=\"allow:").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(versions.len() >= 3, "{versions:?}");

    // A file that does not parse is refused whole, saying where; the policies in force stay.
    replace(
        &cedar,
        "@id(\"broken\")\npermit (principal, action, resource\n",
    );
    served.hang_up();
    let log = served.server.log_with("authorization.policies: line");
    let refused = log
        .lines()
        .find(|line| line.contains("authorization.policies: line"));
    assert!(
        refused.is_some_and(|line| line.contains("was not reloaded")),
        "{log}"
    );
    assert_eq!(send_status(&door, &token).await, 200);

    // A forbid on SendMessage, reloaded: the next sends are refused, and the access log says
    // which policy decided.
    let forbid = format!(
        "{}@id(\"no-sends\")\nforbid (principal, action == Peergate::Action::\"SendMessage\", resource);\n",
        everyone(21)
    );
    replace(&cedar, &forbid);
    served.hang_up();
    let mut status = 200;
    for _ in 0..100 {
        status = send_status(&door, &token).await;
        if status == 403 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 403);
    let log = served.server.log_with("authz=\"deny:no-sends\"");
    assert!(log.contains("authz=\"deny:no-sends\""), "{log}");
}

#[test]
fn serve_and_policy_check_refuse_bad_policy_files_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let schema_without_get = file(
        "partial.cedarschema",
        &peergate::authz::schema::BUILT_IN.replace("\"GetTask\", ", ""),
    );
    let cases = [
        (
            file("syntax.cedar", "permit (principal, action resource);"),
            None,
            "authorization.policies: line 1",
        ),
        (
            file(
                "action.cedar",
                "@id(\"typo\") permit (principal, action == Peergate::Action::\"SendMesage\", resource);",
            ),
            None,
            "policy typo",
        ),
        (
            file("huge.cedar", &"// padding\n".repeat(120_000)),
            None,
            "larger than 1 MiB",
        ),
        (
            file("fine.cedar", &everyone(1)),
            Some(schema_without_get),
            "authorization.schema does not describe peergate's GetTask requests",
        ),
    ];
    for (policies, schema, expected) in cases {
        let mut edit = PolicyEdit::default().insert("authorization.policies", policies.as_str());
        if let Some(schema) = &schema {
            edit = edit.insert("authorization.schema", schema.as_str());
        }
        let policy = file("policy.toml", &edit.text());
        let (code, _, stderr) = cli(&["policy", "check", "--policy", &policy]);
        assert_ne!(code, 0, "{stderr}");
        assert!(stderr.contains(expected), "{expected}: {stderr}");
        let data = dir.path().join("data");
        let (code, _, stderr) = cli_on(&data, &["serve", "--policy", &policy]);
        assert_ne!(code, 0);
        assert!(stderr.contains(expected), "serve: {expected}: {stderr}");
    }
}

/// The worked policies of docs/authorization.md are Cedar that validates against the schema.
#[test]
fn every_worked_policy_in_the_docs_validates() {
    let docs = std::fs::read_to_string(repo_root().join("docs/authorization.md")).unwrap();
    let blocks: Vec<&str> = docs
        .split("```cedar\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert!(blocks.len() >= 6, "{blocks:?}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), blocks.concat()).unwrap();
    let files = peergate::authz::PolicyFiles {
        policies: file.path().to_owned(),
        schema: None,
    };
    let loaded = peergate::authz::Loaded::read(&files).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.policy_count(), 9);
}
