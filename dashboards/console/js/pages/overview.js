// Overview: per-worker load against capacity and the high watermark, the cluster's spread over
// the last hour, hot partitions, actions in flight, policy modes, halt state, stale agents.

import * as api from "../api.js";
import { lineChart } from "../charts.js";
import { ago, describe, h, METRICS, notice, num, pct, readySignal, select, throttle } from "../ui.js";

const METRIC_CHOICES = [
  ["ops", "ops/s"],
  ["cpu", "CPU cores"],
  ["bytes", "bytes/s"],
  ["rejected", "rejected/s"],
];

export default {
  render(root, { params, setParams }) {
    const ready = readySignal();
    let metric = params.get("metric") || "ops";
    let chart = null;
    let busy = false;
    let again = false;
    const bars = h("div", { class: "bars", id: "worker-bars" });
    const barsNote = h("div", { class: "dim", id: "bars-note" });
    const kpis = h("div", { class: "kpis", id: "kpis" });
    const spread = h("div", { id: "spread-chart" });
    const hot = h("div", { id: "hot" });
    const inflight = h("div", { id: "inflight" });
    const policy = h("div", { id: "policy" });
    const agents = h("div", { id: "agents" });
    const errors = h("div", { id: "errors" });

    root.append(
      h("h2", {}, "Overview"),
      h(
        "div",
        { class: "controls" },
        h("label", {}, "Worker load by ", select("metric", METRIC_CHOICES, metric, (v) => {
          metric = v;
          setParams({ metric });
          load();
        })),
      ),
      errors,
      h("div", { class: "panel wide" }, kpis),
      h(
        "div",
        { class: "grid" },
        h("div", { class: "panel wide" }, h("h3", {}, "Workers"), bars, barsNote),
        h("div", { class: "panel wide" }, h("h3", {}, "Cluster spread, last hour"), spread),
        h("div", { class: "panel" }, h("h3", {}, "Hottest partitions now"), hot),
        h("div", { class: "panel" }, h("h3", {}, "Actions in flight"), inflight),
        h("div", { class: "panel" }, h("h3", {}, "Policies and halt"), policy),
        h("div", { class: "panel" }, h("h3", {}, "Collection"), agents),
      ),
    );

    async function load() {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      const t0 = performance.now();
      const [ov, hist, pass, top, running, queued, pol, halt, coll] = await Promise.allSettled([
        api.get("/api/v1/overview", { metric }),
        api.get("/api/v1/cluster/history", { metric, step_ms: 10000 }),
        api.get("/api/v1/pass"),
        api.get("/api/v1/top", { metric: "ops", n: 10 }),
        api.get("/api/v1/actions", { state: "running" }),
        api.get("/api/v1/actions", { state: "queued" }),
        api.get("/api/v1/policy"),
        api.get("/api/v1/halt"),
        api.get("/api/v1/collector"),
      ]);
      const failed = [ov, pass].filter((r) => r.status === "rejected").map((r) => r.reason.message);
      errors.replaceChildren(...[...new Set(failed)].map((m) => notice(m, "error")));
      const watermark = pol.value?.planner?.worker_overload?.high_watermark_ratio ?? null;
      if (ov.value) drawBars(ov.value, watermark);
      drawKpis(ov.value, pass.value, coll.value);
      if (hist.value) {
        chart?.destroy();
        // From the first step with any load: before it the table had nothing to show.
        const all = hist.value.points;
        const first = all.findIndex((x) => x.max > 0);
        const p = first < 0 ? [] : all.slice(first);
        chart = lineChart(spread, {
          times: p.map((x) => x.ts_ms),
          series: [
            { label: "max/mean", values: p.map((x) => x.max_over_mean) },
            { label: "CV", values: p.map((x) => x.cv) },
          ],
          height: 180,
        });
      }
      hot.replaceChildren(hotTable(top.value));
      inflight.replaceChildren(actionsTable([...(running.value?.actions || []), ...(queued.value?.actions || [])], running, queued));
      policy.replaceChildren(policyView(pol, halt));
      agents.replaceChildren(collectorView(coll.value));
      ready();
      document.body.dataset.drawMs = String(Math.round(performance.now() - t0));
      busy = false;
      if (again) {
        again = false;
        load();
      }
    }

    function drawBars(ov, watermark) {
      const withCap = ov.workers.some((w) => w.capacity_ratio !== null && w.capacity_ratio !== undefined);
      const values = ov.workers.map((w) => (withCap ? (w.capacity_ratio ?? 0) : w.value));
      const top = Math.max(withCap ? Math.max(1, (watermark ?? 0) * 1.15) : 0, ...values, 1e-9);
      bars.replaceChildren(
        ...ov.workers.map((w, i) => {
          const over = !w.stale && withCap && watermark !== null && values[i] > watermark;
          const label = w.stale
            ? `${w.worker}: stale, its data for this window is not collected yet (load unknown)`
            : `${w.worker}: ${num(w.value)} ${METRICS[ov.metric] || ""}${withCap ? `, ${pct(w.capacity_ratio)} of capacity` : ""}`;
          return h("div", {
            class: `bar${over ? " over" : ""}${w.stale ? " stale" : ""}`,
            title: label,
            dataset: { worker: w.worker, value: String(w.value) },
            style: { height: `${Math.min(100, (values[i] / top) * 100)}%` },
          });
        }),
      );
      if (withCap && watermark !== null) {
        bars.append(
          h("div", { class: "watermark", style: { bottom: `${(watermark / top) * 100}%` } }, h("span", {}, `high watermark ${pct(watermark)}`)),
        );
      }
      const stale = ov.stale_workers ? ` ${ov.stale_workers} stale (hatched: not collected yet, left out of max and mean).` : "";
      barsNote.textContent = `${ov.workers.length} workers, ${withCap ? "height = load / capacity" : `height = ${METRICS[ov.metric] || ov.metric}`}, over ${ov.window_secs} s. Max ${num(ov.max)}, mean ${num(ov.mean)}.${stale}`;
    }

    function drawKpis(ov, pass, coll) {
      const s = pass?.stats || {};
      const items = [
        ["workers", ov ? ov.workers.length : "–"],
        ["max / mean", ov ? ov.max_over_mean.toFixed(2) : "–"],
        ["CV", ov ? ov.cv.toFixed(2) : "–"],
        ["hot partitions", s.hot_partitions ?? "–"],
        ["overloaded workers", s.overloaded_workers ?? "–"],
        ["actions in flight", s.in_flight ?? "–"],
        ["pending approval", pass ? pass.pending.length : "–"],
        ["collector lag", coll?.max_lag_ms != null ? `${(coll.max_lag_ms / 1000).toFixed(1)} s` : "–"],
        ["last pass", pass?.at_ms ? ago(pass.at_ms) : "none yet"],
      ];
      kpis.replaceChildren(...items.map(([k, v]) => h("div", { class: "kpi", dataset: { kpi: k } }, h("b", {}, String(v)), h("span", {}, k))));
    }

    load();
    return {
      dispose() {
        chart?.destroy();
      },
      refresh: load,
      on_pass: throttle(load, 2000),
    };
  },
};

