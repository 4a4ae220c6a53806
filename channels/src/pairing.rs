//! DM pairing contract (placeholder until the pairing branch lands; replaced by it).

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error("pairing store: {0}")]
    Store(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRequest {
    pub code: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    pub new: bool,
}

#[async_trait::async_trait]
pub trait PairingStore: Send + Sync {
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError>;
    async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> Result<Option<PairingRequest>, PairingError>;
}
