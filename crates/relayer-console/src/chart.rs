//! The overview's chart: the last hour of backlog and oldest pending age as an inline SVG
//! (no script, nothing fetched), each line scaled to its own maximum.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::format::age;
use crate::history::Sample;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;
const PAD: f64 = 24.0;

/// The chart of `samples` over the `window` ending at `now`.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn render(samples: &[Sample], window: Duration, now: SystemTime) -> String {
    let start = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
    let shown: Vec<&Sample> = samples.iter().filter(|s| s.at >= start).collect();
    let mut svg = format!(
        "<svg id=\"chart\" data-samples=\"{}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         role=\"img\" aria-label=\"backlog and oldest pending age, last {}\">",
        shown.len(),
        age(window)
    );
    if shown.is_empty() {
        let _ = write!(
            svg,
            "<text x=\"{PAD}\" y=\"{}\" fill=\"#6b7385\">no samples yet: the sampler records one every sample interval</text></svg>",
            HEIGHT / 2.0
        );
        return svg;
    }
    let max_backlog = shown.iter().map(|s| s.backlog).max().unwrap_or(0).max(1) as f64;
    let max_oldest = shown.iter().map(|s| s.oldest_seconds).fold(0.0, f64::max).max(1.0);
    let x = |at: SystemTime| {
        let offset = at.duration_since(start).unwrap_or_default().as_secs_f64();
        PAD + offset / window.as_secs_f64().max(1.0) * (WIDTH - 2.0 * PAD)
    };
    let y = |value: f64, max: f64| HEIGHT - PAD - value / max * (HEIGHT - 2.0 * PAD);
    let line = |value: &dyn Fn(&Sample) -> f64, max: f64| {
        shown.iter().map(|s| format!("{:.1},{:.1}", x(s.at), y(value(s), max))).collect::<Vec<_>>().join(" ")
    };
    let _ = write!(
        svg,
        "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#dde1e8\"/>\
         <polyline fill=\"none\" stroke=\"#3457d5\" stroke-width=\"2\" points=\"{backlog}\"/>\
         <polyline fill=\"none\" stroke=\"#d5892c\" stroke-width=\"2\" stroke-dasharray=\"4 3\" points=\"{oldest}\"/>\
         <text x=\"{PAD}\" y=\"14\" fill=\"#3457d5\">backlog (max {mb})</text>\
         <text x=\"{mid}\" y=\"14\" fill=\"#d5892c\">oldest pending age (max {mo})</text>\
         <text x=\"{PAD}\" y=\"{t}\" fill=\"#6b7385\">−{w}</text><text x=\"{rt}\" y=\"{t}\" fill=\"#6b7385\">now</text></svg>",
        b = HEIGHT - PAD,
        r = WIDTH - PAD,
        backlog = line(&|s| s.backlog as f64, max_backlog),
        oldest = line(&|s| s.oldest_seconds, max_oldest),
        mb = max_backlog,
        mid = WIDTH / 2.0,
        mo = age(Duration::from_secs_f64(max_oldest)),
        t = HEIGHT - 6.0,
        rt = WIDTH - PAD - 24.0,
        w = age(window),
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_the_window_only() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100_000);
        let at = |ago: u64| Sample {
            at: now - Duration::from_secs(ago),
            backlog: 5,
            oldest_seconds: 3.0,
            dead_letters: 0,
        };
        let svg = render(&[at(7_200), at(60), at(0)], Duration::from_secs(3_600), now);
        assert!(svg.contains("data-samples=\"2\""), "{svg}");
        assert!(render(&[], Duration::from_secs(3_600), now).contains("no samples yet"));
    }
}
