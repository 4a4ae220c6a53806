//! `[metrics]`: the Prometheus endpoint, off unless an address is given.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served (e.g. `127.0.0.1:9464`); empty = no endpoint. Each
    /// process of a deployment needs its own port.
    #[serde(deserialize_with = "optional_socket_addr", serialize_with = "optional_socket_addr_text")]
    pub listen: Option<SocketAddr>,
}

/// An empty string is no address; anything else must parse as one.
fn optional_socket_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.trim().parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!("{text:?} is not a socket address (expected ip:port, e.g. 127.0.0.1:9464)"))
    })
}

/// Written back the way it is read: no address is an empty string.
fn optional_socket_addr_text<S: Serializer>(addr: &Option<SocketAddr>, serializer: S) -> Result<S::Ok, S::Error> {
    match addr {
        Some(addr) => serializer.collect_str(addr),
        None => serializer.serialize_str(""),
    }
}