function hotTable(top) {
  if (!top) return notice("no data");
  if (!top.entries.length) return notice("no partition has load yet");
  return h(
    "table",
    {},
    h("tr", {}, h("th", {}, "partition"), h("th", { class: "num" }, `ops/s (${top.window_secs} s)`)),
    top.entries.map((e) =>
      h(
        "tr",
        {},
        h("td", {}, h("a", { href: `#/partition/${encodeURIComponent(e.key.partition)}` }, e.key.partition)),
        h("td", { class: "num" }, num(e.value)),
      ),
    ),
  );
}

function actionsTable(actions, ...replies) {
  const failed = replies.find((r) => r.status === "rejected");
  if (failed) return notice(failed.reason.message, "error");
  if (!actions.length) return notice("none");
  return h(
    "table",
    {},
    h("tr", {}, h("th", {}, "action"), h("th", {}, "state"), h("th", {}, "since")),
    actions.map((a) => h("tr", {}, h("td", {}, describe(a.request.spec)), h("td", {}, a.state), h("td", {}, ago(a.created_at_ms)))),
  );
}

function policyView(pol, halt) {
  const out = [];
  if (pol.status === "rejected") out.push(notice(pol.reason.message, "error"));
  else {
    out.push(
      h(
        "table",
        {},
        Object.entries(pol.value.modes).map(([p, m]) => h("tr", {}, h("td", {}, p), h("td", { class: m === "auto" ? "good" : m === "off" ? "dim" : "warn" }, m))),
      ),
    );
    if (pol.value.halted) out.push(notice("planner.halt is set: no proposals at all", "error"));
  }
  if (halt.status === "rejected") out.push(notice(`executor: ${halt.reason.message}`, "error"));
  else {
    const hs = halt.value;
    out.push(
      h(
        "p",
        { id: "halt-state", class: hs.halted ? "bad" : "good" },
        hs.halted ? `Executor halted${hs.changed_by ? ` by ${hs.changed_by}` : ""}${hs.reason ? `: ${hs.reason}` : ""}` : "Executor running",
        ` (${hs.queued} queued)`,
      ),
    );
  }
  return h("div", {}, out);
}

function collectorView(c) {
  if (!c) return notice("no data");
  const stale = Object.entries(c.agents).filter(([, a]) => a.status !== "ok");
  return h(
    "div",
    {},
    h("p", { class: c.stale ? "bad" : "good" }, c.stale ? `Collector stale: ${c.last_error || "no recent round"}` : `Collector fresh, last round ${ago(c.last_success_ms)}`),
    h("p", {}, `${Object.keys(c.agents).length} agents, max lag ${c.max_lag_ms != null ? `${c.max_lag_ms} ms` : "–"}, ${num(c.samples_total, 0)} samples`),
    stale.length
      ? h(
          "table",
          { id: "stale-agents" },
          h("tr", {}, h("th", {}, "agent"), h("th", {}, "status"), h("th", {}, "error")),
          stale.slice(0, 50).map(([w, a]) => h("tr", {}, h("td", {}, w), h("td", { class: "bad" }, a.status || "unknown"), h("td", {}, a.last_error || ""))),
        )
      : h("p", { class: "dim" }, "no stale agents"),
  );
}
