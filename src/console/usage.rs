//! Usage and cost over the last days, per day in the owner's time zone and per person, summed
//! from the runs (see [`crate::store::usage`]).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use switchboard_channels::api::console::desk::ConsoleError;
use switchboard_channels::api::console::views::{DayUsage, PersonUsage, UsagePeriod, UsageReport, UsageTotals};

use super::{Console, failed};
use crate::store::usage::UsageSlice;
use crate::users::month_key;
use crate::zone::Tz;

/// What runs billed to nobody are listed as.
const NOBODY: &str = "no one (cron jobs, heartbeats, older runs)";

pub(super) async fn report(console: &Console, period: UsagePeriod) -> Result<UsageReport, ConsoleError> {
    let zone: Tz = console.timezone().parse().unwrap_or(Tz::UTC);
    let now = crate::clock::now();
    let today = now.with_timezone(&zone).date_naive();
    let first = today.checked_sub_days(Days::new(u64::from(period.days.saturating_sub(1)))).unwrap_or(today);
    let end = today.checked_add_days(Days::new(1)).unwrap_or(today);
    let slices = console.usage.usage_slices(start_of(&zone, first), start_of(&zone, end)).await.map_err(failed)?;
    let users = console.store.list_users(&month_key(now)).await.map_err(failed)?;
    let names: HashMap<i64, String> = users
        .iter()
        .map(|summary| {
            let named = summary.identities.iter().find(|(_, name)| !name.is_empty());
            let name = match (named, summary.identities.first()) {
                (Some((_, name)), _) => name.clone(),
                (None, Some((identity, _))) => identity.to_string(),
                (None, None) => format!("user {}", summary.user.id),
            };
            (summary.user.id.0, name)
        })
        .collect();
    let mut days: BTreeMap<NaiveDate, UsageTotals> =
        first.iter_days().take_while(|day| *day <= today).map(|day| (day, UsageTotals::default())).collect();
    let mut people: HashMap<Option<i64>, UsageTotals> = HashMap::new();
    let mut total = UsageTotals::default();
    for slice in &slices {
        let totals = totals(slice);
        days.entry(slice.start.with_timezone(&zone).date_naive()).or_default().add(&totals);
        people.entry(slice.user.map(|user| user.0)).or_default().add(&totals);
        total.add(&totals);
    }
    let mut people: Vec<PersonUsage> = people
        .into_iter()
        .map(|(user_id, totals)| {
            let name = match user_id {
                Some(id) => names.get(&id).cloned().unwrap_or_else(|| format!("user {id}")),
                None => NOBODY.to_owned(),
            };
            PersonUsage { user_id, name, totals }
        })
        .collect();
    people.sort_by(|a, b| b.totals.tokens().cmp(&a.totals.tokens()).then_with(|| a.name.cmp(&b.name)));
    Ok(UsageReport {
        timezone: zone.name().to_owned(),
        from: first.to_string(),
        to: today.to_string(),
        days: days.into_iter().map(|(day, totals)| DayUsage { day: day.to_string(), totals }).collect(),
        people,
        total,
    })
}

fn totals(slice: &UsageSlice) -> UsageTotals {
    UsageTotals {
        runs: slice.runs,
        input_tokens: slice.usage.input_tokens,
        output_tokens: slice.usage.output_tokens,
        cache_read_tokens: slice.usage.cache_read_tokens,
        cost_usd: slice.cost_usd,
        unpriced_runs: slice.unpriced_runs,
    }
}

/// When `day` begins in `zone` (its first existing instant, where the clocks skip midnight).
fn start_of(zone: &Tz, day: NaiveDate) -> DateTime<Utc> {
    let mut at = day.and_time(chrono::NaiveTime::MIN);
    for _ in 0..4 {
        if let Some(start) = zone.from_local_datetime(&at).earliest() {
            return start.with_timezone(&Utc);
        }
        at += chrono::Duration::minutes(30);
    }
    day.and_time(chrono::NaiveTime::MIN).and_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_starts_at_local_midnight_or_the_first_instant_after_it() {
        let day = NaiveDate::from_ymd_opt(2026, 3, 29).unwrap();
        assert_eq!(start_of(&"Europe/Berlin".parse().unwrap(), day).to_rfc3339(), "2026-03-28T23:00:00+00:00");
        // Santiago skips from 00:00 to 01:00 when summer time starts.
        let skipped = NaiveDate::from_ymd_opt(2025, 9, 7).unwrap();
        assert_eq!(start_of(&"America/Santiago".parse().unwrap(), skipped).to_rfc3339(), "2025-09-07T04:00:00+00:00");
    }
}
