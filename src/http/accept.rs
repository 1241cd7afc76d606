//! The accept loop: the outermost guard, before any request exists.
//!
//! * **Header-read timeout.** A client that opens a connection and sends its request head slowly
//!   or not at all (a slowloris) is disconnected when `server.header_read_timeout_seconds` pass,
//!   while every other connection is served; a head past [`MAX_HEADER_BYTES`] is answered 431.
//! * **Connection cap.** At most `server.max_connections` connections are open at once; one past
//!   the cap is closed as soon as it is accepted, before a byte is read, so a flood of idle
//!   connections cannot exhaust file descriptors or memory.
//! * **Connections per address.** At most `server.max_connections_per_address` of them from one
//!   address (IPv6 by /64), so one client cannot take every slot before it has authenticated
//!   and leave none for the others. Addresses in `server.trusted_proxies` are exempt: a proxy
//!   carries many clients.
//! * **Clients that stop reading.** Every socket's writes are guarded
//!   ([`crate::http::stalled_writes`]): one that cannot progress for
//!   `server.write_stall_seconds`, or outlives its stream's maximum duration, closes the
//!   connection and releases what it held.
//! * **Graceful drain.** When shutdown is signalled the listener is closed at once (new
//!   connections are refused by the operating system), idle connections are closed, and
//!   requests in flight get `server.shutdown_grace_seconds` to finish.
//!
//! The request timeout and the body limit are tower layers inside (see `server.rs`).

use crate::guard::certificate::ClientCertificate;
use crate::guard::cidr::Cidr;
use crate::http::h2_watch::{self, ConnectionApp, Drain, StreamTimes};
use crate::http::stalled_writes::{ConnectionDeadline, GuardedIo};
use crate::layers::client_addr::ClientAddr;
use crate::layers::metrics::Metrics;
use crate::shared::capped_counts::CappedCounts;
use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// The most a request's head (its line and headers) may take on an HTTP/1.1 listener: a
/// token of 16 KiB and a forwarded certificate fit, a header line of hundreds of KiB does not
/// (431). hyper's own bound is its read buffer, about 400 KiB. HTTP/2 has its 16 KiB header
/// list.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// How the accept loop protects the gateway.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's head.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one address (IPv6 by /64).
    pub max_per_address: usize,
    /// Addresses the per-address cap does not apply to (trusted proxies).
    pub exempt: Arc<[Cidr]>,
    /// How long a write may wait for the client to read.
    pub write_stall: Duration,
    /// How long requests in flight may take to finish after shutdown is signalled.
    pub shutdown_grace: Duration,
}

/// The connection's view of `app`: every request carries the remote address, the connection's
/// write deadline and the client certificate its handshake verified.
fn connection_app(
    app: Router,
    remote: std::net::SocketAddr,
    deadline: Arc<ConnectionDeadline>,
    certificate: Option<Arc<ClientCertificate>>,
) -> impl ConnectionApp {
    app.map_request(move |request: hyper::Request<hyper::body::Incoming>| {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(ConnectInfo(remote));
        request.extensions_mut().insert(deadline.clone());
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        request
    })
}

/// The HTTP a listener speaks.
#[derive(Debug, Clone, Copy)]
pub enum Protocol {
    /// HTTP/1.1: the door and the admin API.
    Http1,
    /// HTTP/2 only (prior knowledge, or ALPN `h2` over TLS): the gRPC listener.
    Http2(Http2Limits),
}

/// What an HTTP/2 listener holds each connection to, besides [`ConnectionLimits`].
#[derive(Debug, Clone, Copy)]
pub struct Http2Limits {
    /// Requests one connection may have in flight at once.
    pub max_concurrent_streams: u32,
    /// How long a connection may have no stream open before it is sent GOAWAY.
    pub idle_timeout: Duration,
}

/// One connection's HTTP server, as the listener's protocol has it.
#[derive(Clone)]
enum Connections {
    Http1(hyper::server::conn::http1::Builder),
    Http2(
        hyper::server::conn::http2::Builder<TokioExecutor>,
        StreamTimes,
    ),
}

impl Connections {
    fn new(protocol: Protocol, limits: &ConnectionLimits) -> Self {
        match protocol {
            Protocol::Http1 => {
                let mut http = hyper::server::conn::http1::Builder::new();
                http.timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout)
                    .max_header_size(MAX_HEADER_BYTES);
                Self::Http1(http)
            }
            Protocol::Http2(http2) => {
                // HTTP/2 has no head to time: a connection that opens no stream in that time
                // is closed, one that stops answering pings within it too, and one whose
                // client stops taking its answers' data within the write-stall time
                // (crate::http::h2_watch).
                let mut http = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                http.timer(TokioTimer::new())
                    .max_concurrent_streams(http2.max_concurrent_streams)
                    .max_send_buf_size(h2_watch::MAX_SEND_BUFFER)
                    .keep_alive_interval(Some(limits.header_read_timeout))
                    .keep_alive_timeout(limits.header_read_timeout);
                let times = StreamTimes {
                    first_stream: limits.header_read_timeout,
                    stall: limits.write_stall,
                    idle: http2.idle_timeout,
                };
                Self::Http2(http, times)
            }
        }
    }

    /// Serves `app` on `io` until the connection ends or the listener drains.
    async fn serve<I, S>(&self, io: I, app: S, drain: Drain)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
        S: ConnectionApp,
    {
        match self {
            Self::Http1(http) => {
                // Errors here are the client's (a reset, a timed-out head, a client that
                // stopped reading): nothing to do.
                let app = TowerToHyperService::new(app);
                let _ = drain.watcher.watch(http.serve_connection(io, app)).await;
            }
            // Boxed, as the TLS branch: an HTTP/1.1 connection's task holds no room for it.
            Self::Http2(http, times) => {
                Box::pin(h2_watch::serve_connection(http, io, app, drain, *times)).await;
            }
        }
    }
}

