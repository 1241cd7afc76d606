//! The protocol gate over real HTTP: `A2A-Version` and required `A2A-Extensions`.

use crate::common::*;
use serde_json::{Value, json};

const REQUIRED: &str = "https://example.com/ext/audit/v1";
const OPTIONAL: &str = "https://example.com/ext/trace/v1";

fn with_extensions(policy: PolicyEdit) -> PolicyEdit {
    policy
        .push_table(
            "card.extensions",
            &[
                ("uri", REQUIRED.into()),
                ("description", "Audit references.".into()),
                ("required", true.into()),
            ],
        )
        .push_table("card.extensions", &[("uri", OPTIONAL.into())])
}

async fn send(
    url: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let body = json!({"jsonrpc": "2.0", "id": "gate-1", "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}});
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap())
}

#[tokio::test]
async fn versions_other_than_1_x_are_refused_with_32009() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    for ok in [
        vec![],
        vec![("a2a-version", "1.0")],
        vec![("a2a-version", "1.1")],
        vec![("a2a-version", "1")],
    ] {
        let (status, _, body) = send(&gw.door, &token, &ok).await;
        assert_eq!(status, 200);
        assert!(body.get("result").is_some(), "{ok:?}: {body}");
    }
    for bad in ["0.3", "2.0", "banana"] {
        let (status, _, body) = send(&gw.door, &token, &[("a2a-version", bad)]).await;
        assert_eq!(status, 200);
        assert_eq!(body["id"], "gate-1");
        assert_eq!(body["error"]["code"], -32009, "{bad}");
        assert_eq!(body["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED");
        assert_eq!(body["error"]["data"][0]["domain"], "a2a-protocol.org");
        assert!(!body.to_string().contains("banana"), "echoes the version");
    }
    // The query parameter counts like the header.
    let (_, _, body) = send(&format!("{}?A2A-Version=0.3", gw.door), &token, &[]).await;
    assert_eq!(body["error"]["code"], -32009);
    let (_, _, body) = send(&format!("{}?A2A-Version=1.0", gw.door), &token, &[]).await;
    assert!(body.get("result").is_some());
    gw.stop().await;
}

#[tokio::test]
async fn a_version_named_twice_is_refused_not_first_wins() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    for twice in [
        vec![("a2a-version", "1.0"), ("a2a-version", "0.3")],
        vec![("a2a-version", "1.0"), ("a2a-version", "1.0")],
    ] {
        let (status, _, body) = send(&gw.door, &token, &twice).await;
        assert_eq!(status, 200);
        assert_eq!(body["id"], "gate-1");
        assert_eq!(body["error"]["code"], -32600, "{twice:?}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("A2A-Version")
        );
    }
    let url = format!("{}?A2A-Version=1.0&a2a-version=0.3", gw.door);
    let (_, _, body) = send(&url, &token, &[]).await;
    assert_eq!(body["error"]["code"], -32600, "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn strict_mode_refuses_a_missing_version() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("gate.require_version_header", true)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let (_, _, body) = send(&gw.door, &token, &[]).await;
    assert_eq!(body["error"]["code"], -32009);
    assert_eq!(body["id"], "gate-1");
    let (_, _, body) = send(&gw.door, &token, &[("a2a-version", "1.0")]).await;
    assert!(body.get("result").is_some(), "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn required_extensions_must_be_activated_and_activated_ones_are_echoed() {
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let policy = with_extensions(PolicyEdit::default())
        .openai(&model.base_url, "m")
        .policy();
    let gw = TestGateway::start_with(policy).await;
    let token = gw.add_peer("alice");
    let card: Value = reqwest::get(gw.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["capabilities"]["extensions"],
        json!([
            {"uri": REQUIRED, "description": "Audit references.", "required": true},
            {"uri": OPTIONAL}
        ])
    );
    // Missing, or only the optional one, or a near miss: -32008 before the model is asked.
    for headers in [
        vec![],
        vec![("a2a-extensions", OPTIONAL)],
        vec![("a2a-extensions", "https://example.com/ext/audit/v1/")],
    ] {
        let (status, response_headers, body) = send(&gw.door, &token, &headers).await;
        assert_eq!(status, 200);
        assert_eq!(body["error"]["code"], -32008, "{headers:?}");
        assert_eq!(
            body["error"]["data"][0]["reason"],
            "EXTENSION_SUPPORT_REQUIRED"
        );
        assert_eq!(
            body["error"]["data"][0]["metadata"]["missingExtensions"],
            REQUIRED
        );
        assert!(response_headers.get("a2a-extensions").is_none());
    }
    assert!(model.requests().is_empty(), "the backend was asked");
    // Listed among others, across two header lines: accepted, and the activated ones echoed.
    let (_, headers, body) = send(
        &gw.door,
        &token,
        &[
            (
                "a2a-extensions",
                "https://unknown.example/x, https://example.com/ext/audit/v1",
            ),
            ("a2a-extensions", OPTIONAL),
        ],
    )
    .await;
    assert!(body.get("result").is_some(), "{body}");
    assert_eq!(
        headers["a2a-extensions"],
        format!("{REQUIRED}, {OPTIONAL}").as_str()
    );
    assert_eq!(model.requests().len(), 1);
    gw.stop().await;
}
