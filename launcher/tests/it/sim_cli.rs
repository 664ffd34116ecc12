//! `lb sim` end to end at small scale: the binary runs the hot-range scenario under lb, the
//! baselines and the peer models and writes the table, the figures and the charts; the planner
//! rejects less than doing nothing.

use std::process::Command;

use crate::support::scenarios_dir;

#[test]
fn sim_writes_the_comparison_and_lb_rejects_less_than_no_balancer() {
    let out = tempfile::tempdir().expect("dir");
    let status = Command::new(env!("CARGO_BIN_EXE_lb"))
        .arg("sim")
        .arg("--scenario")
        .arg(scenarios_dir().join("hot-range-surge.toml"))
        .args(["--partitions", "64", "--workers", "16", "--duration", "15m", "--strategies", "lb,none,greedy,pd,crdb"])
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("the binary runs");
    assert!(status.success(), "lb sim failed: {status}");
    for file in ["report.md", "figures.json", "rejected.svg", "max-over-mean.svg"] {
        let path = out.path().join(file);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{} is missing or empty", path.display());
    }
    let report = std::fs::read_to_string(out.path().join("report.md")).expect("report");
    assert!(report.contains("| thrash (undone ≤ 10 min) |"), "no thrash column in\n{report}");
    for name in ["| lb |", "| none |", "| greedy |", "| pd |", "| crdb |"] {
        assert!(report.contains(name), "no row {name} in\n{report}");
    }
    let svg = std::fs::read_to_string(out.path().join("rejected.svg")).expect("chart");
    assert_eq!(svg.matches("<polyline").count(), 5, "one line per strategy");

    let figures: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("figures.json")).expect("figures")).expect("json");
    assert_eq!(figures["partitions"], 64);
    assert_eq!(figures["workers"], 16);
    let rejected = |name: &str| {
        figures["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .find(|r| r["figures"]["strategy"] == name)
            .and_then(|r| r["figures"]["rejected_ops"].as_f64())
            .unwrap_or_else(|| panic!("no figures for {name}"))
    };
    let (lb, none) = (rejected("lb"), rejected("none"));
    eprintln!("rejected ops: lb {lb:.0}, none {none:.0}, greedy {:.0}\n{report}", rejected("greedy"));
    assert!(none > 0.0, "the scenario has a hotspot: doing nothing rejects");
    assert!(lb < none / 10.0, "lb rejected {lb:.0} ops, no balancer {none:.0}");
}
