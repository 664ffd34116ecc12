//! The cursor mark: the highest cursor the store ever committed, kept beside the SQLite file
//! (`<store.path>.cursor`), outside what the WAL protects.
//!
//! Cursors are SQLite `AUTOINCREMENT` ids, and `sqlite_sequence` lives in the same WAL as the
//! samples: when the `-wal` file is lost or damaged after a kill, the acknowledged samples in it
//! are gone *and* the sequence falls back, so new samples would reuse cursors a puller already
//! holds, and that puller would silently skip them. The writer therefore records every commit's
//! newest cursor here before it acknowledges the batch (overwritten in place; fsynced when
//! `store.synchronous = "full"`, as the WAL is), and opening the store compares: a mark above
//! the newest surviving cursor is a loss. The store then moves its sequence past the mark, so a
//! cursor never names two samples, and records the lost range in `meta` beside every earlier
//! one (checkpointed into the main file at once), so every puller whose cursor any of them
//! affects is told `gap: true`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The mark file of the store at `store_path`.
pub fn path_of(store_path: &Path) -> PathBuf {
    let mut name = store_path.as_os_str().to_owned();
    name.push(".cursor");
    PathBuf::from(name)
}

/// The open mark file.
#[derive(Debug)]
pub struct CursorMark {
    file: File,
    sync: bool,
}

impl CursorMark {
    /// Opens (creating) the mark of the store at `store_path`; returns it and the mark it holds
    /// (`None` for a new or unreadable file: nothing to compare with).
    pub fn open(store_path: &Path, sync: bool) -> std::io::Result<(Self, Option<u64>)> {
        let path = path_of(store_path);
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        let mut text = String::new();
        let held = match file.read_to_string(&mut text) {
            Ok(_) if text.trim().is_empty() => None,
            Ok(_) => match text.trim().parse::<u64>() {
                Ok(mark) => Some(mark),
                Err(_) => {
                    tracing::warn!(path = %path.display(), "cursor mark unreadable; trusting the store's own sequence");
                    None
                }
            },
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cursor mark unreadable; trusting the store's own sequence");
                None
            }
        };
        Ok((Self { file, sync }, held))
    }

    /// Records `cursor` as the newest committed one: one fixed-width write at the start of the
    /// file (so a shorter number never leaves digits of a longer one behind).
    pub fn record(&mut self, cursor: u64) -> std::io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(format!("{cursor:020}\n").as_bytes())?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_read_back_and_overwritten_in_place() {
        let dir = tempfile::tempdir().expect("dir");
        let store = dir.path().join("agent.sqlite");
        let (mut mark, held) = CursorMark::open(&store, true).expect("open");
        assert_eq!(held, None, "a new mark holds nothing");
        mark.record(123_456).expect("record");
        mark.record(7).expect("record");
        drop(mark);
        let (_, held) = CursorMark::open(&store, false).expect("reopen");
        assert_eq!(held, Some(7));
        std::fs::write(path_of(&store), "garbage").expect("damage");
        assert_eq!(CursorMark::open(&store, false).expect("reopen").1, None, "a damaged mark is not trusted");
    }
}
