//! Another host, as far as the network goes: a network namespace joined to the test's by a
//! veth pair, and TCP forwarders that make the test's loopback services (NATS, PostgreSQL, the
//! fake model) reachable from it at the test side's address.

use std::net::SocketAddr;
use std::process::Command;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A network namespace with one veth link to the test's namespace; removed on drop.
pub struct Namespace {
    pub name: String,
    /// The test's end of the link, where the forwarders listen.
    pub host_ip: String,
    veth: String,
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap_or_else(|err| panic!("cannot run ip: {err}"));
    assert!(
        output.status.success(),
        "ip {} failed (the chaos test's host variant needs root and iproute2): {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Namespace {
    /// The `index`th namespace of this test process, on its own /24.
    pub fn create(index: u8) -> Namespace {
        let id = std::process::id() % 100_000;
        let name = format!("sbchaos{id}n{index}");
        let (veth, peer) = (format!("sbv{id}n{index}"), format!("sbp{id}n{index}"));
        let subnet = format!("10.{}.{}", 200 + u32::from(index), id % 250);
        let (host_ip, ns_ip) = (format!("{subnet}.1"), format!("{subnet}.2"));
        ip(&["netns", "add", &name]);
        let namespace = Namespace { name: name.clone(), host_ip: host_ip.clone(), veth: veth.clone() };
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/24"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&["netns", "exec", &name, "ip", "addr", "add", &format!("{ns_ip}/24"), "dev", &peer]);
        ip(&["netns", "exec", &name, "ip", "link", "set", &peer, "up"]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        namespace
    }

    /// The command that runs a program inside.
    pub fn wrapper(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both.
        let _ = Command::new("ip").args(["link", "del", &self.veth]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// Accepts on `listen` and joins each connection to a new one to `target`, until dropped.
pub struct Forward {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn forward(listen_ip: &str, target: SocketAddr) -> Forward {
    let listener = TcpListener::bind((listen_ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                // A target that is down (NATS restarting) refuses: the client sees a closed
                // connection, as it would over a real network.
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Forward { addr, task }
}
