//! A connection whose client stops reading is closed, and what it held is released.
//!
//! Every accepted connection's socket is wrapped in [`GuardedIo`]:
//!
//! * **Stalled writes.** A write (or flush) that cannot progress for
//!   `server.write_stall_seconds` fails with `TimedOut`, so the server closes the connection and
//!   drops the response, its buffered events and its place among the peer's open streams. A
//!   client that reads nothing of an answer therefore holds the connection for at most that
//!   long once the kernel's buffers are full.
//! * **A stream's end.** A stream ([`crate::http::sse`]) sets the connection's
//!   [`ConnectionDeadline`] to its maximum duration plus the stall time; a write attempted past
//!   it, or pending when it passes, fails the same way. So a client that reads a trickle, too
//!   slowly to stall but too slowly to ever finish, is closed too. The deadline is cleared when
//!   the stream's body is dropped, so a connection that goes on to other requests is not cut.
//!
//! Reads pass through untouched: the header-read timeout and the request timeout bound them.

use pin_project_lite::pin_project;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// When a connection must be done, if a stream set a bound; shared between the socket's
/// wrapper and the requests it carries.
#[derive(Debug)]
pub struct ConnectionDeadline {
    base: Instant,
    /// Nanoseconds after `base`; 0 for none.
    at: AtomicU64,
}

impl ConnectionDeadline {
    /// A connection without a deadline.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            at: AtomicU64::new(0),
        })
    }

    /// The connection must be done `after` from now; cleared when the returned guard drops.
    pub fn bound(self: &Arc<Self>, after: Duration) -> DeadlineGuard {
        let at = (Instant::now() + after).saturating_duration_since(self.base);
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.at.store(nanos, Ordering::SeqCst);
        DeadlineGuard(self.clone())
    }

    fn get(&self) -> Option<Instant> {
        match self.at.load(Ordering::SeqCst) {
            0 => None,
            nanos => Some(self.base + Duration::from_nanos(nanos)),
        }
    }
}

/// Clears a connection's deadline when dropped (the stream that set it ended).
#[derive(Debug)]
pub struct DeadlineGuard(Arc<ConnectionDeadline>);

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        self.0.at.store(0, Ordering::SeqCst);
    }
}

pin_project! {
    /// A socket whose writes may not stall, nor outlive the connection's deadline.
    pub struct GuardedIo<T> {
        #[pin]
        inner: T,
        stall: Duration,
        deadline: Arc<ConnectionDeadline>,
        // Armed while a write is pending.
        stalled: Option<Pin<Box<Sleep>>>,
        // Armed while a write is pending and a deadline is set.
        ends: Option<(Instant, Pin<Box<Sleep>>)>,
    }
}

impl<T> GuardedIo<T> {
    /// Wraps `inner`: a write pending for `stall` fails, and so does one past `deadline`.
    pub fn new(inner: T, stall: Duration, deadline: Arc<ConnectionDeadline>) -> Self {
        Self {
            inner,
            stall,
            deadline,
            stalled: None,
            ends: None,
        }
    }
}

fn timed_out(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, why)
}

impl<T: AsyncWrite> GuardedIo<T> {
    /// Runs one write-side operation under the guard.
    fn guarded<R>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        operation: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<R>>,
        progressed: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        let this = self.project();
        let deadline = this.deadline.get();
        if deadline.is_some_and(|at| Instant::now() >= at) {
            return Poll::Ready(Err(timed_out("the stream's maximum duration passed")));
        }
        match operation(this.inner, cx) {
            Poll::Ready(Ok(result)) => {
                if progressed(&result) {
                    *this.stalled = None;
                    *this.ends = None;
                }
                Poll::Ready(Ok(result))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let stall = *this.stall;
                let stalled = this
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if stalled.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(timed_out("the client stopped reading")));
                }
                if let Some(at) = deadline {
                    if this.ends.as_ref().is_none_or(|(armed, _)| *armed != at) {
                        *this.ends = Some((at, Box::pin(tokio::time::sleep_until(at))));
                    }
                    if let Some((_, ends)) = this.ends.as_mut()
                        && ends.as_mut().poll(cx).is_ready()
                    {
                        return Poll::Ready(Err(timed_out("the stream's maximum duration passed")));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncRead> AsyncRead for GuardedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.guarded(cx, |inner, cx| inner.poll_write(cx, buf), |n| *n > 0)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.guarded(
            cx,
            |inner, cx| inner.poll_write_vectored(cx, bufs),
            |n| *n > 0,
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guarded(cx, |inner, cx| inner.poll_flush(cx), |()| true)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.guarded(cx, |inner, cx| inner.poll_shutdown(cx), |()| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_stall_time() {
        // The far end never reads: a 1 KiB pipe fills at once.
        let (near, _far) = tokio::io::duplex(1024);
        let mut guarded = GuardedIo::new(near, Duration::from_secs(20), ConnectionDeadline::new());
        let written = guarded.write_all(&[7u8; 64 * 1024]).await;
        let error = written.expect_err("a write nobody reads went through");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_read_in_time_goes_through() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut guarded = GuardedIo::new(near, Duration::from_secs(20), ConnectionDeadline::new());
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0u8; 512];
            while got.len() < 64 * 1024 {
                // Slow, but never stalled for the whole stall time.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let n = tokio::io::AsyncReadExt::read(&mut far, &mut chunk)
                    .await
                    .unwrap();
                got.extend_from_slice(&chunk[..n]);
            }
            got.len()
        });
        guarded.write_all(&[7u8; 64 * 1024]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 64 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_reader_is_cut_at_the_deadline_and_a_cleared_one_is_not() {
        let (near, mut far) = tokio::io::duplex(1024);
        let deadline = ConnectionDeadline::new();
        let mut guarded = GuardedIo::new(near, Duration::from_secs(20), deadline.clone());
        let bound = deadline.bound(Duration::from_secs(60));
        tokio::spawn(async move {
            let mut chunk = [0u8; 16];
            loop {
                // Reads a little every 10 s: never stalled, never done.
                tokio::time::sleep(Duration::from_secs(10)).await;
                if tokio::io::AsyncReadExt::read(&mut far, &mut chunk)
                    .await
                    .unwrap_or(0)
                    == 0
                {
                    break;
                }
            }
        });
        let started = Instant::now();
        let error = guarded
            .write_all(&[7u8; 64 * 1024])
            .await
            .expect_err("a trickle outlived the deadline");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        // The stream ended: its deadline no longer applies to the connection.
        drop(bound);
        assert_eq!(deadline.get(), None);
    }
}
