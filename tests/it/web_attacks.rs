//! web_fetch's attack table: each row is something a prompt-injected model might try, the URL,
//! the allow-list in force and what must happen — including how many requests the local test
//! server may see (a refusal happens before any connection). The same table is in
//! `docs/security.md` ("web_fetch: attack cases"); a test below keeps the two in step.
//!
//! Names resolve through a test resolver: `public.test`, `allowed.test` and `internal.test`
//! all resolve to 127.0.0.1, `rebind.test` answers 127.0.0.2 first and 127.0.0.1 after, and
//! any other name goes to the system resolver (`localhost`).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use switchboard::config::AllowList;
use switchboard::tools::web::{FetchSettings, Resolver, SystemResolver, WebFetch};
use switchboard::tools::{Tool, ToolContext, ToolError};

/// What must happen.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `ToolError::Refused` with this in the message.
    Refused(&'static str),
    /// `ToolError::Failed` with this in the message.
    Failed(&'static str),
    /// `ToolError::Transient` with this in the message.
    Transient(&'static str),
    /// A result containing all of these (`PORT` replaced).
    Text(&'static [&'static str]),
}

struct Case {
    tries: &'static str,
    /// `PORT` is the local test server's port.
    url: &'static str,
    allow: &'static [&'static str],
    expect: Expect,
    /// Requests the test server may receive.
    served: usize,
}

use Expect::*;

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { tries: "loopback address", url: "http://127.0.0.1:PORT/", allow: &[], expect: Refused("127.0.0.1 is a loopback address"), served: 0 },
    Case { tries: "localhost by name", url: "http://localhost:PORT/", allow: &[], expect: Refused("localhost resolves to"), served: 0 },
    Case { tries: "IPv6 loopback", url: "http://[::1]:PORT/", allow: &[], expect: Refused("::1 is a loopback address"), served: 0 },
    Case { tries: "loopback in hex", url: "http://0x7f000001:PORT/", allow: &[], expect: Refused("127.0.0.1 is a loopback"), served: 0 },
    Case { tries: "loopback as one decimal number", url: "http://2130706433:PORT/", allow: &[], expect: Refused("127.0.0.1 is a loopback"), served: 0 },
    Case { tries: "loopback, short form", url: "http://127.1:PORT/", allow: &[], expect: Refused("127.0.0.1 is a loopback"), served: 0 },
    Case { tries: "loopback in octal", url: "http://0177.0.0.1:PORT/", allow: &[], expect: Refused("127.0.0.1 is a loopback"), served: 0 },
    Case { tries: "IPv4-mapped IPv6 loopback", url: "http://[::ffff:127.0.0.1]:PORT/", allow: &[], expect: Refused("loopback"), served: 0 },
    Case { tries: "0.0.0.0 (reaches local services on Linux)", url: "http://0.0.0.0:PORT/", allow: &[], expect: Refused("unspecified"), served: 0 },
    Case { tries: "cloud metadata address", url: "http://169.254.169.254/latest/meta-data/", allow: &[], expect: Refused("cloud metadata"), served: 0 },
    Case { tries: "cloud metadata by name", url: "http://metadata.google.internal/computeMetadata/v1/", allow: &[], expect: Refused("cloud metadata"), served: 0 },
    Case { tries: "private network", url: "http://10.0.0.1/", allow: &[], expect: Refused("private"), served: 0 },
    Case { tries: "public-looking name resolving to 127.0.0.1", url: "http://public.test:PORT/", allow: &[], expect: Refused("public.test resolves to 127.0.0.1"), served: 0 },
    Case { tries: "local file", url: "file:///etc/passwd", allow: &[], expect: Refused("not file:"), served: 0 },
    Case { tries: "another protocol", url: "gopher://127.0.0.1:PORT/_SET", allow: &[], expect: Refused("not gopher:"), served: 0 },
    Case { tries: "metadata through a broad allow-list", url: "http://169.254.169.254/", allow: &["0.0.0.0/0"], expect: Refused("cloud metadata"), served: 0 },
    Case { tries: "redirect from an allowed host to an internal name", url: "http://allowed.test:PORT/redirect?to=http://internal.test:PORT/", allow: &["allowed.test"], expect: Refused("internal.test resolves to 127.0.0.1"), served: 1 },
    Case { tries: "redirect from an allowed host to a loopback address", url: "http://allowed.test:PORT/redirect?to=http://127.0.0.1:PORT/", allow: &["allowed.test"], expect: Refused("127.0.0.1 is a loopback"), served: 1 },
    Case { tries: "redirect from an allowed address to IPv6 loopback", url: "http://127.0.0.1:PORT/redirect?to=http://[::1]:PORT/", allow: &["127.0.0.1"], expect: Refused("::1 is a loopback"), served: 1 },
    Case { tries: "redirect to cloud metadata", url: "http://allowed.test:PORT/redirect?to=http://169.254.169.254/latest/meta-data/", allow: &["allowed.test"], expect: Refused("cloud metadata"), served: 1 },
    Case { tries: "redirect to a local file", url: "http://allowed.test:PORT/redirect?to=file:///etc/passwd", allow: &["allowed.test"], expect: Refused("not file:"), served: 1 },
    Case { tries: "endless redirects", url: "http://allowed.test:PORT/loop", allow: &["allowed.test"], expect: Failed("more than 5 redirects"), served: 6 },
    Case { tries: "DNS rebinding: checked answer 127.0.0.2, next answer 127.0.0.1", url: "http://rebind.test:PORT/", allow: &["127.0.0.2"], expect: Transient("cannot fetch"), served: 0 },
    Case { tries: "allowed host: HTML page", url: "http://allowed.test:PORT/", allow: &["allowed.test"], expect: Text(&["URL: http://allowed.test:PORT/\nTitle: Local page\n", "# Hello", "- one"]), served: 1 },
    Case { tries: "allowed range: loopback", url: "http://127.0.0.1:PORT/", allow: &["127.0.0.0/8"], expect: Text(&["Title: Local page"]), served: 1 },
    Case { tries: "redirect within the allowed host", url: "http://allowed.test:PORT/redirect?to=/plain", allow: &["allowed.test"], expect: Text(&["URL: http://allowed.test:PORT/plain\n", "just text"]), served: 2 },
    Case { tries: "large page", url: "http://allowed.test:PORT/big", allow: &["allowed.test"], expect: Text(&["[cut: showing 20000 of", "[the page is larger than 2097152 bytes"]), served: 1 },
    Case { tries: "slow page", url: "http://allowed.test:PORT/slow", allow: &["allowed.test"], expect: Transient("took longer than 2s"), served: 1 },
    Case { tries: "binary content", url: "http://allowed.test:PORT/image", allow: &["allowed.test"], expect: Failed("image/png"), served: 1 },
    Case { tries: "missing page", url: "http://allowed.test:PORT/missing", allow: &["allowed.test"], expect: Failed("HTTP 404"), served: 1 },
    Case { tries: "server error", url: "http://allowed.test:PORT/error", allow: &["allowed.test"], expect: Transient("HTTP 500"), served: 1 },
    Case { tries: "gzip sent without being asked", url: "http://allowed.test:PORT/gzip-always", allow: &["allowed.test"], expect: Text(&["URL: http://allowed.test:PORT/gzip-always\n\ncompressed text, sent whatever the request asked"]), served: 1 },
    Case { tries: "gzip after Accept-Encoding: gzip", url: "http://allowed.test:PORT/gzip-negotiated", allow: &["allowed.test"], expect: Text(&["\n\ncompressed because the request asked for gzip"]), served: 1 },
    Case { tries: "gzip bomb: a few KiB expanding to 8 MiB", url: "http://allowed.test:PORT/gzip-bomb", allow: &["allowed.test"], expect: Text(&["[cut: showing 20000 of 2097152", "[the page is larger than 2097152 bytes"]), served: 1 },
    Case { tries: "broken gzip", url: "http://allowed.test:PORT/gzip-broken", allow: &["allowed.test"], expect: Failed("gzip body that does not decode"), served: 1 },
    Case { tries: "an encoding web_fetch does not decode", url: "http://allowed.test:PORT/brotli", allow: &["allowed.test"], expect: Failed("encoded as br"), served: 1 },
];

