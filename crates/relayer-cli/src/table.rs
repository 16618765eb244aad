//! Human tables for an 80-column terminal that never cut an identifier.
//!
//! A table has two kinds of column. *Identifier* columns (message ids, lane keys, lease
//! holders, queues, numbers) are copied and pasted into the next command, so they are
//! always printed whole. *Text* columns (errors, reasons) are prose: when a line would not
//! fit, they give way. The layout is the first of these that fits in 80 columns:
//!
//! 1. every cell on one line;
//! 2. text columns narrowed to what is left (at least [`MIN_TEXT`] each), their cells
//!    wrapped at word boundaries onto continuation lines within the column;
//! 3. text columns moved under their row, one indented `header: text` line each, wrapped;
//! 4. one block per row, a `header: value` line per cell (identifiers too long for any
//!    grid still print whole: a key that is wider than the terminal wraps in it, uncut).

use std::fmt::Write as _;

use crate::escape::{Newlines, printable};

/// The width human output keeps within.
pub(crate) const WIDTH: usize = 80;

/// The narrowest a text column is squeezed to before it moves under its row.
const MIN_TEXT: usize = 16;

/// Between two columns.
const GAP: &str = "  ";

/// A table: headers, which of them are text, and rows of cells.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    text: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose columns are all identifiers (or numbers).
    pub(crate) fn new(headers: &[&'static str]) -> Self {
        Table { headers: headers.to_vec(), text: vec![false; headers.len()], rows: Vec::new() }
    }

    /// Marks the column `header` as free text, which may wrap or move under its row.
    pub(crate) fn text(mut self, header: &str) -> Self {
        if let Some(i) = self.headers.iter().position(|h| *h == header) {
            self.text[i] = true;
        }
        self
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        let cells = cells
            .into_iter()
            .zip(&self.text)
            .map(|(cell, &text)| {
                if text {
                    printable(&cell.replace(['\n', '\r'], " "), Newlines::Escape)
                } else {
                    quoted_if_ambiguous(cell)
                }
            })
            .collect();
        self.rows.push(cells);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table indented by `indent` spaces, each line ending in a newline.
    pub(crate) fn render(&self, indent: usize) -> String {
        let columns = self.headers.len();
        let natural: Vec<usize> = (0..columns)
            .map(|i| {
                let cells = self.rows.iter().map(|row| width(row.get(i).map_or("", String::as_str)));
                cells.fold(width(self.headers[i]), usize::max)
            })
            .collect();
        let fits = |widths: &[usize]| line_width(indent, widths) <= WIDTH;
        if fits(&natural) {
            return self.grid(indent, &natural, &vec![true; columns]);
        }
        let fixed: Vec<usize> = (0..columns).map(|i| if self.text[i] { 0 } else { natural[i] }).collect();
        let texts = self.text.iter().filter(|t| **t).count();
        let used = line_width(indent, &fixed) + GAP.len() * texts;
        if let Some(room) = WIDTH.saturating_sub(used).checked_div(texts) {
            if room >= MIN_TEXT {
                let widths: Vec<usize> = (0..columns)
                    .map(|i| if self.text[i] { natural[i].min(room) } else { natural[i] })
                    .collect();
                return self.grid(indent, &widths, &vec![true; columns]);
            }
            let shown: Vec<bool> = self.text.iter().map(|t| !t).collect();
            let kept: Vec<usize> = (0..columns).filter(|i| shown[*i]).map(|i| natural[i]).collect();
            if line_width(indent, &kept) <= WIDTH {
                return self.grid(indent, &natural, &shown);
            }
        }
        self.records(indent)
    }

    /// Rows as a grid of the `shown` columns at `widths`; text cells wider than their
    /// column wrap within it, and hidden text columns follow their row.
    fn grid(&self, indent: usize, widths: &[usize], shown: &[bool]) -> String {
        let numeric: Vec<bool> = (0..self.headers.len())
            .map(|i| {
                !self.rows.is_empty()
                    && self
                        .rows
                        .iter()
                        .all(|row| row.get(i).is_none_or(|c| c == "-" || c.parse::<f64>().is_ok()))
            })
            .collect();
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for (r, row) in std::iter::once(&headers).chain(&self.rows).enumerate() {
            let cells: Vec<Vec<String>> = (0..self.headers.len())
                .map(|i| {
                    let cell = row.get(i).map_or("", String::as_str);
                    if self.text[i] && shown[i] { wrap(cell, widths[i]) } else { vec![cell.to_owned()] }
                })
                .collect();
            let height = cells.iter().map(Vec::len).max().unwrap_or(1);
            let last = (0..self.headers.len()).rev().find(|i| shown[*i]).unwrap_or(0);
            for line in 0..height {
                let mut text = " ".repeat(indent);
                for (n, (i, cell)) in cells.iter().enumerate().filter(|(i, _)| shown[*i]).enumerate() {
                    let piece = cell.get(line).map_or("", String::as_str);
                    let pad = widths[i].saturating_sub(width(piece));
                    if n > 0 {
                        text.push_str(GAP);
                    }
                    if numeric[i] {
                        text.push_str(&" ".repeat(pad));
                        text.push_str(piece);
                    } else {
                        text.push_str(piece);
                        if i != last {
                            text.push_str(&" ".repeat(pad));
                        }
                    }
                }
                let _ = writeln!(out, "{}", text.trim_end());
            }
            if r > 0 {
                for (i, cell) in row.iter().enumerate().filter(|(i, _)| !shown[*i]) {
                    if !cell.is_empty() {
                        out.push_str(&labelled(indent + 4, self.headers[i], cell));
                    }
                }
            }
        }
        out
    }

    /// One block per row: `header: value`, aligned; text values wrapped.
    fn records(&self, indent: usize) -> String {
        let label = self.headers.iter().map(|h| width(h)).max().unwrap_or(0);
        let mut out = String::new();
        for (r, row) in self.rows.iter().enumerate() {
            if r > 0 {
                out.push('\n');
            }
            for (i, header) in self.headers.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                let lead = format!("{}{header:>label$}: ", " ".repeat(indent));
                if self.text[i] {
                    let lines = wrap(cell, WIDTH.saturating_sub(width(&lead)).max(MIN_TEXT));
                    for (n, line) in lines.iter().enumerate() {
                        let prefix = if n == 0 { lead.clone() } else { " ".repeat(width(&lead)) };
                        let _ = writeln!(out, "{}", format!("{prefix}{line}").trim_end());
                    }
                } else {
                    let _ = writeln!(out, "{}", format!("{lead}{cell}").trim_end());
                }
            }
        }
        out
    }
}