/// The per-address slot a connection from `ip` holds while open: `Some(None)` for an address
/// exempt from the cap (a trusted proxy), `None` when the address is at its cap.
fn address_slot(
    limits: &ConnectionLimits,
    per_address: &CappedCounts<IpAddr>,
    ip: IpAddr,
) -> Option<Option<crate::shared::capped_counts::Place<IpAddr>>> {
    if limits.exempt.iter().any(|proxy| proxy.contains(ip)) {
        return Some(None);
    }
    let key = ClientAddr::of_socket(ip).limit_key();
    let cap = u32::try_from(limits.max_per_address).unwrap_or(u32::MAX);
    per_address.take(key, cap).map(Some)
}

/// One accepted connection, served to its end: with `tls`, after the handshake (within its
/// timeout), the verified client certificate going with every request.
async fn serve_connection(
    io: GuardedIo<tokio::net::TcpStream>,
    (remote, deadline): (std::net::SocketAddr, Arc<ConnectionDeadline>),
    (http, app, drain): (Connections, Router, Drain),
    tls: Option<(tokio_rustls::TlsAcceptor, Duration)>,
) {
    match tls {
        None => {
            let app = connection_app(app, remote, deadline, None);
            http.serve(TokioIo::new(io), app, drain).await;
        }
        // Boxed: a TLS session and its handshake are several KiB, and without the box every
        // connection's task would be that large, plain ones too (6,424 bytes instead of 2,416
        // in a test build; 6,096 before in a release build).
        Some(tls) => {
            Box::pin(serve_tls(io, (remote, deadline), (http, app, drain), tls)).await;
        }
    }
}

/// A connection on a TLS listener: the handshake within its timeout, then `app` with the client
/// certificate it verified (if any) going with every request, until that certificate expires.
async fn serve_tls(
    io: GuardedIo<tokio::net::TcpStream>,
    (remote, deadline): (std::net::SocketAddr, Arc<ConnectionDeadline>),
    (http, app, drain): (Connections, Router, Drain),
    (acceptor, handshake_timeout): (tokio_rustls::TlsAcceptor, Duration),
) {
    let Ok(Ok(tls)) = tokio::time::timeout(handshake_timeout, acceptor.accept(io)).await else {
        return;
    };
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| Arc::new(ClientCertificate::from_der(leaf.as_ref())));
    // Each request checks the certificate's expiry (the authenticator); a stream open when it
    // passes ends with the connection.
    let expires_in = certificate
        .as_ref()
        .and_then(|certificate| certificate.not_after)
        .map(|not_after| {
            let left = crate::clock::Timestamp::now().duration_until(not_after);
            Duration::try_from(left).unwrap_or(Duration::ZERO)
        });
    let app = connection_app(app, remote, deadline, certificate);
    let serving = http.serve(TokioIo::new(tls), app, drain);
    match expires_in {
        Some(left) => {
            let _ = tokio::time::timeout(left, serving).await;
        }
        None => serving.await,
    }
}

/// Serves `app` on `listener` in `protocol` until `shutdown` turns true, then drains. With
/// `tls`, each connection's handshake runs in the connection's own task, within the
/// header-read timeout, and the client certificate it verified (if any) goes with every
/// request of the connection.
pub async fn serve(
    listener: TcpListener,
    (app, protocol): (Router, Protocol),
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_address = CappedCounts::<IpAddr>::default();
    let graceful = GracefulShutdown::new();
    let http = Connections::new(protocol, &limits);
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
                let Some(address_slot) = address_slot(&limits, &per_address, remote.ip()) else {
                    metrics.connection_refused();
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let deadline = ConnectionDeadline::new();
                let io = GuardedIo::new(stream, limits.write_stall, deadline.clone());
                let drain = Drain {
                    watcher: graceful.watcher(),
                    shutdown: shutdown.clone(),
                    accepted: tokio::time::Instant::now(),
                };
                let served = (http.clone(), app.clone(), drain);
                let tls = tls.clone().map(|acceptor| (acceptor, limits.header_read_timeout));
                tokio::spawn(async move {
                    serve_connection(io, (remote, deadline), served, tls).await;
                    drop(address_slot);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A task is as large as the largest state its future can be in, and every open connection
    /// holds one: with the TLS session inline, plain connections paid for it too (6.3 KiB each;
    /// BENCHMARKS.md, "Ten thousand streams on one instance").
    #[tokio::test]
    async fn a_plain_connection_task_holds_no_room_for_a_tls_session() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, remote) = listener.accept().await.unwrap();
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1,
            max_per_address: 1,
            exempt: Arc::from(Vec::new()),
            write_stall: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(1),
        };
        let deadline = ConnectionDeadline::new();
        let io = GuardedIo::new(stream, limits.write_stall, deadline.clone());
        let graceful = GracefulShutdown::new();
        let (_draining, shutdown) = watch::channel(false);
        let drain = Drain {
            watcher: graceful.watcher(),
            shutdown,
            accepted: tokio::time::Instant::now(),
        };
        let served = (
            Connections::new(Protocol::Http1, &limits),
            Router::new(),
            drain,
        );
        let task = serve_connection(io, (remote, deadline), served, None);
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= 3 * 1024,
            "a connection's task is {size} bytes: something large is held inline again"
        );
        drop((task, client));
    }
}