/// The test names of the module docs, and the system resolver for the rest.
#[derive(Default)]
struct TestResolver {
    lookups: Mutex<HashMap<String, usize>>,
}

#[async_trait]
impl Resolver for TestResolver {
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let seen = {
            let mut lookups = self.lookups.lock().unwrap();
            let count = lookups.entry(host.to_owned()).or_default();
            *count += 1;
            *count
        };
        let ip = |text: &str| vec![SocketAddr::new(text.parse::<IpAddr>().unwrap(), port)];
        match host {
            "public.test" | "allowed.test" | "internal.test" => Ok(ip("127.0.0.1")),
            "rebind.test" if seen == 1 => Ok(ip("127.0.0.2")),
            "rebind.test" => Ok(ip("127.0.0.1")),
            _ => SystemResolver.lookup(host, port).await,
        }
    }
}

const PAGE: &str = "<!doctype html><html><head><title>Local page</title><script>alert('x')</script></head>\
                    <body><h1>Hello</h1><p>From the <b>test</b> server.</p><ul><li>one</li><li>two</li></ul><p><a href=\"/plain\">More</a></p></body></html>";

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// 8 MiB of spaces, a few KiB compressed: made once.
fn gzip_bomb() -> &'static [u8] {
    static BOMB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| gzip(&vec![b' '; 8 * 1024 * 1024]))
}

/// A gzip body marked as such; real servers send it even when the request did not ask.
fn gzipped(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain"), (header::CONTENT_ENCODING, "gzip")], body).into_response()
}

