// One partition: its history chart and every action that touched it, with verdicts.

import * as api from "../api.js";
import { lineChart, MARKER_COLORS } from "../charts.js";
import { actionKind, describe, h, METRICS, notice, partitionsOf, readySignal, select, time } from "../ui.js";

export default {
  render(root, { rest, params, setParams }) {
    const ready = readySignal();
    const id = rest[0] || "";
    let metric = params.get("metric") || "ops";
    let chart = null;
    const chartEl = h("div", { id: "partition-chart" });
    const actionsEl = h("div", { id: "partition-actions" });
    const errors = h("div");
    root.append(
      h("h2", {}, `Partition ${id}`),
      h("div", { class: "controls" }, h("label", {}, "Metric ", select("partition-metric", Object.entries(METRICS), metric, (v) => {
        metric = v;
        setParams({ metric });
        load();
      }))),
      errors,
      h("div", { class: "panel" }, h("h3", {}, "Last hour"), chartEl),
      h("div", { class: "panel" }, h("h3", {}, "Actions on this partition"), actionsEl),
    );

    async function load() {
      try {
        const [hist, acts, evals] = await Promise.all([
          api.get(`/api/v1/partitions/${encodeURIComponent(id)}/history`, { metric }),
          api.get("/api/v1/records/action", { limit: 1000 }),
          api.get("/api/v1/records/evaluation", { limit: 1000 }),
        ]);
        errors.replaceChildren();
        const mine = acts.records.filter((r) => partitionsOf(r.body.request?.spec).includes(id));
        const verdicts = new Map(evals.records.map((r) => [r.key, r.body]));
        chart?.destroy();
        chart = lineChart(chartEl, {
          times: hist.points.map((p) => p.ts_ms),
          series: [{ label: `${metric} (${METRICS[metric] || ""})`, values: hist.points.map((p) => p.value) }],
          markers: mine.map((r) => ({ ts_ms: r.body.record?.created_at_ms || r.at_ms, label: actionKind(r.body.request.spec), color: MARKER_COLORS[actionKind(r.body.request.spec)] })),
        });
        actionsEl.replaceChildren(
          mine.length
            ? h(
                "table",
                {},
                h("tr", {}, h("th", {}, "when"), h("th", {}, "action"), h("th", {}, "origin"), h("th", {}, "outcome"), h("th", {}, "verdict")),
                mine.map((r) => {
                  const v = verdicts.get(r.key);
                  return h(
                    "tr",
                    {},
                    h("td", {}, time(r.body.record?.created_at_ms || r.at_ms)),
                    h("td", {}, h("a", { href: `#/timeline?action=${encodeURIComponent(r.key)}` }, describe(r.body.request.spec))),
                    h("td", {}, r.body.request.origin),
                    h("td", {}, r.body.record?.state || r.body.outcome),
                    h("td", { class: v?.verdict === "effective" ? "good" : v?.verdict === "harmful" ? "bad" : "" }, v ? `${v.verdict}: ${v.why}` : "not yet evaluated"),
                  );
                }),
              )
            : notice("no action touched this partition in the records kept"),
        );
        ready();
      } catch (e) {
        errors.replaceChildren(notice(e.message, "error"));
      }
    }
    load();
    return { dispose: () => chart?.destroy(), refresh: load, on_record: (r) => r.kind !== "proposal" && load() };
  },
};
