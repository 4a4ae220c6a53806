//! The API channel's HTTP limits, hit from outside against the real daemon: idle sockets,
//! a flood of them under a low descriptor limit, header dribbling, oversized heads and
//! bodies, the connection limit, and the bearer scheme in any case.

use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch};
use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn daemon(dir: &std::path::Path, llm: &FakeLlm, env: &[(&str, &str)]) -> Daemon {
    daemon_with(Launch::new(dir, "run", &["run"]).llm(&llm.base_url()), env).await
}

async fn daemon_with(mut launch: Launch<'_>, env: &[(&str, &str)]) -> Daemon {
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

pub(crate) fn addr(daemon: &Daemon) -> String {
    daemon.url("").trim_start_matches("http://").to_owned()
}

/// Waits until the server closes the connection (EOF or reset) and returns what it sent.
pub(crate) async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read_all).await.ok()?;
    Some(String::from_utf8_lossy(&got).into_owned())
}

pub(crate) fn raise_own_descriptor_limit() {
    let mut rlimit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlimit), 0);
        rlimit.rlim_cur = rlimit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit), 0);
    }
    assert!(rlimit.rlim_cur >= 4096, "the test needs 4096 descriptors, has {}", rlimit.rlim_cur);
}

#[tokio::test]
async fn idle_sockets_are_closed_after_the_idle_timeout() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[("SWITCHBOARD_CHANNELS__API__IDLE_TIMEOUT_SECS", "2")]).await;
    let started = Instant::now();
    let mut sockets = Vec::new();
    for _ in 0..200 {
        sockets.push(TcpStream::connect(addr(&daemon)).await.unwrap());
    }
    let mut lifetimes = Vec::new();
    for socket in &mut sockets {
        until_closed(socket, Duration::from_secs(10)).await.expect("an idle socket stayed open for 10 s");
        lifetimes.push(started.elapsed());
    }
    let (first, last) = (lifetimes[0], *lifetimes.last().unwrap());
    eprintln!("200 idle sockets closed between {first:?} and {last:?} after opening");
    assert!(first >= Duration::from_millis(1900), "closed before the idle timeout: {first:?}");
    assert!(last <= Duration::from_secs(4), "closed long after the idle timeout: {last:?}");
    // The server itself is fine.
    let (status, body) = daemon.post(json!({"chat_id": "after", "content": "still here"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("echo: still here")), "{body}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_not_cut_by_the_header_timeout() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("SWITCHBOARD_CHANNELS__API__HEADER_TIMEOUT_SECS", "1"),
        ("SWITCHBOARD_CHANNELS__API__IDLE_TIMEOUT_SECS", "5"),
    ];
    let daemon = daemon(dir.path(), &llm, &env).await;
    let mut stream = TcpStream::connect(addr(&daemon)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
}

#[tokio::test]
async fn a_flood_of_idle_sockets_under_a_low_descriptor_limit_leaves_the_api_reachable() {
    raise_own_descriptor_limit();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The defaults (512 connections, 30 s idle) under the 1024 descriptors of a plain shell.
    let launch = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).nofile(1024);
    let daemon = daemon_with(launch, &[]).await;
    let mut flood = Vec::new();
    for _ in 0..1100 {
        flood.push(TcpStream::connect(addr(&daemon)).await.unwrap());
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut slowest = Duration::ZERO;
    for n in 0..20 {
        let started = Instant::now();
        let response = client
            .post(daemon.url("/v1/messages"))
            .json(&json!({"chat_id": format!("c{n}"), "content": format!("ping {n}")}))
            .send()
            .await
            .unwrap_or_else(|err| panic!("request {n} failed under the flood: {err}\n{}", daemon.logs()));
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["reply"], format!("echo: ping {n}"));
        slowest = slowest.max(started.elapsed());
    }
    eprintln!("20 of 20 requests answered with 1100 idle sockets open; slowest {slowest:?}");
    assert!(!daemon.logs().contains("Too many open files"), "{}", daemon.logs());
    drop(flood);
}

