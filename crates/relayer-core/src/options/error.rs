//! A refused setting: [`OptionsError`] names the field and the value, and [`Field`] is how a
//! setting is named (`section.name`).

use std::fmt;

use super::setting_value::SettingValue;

/// A setting refused because it is out of range. Its message names the field and the
/// value: `sweeper.batch_size: 0 is out of range (1..=10000)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value} {problem}")]
pub struct OptionsError {
    field: String,
    value: String,
    problem: String,
}

impl OptionsError {
    pub(crate) fn new(field: Field, value: impl SettingValue, problem: impl Into<String>) -> Self {
        OptionsError { field: field.to_string(), value: value.render(), problem: problem.into() }
    }

    /// The refused field, e.g. `sweeper.batch_size` (or `after` for a constructor argument).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The refused value as configuration writes it, e.g. `0` or `0s`.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// The name of a setting in errors: `section.name`, or just `name` for a constructor
/// argument.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field {
    section: &'static str,
    pub(crate) name: &'static str,
}

impl Field {
    pub(crate) const fn new(section: &'static str, name: &'static str) -> Self {
        Field { section, name }
    }

    pub(crate) const fn bare(name: &'static str) -> Self {
        Field { section: "", name }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.section.is_empty() {
            write!(f, "{}.", self.section)?;
        }
        f.write_str(self.name)
    }
}
