//! The simulator runs the controller that ships: the `lb` strategy and a bare
//! [`OnlineCore`] — what the master's live loop steps — fed the same observations every second
//! make the same submissions with the same ids, reasons and policies.

use std::sync::{Arc, Mutex};

use lb_common::ids::ActionId;
use lb_launcher::sim::strategy::{dataset_view, observation};
use lb_launcher::sim::{Context, Decision, Lb, Proposed, Sim, Strategy};
use lb_master::online::{ActionUpdate, OnlineConfig, OnlineCore};
use lb_master::planner::{PlannerInput, PlannerState};
use lb_testbed::scenario::Scenario;

use crate::support::scenarios_dir;

/// `lb` as the simulator runs it, next to the live loop's core given the same observations.
#[derive(Debug)]
struct Mirror {
    lb: Lb,
    live: OnlineCore,
    config: OnlineConfig,
    updates: Vec<ActionUpdate>,
    /// Submissions compared, and every second where the two differed (read after the run).
    seen: Arc<Mutex<(usize, Vec<String>)>>,
}

impl Strategy for Mirror {
    fn name(&self) -> &str {
        "lb"
    }

    fn needs_input(&self) -> bool {
        true
    }

    fn decide(&mut self, ctx: &mut Context<'_>) -> Decision {
        let Some(input) = ctx.input.as_deref_mut() else { return Decision::default() };
        let mut live_input: PlannerInput = input.clone();
        let (datasets, usage) = dataset_view(ctx.engine);
        let due = self.live.evaluation_due(&self.config, ctx.now_ms);
        let updates = std::mem::take(&mut self.updates);
        let observation = observation(&mut live_input, &datasets, &usage, due, updates, ctx.now_ms);
        let live = self.live.step(observation, &self.config, ctx.now_ms);
        let decision = self.lb.decide(ctx);
        let sim: Vec<(Option<ActionId>, String, String)> = decision
            .actions
            .iter()
            .filter(|a| a.submit)
            .map(|a| (a.id.clone(), format!("{:?}", a.spec), a.reason.clone()))
            .collect();
        let shipped: Vec<(Option<ActionId>, String, String)> =
            live.submissions().map(|r| (Some(r.id.clone()), format!("{:?}", r.spec), r.reason.clone())).collect();
        let mut seen = self.seen.lock().expect("not poisoned");
        seen.0 += shipped.len();
        if sim != shipped {
            seen.1.push(format!("t={} ms: sim {sim:?} vs live core {shipped:?}", ctx.now_ms));
        }
        decision
    }

    fn submitted(&mut self, id: &ActionId, action: &Proposed, input: Option<&PlannerInput>, now_ms: i64) {
        self.lb.submitted(id, action, input, now_ms);
    }

    fn refused(&mut self, id: &ActionId) {
        self.lb.refused(id);
        self.live.refused(id);
    }

    fn finished(&mut self, id: &ActionId, applied: bool, at_ms: i64) {
        self.lb.finished(id, applied, at_ms);
        self.updates.push(ActionUpdate::Finished { id: id.clone(), applied, at_ms });
    }

    fn planner_state(&self) -> Option<&PlannerState> {
        self.lb.planner_state()
    }
}

#[test]
fn the_simulators_lb_and_the_live_loops_core_decide_the_same_on_the_same_observations() {
    for name in ["hot-range-surge", "growing-dataset", "worker-loss"] {
        let path = scenarios_dir().join(format!("{name}.toml"));
        let scenario = Scenario::load(&path).expect("scenario file loads");
        let config = OnlineConfig::default();
        let seen = Arc::new(Mutex::new((0, Vec::new())));
        let mirror = Mirror {
            lb: Lb::with_config(config.clone()),
            live: OnlineCore::new(&config, 0),
            config,
            updates: Vec::new(),
            seen: Arc::clone(&seen),
        };
        let mut sim = Sim::new(&scenario, Box::new(mirror));
        sim.run_until(900);
        let (compared, mismatches) = seen.lock().expect("not poisoned").clone();
        assert!(compared > 0 && compared == sim.actions.len(), "{name}: lb acted ({compared} compared)");
        assert!(mismatches.is_empty(), "{name}: {mismatches:#?}");
        eprintln!("{name}: {compared} submissions, the same from both");
    }
}
