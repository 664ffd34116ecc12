//! Line charts as hand-written SVG: axes with ticks and labels, one polyline per series, a
//! legend. Enough for the simulator's per-second figures, with no dependency.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
/// Margins: left holds the y tick labels, bottom the x ticks and the axis label.
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Colour-blind-safe (Okabe–Ito) line colours, in series order.
const COLOURS: [&str; 6] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"];

/// At most `max_points` points: the series cut into equal runs, each kept as its largest value
/// (at the run's first x), so short spikes stay visible.
pub fn downsample_max(points: impl Iterator<Item = (f64, f64)>, max_points: usize) -> Vec<(f64, f64)> {
    let all: Vec<(f64, f64)> = points.collect();
    let per = all.len().div_ceil(max_points.max(1)).max(1);
    all.chunks(per)
        .map(|run| {
            let x = run[0].0;
            let y = run.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            (x, y)
        })
        .collect()
}

/// A "nice" step (1, 2 or 5 × 10^k) giving about `count` ticks over `span`.
fn nice_step(span: f64, count: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / count;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn label(v: f64) -> String {
    if v == v.round() && v.abs() < 1e9 { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The chart as an SVG document. The y axis starts at 0 (or the data's minimum if negative).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let finite = || series.iter().flat_map(|s| s.points.iter()).filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in finite() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if !y1.is_finite() || y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let y_step = nice_step(y1 - y0, 5.0);
    y1 = (y1 / y_step).ceil() * y_step;
    let x_step = nice_step(x1 - x0, 8.0);
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
    let _ =
        writeln!(s, r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#, WIDTH / 2.0, escape(title));
    // Grid and y ticks.
    let mut y = y0;
    while y <= y1 + y_step / 2.0 {
        let yy = py(y);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            label(y)
        );
        y += y_step;
    }
    // X ticks.
    let mut x = (x0 / x_step).ceil() * x_step;
    while x <= x1 {
        let xx = px(x);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#333"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 5.0,
            TOP + ph + 18.0,
            label(x)
        );
        x += x_step;
    }
    // Axes and their labels.
    let _ = writeln!(s, r##"<path d="M{LEFT},{TOP} V{:.1} H{:.1}" fill="none" stroke="#333"/>"##, TOP + ph, LEFT + pw);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(y_label)
    );
    // Lines and legend.
    for (i, series) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut pts = String::new();
        for &(x, y) in series.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
            let _ = write!(pts, "{:.1},{:.1} ", px(x), py(y));
        }
        let _ =
            writeln!(s, r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#, pts.trim_end());
        let ly = TOP + 10.0 + i as f64 * 20.0;
        let lx = LEFT + pw + 15.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&series.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_spikes_and_bounds_the_points() {
        let pts = (0..3600).map(|t| (f64::from(t), if t == 1234 { 9.0 } else { 0.0 }));
        let d = downsample_max(pts, 600);
        assert!(d.len() <= 600);
        assert_eq!(d.iter().filter(|p| p.1 == 9.0).count(), 1);
        assert_eq!(d[0].0, 0.0);
    }

    #[test]
    fn chart_has_one_polyline_per_series_and_escapes_names() {
        let series = vec![
            Series { name: "a<b".into(), points: vec![(0.0, 1.0), (10.0, 2.0)] },
            Series { name: "c".into(), points: vec![(0.0, 0.5), (10.0, 0.0)] },
        ];
        let svg = line_chart("t", "x", "y", &series);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        // The highest point sits at the top of the plot area or below it.
        assert!(!svg.contains("NaN"));
    }
}
