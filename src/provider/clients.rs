//! The HTTP client of one provider, pooled, and renewed after a stream that ended unfinished:
//! a server whose stream failed may close that connection just after the stream's end while it
//! still looks reusable (llama-cpp-python does), and the requests that follow at once (the
//! retry without streaming, the next turn) would go over it and fail. A new client has a new,
//! empty pool; requests already under way keep the old one.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use reqwest::header::HeaderMap;

use super::ProviderError;
use super::http::error_chain;

pub(super) struct Clients {
    current: RwLock<reqwest::Client>,
    headers: HeaderMap,
    connect_timeout: Duration,
}

impl Clients {
    pub fn new(headers: HeaderMap, connect_timeout: Duration) -> Result<Self, ProviderError> {
        let current = RwLock::new(build(&headers, connect_timeout)?);
        Ok(Self { current, headers, connect_timeout })
    }

    /// The client to send with (a cheap handle on the shared pool).
    pub fn get(&self) -> reqwest::Client {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the client, so later requests open new connections; returns the new one.
    pub fn renew(&self) -> Result<reqwest::Client, ProviderError> {
        let client = build(&self.headers, self.connect_timeout)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = client.clone();
        Ok(client)
    }
}

fn build(headers: &HeaderMap, timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .default_headers(headers.clone())
        .connect_timeout(timeout)
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {}", error_chain(&e))))
}
