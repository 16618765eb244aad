//! The shared checks of worker options: ranges, positive durations, leases, retentions and
//! the rules that tie two settings together. Each names the refused field and value.

use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::error::{Field, OptionsError};
use super::limits::{MAX_BATCH_SIZE, MAX_INTERVAL, MAX_LEASE, MAX_RETENTION, MIN_LEASE};
use super::setting_value::SettingValue;
use crate::duration::Retention;

pub(crate) fn check_range<T: SettingValue + PartialOrd>(
    field: Field,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), OptionsError> {
    if range.contains(&value) {
        return Ok(());
    }
    let problem = format!("is out of range ({}..={})", range.start().render(), range.end().render());
    Err(OptionsError::new(field, value, problem))
}

pub(crate) fn check_batch_size(field: Field, value: u32) -> Result<(), OptionsError> {
    check_range(field, value, 1..=MAX_BATCH_SIZE)
}

pub(crate) fn check_nonzero(field: Field, value: u32) -> Result<NonZeroU32, OptionsError> {
    NonZeroU32::new(value).ok_or_else(|| OptionsError::new(field, value, "must be at least 1"))
}

pub(crate) fn check_positive(field: Field, value: Duration) -> Result<(), OptionsError> {
    if value.is_zero() { Err(OptionsError::new(field, value, "must be positive")) } else { Ok(()) }
}

/// Intervals, backoffs, budgets: positive and at most [`MAX_INTERVAL`].
pub(crate) fn check_interval(field: Field, value: Duration) -> Result<(), OptionsError> {
    check_positive(field, value)?;
    check_delay(field, value)
}

/// Delays may be zero, and are at most [`MAX_INTERVAL`].
pub(crate) fn check_delay(field: Field, value: Duration) -> Result<(), OptionsError> {
    if value > MAX_INTERVAL {
        let problem = format!("is longer than the maximum ({})", MAX_INTERVAL.render());
        return Err(OptionsError::new(field, value, problem));
    }
    Ok(())
}

/// Leases and claims: [`MIN_LEASE`]..=[`MAX_LEASE`].
pub(crate) fn check_lease(field: Field, value: Duration) -> Result<(), OptionsError> {
    check_range(field, value, MIN_LEASE..=MAX_LEASE)
}

/// Retentions: positive and at most [`MAX_RETENTION`], or infinite.
pub(crate) fn check_retention(field: Field, value: Retention) -> Result<(), OptionsError> {
    match value {
        Retention::After(duration) if duration.is_zero() => {
            Err(OptionsError::new(field, value, "must be positive, or \"infinite\" to keep rows forever"))
        }
        Retention::After(duration) if duration > MAX_RETENTION => {
            let problem = format!(
                "is longer than the maximum ({}); use \"infinite\" to keep rows forever",
                MAX_RETENTION.render()
            );
            Err(OptionsError::new(field, value, problem))
        }
        _ => Ok(()),
    }
}

/// `value <= other`; the message names the other field without its section.
pub(crate) fn check_not_above(
    field: Field,
    value: Duration,
    other_field: Field,
    other: Duration,
) -> Result<(), OptionsError> {
    if value <= other {
        return Ok(());
    }
    let problem = format!("must not exceed {} ({})", other_field.name, other.render());
    Err(OptionsError::new(field, value, problem))
}

/// `value <= other / 2`; the message names the other field with its section, since it may
/// belong to another worker's options.
pub(crate) fn check_at_most_half(
    field: Field,
    value: Duration,
    other_field: Field,
    other: Duration,
) -> Result<(), OptionsError> {
    if value <= other / 2 {
        return Ok(());
    }
    let problem = format!("must be at most half of {other_field} ({})", other.render());
    Err(OptionsError::new(field, value, problem))
}

/// `value > other`; the message names the other field without its section.
pub(crate) fn check_greater(
    field: Field,
    value: Duration,
    other_field: Field,
    other: Duration,
) -> Result<(), OptionsError> {
    if value > other {
        return Ok(());
    }
    let problem = format!("must be greater than {} ({})", other_field.name, other.render());
    Err(OptionsError::new(field, value, problem))
}
