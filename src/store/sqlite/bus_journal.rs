//! The flows as the in-process bus's journal (`bus_journal`, migration 0002) names them, for the
//! `Journal` implementation (`store::journal`, its rows written by `group_writes`) and for a
//! run's finishing trigger (`finish`), which writes the reply's row and deletes the answered
//! message's row itself.

use switchboard_channels::bus::journal::JournalError;
use switchboard_channels::subject::Flow;

pub(in crate::store) fn flow_name(flow: Flow) -> Result<&'static str, JournalError> {
    match flow {
        Flow::In => Ok("in"),
        Flow::Out => Ok("out"),
        Flow::Events => Err(JournalError("events are not journaled".into())),
    }
}
