//! Hostile HTTP/2 clients on the gRPC listener, spoken to frame by frame with the `h2` crate:
//! a client that never opens its flow-control window, one that connects and sends nothing or
//! only the preface, one that goes idle, and a message past the body limit whose length only
//! its gRPC prefix gives.

use crate::common::*;
use axum::body::Bytes;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a test waits for the gateway to close a connection; what it waits for takes a
/// second or two, so this bounds only a failure.
const CLOSED_WITHIN: Duration = Duration::from_secs(30);

/// The full policy with the timers at their least, so the tests wait seconds, not minutes.
fn quick_grpc() -> PolicyEdit {
    PolicyEdit::from_text(&std::fs::read_to_string(repo_root().join("policies/full.toml")).unwrap())
        .set("server.header_read_timeout_seconds", 1)
        .set("server.write_stall_seconds", 1)
        .set("grpc.idle_timeout_seconds", 1)
}

/// An HTTP/2 connection to `addr` whose streams' flow-control windows start at `window`; the
/// task driving it ends when the gateway closes it.
async fn connect(
    addr: SocketAddr,
    window: u32,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    (client, tokio::spawn(connection))
}

/// A gRPC call of `path` with an empty message, and its stream (left open for the caller to
/// read or not).
async fn call(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    token: Option<&str>,
    message: &[u8],
) -> Result<h2::client::ResponseFuture, h2::Error> {
    let mut client = client.clone().ready().await?;
    let mut request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("http://peergate{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let (response, mut body) = client.send_request(request.body(()).unwrap(), false)?;
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(message);
    body.send_data(Bytes::from(framed), true)?;
    Ok(response)
}

/// The `grpc-*` fields a call ended with (its trailers, or its only headers), reading its
/// messages as a good client does.
async fn ending(response: h2::client::ResponseFuture) -> axum::http::HeaderMap {
    let response = response.await.unwrap();
    if response.headers().contains_key("grpc-status") {
        return response.headers().clone();
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
    }
    body.trailers().await.unwrap().unwrap_or_default()
}

/// The `google.rpc.Status` details of a call's ending, as text (the reasons are readable in it).
fn reasons(ending: &axum::http::HeaderMap) -> String {
    let details = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        ending["grpc-status-details-bin"].as_bytes(),
    )
    .unwrap();
    String::from_utf8_lossy(&details).into_owned()
}

/// The `grpc-status` a call ended with.
async fn status_of(response: h2::client::ResponseFuture) -> String {
    let ending = ending(response).await;
    ending
        .get("grpc-status")
        .map_or("none", |status| status.to_str().unwrap())
        .to_owned()
}

const CHECK: &str = "/grpc.health.v1.Health/Check";
const CARD: &str = "/lf.a2a.v1.A2AService/GetExtendedAgentCard";

