//! `lb up` as a user runs it: the binary, started from an empty directory with no arguments but
//! a data directory, runs the built-in scenario; the terminal shows the banner and then event
//! lines (the hotspot that starts 30 s in, the proposal with its reason), never the
//! components' logs, which go to `<data dir>/lb.log`; Ctrl-C (SIGINT) stops it cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The built-in hotspot starts at 30 s and ramps for 30 s; a debug build on a busy 2-core
/// machine detects it well within this.
const EVENTS_WITHIN: Duration = Duration::from_secs(120);

#[test]
fn lb_up_from_an_empty_directory_shows_the_banner_and_event_lines_and_logs_to_a_file() {
    let cwd = tempfile::tempdir().expect("dir");
    let data = cwd.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lb"))
        .current_dir(cwd.path())
        .args(["up", "--interval-ms", "500", "--data-dir"])
        .arg(&data)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let stderr = child.stderr.take().expect("stderr");
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());

    let started = Instant::now();
    let mut lines: Vec<String> = Vec::new();
    let seen = |lines: &[String], what: &str| lines.iter().any(|l| l.contains(what));
    while !(seen(&lines, "hotspot detected") && seen(&lines, "proposed: split")) {
        let left = EVENTS_WITHIN.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    let stopped = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(stopped.success(), "SIGINT delivered");
    let status = child.wait().expect("lb exits");
    lines.extend(rx.try_iter());
    let stderr = stderr.join().expect("stderr reader");
    let out = lines.join("\n");
    eprintln!("stdout:\n{out}\nstderr:\n{stderr}");

    assert!(lines.first().is_some_and(|l| l.starts_with("lb is up")), "the banner comes first:\n{out}");
    assert!(seen(&lines, "what happens: 30 s after start"), "the banner says when the hotspot starts:\n{out}");
    assert!(seen(&lines, "master API (/api/v1)"), "the banner has the URLs:\n{out}");
    let log = data.join("lb.log");
    assert!(seen(&lines, &format!("component logs                 {}", log.display())), "and where logs go:\n{out}");
    assert!(seen(&lines, "hotspot detected"), "an event line for the hotspot within {EVENTS_WITHIN:?}:\n{out}");
    let proposal = lines.iter().find(|l| l.contains("proposed: split")).expect("an event line for the split");
    assert!(proposal.contains("(partition_overload): partition "), "a proposal line says why: {proposal}");
    for level in [" INFO ", " WARN ", " DEBUG "] {
        assert!(!out.contains(level) && !stderr.contains(level), "no component log on the terminal ({level}):\n{out}");
    }
    let logged = std::fs::read_to_string(&log).expect("the log file exists");
    assert!(logged.contains(" INFO ") && logged.contains("action submitted"), "component logs are in {log:?}");
    assert!(status.success(), "a clean stop after SIGINT: {status}");
    assert!(lines.last().is_some_and(|l| l == "stopped"), "it says it stopped:\n{out}");
    assert!(data.join("first-run.toml").exists(), "the built-in scenario is written where it can be edited");
}
