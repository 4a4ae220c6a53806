//! Roles made of several of the store's traits, for consumers that use several: one name in
//! their signature instead of the whole [`super::Database`]. Each is a supertrait of
//! `Database` (with a blanket impl), so the assembly hands one out by upcasting its
//! `Arc<dyn Database>`; a role that is not a supertrait of `Database` could not be.

use super::approvals::ApprovalStore;
use super::cron::CronStore;
use super::heartbeat::HeartbeatStore;
use super::pairing::PairingAdmin;
use super::users::UserStore;

/// What the owner's operations (`control`, and the console beside them) read and change:
/// people and their levels, strangers' pairing requests, tool calls waiting for approval,
/// cron jobs, and the owners' direct chats on record (where to tell them).
pub trait OwnerRecords: UserStore + PairingAdmin + ApprovalStore + CronStore + HeartbeatStore {}

impl<T: UserStore + PairingAdmin + ApprovalStore + CronStore + HeartbeatStore + ?Sized> OwnerRecords for T {}
