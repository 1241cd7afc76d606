//! The baseline for `bench/load.sh`: a bare axum server that answers every request with the
//! same 200-byte JSON body, so the load script can show what peergate's layers cost.
//!
//! `cargo run --release --example bare_axum -- 127.0.0.1:9000`

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::any;

/// Exactly 200 bytes.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"00000000-0000-4000-8000-000000000000","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}},"note":"bare axum baseline for peergate xxxxxxxxxxxx"}}"#;

async fn fixed() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], BODY)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    assert_eq!(BODY.len(), 200);
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("bare axum listening on http://{}", listener.local_addr()?);
    axum::serve(listener, Router::new().fallback(any(fixed))).await
}
