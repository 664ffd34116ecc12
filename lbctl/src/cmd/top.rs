//! `lbctl top`: the highest partitions (or workers, tables, tenants) by a metric.

use lb_common::protocol::{GroupBy, GroupKey, TopN, TopQuery};

use crate::api::Api;
use crate::cli::TopArgs;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::Style;
use crate::table::{Align, Table};

pub async fn fetch(api: &Api, args: &TopArgs) -> Result<TopN, CtlError> {
    let query = TopQuery {
        metric: Some(args.metric),
        n: Some(usize::from(args.n)),
        group_by: Some(args.by),
        window_secs: Some(args.window),
    };
    api.master.top(&query).await.at_master()
}

fn by_name(g: GroupBy) -> &'static str {
    match g {
        GroupBy::None => "partitions",
        GroupBy::Worker => "workers",
        GroupBy::Table => "tables",
        GroupBy::Tenant => "tenants",
    }
}

pub fn key(k: &GroupKey) -> String {
    match k {
        GroupKey::Partition { partition } => partition.to_string(),
        GroupKey::Worker { worker } => worker.to_string(),
        GroupKey::Table { tenant, table } => format!("{tenant}/{table}"),
        GroupKey::Tenant { tenant } => tenant.to_string(),
    }
}

/// Rank, key, value and its share of the total shown (for rates, which add up).
pub fn render(top: &TopN, style: &Style) -> String {
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "top {} {} by {} over {} s",
            top.entries.len(),
            by_name(top.group_by),
            top.metric,
            fmt::num(top.window_secs)
        ))
    );
    if top.entries.is_empty() {
        out.push_str("nothing reported in the window\n");
        return out;
    }
    let total: f64 = top.entries.iter().map(|e| e.value).sum();
    let share = top.metric.is_rate() && total > 0.0;
    let mut columns = vec![("#", Align::Right), ("KEY", Align::Left), ("VALUE", Align::Right)];
    if share {
        columns.push(("SHARE", Align::Right));
    }
    let mut t = Table::new(&columns);
    for (i, e) in top.entries.iter().enumerate() {
        let mut row =
            vec![(i + 1).to_string().into(), key(&e.key).into(), fmt::metric_value(top.metric, e.value).into()];
        if share {
            row.push(fmt::percent(e.value / total).into());
        }
        t.row(row);
    }
    out.push_str(&t.render(style));
    out
}