async fn route(
    State(hits): State<Arc<AtomicUsize>>,
    uri: axum::http::Uri,
    query: Query<HashMap<String, String>>,
    headers: header::HeaderMap,
) -> Response {
    hits.fetch_add(1, Ordering::SeqCst);
    let asked_for_gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    match uri.path() {
        "/gzip-always" => gzipped(gzip(b"compressed text, sent whatever the request asked")),
        "/gzip-negotiated" if asked_for_gzip => gzipped(gzip(b"compressed because the request asked for gzip")),
        "/gzip-negotiated" => ([(header::CONTENT_TYPE, "text/plain")], "plain: no gzip was asked for").into_response(),
        "/gzip-bomb" => {
            let body = gzip_bomb().to_vec();
            assert!(body.len() < 64 * 1024, "a small body: {} bytes", body.len());
            gzipped(body)
        }
        "/gzip-broken" => gzipped(b"\x1f\x8b\x08\x00 this is not deflate data at all".to_vec()),
        "/brotli" => (
            [(header::CONTENT_TYPE, "text/plain"), (header::CONTENT_ENCODING, "br")],
            b"\x0b\x02\x80hello\x03".to_vec(),
        )
            .into_response(),
        "/" => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response(),
        "/plain" => ([(header::CONTENT_TYPE, "text/plain")], "just text").into_response(),
        "/redirect" => (StatusCode::FOUND, [(header::LOCATION, query.0["to"].clone())]).into_response(),
        "/loop" => (StatusCode::FOUND, [(header::LOCATION, "/loop")]).into_response(),
        "/big" => ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(3 * 1024 * 1024)).into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "late".into_response()
        }
        "/image" => ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G']).into_response(),
        "/error" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn start_server() -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(get(route)).with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, hits)
}

fn tool(allow: &[&str], resolver: Arc<TestResolver>) -> WebFetch {
    let settings = FetchSettings {
        allow_private: AllowList::parse(allow).unwrap(),
        max_bytes: 2 * 1024 * 1024,
        timeout: Duration::from_secs(2),
        max_chars: 20_000,
    };
    WebFetch::with_resolver(settings, resolver)
}

fn check(case: &Case, result: &Result<String, ToolError>, port: &str) -> Result<(), String> {
    let ok = match (case.expect, result) {
        (Refused(part), Err(ToolError::Refused(message))) => message.contains(part),
        (Failed(part), Err(ToolError::Failed(message))) => message.contains(part),
        (Transient(part), Err(ToolError::Transient(message))) => message.contains(part),
        (Text(parts), Ok(text)) => {
            parts.iter().all(|part| text.contains(&part.replace("PORT", port))) && !text.contains("alert")
        }
        _ => false,
    };
    if ok { Ok(()) } else { Err(format!("{}: {} expected {:?}, got {result:?}", case.tries, case.url, case.expect)) }
}

#[tokio::test]
async fn attack_table() {
    let (port, hits) = start_server().await;
    let port = port.to_string();
    let resolver = Arc::new(TestResolver::default());
    let mut failures = Vec::new();
    for case in CASES {
        let url = case.url.replace("PORT", &port);
        let before = hits.load(Ordering::SeqCst);
        let result = tool(case.allow, resolver.clone()).execute(json!({"url": url}), &ToolContext::default()).await;
        let served = hits.load(Ordering::SeqCst) - before;
        if let Err(problem) = check(case, &result, &port) {
            failures.push(problem);
        } else if served != case.served {
            failures.push(format!("{}: the server saw {served} requests, not {}", case.tries, case.served));
        }
    }
    // Pinning: the name was resolved once, for the check, and never again to connect.
    assert_eq!(resolver.lookups.lock().unwrap()["rebind.test"], 1);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn max_chars_and_links_arguments() {
    let (port, _) = start_server().await;
    let fetch = tool(&["allowed.test"], Arc::new(TestResolver::default()));
    let url = format!("http://allowed.test:{port}/");
    let out = fetch.execute(json!({"url": url, "max_chars": 5}), &ToolContext::default()).await.unwrap();
    assert!(
        out.ends_with("# Hel\n\n[cut: showing 5 of 49 characters; call again with a larger max_chars for more]"),
        "{out}"
    );
    let out = fetch.execute(json!({"url": url}), &ToolContext::default()).await.unwrap();
    assert!(out.ends_with("\n\nMore"), "{out}");
    let out = fetch.execute(json!({"url": url, "links": true}), &ToolContext::default()).await.unwrap();
    assert!(out.ends_with(&format!("\n\nMore (http://allowed.test:{port}/plain)")), "{out}");
    let bad = fetch.execute(json!({"url": url, "max_chars": 0}), &ToolContext::default()).await;
    assert!(matches!(bad, Err(ToolError::InvalidArguments(_))), "{bad:?}");
    let bad = fetch.execute(json!({"url": "not a url"}), &ToolContext::default()).await;
    assert!(matches!(bad, Err(ToolError::InvalidArguments(_))), "{bad:?}");
}

/// Every row of the table is in docs/security.md, with the same words and URL.
#[test]
fn the_documented_table_matches() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    let section = doc.split("## web_fetch: attack cases").nth(1).expect("the section exists");
    let missing: Vec<&str> = CASES
        .iter()
        .filter(|c| !section.contains(&format!("| {} | `{}` |", c.tries, c.url)))
        .map(|c| c.tries)
        .collect();
    assert!(missing.is_empty(), "docs/security.md lacks rows for {missing:?}");
}
