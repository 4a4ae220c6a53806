//! Crontab as users write it, read field by field and translated to the `cron` crate's syntax.
//!
//! Every field is expanded to an explicit set here, so the crate only ever sees plain number
//! lists (and weekday names): its own conventions (seconds first, Sunday = 1) cannot leak into
//! what users meant.

use super::{FieldProblem, ScheduleError};

/// One crontab field: its position as the user wrote it, what it holds, and its value range.
#[derive(Debug, Clone, Copy)]
struct FieldSpec {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
}

const SECOND: FieldSpec = FieldSpec { name: "second", min: 0, max: 59, names: &[] };
const MINUTE: FieldSpec = FieldSpec { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: FieldSpec = FieldSpec { name: "hour", min: 0, max: 23, names: &[] };
const DAY_OF_MONTH: FieldSpec = FieldSpec { name: "day of month", min: 1, max: 31, names: &[] };
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
};
// 0-7: both 0 and 7 are Sunday, as in Vixie cron.
const DAY_OF_WEEK: FieldSpec =
    FieldSpec { name: "day of week", min: 0, max: 7, names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] };

/// The crate's weekday names, indexed by crontab number (Sunday = 0).
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A parsed field: the selected values (bit n = value n) and whether the user wrote it
/// starting with `*` (Vixie cron's test for "unrestricted" in the day-of-month/day-of-week rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) bits: u64,
    pub(super) star: bool,
}

impl Field {
    pub(super) fn contains(&self, value: u32) -> bool {
        value < 64 && self.bits & (1 << value) != 0
    }
}

/// A crontab expression expanded to value sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Crontab {
    pub(super) second: Field,
    pub(super) minute: Field,
    pub(super) hour: Field,
    pub(super) day_of_month: Field,
    pub(super) month: Field,
    /// Sunday = 0 … Saturday = 6 (a written 7 is folded into 0).
    pub(super) day_of_week: Field,
}

impl Crontab {
    pub(super) fn parse(expr: &str) -> Result<Crontab, ScheduleError> {
        let expanded = expand_macro(expr.trim())?;
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            5 => (None, &fields[..]),
            6 => (Some(fields[0]), &fields[1..]),
            found => return Err(ScheduleError::FieldCount { found }),
        };
        // Field positions in errors count the fields as the user wrote them.
        let offset = usize::from(seconds.is_some());
        let at = |i: usize, spec: FieldSpec| parse_field(rest[i], spec, i + 1 + offset);
        let second = match seconds {
            Some(text) => parse_field(text, SECOND, 1)?,
            None => Field { bits: 1, star: false },
        };
        let mut day_of_week = at(4, DAY_OF_WEEK)?;
        if day_of_week.contains(7) {
            day_of_week.bits = (day_of_week.bits & !(1 << 7)) | 1;
        }
        let tab = Crontab {
            second,
            minute: at(0, MINUTE)?,
            hour: at(1, HOUR)?,
            day_of_month: at(2, DAY_OF_MONTH)?,
            month: at(3, MONTH)?,
            day_of_week,
        };
        tab.check_possible_day()?;
        Ok(tab)
    }

    /// Vixie cron: when both day fields are restricted, a day matches if either matches.
    pub(super) fn days_or(&self) -> bool {
        !self.day_of_month.star && !self.day_of_week.star
    }

    /// True when every hour is selected: such jobs run in both passes of a repeated
    /// (fall-back) hour, because they are meant to run every real hour.
    pub(super) fn every_hour(&self) -> bool {
        self.hour.bits == (1 << 24) - 1
    }

    /// The crate expressions to evaluate; with the OR rule, two whose union is the schedule
    /// (the crate ANDs the day fields).
    pub(super) fn crate_exprs(&self) -> Vec<String> {
        let dom = numbers(self.day_of_month.bits);
        let dow = weekdays(self.day_of_week.bits);
        if self.days_or() {
            vec![self.crate_expr(&dom, "*"), self.crate_expr("*", &dow)]
        } else {
            vec![self.crate_expr(&dom, &dow)]
        }
    }

    fn crate_expr(&self, dom: &str, dow: &str) -> String {
        format!(
            "{} {} {} {dom} {} {dow}",
            numbers(self.second.bits),
            numbers(self.minute.bits),
            numbers(self.hour.bits),
            numbers(self.month.bits),
        )
    }

    /// Rejects day-of-month/month combinations no calendar has (`0 0 30 2 *`): such a job
    /// would be accepted and silently never run.
    fn check_possible_day(&self) -> Result<(), ScheduleError> {
        // With the OR rule the weekday side alone makes the schedule fire.
        if self.days_or() || !self.day_of_week.star && self.day_of_month.star {
            return Ok(());
        }
        const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let first_day = self.day_of_month.bits.trailing_zeros();
        let possible = (1..=12u32).filter(|&m| self.month.contains(m)).any(|m| first_day <= LONGEST[(m - 1) as usize]);
        if possible { Ok(()) } else { Err(ScheduleError::NeverFires) }
    }
}

