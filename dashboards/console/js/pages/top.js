// Top-N: partitions by any metric over a chosen window, grouped by partition, worker, table or
// tenant; a partition opens its history and actions.

import * as api from "../api.js";
import { h, METRICS, notice, num, readySignal, select } from "../ui.js";

const METRIC_CHOICES = Object.entries(METRICS).concat([["stored_bytes", "stored bytes"]]);
const WINDOWS = [
  ["10", "10 s"],
  ["60", "1 min"],
  ["300", "5 min"],
  ["3600", "1 h"],
];
const GROUPS = [
  ["none", "partition"],
  ["worker", "worker"],
  ["table", "table"],
  ["tenant", "tenant"],
];
const SIZES = [["10", "10"], ["50", "50"], ["100", "100"], ["500", "500"]];

export default {
  render(root, { params, setParams }) {
    const ready = readySignal();
    const q = {
      metric: params.get("metric") || "ops",
      window_secs: params.get("window_secs") || "10",
      group_by: params.get("group_by") || "none",
      n: params.get("n") || "50",
    };
    const out = h("div", { id: "top-table" });
    const change = (k) => (v) => {
      q[k] = v;
      setParams(q);
      load();
    };
    root.append(
      h("h2", {}, "Top-N"),
      h(
        "div",
        { class: "controls" },
        h("label", {}, "Metric ", select("top-metric", METRIC_CHOICES, q.metric, change("metric"))),
        h("label", {}, "Window ", select("top-window", WINDOWS, q.window_secs, change("window_secs"))),
        h("label", {}, "Group by ", select("top-group", GROUPS, q.group_by, change("group_by"))),
        h("label", {}, "Rows ", select("top-n", SIZES, q.n, change("n"))),
      ),
      h("div", { class: "panel" }, out),
    );

    function label(key) {
      switch (key.kind) {
        case "partition":
          return h("a", { href: `#/partition/${encodeURIComponent(key.partition)}` }, key.partition);
        case "table":
          return h("a", { href: `#/heatmap?tenant=${encodeURIComponent(key.tenant)}&table=${encodeURIComponent(key.table)}` }, `${key.tenant}/${key.table}`);
        case "worker":
          return key.worker;
        case "tenant":
          return key.tenant;
        default:
          return JSON.stringify(key);
      }
    }

    async function load() {
      try {
        const top = await api.get("/api/v1/top", q);
        out.replaceChildren(
          top.entries.length
            ? h(
                "table",
                {},
                h("tr", {}, h("th", {}, "#"), h("th", {}, top.group_by === "none" ? "partition" : top.group_by), h("th", { class: "num" }, `${METRICS[top.metric] || top.metric} over ${top.window_secs} s`)),
                top.entries.map((e, i) => h("tr", { dataset: { rank: String(i + 1) } }, h("td", {}, String(i + 1)), h("td", {}, label(e.key)), h("td", { class: "num" }, num(e.value)))),
              )
            : notice("nothing has this metric in the window"),
        );
        ready();
      } catch (e) {
        out.replaceChildren(notice(e.message, "error"));
      }
    }
    load();
    return { refresh: load };
  },
};
