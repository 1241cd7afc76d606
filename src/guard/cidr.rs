//! Address ranges (`server.trusted_proxies`): whom the guard believes about a client's address.

use ipnet::IpNet;
use std::net::IpAddr;
use std::str::FromStr;

/// An address range such as `10.0.0.0/8` or `2001:db8::/32` (a bare address is its own
/// range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpNet);

/// A range that is not `ADDRESS/PREFIX` with a prefix that fits the address family.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a CIDR range (expected e.g. 10.0.0.0/8 or 2001:db8::/32)")]
pub struct CidrError;

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains('/') {
            s.parse::<IpNet>().map(Self).map_err(|_| CidrError)
        } else {
            s.parse::<IpAddr>()
                .map(|addr| Self(IpNet::from(addr)))
                .map_err(|_| CidrError)
        }
    }
}

impl<'de> serde::Deserialize<'de> for Cidr {
    /// From the policy: parsed once, when it loads.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Cidr {
    /// Whether `ip` lies in this range (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}
