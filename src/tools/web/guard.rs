//! The SSRF guard of `web_fetch`: which URLs the agent may reach.
//!
//! A URL passes when its scheme is http or https and every address its host resolves to is
//! public, or allowed by `[tools.web] allow_private`. The caller then connects only to the
//! addresses checked here ([`Target::addrs`]), so a DNS answer that changes between the check
//! and the connection (DNS rebinding) cannot lead it elsewhere. Every redirect is checked again.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::Url;

use crate::config::AllowList;
use crate::config::allow_list::{METADATA_V4, normalize_host};
use crate::tools::ToolError;

/// Host names of cloud metadata services. They resolve to link-local addresses, which are
/// refused anyway; naming them refuses them before any DNS query, even where a resolver maps
/// them somewhere unexpected.
const METADATA_HOSTS: &[&str] =
    &["metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"];

/// Turns a host name into addresses. The system resolver in production; tests inject one that
/// maps made-up names (`public.test`) to 127.0.0.1.
#[async_trait]
pub trait Resolver: Send + Sync {
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Why `ip` is not a public address, or `None` when it is. IPv6 forms that embed an IPv4
/// address (mapped, compatible, NAT64, 6to4) are judged by that address.
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let reason = match (a, b, c) {
        _ if ip == METADATA_V4 => "cloud metadata",
        _ if ip.is_broadcast() => "broadcast",
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared (CGNAT 100.64.0.0/10)",
        (192, 0, 0) => "IETF protocol assignment",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    };
    Some(reason)
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return v4_reason(v4);
    }
    let s = ip.segments();
    let reason = match s[0] {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x2001 if s[1] == 0x0db8 => "documentation",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local",
        0xfc00..=0xfdff => "unique-local",
        0xff00..=0xffff => "multicast",
        _ => return None,
    };
    Some(reason)
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(low(hi, lo)),
        // `::` and `::1` are in this range too but are IPv6's own unspecified and loopback.
        [0, 0, 0, 0, 0, 0, hi, lo] if !ip.is_unspecified() && !ip.is_loopback() => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// Where a checked URL may be fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host name to pin to `addrs`, or `None` when the URL holds an address literal.
    pub host: Option<String>,
    /// Every address the host resolved to, all of them checked.
    pub addrs: Vec<SocketAddr>,
}

/// Checks URLs against the allow-list, resolving names with its [`Resolver`].
#[derive(Clone)]
pub struct Guard {
    allow: AllowList,
    resolver: Arc<dyn Resolver>,
}

impl Guard {
    pub fn new(allow: AllowList, resolver: Arc<dyn Resolver>) -> Self {
        Self { allow, resolver }
    }

    /// Resolves and checks `url`; `Err(ToolError::Refused)` says why it may not be fetched.
    pub async fn check(&self, url: &Url) -> Result<Target, ToolError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::Refused(format!(
                "web_fetch only fetches http:// and https:// URLs, not {}:",
                url.scheme()
            )));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url.host_str().ok_or_else(|| ToolError::InvalidArguments("the URL has no host".into()))?;
        // The URL parser already turned every IPv4 spelling (0x7f000001, 2130706433, 127.1)
        // into dotted decimal, so a host that parses as an address is one.
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            let addrs = self.check_addrs(None, vec![SocketAddr::new(ip, port)])?;
            return Ok(Target { host: None, addrs });
        }
        let addrs = self.check_name(host, port).await?;
        Ok(Target { host: Some(host.to_owned()), addrs })
    }

    async fn check_name(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>, ToolError> {
        let allowed_by_name = self.allow.allows_host(name);
        if !allowed_by_name && METADATA_HOSTS.contains(&normalize_host(name).as_str()) {
            return Err(ToolError::Refused(format!("{name} is a cloud metadata service")));
        }
        let addrs = self
            .resolver
            .lookup(name, port)
            .await
            .map_err(|error| ToolError::Failed(format!("cannot resolve {name}: {error}")))?;
        if addrs.is_empty() {
            return Err(ToolError::Failed(format!("{name} has no addresses")));
        }
        if allowed_by_name {
            return Ok(addrs);
        }
        self.check_addrs(Some(name), addrs)
    }

    /// Refuses when ANY address is not allowed: a name with one public and one private
    /// address could otherwise be steered to the private one.
    fn check_addrs(&self, name: Option<&str>, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, ToolError> {
        for addr in &addrs {
            let ip = addr.ip();
            if let Some(reason) = blocked_reason(ip)
                && !self.allow.allows_ip(ip)
            {
                let what = match name {
                    Some(name) => format!("{name} resolves to {ip}, which"),
                    None => ip.to_string(),
                };
                return Err(ToolError::Refused(format!(
                    "{what} is a {reason} address; web_fetch only reaches public addresses \
                     (an operator can allow more with tools.web.allow_private)"
                )));
            }
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests;