/// `header: text` at `indent`, wrapped within 80 columns.
fn labelled(indent: usize, header: &str, text: &str) -> String {
    let lead = format!("{}{header}: ", " ".repeat(indent));
    let mut out = String::new();
    for (n, line) in wrap(text, WIDTH.saturating_sub(width(&lead)).max(MIN_TEXT)).iter().enumerate() {
        let prefix = if n == 0 { lead.clone() } else { " ".repeat(width(&lead)) };
        let _ = writeln!(out, "{prefix}{line}");
    }
    out
}

fn width(text: &str) -> usize {
    text.chars().count()
}

fn line_width(indent: usize, widths: &[usize]) -> usize {
    let shown = widths.iter().filter(|w| **w > 0).count();
    indent + widths.iter().sum::<usize>() + GAP.len() * shown.saturating_sub(1)
}

/// An identifier as it can be copied back into a command: as it is when it is one plain
/// token, else quoted and escaped (a key with a space, a line break or a quote in it, or an
/// empty key, would otherwise read as something else). Prose cells are never quoted: a line
/// break in them is a space.
fn quoted_if_ambiguous(cell: String) -> String {
    let plain = !cell.is_empty()
        && !cell.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\');
    if plain { cell } else { format!("{cell:?}") }
}

/// `text` in lines of at most `columns` characters, broken at spaces; a word longer than
/// a line is split (it is prose, not an identifier). Never empty.
pub(crate) fn wrap(text: &str, columns: usize) -> Vec<String> {
    let columns = columns.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let room = if line.is_empty() { columns } else { columns.saturating_sub(width(&line) + 1) };
            if word.len() <= room {
                if !line.is_empty() {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if line.is_empty() {
                // A word longer than a whole line: split it.
                lines.push(word.drain(..columns).collect());
            } else {
                lines.push(std::mem::take(&mut line));
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MESSAGE_ID: &str = "0190f3a2-6c1e-7b44-9a0e-3f2d1c0b9a87";
    const ERROR: &str = "permanent: the ledger refused entry 4711 because the account it names was \
                         closed on 2026-11-30 and accepts no further entries";

    fn lines_fit(text: &str) {
        for line in text.lines() {
            assert!(width(line) <= WIDTH, "{line:?} is {} wide", width(line));
        }
    }

    /// A lane key with a space or a line break in it is quoted, escaped, so it reads as one
    /// key; prose keeps its words and loses only its line breaks.
    #[test]
    fn ambiguous_identifiers_are_quoted_and_prose_is_not() {
        let mut table = Table::new(&["lane", "waiting", "reason"]).text("reason");
        table.row(vec!["eu west\n1".to_owned(), "3".to_owned(), "line one\nline two".to_owned()]);
        table.row(vec![String::new(), "1".to_owned(), "x".to_owned()]);
        table.row(vec!["plain-key:1".to_owned(), "2".to_owned(), "y".to_owned()]);
        let text = table.render(0);
        assert!(text.contains("\"eu west\\n1\""), "{text}");
        assert!(text.contains("line one line two"), "{text}");
        assert!(text.contains("\"\""), "an empty key is shown as \"\": {text}");
        assert!(text.contains("plain-key:1 ") && !text.contains("\"plain-key:1\""), "{text}");
    }

    #[test]
    fn a_short_table_stays_on_one_line_per_row_with_numbers_right_aligned() {
        let mut table = Table::new(&["lane", "waiting", "reason"]).text("reason");
        table.row(vec!["orders-1".to_owned(), "3".to_owned(), "x".to_owned()]);
        table.row(vec!["b".to_owned(), "12".to_owned(), "short".to_owned()]);
        let text = table.render(2);
        assert_eq!(text, "  lane      waiting  reason\n  orders-1        3  x\n  b              12  short\n");
    }

    /// A parked lane as `lanes list` shows it: the key whole, the reason wrapped in its
    /// column.
    #[test]
    fn a_long_reason_wraps_in_its_column_and_the_key_stays_whole() {
        let lane = "account-0190f3a2-6c1e";
        let mut table = Table::new(&["lane", "waiting", "head", "tries", "parked", "reason"]).text("reason");
        table.row(vec![lane.into(), "3".into(), "17".into(), "1".into(), "3m04s".into(), ERROR.into()]);
        let text = table.render(0);
        lines_fit(&text);
        assert!(text.lines().nth(1).unwrap().starts_with(lane), "{text}");
        let words: Vec<&str> = text.split_whitespace().collect();
        for word in ERROR.split_whitespace() {
            assert!(words.contains(&word), "{word:?} lost: {text}");
        }
        assert!(text.lines().count() > 2, "the reason wraps: {text}");
        let column = text.lines().next().unwrap().find("reason").unwrap();
        for line in text.lines().skip(2) {
            assert_eq!(
                line.find(|c: char| c != ' '),
                Some(column),
                "continuations stay in the column: {text}"
            );
        }
    }

    /// A dead outbox row as `dead-letters list --outbox` shows it: the message id whole on
    /// the row, the error under it, wrapped, whole.
    #[test]
    fn a_text_column_without_room_moves_under_its_row() {
        let mut table =
            Table::new(&["seq", "message id", "destination", "tries", "died", "error"]).text("error");
        let destination = "nats:orders.eu-west-1";
        table.row(vec![
            "9".into(),
            MESSAGE_ID.into(),
            destination.into(),
            "1".into(),
            "2s".into(),
            ERROR.into(),
        ]);
        let text = table.render(0);
        lines_fit(&text);
        assert!(text.lines().nth(1).unwrap().contains(MESSAGE_ID) && text.contains(destination), "{text}");
        assert!(text.lines().nth(2).unwrap().starts_with("    error: permanent:"), "{text}");
        assert!(text.split_whitespace().collect::<Vec<_>>().join(" ").contains(ERROR), "{text}");
    }

    /// Identifiers too wide for any grid: one block per row, every value whole.
    #[test]
    fn identifiers_too_wide_for_a_grid_print_whole_as_records() {
        let holder = format!("sidecar-{}.eu-west-1.internal/4242/{MESSAGE_ID}", "x".repeat(10));
        let mut table = Table::new(&["job", "holder", "term"]);
        table.row(vec!["sweeper".into(), holder.clone(), "7".into()]);
        let text = table.render(2);
        assert!(text.contains(&format!("holder: {holder}")), "{text}");
        assert!(text.contains("  term: 7"), "{text}");
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_splits_only_overlong_words() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("", 5), [""]);
    }

    fn identifier() -> impl Strategy<Value = String> {
        "[a-z0-9:./-]{1,40}"
    }

    fn prose() -> impl Strategy<Value = String> {
        proptest::collection::vec("[a-z]{1,15}", 0..40).prop_map(|words| words.join(" "))
    }

    proptest! {
        /// Whatever the rows, every identifier prints whole, every word of the text is
        /// kept, and no line passes 80 columns (identifiers of up to 40 characters).
        #[test]
        fn identifiers_are_never_cut_and_lines_stay_within_80_columns(
            rows in proptest::collection::vec((identifier(), identifier(), identifier(), prose()), 1..6),
            indent in 0usize..3,
        ) {
            let mut table = Table::new(&["lane", "holder", "queue", "reason"]).text("reason");
            for (a, b, c, text) in &rows {
                table.row(vec![a.clone(), b.clone(), c.clone(), text.clone()]);
            }
            let text = table.render(indent);
            for line in text.lines() {
                prop_assert!(width(line) <= WIDTH, "{:?} is {} wide", line, width(line));
            }
            let tokens: Vec<&str> = text.split_whitespace().collect();
            for (a, b, c, prose) in &rows {
                for id in [a, b, c] {
                    prop_assert!(tokens.contains(&id.as_str()), "{:?} cut: {}", id, text);
                }
                for word in prose.split_whitespace() {
                    prop_assert!(tokens.contains(&word), "{:?} lost: {}", word, text);
                }
            }
        }
    }
}
