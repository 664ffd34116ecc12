//! `lbctl offline`: the newest offline pass — what it read of the look-back, the merges and
//! pre-splits it found, and its report (chronically unbalanced tables and tenants, keys split
//! and merged back repeatedly, each worker's day). `--run` asks the leader for a pass first and
//! waits for it.

use std::time::Duration;

use lb_common::protocol::{OfflineFindings, OfflineImbalance};

use crate::api::Api;
use crate::error::{AtComponent, CtlError};
use crate::fmt;
use crate::style::{Paint, Style};
use crate::table::{Align, Table};

/// How often `--run` looks for the asked-for pass.
const POLL: Duration = Duration::from_millis(500);

/// The newest findings; with `run`, those of a pass asked for now (waiting at most `wait`).
pub async fn fetch(api: &Api, run: bool, wait: Duration) -> Result<OfflineFindings, CtlError> {
    if !run {
        return api.master.offline().await.at_master();
    }
    let asked = api.master.request_offline_pass().await.at_master()?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let found = api.master.offline().await.at_master()?;
        if found.at_ms > asked.previous_at_ms {
            return Ok(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CtlError::Timeout(format!(
                "the offline pass asked for at {} has not finished within {}; `lbctl offline` shows it when it has",
                fmt::clock(asked.requested_at_ms),
                fmt::duration_ms(wait.as_millis() as i64)
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn imbalance_table(rows: &[OfflineImbalance], total: usize, what: &str, style: &Style) -> String {
    if rows.is_empty() {
        return format!("no {what} chronically unbalanced\n");
    }
    let mut t = Table::new(&[
        ("TENANT", Align::Left),
        ("TABLE", Align::Left),
        ("UNBALANCED HOURS", Align::Right),
        ("MEAN SPREAD", Align::Right),
        ("MAX SPREAD", Align::Right),
    ]);
    for r in rows {
        t.row(vec![
            r.tenant.as_str().into(),
            r.table.as_ref().map_or("-", |t| t.as_str()).into(),
            format!("{} of {}", r.hours_unbalanced, r.hours_judged).into(),
            fmt::ratio(r.mean_spread).into(),
            fmt::ratio(r.max_spread).into(),
        ]);
    }
    let more = if total > rows.len() { format!("({} more)\n", total - rows.len()) } else { String::new() };
    format!("{}{more}", t.render(style))
}

pub fn render(f: &OfflineFindings, style: &Style, now_ms: i64) -> String {
    if f.at_ms == 0 {
        return "no offline pass yet (the leader runs one every offline.interval_secs; `lbctl offline --run` asks for one now)\n"
            .to_owned();
    }
    let c = &f.coverage;
    let mut out = format!(
        "{}\n",
        style.bold(&format!(
            "offline pass {}: {} of {} hours of look-back, {} files read",
            fmt::ago(f.at_ms, now_ms),
            c.hours_with_data,
            c.hours_expected,
            c.files_read
        ))
    );
    for why in &c.partial {
        out.push_str(&format!("{}\n", style.paint(Paint::Warn, &format!("partial: {}", fmt::one_line(why)))));
    }
    out.push_str(&format!("\n{}\n", style.bold("merges")));
    if f.merges.is_empty() {
        out.push_str(&format!("none ({} pairs declined)\n", f.declined_total));
    } else {
        let mut t = Table::new(&[
            ("TABLE", Align::Left),
            ("LEFT", Align::Left),
            ("RIGHT", Align::Left),
            ("COMBINED PEAK", Align::Right),
            ("OF LIMIT", Align::Right),
            ("TO", Align::Left),
        ]);
        for m in &f.merges {
            t.row(vec![
                format!("{}/{}", m.tenant, m.table).into(),
                m.left.as_str().into(),
                m.right.as_str().into(),
                format!("{}/s", fmt::num(m.combined_peak_ops_per_sec)).into(),
                fmt::ratio(m.combined_peak_ops_per_sec / m.limit_ops_per_sec).into(),
                m.to_worker.as_str().into(),
            ]);
        }
        out.push_str(&t.render(style));
    }
    out.push_str(&format!("\n{}\n", style.bold("peaks ahead")));
    if f.peaks.is_empty() {
        out.push_str("none forecast\n");
    } else {
        let mut t = Table::new(&[
            ("PARTITION", Align::Left),
            ("PEAK AT", Align::Left),
            ("ACT AT", Align::Left),
            ("PREDICTED", Align::Right),
            ("LIMIT", Align::Right),
            ("PIECES", Align::Right),
        ]);
        for p in &f.peaks {
            t.row(vec![
                p.partition.as_str().into(),
                fmt::date_time(p.peak_at_ms).into(),
                fmt::date_time(p.act_at_ms).into(),
                format!("{}/s", fmt::num(p.predicted_peak_ops_per_sec)).into(),
                format!("{}/s", fmt::num(p.limit_ops_per_sec)).into(),
                p.pieces.to_string().into(),
            ]);
        }
        out.push_str(&t.render(style));
    }
    let r = &f.report;
    out.push_str(&format!("\n{}\n", style.bold("chronically unbalanced tables")));
    out.push_str(&imbalance_table(&r.tables, r.tables_total, "table", style));
    out.push_str(&format!("\n{}\n", style.bold("chronically unbalanced tenants")));
    out.push_str(&imbalance_table(&r.tenants, r.tenants_total, "tenant", style));
    out.push_str(&format!("\n{}\n", style.bold("flapping split keys")));
    if r.flapping.is_empty() {
        out.push_str("none\n");
    } else {
        let mut t = Table::new(&[
            ("TABLE", Align::Left),
            ("KEY", Align::Left),
            ("SPLITS", Align::Right),
            ("MERGES", Align::Right),
            ("LAST CHANGE", Align::Left),
        ]);
        for x in &r.flapping {
            t.row(vec![
                format!("{}/{}", x.tenant, x.table).into(),
                x.key.to_string().into(),
                x.splits.to_string().into(),
                x.merges.to_string().into(),
                fmt::date_time(x.last_change_ms).into(),
            ]);
        }
        out.push_str(&t.render(style));
    }
    out.push_str(&format!("\n{}\n", style.bold("worker load per day (hourly ops/s)")));
    let mut t = Table::new(&[
        ("DAY", Align::Left),
        ("WORKER", Align::Left),
        ("HOURS", Align::Right),
        ("P50", Align::Right),
        ("P90", Align::Right),
        ("MAX", Align::Right),
    ]);
    for d in &r.worker_days {
        t.row(vec![
            d.day.to_string().into(),
            d.worker.as_str().into(),
            d.hours.to_string().into(),
            fmt::num(d.p50_ops_per_sec).into(),
            fmt::num(d.p90_ops_per_sec).into(),
            fmt::num(d.max_ops_per_sec).into(),
        ]);
    }
    out.push_str(&t.render(style));
    out
}
