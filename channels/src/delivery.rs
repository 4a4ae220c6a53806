//! The delivery core every chat platform shares: per-chat queues of outbound messages, the
//! send loop with its redelivery bookkeeping, and live feedback (typing, streamed drafts)
//! while a run goes on; on the way in, the pairing check and the recent unaddressed group
//! messages kept as context. A platform adapter implements [`Platform`], the calls only it can
//! make, and starts [`run_outbound`] and [`run_live`] with one shared [`LiveRuns`].
//!
//! `docs/architecture.md` ("The delivery core") says what a new channel implements.

#[cfg(any(feature = "discord", feature = "matrix", feature = "telegram"))]
pub mod download;
#[cfg(any(feature = "discord", feature = "matrix", feature = "telegram"))]
pub(crate) mod group_context;
mod ledger;
pub mod live;
pub mod outbound;
pub mod pairing;
pub mod platform;
mod queues;
pub mod record;
mod sending;

pub use ledger::{Ledger, RecentIds};
pub use live::{DraftState, LiveRuns, run_live};
pub use outbound::Courier;
pub use platform::{DraftLimits, Platform, Unreachable};
pub use queues::run_outbound;
pub use record::{DeliveryPolicy, DeliveryRecord, RecordError, Sent};
pub use sending::{Sending, idempotency_key};

#[cfg(test)]
pub(crate) mod testing {
    //! A platform that goes nowhere, for the core's unit tests of its bookkeeping.

    use std::time::Duration;

    use async_trait::async_trait;
    use tokio_util::sync::CancellationToken;

    use super::{DraftLimits, Platform};
    use crate::contract::{OutboundMessage, RunEvent};

    pub(crate) struct Nowhere;

    #[async_trait]
    impl Platform for Nowhere {
        const NAME: &'static str = "Nowhere";
        const CHANNEL: &'static str = "nowhere";
        const TYPING_INTERVAL: Duration = Duration::from_secs(1);
        const DRAFT: DraftLimits = DraftLimits { kept_bytes: 64 };
        type Target = ();
        type MessageId = u64;
        type Step = String;
        type Error = String;
        type AddressError = String;

        fn target_of(&self, _msg: &OutboundMessage) -> Result<(), String> {
            Ok(())
        }
        async fn plan(&self, msg: &OutboundMessage) -> Vec<String> {
            vec![msg.content.clone()]
        }
        async fn send_step(&self, _: &(), _: &str, _: usize, _: &String, _: &CancellationToken) -> Result<(), String> {
            Ok(())
        }
        fn can_edit_into(&self, _step: &String) -> bool {
            true
        }
        async fn edit_into(&self, _: &(), _: &u64, _: &String, _: &CancellationToken) -> Result<(), String> {
            Ok(())
        }
        async fn delete(&self, _: &(), _: &u64) -> Result<(), String> {
            Ok(())
        }
        fn is_final(&self, _err: &String) -> bool {
            true
        }
        fn describe(&self, err: &String) -> String {
            err.clone()
        }
        fn live_target(&self, _event: &RunEvent) -> Option<()> {
            Some(())
        }
        fn typing_enabled(&self) -> bool {
            true
        }
        fn streams_in(&self, _target: &()) -> bool {
            true
        }
        fn edit_interval(&self) -> Duration {
            Duration::from_millis(10)
        }
        async fn typing(&self, _target: &()) -> Result<(), String> {
            Ok(())
        }
        fn visible_draft(&self, text: &str) -> String {
            text.chars().take(10).collect()
        }
        async fn post_draft(&self, _: &(), _: &str) -> Result<u64, String> {
            Ok(1)
        }
        async fn edit_draft(&self, _: &(), _: &u64, _: &str) -> Result<(), String> {
            Ok(())
        }
    }
}
