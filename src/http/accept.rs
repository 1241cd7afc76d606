//! The accept loop: the outermost guard, before any request exists.
//!
//! * **Header-read timeout.** A client that opens a connection and sends its request head slowly
//!   or not at all (a slowloris) is disconnected when `server.header_read_timeout_seconds` pass,
//!   while every other connection is served.
//! * **Connection cap.** At most `server.max_connections` connections are open at once; one past
//!   the cap is closed as soon as it is accepted, before a byte is read, so a flood of idle
//!   connections cannot exhaust file descriptors or memory.
//! * **Graceful drain.** When shutdown is signalled the listener is closed at once (new
//!   connections are refused by the operating system), idle connections are closed, and
//!   requests in flight get `server.shutdown_grace_seconds` to finish.
//!
//! The request timeout and the body limit are tower layers inside (see `server.rs`).

use crate::layers::metrics::Metrics;
use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How the accept loop protects the gateway.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's head.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long requests in flight may take to finish after shutdown is signalled.
    pub shutdown_grace: Duration,
}

/// Serves `app` on `listener` until `shutdown` turns true, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, remote) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors or a connection reset before accept: back off
                        // briefly instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    metrics.connection_refused();
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let app = app.clone().map_request(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let mut request = request.map(axum::body::Body::new);
                        request.extensions_mut().insert(ConnectInfo(remote));
                        request
                    },
                );
                let connection = http.serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(app),
                );
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    // Errors here are the client's (a reset, a timed-out head): nothing to do.
                    let _ = connection.await;
                    drop(slot);
                });
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    // Closing the listener makes new connections fail at once.
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!("the shutdown grace period ended with requests still in flight; they are dropped");
        }
    }
    Ok(())
}