#[tokio::test]
async fn a_client_that_never_opens_its_window_is_cut_and_a_reading_one_is_not() {
    let gw = TestGateway::start_with(quick_grpc().policy()).await;
    let token = gw.add_peer("alice");
    let grpc = gw.grpc.expect("full.toml serves gRPC");

    // Every answer waits whole for a window that never opens: the gateway keeps sixteen at
    // most, refusing the next calls at once, and only for the write-stall time.
    let (hoarder, hoarding) = connect(grpc, 0).await;
    let mut held = Vec::new();
    for path in [CARD, CHECK].into_iter().cycle().take(16) {
        let answer = call(&hoarder, path, Some(&token), &[]).await.unwrap();
        let answer = answer.await.unwrap();
        assert!(!answer.headers().contains_key("grpc-status"), "{answer:?}");
        held.push(answer);
    }
    let refused = ending(call(&hoarder, CARD, Some(&token), &[]).await.unwrap()).await;
    assert_eq!(refused["grpc-status"], "8", "{refused:?}");
    assert!(reasons(&refused).contains("NOT_READING"), "{refused:?}");
    // And the connection was sent GOAWAY: it takes no new call, so it cannot become a flood of
    // refusals.
    let going_away = tokio::time::timeout(CLOSED_WITHIN, async {
        loop {
            let refused = match call(&hoarder, CHECK, None, &[]).await {
                Err(_) => true,
                Ok(answer) => answer.await.is_err(),
            };
            if refused {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(going_away.is_ok(), "the connection still takes calls");
    // A client that reads, on a connection of its own, is served all the while.
    let (reader, reading) = connect(grpc, 65_535).await;
    let mut served = 0;
    let closed = tokio::time::timeout(CLOSED_WITHIN, async {
        while !hoarding.is_finished() {
            let answer = call(&reader, CHECK, None, &[]).await.unwrap();
            assert_eq!(
                status_of(answer).await,
                "0",
                "the reading client was refused"
            );
            served += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a connection whose client never took its answers' data is still open"
    );
    assert!(served > 0);
    drop(held);
    let answer = call(&reader, CARD, Some(&token), &[]).await.unwrap();
    assert_eq!(status_of(answer).await, "0", "the reading client was cut");
    assert!(!reading.is_finished());
    gw.stop().await;
}

#[tokio::test]
async fn a_connection_that_asks_nothing_is_closed_and_an_idle_one_is_sent_goaway() {
    let gw = TestGateway::start_with(quick_grpc().policy()).await;
    let grpc = gw.grpc.expect("full.toml serves gRPC");

    // Nothing at all, then only the preface and its SETTINGS: closed, as a silent head is.
    let mut silent = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let mut preface_only = tokio::net::TcpStream::connect(grpc).await.unwrap();
    preface_only
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    for (name, socket) in [("silent", &mut silent), ("preface only", &mut preface_only)] {
        let closed = tokio::time::timeout(CLOSED_WITHIN, async {
            let mut buffer = [0u8; 1024];
            while socket.read(&mut buffer).await.is_ok_and(|n| n > 0) {}
        })
        .await;
        assert!(closed.is_ok(), "the {name} connection is still open");
    }

    // A client that asked once and went idle is told to go (GOAWAY), after its answer.
    let (client, driving) = connect(grpc, 65_535).await;
    let answer = call(&client, CHECK, None, &[]).await.unwrap();
    assert_eq!(status_of(answer).await, "0");
    let ended = tokio::time::timeout(CLOSED_WITHIN, driving).await;
    let ended = ended.expect("an idle connection is still open").unwrap();
    assert!(ended.is_ok(), "closed with an error, not GOAWAY: {ended:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_message_past_the_body_limit_by_its_prefix_is_resource_exhausted() {
    let gw = TestGateway::start_with(quick_grpc().policy()).await;
    let token = gw.add_peer("alice");
    let grpc = gw.grpc.expect("full.toml serves gRPC");
    let (client, _driving) = connect(grpc, 65_535).await;
    // The prefix names a message a byte past the limit; the body itself is small, so only the
    // decoder sees how large it claims to be.
    let limit = 1_048_576u32 + 1;
    let mut client_call = client.clone().ready().await.unwrap();
    let request = axum::http::Request::builder()
        .method("POST")
        .uri("http://peergate/lf.a2a.v1.A2AService/SendMessage")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    let (response, mut body) = client_call.send_request(request, false).unwrap();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&limit.to_be_bytes());
    framed.extend_from_slice(&[0x0a; 16]);
    body.send_data(Bytes::from(framed), true).unwrap();
    let ending = ending(response).await;
    assert_eq!(
        ending["grpc-status"], "8",
        "not RESOURCE_EXHAUSTED: {ending:?}"
    );
    assert!(reasons(&ending).contains("BODY_TOO_LARGE"), "{ending:?}");
    gw.stop().await;
}

#[tokio::test]
async fn every_refusal_on_the_grpc_listener_ends_with_a_grpc_status() {
    let gw = TestGateway::start_with(quick_grpc().policy()).await;
    let token = gw.add_peer("alice");
    let (code, limited, stderr) = gw.cli(&["peer", "add", "carol", "--rate", "1/min"]);
    assert_eq!(code, 0, "{stderr}");
    let limited = limited.trim();
    let grpc = gw.grpc.expect("full.toml serves gRPC");
    let (client, _driving) = connect(grpc, 65_535).await;
    const GET_TASK: &str = "/lf.a2a.v1.A2AService/GetTask";
    // GetTaskRequest{id: "x"}.
    let get_x: &[u8] = &[0x12, 0x01, b'x'];
    // What is refused, the path, the token, the message and the status it must end with.
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, &'a [u8], &'a str);
    let cases: [Case; 7] = [
        ("no credential", GET_TASK, None, get_x, "16"),
        ("a wrong token", GET_TASK, Some("pgt_wrong"), get_x, "16"),
        (
            "no such method",
            "/lf.a2a.v1.A2AService/Nothing",
            Some(&token),
            &[],
            "12",
        ),
        (
            "no such service",
            "/other.Service/Call",
            Some(&token),
            &[],
            "12",
        ),
        (
            "a malformed message",
            GET_TASK,
            Some(&token),
            &[0xff, 0xff],
            "3",
        ),
        (
            "the first of a tight quota",
            GET_TASK,
            Some(limited),
            get_x,
            "5",
        ),
        ("past a tight quota", GET_TASK, Some(limited), get_x, "8"),
    ];
    for (what, path, token, message, code) in cases {
        let answer = call(&client, path, token, message).await.unwrap();
        let answer = tokio::time::timeout(CLOSED_WITHIN, answer)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: reset, not a status: {e}"));
        let ending = if answer.headers().contains_key("grpc-status") {
            answer.headers().clone()
        } else {
            let mut body = answer.into_body();
            while let Some(data) = body.data().await {
                data.unwrap_or_else(|e| panic!("{what}: reset in the answer: {e}"));
            }
            let trailers = body.trailers().await;
            trailers
                .unwrap_or_else(|e| panic!("{what}: reset before the status: {e}"))
                .unwrap_or_default()
        };
        assert_eq!(ending["grpc-status"], code, "{what}: {ending:?}");
    }
    gw.stop().await;
}
