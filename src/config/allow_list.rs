//! `[tools.web] allow_private` in checked form: the private hosts and ranges `web_fetch` may
//! reach. Parsed when the config is validated and again by the fetch guard that enforces it.

use std::net::{IpAddr, Ipv4Addr};

/// The metadata service of AWS, GCP, Azure and others.
pub const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// An address range such as `10.0.0.0/8`; a single address is a range of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    fn parse(text: &str) -> Option<Self> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Self { addr: addr.to_canonical(), prefix })
    }

    fn is_single(&self) -> bool {
        self.prefix == if self.addr.is_ipv4() { 32 } else { 128 }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip, bits) = match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => (u128::from(net.to_bits()), u128::from(ip.to_bits()), 32),
            (IpAddr::V6(net), IpAddr::V6(ip)) => (net.to_bits(), ip.to_bits(), 128),
            _ => return false,
        };
        let shift = bits - u32::from(self.prefix);
        // A shift by the full width is a /0: everything matches.
        shift >= bits || net >> shift == ip >> shift
    }
}

/// `[tools.web] allow_private`: the hosts and ranges web_fetch may reach although they are
/// not public.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    ranges: Vec<Cidr>,
    hosts: Vec<String>,
}

impl AllowList {
    /// Parses entries that are addresses (`127.0.0.1`, `::1`), CIDR ranges (`10.0.0.0/8`) or
    /// host names (`intranet.local`). The error names the first bad entry.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut list = Self::default();
        for entry in entries.iter().map(|e| e.as_ref().trim()) {
            if let Some(range) = Cidr::parse(entry) {
                list.ranges.push(range);
            } else if is_host_name(entry) {
                list.hosts.push(normalize_host(entry));
            } else {
                return Err(format!("{entry:?} is not an address, a CIDR range (10.0.0.0/8) or a host name"));
            }
        }
        Ok(list)
    }

    pub fn allows_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| *h == normalize_host(host))
    }

    /// The metadata address is only allowed when listed on its own: a broad range such as
    /// `169.254.0.0/16` or `0.0.0.0/0` is more likely a shortcut than a wish to expose it.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let exact_only = ip == IpAddr::V4(METADATA_V4);
        self.ranges.iter().any(|r| r.contains(ip) && (!exact_only || r.is_single()))
    }
}

fn is_host_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').filter(|l| !l.is_empty()).count() > 0
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// A host name compared: lower case without the trailing dot of a fully qualified name.
pub fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}
