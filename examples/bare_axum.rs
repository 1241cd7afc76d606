//! The baselines for `bench/load.sh` and `bench/grpc.sh`: a bare axum server that answers every
//! request with the same 200-byte JSON body, so the load script can show what peergate's layers
//! cost; and, given a second address, a bare gRPC server (tonic's server core over HTTP/2, as
//! peergate's gRPC listener uses it) that answers every call with the same 200-byte message, so
//! the gRPC script can show what HTTP/2 and gRPC's framing cost before any of peergate's work.
//!
//! `cargo run --release --example bare_axum -- 127.0.0.1:9000 [127.0.0.1:9001]`

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use prost::bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, UnaryService};

/// Exactly 200 bytes.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"00000000-0000-4000-8000-000000000000","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}},"note":"bare axum baseline for peergate xxxxxxxxxxxx"}}"#;

async fn fixed() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], BODY)
}

/// Any message in, the same 200 bytes out: the gRPC framing without a message type.
#[derive(Clone, Copy)]
struct FixedCodec;

impl Codec for FixedCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = FixedCodec;
    type Decoder = FixedCodec;
    fn encoder(&mut self) -> Self::Encoder {
        *self
    }
    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for FixedCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for FixedCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[derive(Clone, Copy)]
struct Answer;

impl UnaryService<Bytes> for Answer {
    type Response = Bytes;
    type Future = std::future::Ready<Result<tonic::Response<Bytes>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(Bytes::from_static(
            BODY.as_bytes(),
        ))))
    }
}

async fn grpc(request: Request) -> Response {
    Grpc::new(FixedCodec)
        .unary(Answer, request)
        .await
        .map(Body::new)
}

/// Serves `app` over HTTP/2 without TLS (prior knowledge), as peergate's gRPC listener does.
async fn serve_http2(listener: tokio::net::TcpListener, app: Router) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(app);
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    assert_eq!(BODY.len(), 200);
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("bare axum listening on http://{}", listener.local_addr()?);
    if let Some(grpc_addr) = args.next() {
        let grpc_listener = tokio::net::TcpListener::bind(&grpc_addr).await?;
        eprintln!(
            "bare gRPC listening on http://{}",
            grpc_listener.local_addr()?
        );
        let app = Router::new().route("/{*method}", post(grpc));
        tokio::spawn(serve_http2(grpc_listener, app));
    }
    axum::serve(listener, Router::new().fallback(any(fixed))).await
}
