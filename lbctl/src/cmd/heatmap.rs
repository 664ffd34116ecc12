//! `lbctl heatmap TENANT/TABLE`: the table's key space (columns, lowest keys left) over time
//! (rows, oldest first), one character per cell. With 256 colours, a block in a colour from
//! cold blue to hot red; otherwise the shade characters ░▒▓█ by quarter of the hottest cell.

use lb_common::protocol::{Heatmap, HeatmapQuery};

use crate::api::{Api, now_ms};
use crate::cli::HeatmapArgs;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::Style;

/// Rows a default heatmap has: `--since` / 20 per row fits a terminal's height.
pub const DEFAULT_ROWS: u64 = 20;

/// Shade characters from cold to hot; a cell with no load is a blank.
const SHADES: [char; 4] = ['░', '▒', '▓', '█'];

/// The 256-colour ramp, cold to hot: blues, cyan, greens, yellow, orange, red.
const RAMP: [u8; 16] = [17, 19, 21, 27, 33, 39, 45, 51, 49, 47, 82, 154, 226, 214, 208, 196];

pub async fn fetch(api: &Api, args: &HeatmapArgs) -> Result<Heatmap, CtlError> {
    let step_secs = args.step.unwrap_or((args.since / DEFAULT_ROWS).max(1));
    let to_ms = now_ms();
    let query = HeatmapQuery {
        tenant: args.table.0.clone(),
        table: args.table.1.clone(),
        metric: Some(args.metric),
        from_ms: Some(to_ms - (args.since * 1000) as i64),
        to_ms: Some(to_ms),
        step_ms: Some((step_secs * 1000) as i64),
        buckets: Some(usize::from(args.buckets)),
    };
    api.master.heatmap(&query).await.at_master()
}

/// What a cell shows: nothing, a shade, or a block in a colour of the ramp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Blank,
    Shade(char),
    Color(u8),
}

/// The mark for `value` against the hottest cell `max`: the level is the value's share of it,
/// rounded up, so any load at all is visible.
fn mark(value: f32, max: f32, style: &Style) -> Mark {
    if value <= 0.0 || max <= 0.0 {
        return Mark::Blank;
    }
    let x = (value / max).clamp(0.0, 1.0);
    let level = |n: usize| ((x * n as f32).ceil() as usize).clamp(1, n) - 1;
    if style.colors256 { Mark::Color(RAMP[level(RAMP.len())]) } else { Mark::Shade(SHADES[level(SHADES.len())]) }
}

/// One row of marks; a run of one colour is one escape sequence.
fn row_text(marks: &[Mark], style: &Style) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < marks.len() {
        let run = marks[i..].iter().take_while(|m| **m == marks[i]).count();
        match marks[i] {
            Mark::Blank => out.push_str(&" ".repeat(run)),
            Mark::Shade(c) => out.extend(std::iter::repeat_n(c, run)),
            Mark::Color(c) => out.push_str(&style.fg256(c, &"█".repeat(run))),
        }
        i += run;
    }
    out
}

pub fn render(h: &Heatmap, style: &Style) -> String {
    let cols = h.key_buckets.len();
    let max = h.values.iter().copied().fold(0.0f32, f32::max);
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "{}/{} {} heatmap: {} rows of {}, {} key ranges; hottest cell {}",
            h.tenant,
            h.table,
            h.metric,
            h.times_ms.len(),
            fmt::duration_ms(h.step_ms),
            cols,
            fmt::metric_value(h.metric, f64::from(max))
        ))
    );
    if cols == 0 || h.times_ms.is_empty() {
        out.push_str("no partitions of this table in the window\n");
        return out;
    }
    for (r, t) in h.times_ms.iter().enumerate() {
        let marks: Vec<Mark> =
            (0..cols).map(|c| mark(h.values.get(r * cols + c).copied().unwrap_or(0.0), max, style)).collect();
        let row = row_text(&marks, style);
        out.push_str(&format!("{}  │{row}│\n", fmt::clock(*t)));
    }
    // Key labels under the grid: the first bucket's start left, the last one's end right.
    let first = h.key_buckets[0].start.to_string();
    let last = h.key_buckets[cols - 1].end.to_string();
    let gap = (cols + 2).saturating_sub(first.len() + last.len());
    out.push_str(&format!("{}  {first}{}{last}\n", " ".repeat(8), " ".repeat(gap.max(1))));
    let hottest = fmt::metric_value(h.metric, f64::from(max));
    let scale = if style.colors256 {
        let ramp: String = RAMP.iter().map(|&c| style.fg256(c, "█")).collect();
        format!("{ramp} = 0 to {hottest}")
    } else {
        format!("░▒▓█ = up to ¼, ½, ¾ and all of {hottest}")
    };
    let cell = if h.metric.is_rate() {
        "the rate that landed in its key range"
    } else {
        "the highest value of the partitions over its key range"
    };
    out.push_str(&format!("scale: blank = nothing, {scale}; a cell is {cell} over {}\n", fmt::duration_ms(h.step_ms)));
    out
}
