//! The files a run wrote under `outbox/` go with its reply (see `workspace::outbox`).

use std::path::Path;
use std::time::Duration;

use switchboard_channels::contract::{Media, SessionKey};

use crate::tools::message::file_media;
use crate::workspace::memory::MemoryScope;
use crate::workspace::outbox::{self, Collected};

/// The run's files, moved out of its outbox, as media for its reply in name order, with the
/// note about those that were not sent. A failure to read or move them costs the files, not
/// the reply: the reply says so.
/// Outboxes older than `keep` are pruned meanwhile.
pub(super) async fn collect(
    workspace: &Path,
    run: &str,
    memory: &MemoryScope,
    session: &SessionKey,
    keep: Duration,
) -> Sent {
    // Most runs write no file and most turns prune nothing: a stat and a lookup here spare
    // them a hand-off to a blocking thread.
    let wrote = workspace.join(outbox::run_folder(run)).exists();
    let prune = outbox::prune_due(workspace);
    if !wrote && !prune {
        return Sent::default();
    }
    let (dir, run_id, scope, session_key) = (workspace.to_owned(), run.to_owned(), memory.clone(), session.to_owned());
    let collected = tokio::task::spawn_blocking(move || {
        let collected = match wrote {
            true => outbox::collect(&dir, &run_id, &scope, &session_key),
            false => Ok(Collected::default()),
        };
        if prune {
            outbox::prune_now(&dir, keep);
        }
        collected
    })
    .await;
    match collected {
        Ok(Ok(collected)) => Sent::from(collected),
        Ok(Err(err)) => failed(&err.to_string()),
        Err(err) => failed(&err.to_string()),
    }
}

/// Removes the run's outbox folder once its reply is stored (see [`outbox::clear`]).
pub(super) async fn clear(workspace: &Path, run_id: &str) {
    // Most runs write no file: one stat here spares every turn a hand-off to a blocking thread.
    if !workspace.join(outbox::run_folder(run_id)).exists() {
        return;
    }
    let (dir, run) = (workspace.to_owned(), run_id.to_owned());
    match tokio::task::spawn_blocking(move || outbox::clear(&dir, &run)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(%err, "cannot remove the run's outbox folder; it is deleted when old"),
        Err(err) => tracing::warn!(%err, "cannot remove the run's outbox folder; it is deleted when old"),
    }
}

fn failed(err: &str) -> Sent {
    tracing::warn!(%err, "cannot collect the files of the run's outbox; the reply goes without them");
    Sent { media: Vec::new(), note: Some("(the files written to outbox/ could not be sent; the log says why)".into()) }
}

/// What goes with a reply.
#[derive(Debug, Default)]
pub(super) struct Sent {
    pub media: Vec<Media>,
    /// Said after the reply's text: files that were not sent, and why.
    pub note: Option<String>,
}

impl From<Collected> for Sent {
    fn from(collected: Collected) -> Self {
        let note = collected.note();
        let media = collected.files.into_iter().map(|file| file_media(&file.path, file.name, file.size)).collect();
        Sent { media, note }
    }
}

impl Sent {
    /// `text` with the note after it.
    pub fn noted(&self, text: &str) -> String {
        match &self.note {
            Some(note) if text.trim().is_empty() => note.clone(),
            Some(note) => format!("{}\n\n{note}", text.trim_end()),
            None => text.to_owned(),
        }
    }
}
