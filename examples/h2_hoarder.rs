//! A gRPC client that never opens its flow-control window, for `bench/unread.sh`: CONNECTIONS
//! HTTP/2 connections to the gRPC listener, each calling METHOD with one message (hex) again
//! and again without reading an answer, reconnecting when the gateway closes it, for SECONDS;
//! every ten seconds it prints the gateway's resident memory (its PID) and what it did.
//!
//! ```text
//! cargo run --release --example h2_hoarder -- ADDR TOKEN METHOD MESSAGE_HEX CONNECTIONS SECONDS PID
//! ```

use axum::body::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Counts {
    calls: AtomicUsize,
    connections: AtomicUsize,
    closed: AtomicUsize,
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, token, method, message, connections, seconds, pid] = &args[..] else {
        eprintln!("usage: h2_hoarder ADDR TOKEN METHOD MESSAGE_HEX CONNECTIONS SECONDS PID");
        std::process::exit(2);
    };
    let addr: std::net::SocketAddr = addr.parse().expect("ADDR is host:port");
    let message = framed(&hex(message));
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/lf.a2a.v1.A2AService/{method}"))
        .header("content-type", "application/grpc")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    let counts = Arc::new(Counts::default());
    for _ in 0..connections.parse::<usize>().unwrap() {
        let (request, message, counts) = (request.clone(), message.clone(), counts.clone());
        tokio::spawn(async move {
            loop {
                hoard(addr, &request, &message, &counts).await;
                counts.closed.fetch_add(1, Relaxed);
            }
        });
    }
    let (start, seconds) = (Instant::now(), seconds.parse::<u64>().unwrap());
    while start.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        println!(
            "{:4} s  rss {:7} KiB  calls {:8}  connections {:5}  closed by the gateway {:5}",
            start.elapsed().as_secs(),
            rss_kib(pid),
            counts.calls.load(Relaxed),
            counts.connections.load(Relaxed),
            counts.closed.load(Relaxed),
        );
    }
}

/// One connection, calling until the gateway ends it.
async fn hoard(
    addr: std::net::SocketAddr,
    request: &axum::http::Request<()>,
    message: &Bytes,
    counts: &Counts,
) {
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    };
    let handshake = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp);
    let Ok(Ok((mut client, connection))) =
        tokio::time::timeout(Duration::from_secs(5), handshake).await
    else {
        return;
    };
    counts.connections.fetch_add(1, Relaxed);
    let driving = tokio::spawn(connection);
    let mut held = Vec::new();
    while !driving.is_finished() {
        let ready = std::future::poll_fn(|cx| client.poll_ready(cx));
        match tokio::time::timeout(Duration::from_secs(1), ready).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => continue,
        }
        let Ok((answer, mut body)) = client.send_request(request.clone(), false) else {
            break;
        };
        let _ = body.send_data(message.clone(), true);
        counts.calls.fetch_add(1, Relaxed);
        // The answer's headers are taken, its data never.
        held.push(tokio::spawn(async move {
            let _body = body;
            let _answer = answer.await;
            std::future::pending::<()>().await;
        }));
        tokio::task::yield_now().await;
    }
    for call in held {
        call.abort();
    }
}

/// A gRPC message: uncompressed, its length, the bytes.
fn framed(message: &[u8]) -> Bytes {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("MESSAGE_HEX is hex"))
        .collect()
}

fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}