#[tokio::test]
async fn header_dribbling_is_cut_after_the_header_timeout() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("SWITCHBOARD_CHANNELS__API__HEADER_TIMEOUT_SECS", "2"),
        ("SWITCHBOARD_CHANNELS__API__IDLE_TIMEOUT_SECS", "60"),
    ];
    let daemon = daemon(dir.path(), &llm, &env).await;
    let mut stream = TcpStream::connect(addr(&daemon)).await.unwrap();
    let started = Instant::now();
    stream.write_all(b"POST /v1/messages HTTP/1.1\r\n").await.unwrap();
    // One header byte every 200 ms: the head never ends, but bytes keep coming.
    let dribble = async {
        for byte in b"X-Slow: ".iter().cycle() {
            if stream.write_all(&[*byte]).await.is_err() {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        unreachable!()
    };
    let cut_after = tokio::time::timeout(Duration::from_secs(15), dribble).await.expect("dribbling went on for 15 s");
    eprintln!("header dribbling cut after {cut_after:?}");
    assert!(cut_after >= Duration::from_millis(1900), "cut before the header timeout: {cut_after:?}");
    assert!(cut_after <= Duration::from_secs(5), "cut long after the header timeout: {cut_after:?}");
}

#[tokio::test]
async fn a_head_over_the_limit_is_431_and_a_body_over_the_limit_is_413() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("SWITCHBOARD_CHANNELS__API__MAX_HEADER_BYTES", "8192"),
        ("SWITCHBOARD_CHANNELS__API__MAX_BODY_BYTES", "1000"),
    ];
    let daemon = daemon(dir.path(), &llm, &env).await;
    let client = reqwest::Client::new();
    let fits = client.get(daemon.url("/healthz")).header("x-pad", "a".repeat(6000)).send().await.unwrap();
    assert_eq!(fits.status(), 200);
    let mut stream = TcpStream::connect(addr(&daemon)).await.unwrap();
    let head = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "a".repeat(9000));
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer =
        until_closed(&mut stream, Duration::from_secs(5)).await.expect("an oversized head kept the connection");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let body = json!({"chat_id": "c", "content": "x".repeat(2000)});
    let (status, body) = daemon.post(body).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(llm.requests().len(), 0);
}

#[tokio::test]
async fn at_the_connection_limit_idle_connections_make_room_and_busy_ones_are_kept() {
    let llm = FakeLlm::start().await;
    for _ in 0..2 {
        llm.push(Scripted::Delay(Duration::from_secs(3), Box::new(Scripted::Text("slow".into()))));
    }
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[("SWITCHBOARD_CHANNELS__API__MAX_CONNECTIONS", "2")]).await;
    // Two idle connections fill the limit; a request on a third still gets through.
    let mut idle = [TcpStream::connect(addr(&daemon)).await.unwrap(), TcpStream::connect(addr(&daemon)).await.unwrap()];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = reqwest::get(daemon.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(until_closed(&mut idle[0], Duration::from_secs(2)).await.is_some(), "the oldest idle connection stayed");
    // Two requests in progress fill the limit; a third connection is refused at once (503) and
    // the two are answered.
    let slow = |chat: &'static str| {
        let url = daemon.url("/v1/messages");
        tokio::spawn(async move {
            let response =
                reqwest::Client::new().post(url).json(&json!({"chat_id": chat, "content": "hi"})).send().await;
            response.map(|r| r.status().as_u16())
        })
    };
    let (first, second) = (slow("a"), slow("b"));
    llm.wait_for_requests(2, Duration::from_secs(10)).await;
    let mut third = TcpStream::connect(addr(&daemon)).await.unwrap();
    third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.ok();
    let answer =
        until_closed(&mut third, Duration::from_secs(2)).await.expect("the connection over the limit stayed open");
    assert!(answer.starts_with("HTTP/1.1 503"), "a connection over the limit was not refused: {answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert_eq!(first.await.unwrap().unwrap(), 200);
    assert_eq!(second.await.unwrap().unwrap(), 200);
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[("SWITCHBOARD_CHANNELS__API__TOKEN", "s3cret-token")]).await;
    let client = reqwest::Client::new();
    let post = |authorization: &'static str| {
        client
            .post(daemon.url("/v1/messages"))
            .header("authorization", authorization)
            .json(&json!({"chat_id": "c", "content": "hello"}))
            .send()
    };
    for scheme in ["bearer s3cret-token", "BEARER s3cret-token", "Bearer s3cret-token"] {
        let response = post(scheme).await.unwrap();
        assert_eq!(response.status(), 200, "{scheme}");
    }
    for wrong in ["bearer wrong-token", "Basic s3cret-token", "bearers3cret-token"] {
        let response = post(wrong).await.unwrap();
        assert_eq!(response.status(), 401, "{wrong}");
    }
}
