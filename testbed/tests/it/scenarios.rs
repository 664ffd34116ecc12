//! Every shipped scenario file parses, validates and runs; the required ones exist.

use lb_testbed::Engine;
use lb_testbed::scenario::Scenario;

use crate::support::{scenarios_dir, step_secs};

#[test]
fn every_scenario_file_parses_validates_and_runs() {
    let dir = scenarios_dir();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read scenarios dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut engine = Engine::new(&scenario);
        step_secs(&mut engine, 30);
        assert!(engine.summary().demand_ops_per_sec > 0.0, "{} carries no load", path.display());
        for report in engine.cluster.workers.ids.clone().iter().filter_map(|w| engine.report_for(w)) {
            report.validate().unwrap_or_else(|e| panic!("{}: report of {}: {e}", path.display(), report.worker_id));
        }
        names.push(path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned());
    }
    for required in
        ["hot-range-surge", "single-hot-key", "sequential-append", "zipf-skew", "worker-loss", "growing-dataset"]
    {
        assert!(names.iter().any(|n| n == required), "missing scenario {required}; have {names:?}");
    }
}

#[test]
fn a_seed_fixes_the_whole_run() {
    let path = scenarios_dir().join("zipf-skew.toml");
    let scenario = Scenario::load(&path).expect("load");
    let run = |seed: u64| {
        let mut s = scenario.clone();
        s.seed = seed;
        let mut engine = Engine::new(&s);
        step_secs(&mut engine, 120);
        engine.view()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1).partitions, run(2).partitions);
}