fn expand_macro(expr: &str) -> Result<String, ScheduleError> {
    let Some(name) = expr.strip_prefix('@') else {
        return Ok(expr.to_owned());
    };
    let expanded = match name.to_ascii_lowercase().as_str() {
        "hourly" => "0 * * * *",
        "daily" | "midnight" => "0 0 * * *",
        "weekly" => "0 0 * * 0",
        "monthly" => "0 0 1 * *",
        "yearly" | "annually" => "0 0 1 1 *",
        _ => return Err(ScheduleError::UnknownMacro(expr.to_owned())),
    };
    Ok(expanded.to_owned())
}

fn parse_field(text: &str, spec: FieldSpec, position: usize) -> Result<Field, ScheduleError> {
    let fail = |problem| ScheduleError::Field { position, field: spec.name, problem };
    let mut bits = 0u64;
    for item in text.split(',') {
        bits |= parse_item(item, spec).map_err(fail)?;
    }
    Ok(Field { bits, star: text.starts_with('*') })
}

/// One list item: `*`, `N`, `A-B`, each optionally with `/STEP`.
fn parse_item(item: &str, spec: FieldSpec) -> Result<u64, FieldProblem> {
    if item.is_empty() {
        return Err(FieldProblem::Empty);
    }
    let (base, step) = match item.split_once('/') {
        Some((base, step)) => (base, Some(parse_step(step)?)),
        None => (item, None),
    };
    let (lo, hi) = if base == "*" {
        (spec.min, spec.max)
    } else if let Some((a, b)) = base.split_once('-') {
        let (lo, mut hi) = (parse_value(a, spec)?, parse_value(b, spec)?);
        // `FRI-SUN`: Sunday as the end of a weekday range is day 7, not day 0.
        if spec.name == DAY_OF_WEEK.name && hi == 0 && lo > 0 {
            hi = 7;
        }
        if lo > hi {
            return Err(FieldProblem::BackwardsRange { lo, hi });
        }
        (lo, hi)
    } else {
        let value = parse_value(base, spec)?;
        // `N/STEP` means N through the field's maximum, as in most crons and the `cron` crate.
        (value, if step.is_some() { spec.max } else { value })
    };
    let step = step.unwrap_or(1);
    Ok((lo..=hi).step_by(usize::from(step)).fold(0, |acc, v| acc | 1 << v))
}

fn parse_step(text: &str) -> Result<u8, FieldProblem> {
    match text.parse::<u8>() {
        Ok(0) => Err(FieldProblem::ZeroStep),
        Ok(step) => Ok(step),
        Err(_) => Err(FieldProblem::BadStep(text.to_owned())),
    }
}

fn parse_value(text: &str, spec: FieldSpec) -> Result<u8, FieldProblem> {
    let named = spec.names.iter().position(|n| n.eq_ignore_ascii_case(text));
    if let Some(index) = named {
        // Month names count from 1, weekday names from 0 (Sunday).
        let index = u8::try_from(index).map_err(|_| FieldProblem::BadValue(text.to_owned()))?;
        return Ok(index + spec.min);
    }
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FieldProblem::BadValue(text.to_owned()));
    }
    let out_of_range = || FieldProblem::OutOfRange { value: text.to_owned(), min: spec.min, max: spec.max };
    let value = text.parse::<u8>().map_err(|_| out_of_range())?;
    if (spec.min..=spec.max).contains(&value) { Ok(value) } else { Err(out_of_range()) }
}

/// A set as a comma list of numbers (the crate's numbering equals crontab's for these fields).
fn numbers(bits: u64) -> String {
    let values: Vec<String> = (0..64).filter(|v| bits & (1u64 << v) != 0).map(|v| v.to_string()).collect();
    values.join(",")
}

/// Weekdays as names, so the crate's Sunday = 1 numbering never meets ours.
fn weekdays(bits: u64) -> String {
    let names: Vec<&str> = (0..7).filter(|v| bits & (1u64 << v) != 0).map(|v| WEEKDAY_NAMES[v]).collect();
    names.join(",")
}
