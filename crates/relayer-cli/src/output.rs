//! Human output: aligned tables that stay within 80 columns, and short ages.

use std::fmt::Write as _;
use std::time::Duration;

/// The width human output keeps within.
const WIDTH: usize = 80;

/// A table: a header row and rows of cells, rendered with aligned columns. Numbers are
/// right-aligned; the widest column is cut (with `…`) so a line fits in 80 columns.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(headers: &[&'static str]) -> Self {
        Table { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table indented by `indent` spaces, each line ending in a newline.
    pub(crate) fn render(&self, indent: usize) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        // Shrink the widest columns until a line fits.
        let line = |widths: &[usize]| indent + widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
        while line(&widths) > WIDTH {
            let (widest, width) =
                widths.iter().copied().enumerate().max_by_key(|(_, w)| *w).unwrap_or((0, 0));
            if width <= 8 {
                break;
            }
            widths[widest] = width - 1;
        }
        let numeric: Vec<bool> = (0..columns)
            .map(|i| {
                self.rows.iter().all(|row| row.get(i).is_none_or(|c| c == "-" || c.parse::<f64>().is_ok()))
                    && !self.rows.is_empty()
            })
            .collect();
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut text = " ".repeat(indent);
            for (i, width) in widths.iter().enumerate() {
                let cell = cut(row.get(i).map_or("", String::as_str), *width);
                let pad = width - cell.chars().count();
                if i > 0 {
                    text.push_str("  ");
                }
                if numeric[i] {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(&cell);
                } else {
                    text.push_str(&cell);
                    if i + 1 < columns {
                        text.push_str(&" ".repeat(pad));
                    }
                }
            }
            let _ = writeln!(out, "{}", text.trim_end());
        }
        out
    }
}

fn cut(text: &str, width: usize) -> String {
    let single_line = text.replace('\n', " ");
    if single_line.chars().count() <= width {
        return single_line;
    }
    let mut kept: String = single_line.chars().take(width.saturating_sub(1)).collect();
    kept.push('…');
    kept
}

/// A short age: `850ms`, `12.5s`, `3m04s`, `2h05m`, `3d04h`.
pub(crate) fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{}ms", duration.as_millis()),
        1..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3_600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600..86_400 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// An optional age, `-` when absent.
pub(crate) fn maybe_age(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "-".to_owned(), age)
}

/// An optional value, `-` when absent.
pub(crate) fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Seconds as a JSON number (with millisecond precision).
pub(crate) fn seconds(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Prints `value` as pretty JSON on standard output.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_fit_in_80_columns_and_align_numbers() {
        let mut table = Table::new(&["lane", "waiting", "reason"]);
        table.row(vec!["orders-1".to_owned(), "3".to_owned(), "x".repeat(200)]);
        table.row(vec!["b".to_owned(), "12".to_owned(), "short".to_owned()]);
        let text = table.render(2);
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} is {} wide", line.chars().count());
        }
        assert!(text.contains("…"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1].find(" 3").map(|i| i + 2), lines[2].find("12").map(|i| i + 2));
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(Duration::from_millis(850)), "850ms");
        assert_eq!(age(Duration::from_millis(12_500)), "12.5s");
        assert_eq!(age(Duration::from_secs(184)), "3m04s");
        assert_eq!(age(Duration::from_secs(7_500)), "2h05m");
        assert_eq!(age(Duration::from_secs(3 * 86_400 + 4 * 3_600)), "3d04h");
    }
}
