//! The guard's address table, the allow-list, and URL checks with a fake resolver.

use std::collections::HashMap;

use super::*;

/// (address, expected reason or None for public)
const ADDRESSES: &[(&str, Option<&str>)] = &[
    // Public.
    ("8.8.8.8", None),
    ("1.1.1.1", None),
    ("93.184.216.34", None),
    ("172.32.0.1", None),
    ("100.128.0.1", None),
    ("2606:4700:4700::1111", None),
    ("2001:4860:4860::8888", None),
    ("::ffff:8.8.8.8", None),
    // IPv4 ranges.
    ("0.0.0.0", Some("unspecified (0.0.0.0/8)")),
    ("127.0.0.1", Some("loopback")),
    ("127.255.255.254", Some("loopback")),
    ("10.0.0.1", Some("private")),
    ("172.16.0.1", Some("private")),
    ("172.31.255.255", Some("private")),
    ("192.168.1.1", Some("private")),
    ("169.254.0.1", Some("link-local")),
    ("169.254.169.254", Some("cloud metadata")),
    ("100.64.0.1", Some("shared (CGNAT 100.64.0.0/10)")),
    ("100.127.255.255", Some("shared (CGNAT 100.64.0.0/10)")),
    ("192.0.0.8", Some("IETF protocol assignment")),
    ("192.0.2.1", Some("documentation")),
    ("198.51.100.7", Some("documentation")),
    ("203.0.113.9", Some("documentation")),
    ("198.18.0.1", Some("benchmarking")),
    ("224.0.0.1", Some("multicast")),
    ("239.255.255.250", Some("multicast")),
    ("240.0.0.1", Some("reserved")),
    ("255.255.255.255", Some("broadcast")),
    // IPv6 ranges.
    ("::", Some("unspecified")),
    ("::1", Some("loopback")),
    ("fe80::1", Some("link-local")),
    ("febf::1", Some("link-local")),
    ("fec0::1", Some("site-local")),
    ("fc00::1", Some("unique-local")),
    ("fd00:ec2::254", Some("unique-local")),
    ("ff02::1", Some("multicast")),
    ("2001:db8::1", Some("documentation")),
    ("100::1", Some("discard-only (100::/64)")),
    // IPv6 forms that embed an IPv4 address are judged by it.
    ("::ffff:127.0.0.1", Some("loopback")),
    ("::ffff:10.1.2.3", Some("private")),
    ("::ffff:169.254.169.254", Some("cloud metadata")),
    ("::127.0.0.1", Some("loopback")),
    ("64:ff9b::7f00:1", Some("loopback")),
    ("64:ff9b::a9fe:a9fe", Some("cloud metadata")),
    ("2002:7f00:1::", Some("loopback")),
    ("2002:c0a8:101::1", Some("private")),
];

#[test]
fn address_table() {
    for (text, expected) in ADDRESSES {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(blocked_reason(ip), *expected, "{text}");
    }
}

#[test]
fn allow_list_by_address_range_and_name() {
    let list = AllowList::parse(&["127.0.0.1", "10.0.0.0/8", "[::1]", "fd00::/8", "Intranet.Local."]).unwrap();
    let allowed = |text: &str| list.allows_ip(text.parse().unwrap());
    assert!(allowed("127.0.0.1"));
    assert!(allowed("::ffff:127.0.0.1"), "a mapped address matches its IPv4 entry");
    assert!(!allowed("127.0.0.2"));
    assert!(allowed("10.255.0.1"));
    assert!(!allowed("11.0.0.1"));
    assert!(allowed("::1"));
    assert!(allowed("fd12::1"));
    assert!(!allowed("fc00::1"));
    assert!(list.allows_host("intranet.local"));
    assert!(list.allows_host("INTRANET.local."));
    assert!(!list.allows_host("other.local"));
}

#[test]
fn metadata_needs_its_own_entry() {
    let broad = AllowList::parse(&["0.0.0.0/0", "169.254.0.0/16"]).unwrap();
    assert!(broad.allows_ip("10.0.0.1".parse().unwrap()));
    assert!(broad.allows_ip("169.254.1.1".parse().unwrap()));
    assert!(!broad.allows_ip("169.254.169.254".parse().unwrap()));
    let exact = AllowList::parse(&["169.254.169.254"]).unwrap();
    assert!(exact.allows_ip("169.254.169.254".parse().unwrap()));
}

#[test]
fn bad_allow_list_entries_are_named() {
    for bad in ["10.0.0.0/33", "::1/129", "", "http://x", "a b"] {
        let error = AllowList::parse(&[bad]).unwrap_err();
        assert!(error.contains(&format!("{bad:?}")), "{error}");
    }
}

/// Answers from a fixed table; unknown names fail like NXDOMAIN.
struct Table(HashMap<&'static str, Vec<IpAddr>>);

#[async_trait]
impl Resolver for Table {
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let ips = self.0.get(host).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"))?;
        Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }
}

fn guard(allow: &[&str]) -> Guard {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let table = HashMap::from([
        ("public.test", vec![ip("93.184.216.34")]),
        ("internal.test", vec![ip("127.0.0.1")]),
        // One public and one private answer: refused, or a connection could use either.
        ("mixed.test", vec![ip("93.184.216.34"), ip("10.0.0.5")]),
        ("intranet.local", vec![ip("10.1.1.1")]),
        ("metadata.google.internal", vec![ip("93.184.216.34")]),
    ]);
    Guard::new(AllowList::parse(allow).unwrap(), Arc::new(Table(table)))
}

async fn check(guard: &Guard, url: &str) -> Result<Target, ToolError> {
    guard.check(&Url::parse(url).unwrap()).await
}

#[tokio::test]
async fn urls_are_checked_by_every_resolved_address() {
    let g = guard(&[]);
    let target = check(&g, "https://public.test/page").await.unwrap();
    assert_eq!(target.host.as_deref(), Some("public.test"));
    assert_eq!(target.addrs, vec!["93.184.216.34:443".parse().unwrap()]);
    for url in [
        "http://internal.test/",
        "http://mixed.test/",
        "http://intranet.local/",
        "http://127.1:8080/",
        "http://[::ffff:7f00:1]/",
        "http://metadata.google.internal/",
        "http://METADATA.google.internal./",
        "file:///etc/passwd",
        "ftp://public.test/",
    ] {
        let result = check(&g, url).await;
        assert!(matches!(result, Err(ToolError::Refused(_))), "{url}: {result:?}");
    }
    assert!(matches!(check(&g, "http://unknown.test/").await, Err(ToolError::Failed(_))));
}

#[tokio::test]
async fn allow_list_lets_named_hosts_and_ranges_through() {
    let g = guard(&["intranet.local", "127.0.0.0/8"]);
    let target = check(&g, "http://intranet.local:8080/").await.unwrap();
    assert_eq!(target.addrs, vec!["10.1.1.1:8080".parse().unwrap()]);
    assert!(check(&g, "http://internal.test/").await.is_ok());
    assert_eq!(check(&g, "http://127.0.0.1:9/").await.unwrap().host, None);
    assert!(matches!(check(&g, "http://mixed.test/").await, Err(ToolError::Refused(_))));
}

#[tokio::test]
async fn refusals_explain_themselves() {
    let Err(ToolError::Refused(message)) = check(&guard(&[]), "http://internal.test/").await else {
        panic!("expected a refusal");
    };
    assert!(message.contains("internal.test resolves to 127.0.0.1, which is a loopback address"), "{message}");
    assert!(message.contains("tools.web.allow_private"), "{message}");
}
