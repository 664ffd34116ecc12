//! Aligned text tables: columns padded to their widest cell (measured without colour codes),
//! numbers right-aligned, two spaces between columns, no trailing blanks.

use crate::style::{Paint, Style};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One cell: its text and, optionally, what it means (its colour).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub text: String,
    pub paint: Option<Paint>,
}

impl Cell {
    pub fn painted(text: impl Into<String>, paint: Option<Paint>) -> Cell {
        Cell { text: text.into(), paint }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, paint: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell { text: text.to_owned(), paint: None }
    }
}

#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, Align)]) -> Table {
        Table { columns: columns.to_vec(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are empty, extra ones are dropped.
    pub fn row(&mut self, cells: Vec<Cell>) {
        let mut cells = cells;
        cells.resize(self.columns.len(), Cell::from(""));
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, one line per row after a bold header, each line ending in `\n`.
    pub fn render(&self, style: &Style) -> String {
        let width = |s: &str| s.chars().count();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|c| self.rows.iter().map(|r| width(&r[c].text)).chain([width(self.columns[c].0)]).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        let header: Vec<Cell> = self.columns.iter().map(|(h, _)| Cell::painted(*h, Some(Paint::Bold))).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            // Trailing empty cells are dropped so no line ends in blanks.
            let last = row.iter().rposition(|c| !c.text.is_empty()).unwrap_or(0);
            for (c, cell) in row.iter().enumerate().take(last + 1) {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(widths[c] - width(&cell.text));
                let text = match cell.paint {
                    Some(p) => style.paint(p, &cell.text),
                    None => cell.text.clone(),
                };
                match (self.columns[c].1, c == last) {
                    (Align::Right, _) => {
                        line.push_str(&pad);
                        line.push_str(&text);
                    }
                    (Align::Left, true) => line.push_str(&text),
                    (Align::Left, false) => {
                        line.push_str(&text);
                        line.push_str(&pad);
                    }
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_without_trailing_blanks() {
        let mut t = Table::new(&[("NAME", Align::Left), ("OPS/S", Align::Right), ("NOTE", Align::Left)]);
        t.row(vec!["a".into(), "1".into(), "".into()]);
        t.row(vec!["longer".into(), "12345".into(), "x".into()]);
        assert_eq!(t.render(&Style::PLAIN), "NAME    OPS/S  NOTE\na           1\nlonger  12345  x\n");
    }

    #[test]
    fn colour_codes_do_not_count_as_width() {
        let mut t = Table::new(&[("A", Align::Left), ("B", Align::Left)]);
        t.row(vec![Cell::painted("red", Some(Paint::Bad)), "x".into()]);
        let out = t.render(&Style { color: true, colors256: false });
        assert!(out.contains("\x1b[31mred\x1b[0m  x"), "{out:?}");
    }
}
