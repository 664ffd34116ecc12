//! The master's policies a scenario is balanced under: its `[master]` sections laid over a
//! base config, key by key, then validated as the master validates its own file.
//!
//! A scenario that needs lb to act in a way the shipped defaults do not (the placement manager
//! in `auto` rather than its shipped `dry_run`, merges judged over an hour rather than a week)
//! says so in its own file, so every run of it (`lb sim`, the peer table, the tests, `lb up`) is
//! balanced the same way.

use lb_common::validate::{FieldError, ValidationError};
use lb_master::online::OnlineConfig;
use lb_testbed::scenario::Scenario;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `scenario`'s `[master]` over `base`: each key it sets replaces the base's, the rest stay.
/// Fails naming the field (`master.offline.lookback_hours`) on an unknown key, a wrong type
/// or a value the master would refuse.
pub fn online_config(scenario: &Scenario, base: OnlineConfig) -> Result<OnlineConfig, ValidationError> {
    if scenario.master.is_empty() {
        return Ok(base);
    }
    let mut errors = Vec::new();
    let planner = section(&scenario.master, "planner", &base.planner, &mut errors);
    let evaluation = section(&scenario.master, "evaluation", &base.evaluation, &mut errors);
    let placement = section(&scenario.master, "placement", &base.placement, &mut errors);
    let offline = section(&scenario.master, "offline", &base.offline, &mut errors);
    if let Some(unknown) =
        scenario.master.keys().find(|k| !lb_testbed::scenario::MASTER_POLICY_SECTIONS.contains(&k.as_str()))
    {
        errors.push(field_error(unknown, "…", "is not a policy section (planner, evaluation, placement, offline)"));
    }
    let (Some(planner), Some(evaluation), Some(placement), Some(offline)) = (planner, evaluation, placement, offline)
    else {
        return Err(ValidationError { errors });
    };
    let config = OnlineConfig { planner, evaluation, placement, offline, ..base };
    let found =
        lb_master::config::policy_errors(&config.planner, &config.evaluation, &config.placement, &config.offline);
    errors.extend(found.into_iter().map(|f| FieldError { field: format!("master.{}", f.field), ..f }));
    if errors.is_empty() { Ok(config) } else { Err(ValidationError { errors }) }
}

/// `base` with `master.<name>` laid over it, or `None` with the reason pushed to `errors`.
fn section<T: Serialize + DeserializeOwned + Clone>(
    master: &toml::Table,
    name: &str,
    base: &T,
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    let Some(over) = master.get(name) else { return Some(base.clone()) };
    let Some(over) = over.as_table() else {
        errors.push(field_error(name, over, "must be a table, as in master.toml"));
        return None;
    };
    let mut merged = match toml::Table::try_from(base) {
        Ok(t) => t,
        Err(e) => {
            errors.push(field_error(name, "…", &format!("the default does not serialize: {e}")));
            return None;
        }
    };
    overlay(&mut merged, over);
    match merged.try_into::<T>() {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push(field_error(name, "…", e.message().trim()));
            None
        }
    }
}

/// Each key of `over` replaces `base`'s; a table is laid over a table key by key.
pub(crate) fn overlay(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => overlay(b, o),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

fn field_error(section: &str, value: impl std::fmt::Display, message: &str) -> FieldError {
    FieldError { field: format!("master.{section}"), value: value.to_string(), message: message.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lb_master::offline::OfflineSection;
    use lb_master::planner::PolicyMode;

    fn scenario(master: &str) -> Scenario {
        let text = format!(
            "name = \"t\"\n[cluster]\nworkers = 2\nworker_ops_per_sec = 1000\nworker_bytes_per_sec = 1e6\n\
             partition_limit_ops_per_sec = 500\npartition_limit_bytes_per_sec = 1e5\n{master}"
        );
        toml::from_str(&text).expect("parses")
    }

    #[test]
    fn a_scenarios_master_sets_the_keys_it_names_and_keeps_the_base_for_the_rest() {
        let s = scenario(
            "[master.placement]\nmode = \"auto\"\n[master.offline]\nlookback_hours = 2\n\
             [master.planner.imbalance]\nmode = \"off\"\n",
        );
        let base = OnlineConfig {
            offline: OfflineSection { min_history_hours: 2, ..OfflineSection::default() },
            ..OnlineConfig::default()
        };
        let config = online_config(&s, base.clone()).expect("valid");
        assert_eq!(config.placement.mode, PolicyMode::Auto);
        assert_eq!(config.offline.lookback_hours, 2);
        assert_eq!(config.offline.min_history_hours, 2, "the base's, not the type's default");
        assert_eq!(config.planner.imbalance.mode, PolicyMode::Off);
        assert_eq!(config.planner.partition_overload, base.planner.partition_overload, "untouched");
        assert_eq!(config.evaluation, base.evaluation);
        assert_eq!(online_config(&scenario(""), base.clone()).expect("valid"), base, "no [master]: the base");
    }

    #[test]
    fn a_bad_master_section_is_refused_naming_the_field() {
        let err = |master: &str| online_config(&scenario(master), OnlineConfig::default()).unwrap_err().to_string();
        let unknown = err("[master.offline]\nlookback_hourz = 2\n");
        assert!(unknown.contains("master.offline") && unknown.contains("lookback_hourz"), "{unknown}");
        let typed = err("[master.placement]\nmode = 3\n");
        assert!(typed.contains("master.placement"), "{typed}");
        let range = err("[master.offline]\nlookback_hours = 0\n");
        assert!(range.contains("master.offline.lookback_hours"), "{range}");
        let planner = err("[master.planner.caps]\nmin_gain_ratio = -1.0\n");
        assert!(planner.contains("master.planner.caps.min_gain_ratio"), "{planner}");
        let http = err("[master.http]\nlisten = \"x\"\n");
        assert!(http.contains("master.http") && http.contains("not a policy section"), "{http}");
    }
}
