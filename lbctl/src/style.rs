//! Terminal styling: whether to colour, and the few paints lbctl uses. Decided once from the
//! terminal and the environment, then passed to every renderer, so renderers stay pure.

use std::io::IsTerminal;

/// How output may be decorated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    /// ANSI colours and bold (only on a terminal, never with `NO_COLOR`).
    pub color: bool,
    /// The terminal shows the 256-colour palette (heatmaps use it; without it, shade characters).
    pub colors256: bool,
}

/// What a piece of text means, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    Bold,
    Dim,
    /// Bad: over a limit, failed, harmful, halted, down.
    Bad,
    /// Close to a limit, waiting, no effect.
    Warn,
    /// Fine: succeeded, effective, up.
    Good,
    /// In progress.
    Busy,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Bold => "1",
            Paint::Dim => "2",
            Paint::Bad => "31",
            Paint::Warn => "33",
            Paint::Good => "32",
            Paint::Busy => "36",
        }
    }
}

impl Style {
    /// No decoration: pipes, files, `NO_COLOR`, tests.
    pub const PLAIN: Style = Style { color: false, colors256: false };

    /// Colour only when stdout is a terminal, `NO_COLOR` is unset or empty (no-color.org) and
    /// `TERM` is not `dumb`; 256 colours when `TERM` or `COLORTERM` says so.
    pub fn detect() -> Style {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Style::from_env(std::io::stdout().is_terminal(), var("NO_COLOR"), var("TERM"), var("COLORTERM"))
    }

    pub fn from_env(tty: bool, no_color: Option<String>, term: Option<String>, colorterm: Option<String>) -> Style {
        let color = tty && no_color.is_none() && term.as_deref() != Some("dumb");
        let wide = term.as_deref().is_some_and(|t| t.contains("256color"))
            || colorterm.as_deref().is_some_and(|c| matches!(c, "truecolor" | "24bit"));
        Style { color, colors256: color && wide }
    }

    /// `text` in `paint`, or as is without colour.
    pub fn paint(&self, paint: Paint, text: &str) -> String {
        if self.color && !text.is_empty() { format!("\x1b[{}m{text}\x1b[0m", paint.code()) } else { text.to_owned() }
    }

    /// `text` with a 256-colour foreground, or as is.
    pub fn fg256(&self, color: u8, text: &str) -> String {
        if self.colors256 { format!("\x1b[38;5;{color}m{text}\x1b[0m") } else { text.to_owned() }
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint(Paint::Bold, text)
    }
}

/// The paint of a load ratio (demand over capacity or limit): over 1 is bad, over the usual
/// high watermark (0.85) a warning.
pub fn ratio_paint(ratio: f64) -> Option<Paint> {
    if ratio >= 1.0 {
        Some(Paint::Bad)
    } else if ratio >= 0.85 {
        Some(Paint::Warn)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let s = |tty, no: Option<&str>, term: Option<&str>| {
            Style::from_env(tty, no.map(str::to_owned), term.map(str::to_owned), None)
        };
        assert_eq!(s(false, None, Some("xterm-256color")), Style::PLAIN);
        assert_eq!(s(true, Some("1"), Some("xterm-256color")), Style::PLAIN);
        assert_eq!(s(true, None, Some("dumb")), Style::PLAIN);
        assert_eq!(s(true, None, Some("xterm")), Style { color: true, colors256: false });
        assert_eq!(s(true, None, Some("xterm-256color")), Style { color: true, colors256: true });
        assert_eq!(Style::PLAIN.paint(Paint::Bad, "x"), "x");
        assert_eq!(Style { color: true, colors256: false }.paint(Paint::Bad, "x"), "\x1b[31mx\x1b[0m");
    }
}
