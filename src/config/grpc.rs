//! `[grpc]`: the gRPC binding (A2A 1.0's `a2a.proto` over HTTP/2) on a listener of its own,
//! behind the same guard as the door. Off when the section is absent.

use super::{Invalid, invalid};
use crate::units::{Bounded, Seconds};
use serde::Deserialize;
use std::net::SocketAddr;

/// `[grpc]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcPolicy {
    /// Address the gRPC listener binds.
    pub listen: SocketAddr,
    /// What the card's `GRPC` interface names (`host:port`); the listen address when absent.
    #[serde(default)]
    pub public_address: Option<String>,
    /// Requests one HTTP/2 connection may have in flight at once.
    #[serde(default = "default_max_concurrent_streams")]
    pub max_concurrent_streams: Bounded<1, 1000>,
    /// Seconds a connection may have no call open before it is sent GOAWAY (a client opens a
    /// new one when it next calls).
    #[serde(default = "default_idle_timeout_seconds")]
    pub idle_timeout_seconds: Seconds<1, 3600>,
}

fn default_idle_timeout_seconds() -> Seconds<1, 3600> {
    const { Seconds::of(60) }
}

fn default_max_concurrent_streams() -> Bounded<1, 1000> {
    const { Bounded::of(100) }
}

impl GrpcPolicy {
    /// What the card names.
    pub fn advertised(&self) -> String {
        self.public_address
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }

    pub(super) fn validate(&self) -> Result<(), Invalid> {
        // A card naming 0.0.0.0 sends every partner nowhere.
        if self.listen.ip().is_unspecified() && self.public_address.is_none() {
            return Err(invalid(
                "grpc.public_address",
                "is required when grpc.listen is an unspecified address: name the host:port partners reach",
            ));
        }
        if let Some(address) = &self.public_address {
            let well_formed = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !well_formed || address.contains('/') {
                return Err(invalid(
                    "grpc.public_address",
                    "must be host:port, as a gRPC client dials it",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(listen: &str, public_address: Option<&str>, streams: u64) -> GrpcPolicy {
        GrpcPolicy {
            listen: listen.parse().unwrap(),
            public_address: public_address.map(str::to_owned),
            max_concurrent_streams: Bounded::checked(streams).unwrap(),
            idle_timeout_seconds: default_idle_timeout_seconds(),
        }
    }

    #[test]
    fn the_card_names_a_reachable_host_and_port_or_start_up_stops() {
        assert!(policy("127.0.0.1:8082", None, 100).validate().is_ok());
        assert_eq!(
            policy("127.0.0.1:8082", None, 100).advertised(),
            "127.0.0.1:8082"
        );
        let named = policy("0.0.0.0:8082", Some("agents.example.com:443"), 100);
        assert!(named.validate().is_ok());
        assert_eq!(named.advertised(), "agents.example.com:443");
        for (listen, public, streams, key) in [
            ("0.0.0.0:8082", None, 100, "grpc.public_address"),
            ("[::]:8082", None, 100, "grpc.public_address"),
            (
                "127.0.0.1:8082",
                Some("agents.example.com"),
                100,
                "grpc.public_address",
            ),
            (
                "127.0.0.1:8082",
                Some("https://agents.example.com:443"),
                100,
                "grpc.public_address",
            ),
            ("127.0.0.1:8082", Some(":443"), 100, "grpc.public_address"),
        ] {
            let refused = policy(listen, public, streams).validate().unwrap_err();
            assert_eq!(refused.key, key, "{listen} {public:?} {streams}");
        }
    }
}
