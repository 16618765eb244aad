//! A setting's value as configuration writes it (`0`, `30s`, `infinite`): what errors and
//! fingerprints show.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::duration::{HumanDuration, Retention};

/// A setting's value as configuration writes it, for errors and fingerprints.
pub(crate) trait SettingValue: Copy {
    fn render(self) -> String;
}

impl SettingValue for u32 {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for usize {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for NonZeroU32 {
    fn render(self) -> String {
        self.to_string()
    }
}

impl SettingValue for Option<NonZeroU32> {
    fn render(self) -> String {
        self.map_or_else(|| "none".to_owned(), |value| value.to_string())
    }
}

impl SettingValue for Option<Duration> {
    fn render(self) -> String {
        self.map_or_else(|| "none".to_owned(), SettingValue::render)
    }
}

impl SettingValue for Duration {
    fn render(self) -> String {
        HumanDuration(self).to_string()
    }
}

impl SettingValue for Retention {
    fn render(self) -> String {
        self.to_string()
    }
}
