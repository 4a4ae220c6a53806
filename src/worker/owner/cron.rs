//! `/cron`: the cron jobs, a notice each with its schedule, next run (in the job's time zone)
//! and buttons to pause or resume and delete it; the presses go to the control desk.

use switchboard_channels::control::ButtonAction;

use crate::control::Control;
use crate::scheduler::job::local_time;
use crate::store::StoreError;
use crate::store::cron::CronJob;
use crate::worker::answer::{Answer, Item};

/// Jobs shown, a notice each; more would flood the chat.
const JOBS_SHOWN: usize = 10;

/// `/cron`: the jobs due soonest first, then the paused ones, then those that will not run again.
pub(in crate::worker) async fn cron(control: &Control) -> Result<Answer, StoreError> {
    let mut jobs = control.store().cron_jobs(None).await?;
    if jobs.is_empty() {
        let text = "No cron jobs. Ask me to remind you of something, or add one with `switchboard cron add`.";
        return Ok(String::from(text).into());
    }
    jobs.sort_by_key(|job| (job.is_finished(), !job.enabled, job.job.next_run_at));
    let total = jobs.len();
    let items: Vec<Item> = jobs.iter().take(JOBS_SHOWN).map(item).collect();
    let text = match total.checked_sub(JOBS_SHOWN).filter(|left| *left > 0) {
        Some(left) => format!(
            "{total} cron jobs: the {JOBS_SHOWN} above, and {left} more (`switchboard cron list`, or the owner console)."
        ),
        None if total == 1 => "1 cron job, above.".into(),
        None => format!("{total} cron jobs, above."),
    };
    Ok(Answer { items, text })
}

fn item(job: &CronJob) -> Item {
    let when = match (job.job.next_run_at, job.enabled) {
        (None, _) => "Done: it will not run again.".to_owned(),
        (Some(_), false) => "Paused.".to_owned(),
        (Some(next), true) => format!("Next run: {}", local_time(next, &job.job.tz)),
    };
    let text = format!(
        "{} ({})\n{}, to {}\n{when}",
        job.job.name,
        job.id,
        job.job.schedule.describe(),
        job.job.chat.session_key()
    );
    let id = job.id.clone();
    let mut row = Vec::new();
    if !job.is_finished() {
        let toggle = match job.enabled {
            true => ButtonAction::CronPause(id.clone()).button("Pause"),
            false => ButtonAction::CronResume(id.clone()).button("Resume"),
        };
        row.push(toggle);
    }
    row.push(ButtonAction::CronDelete(id).button("Delete"));
    Item { text, buttons: vec![row] }
}
