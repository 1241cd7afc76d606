//! The open-files limit against the connections the policy allows: each connection is a file
//! descriptor, and a process that runs out accepts nothing more (and cannot open its store).
//!
//! At start-up the soft limit is raised towards the hard one when the door's
//! `server.max_connections` (and the gRPC listener's, with `[grpc]`) need more; when even the
//! hard limit is short, the log says what to raise (`LimitNOFILE=` in a systemd unit, `ulimit
//! -n` in a shell, `--ulimit nofile=` for a container). A short limit does not stop start-up:
//! the defaults ask for more than many systems' default soft limit, and the door works until
//! that many clients are connected at once.

use crate::config::Policy;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept for everything but the door's connections: the store, Redis, the model's
/// connections, the admin and metrics listeners, files.
const BESIDES_CONNECTIONS: u64 = 256;

/// What the policy's connections need.
fn needed(policy: &Policy) -> u64 {
    let listeners = 1 + u64::from(policy.grpc.is_some());
    (policy.server.max_connections.get())
        .saturating_mul(listeners)
        .saturating_add(BESIDES_CONNECTIONS)
}

/// Raises the soft limit when the policy needs more, and says so; warns when it cannot.
pub(super) fn fit(policy: &Policy) {
    let needed = needed(policy);
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= needed {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    let mut raised = needed.min(hard);
    if raised > soft {
        match setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(raised),
                maximum: limit.maximum,
            },
        ) {
            Ok(()) => tracing::info!(
                from = soft,
                to = raised,
                "raised the open-files limit for server.max_connections"
            ),
            Err(error) => {
                tracing::warn!(%error, "could not raise the open-files limit");
                raised = soft;
            }
        }
    }
    if raised < needed {
        tracing::warn!(
            limit = raised,
            needed,
            "the open-files limit is below what server.max_connections needs: raise it (LimitNOFILE= in the systemd unit, ulimit -n, --ulimit nofile=) or lower server.max_connections"
        );
    }
}
