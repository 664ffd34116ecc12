// Heatmap: time × key range of one table (like TiDB's Key Visualizer), with a metric switch,
// hover for the partition, its range and value, and markers where actions happened.

import * as api from "../api.js";
import { heatColor, MARKER_COLORS } from "../charts.js";
import { actionKind, describe, h, METRICS, notice, num, partitionsOf, readySignal, select, throttle, time } from "../ui.js";

// Range → step: 5 min at 1 s up to 6 h at 1 min.
const RANGES = [
  ["300", "last 5 min (1 s)", 1000],
  ["900", "last 15 min (5 s)", 5000],
  ["3600", "last hour (10 s)", 10000],
  ["21600", "last 6 h (1 min)", 60000],
];
const METRIC_CHOICES = [
  ["ops", "ops/s"],
  ["bytes", "bytes/s"],
  ["rejected", "rejected/s"],
  ["latency_p99", "latency p99"],
];
/// At most ~1,500 key buckets, and cells kept under ~120k so a reply stays under ~1 MB.
const MAX_BUCKETS = 1500;
const MAX_CELLS = 120000;

export default {
  render(root, { params, setParams }) {
    const ready = readySignal();
    const state = {
      table: params.get("tenant") && params.get("table") ? `${params.get("tenant")}/${params.get("table")}` : "",
      metric: params.get("metric") || "ops",
      range: params.get("range") || "300",
    };
    const controls = h("div", { class: "controls" });
    const errors = h("div");
    const canvas = h("canvas", { id: "heatmap-canvas", height: 1, width: 1, style: { height: "480px" } });
    const markers = h("div", { id: "heatmap-markers", style: { position: "absolute", inset: "0", pointerEvents: "none" } });
    const tip = h("div", { class: "tooltip", hidden: true });
    const wrap = h("div", { class: "heat-wrap" }, canvas, markers, tip);
    const legend = h("div", { class: "dim", id: "heatmap-legend" });
    root.append(h("h2", {}, "Heatmap"), controls, errors, h("div", { class: "panel" }, wrap, legend));
    let map = null;

    async function tables() {
      const top = await api.get("/api/v1/top", { group_by: "table", n: 1000, window_secs: 3600 });
      return top.entries.map((e) => `${e.key.tenant}/${e.key.table}`).sort();
    }

    async function init() {
      let names = [];
      try {
        names = await tables();
      } catch (e) {
        errors.replaceChildren(notice(e.message, "error"));
        return;
      }
      if (!state.table || !names.includes(state.table)) state.table = names[0] || "";
      const change = (k) => (v) => {
        state[k] = v;
        const [tenant, table] = state.table.split("/");
        setParams({ tenant, table, metric: state.metric, range: state.range });
        load();
      };
      controls.replaceChildren(
        h("label", {}, "Table ", select("heatmap-table", names.map((n) => [n, n]), state.table, change("table"))),
        h("label", {}, "Metric ", select("heatmap-metric", METRIC_CHOICES, state.metric, change("metric"))),
        h("label", {}, "Range ", select("heatmap-range", RANGES.map(([v, l]) => [v, l]), state.range, change("range"))),
      );
      if (!names.length) {
        errors.replaceChildren(notice("no table has reported load yet"));
        return;
      }
      load();
    }

    async function load() {
      const [tenant, table] = state.table.split("/");
      const [, , step] = RANGES.find(([v]) => v === state.range) || RANGES[0];
      const span = Number(state.range) * 1000;
      const to = Math.floor(Date.now() / step) * step;
      const from = to - span;
      const rows = Math.ceil(span / step);
      const buckets = Math.max(1, Math.min(MAX_BUCKETS, Math.floor(MAX_CELLS / rows)));
      try {
        const [hm, acts] = await Promise.all([
          api.get("/api/v1/heatmap", { tenant, table, metric: state.metric, from_ms: from, to_ms: to, step_ms: step, buckets }),
          api.get("/api/v1/records/action", { since_ms: from, limit: 1000 }),
        ]);
        errors.replaceChildren();
        map = hm;
        canvas.lbHeatmap = hm; // what is drawn, for tests and the devtools
        draw(hm, acts.records, tenant, table, from, to);
        ready();
      } catch (e) {
        errors.replaceChildren(notice(e.message, "error"));
      }
    }

    function draw(hm, actions, tenant, table, from, to) {
      const rows = hm.times_ms.length;
      const nb = hm.key_buckets.length;
      canvas.width = Math.max(1, rows);
      canvas.height = Math.max(1, nb);
      canvas.dataset.rows = String(rows);
      canvas.dataset.buckets = String(nb);
      const max = hm.values.reduce((m, v) => Math.max(m, v), 0);
      const ctx = canvas.getContext("2d");
      const img = ctx.createImageData(canvas.width, canvas.height);
      const scale = Math.log1p(max);
      for (let r = 0; r < rows; r++) {
        for (let b = 0; b < nb; b++) {
          const v = hm.values[r * nb + b];
          const [R, G, B] = heatColor(scale > 0 ? Math.log1p(v) / scale : 0);
          const o = (b * canvas.width + r) * 4;
          img.data[o] = R;
          img.data[o + 1] = G;
          img.data[o + 2] = B;
          img.data[o + 3] = 255;
        }
      }
      ctx.putImageData(img, 0, 0);
      legend.textContent = `${tenant}/${table}: ${nb} key buckets × ${rows} steps of ${hm.step_ms / 1000} s; colour is log-scaled to the brightest cell, ${num(max)} ${METRICS[hm.metric] || ""}. Key space runs top (start) to bottom (end); hover a cell.`;
      const own = new Set(hm.bucket_partitions.filter(Boolean));
      const mine = actions.filter((rec) => {
        const req = rec.body.request || {};
        const path = req.actor_path || [];
        return (path[0] === tenant && path[1] === table) || partitionsOf(req.spec).some((p) => own.has(p));
      });
      markers.replaceChildren(
        ...mine.map((rec) => {
          const at = rec.body.record?.finished_at_ms || rec.body.record?.created_at_ms || rec.at_ms;
          const x = ((at - from) / (to - from)) * 100;
          const kind = actionKind(rec.body.request.spec);
          return h("div", {
            class: "marker",
            dataset: { kind, action: rec.key },
            title: `${time(at)} ${describe(rec.body.request.spec)} (${rec.body.outcome})`,
            style: { position: "absolute", top: 0, bottom: 0, left: `${Math.max(0, Math.min(100, x))}%`, borderLeft: `2px dashed ${MARKER_COLORS[kind] || "#fff"}` },
          });
        }),
      );
    }

    canvas.addEventListener("mousemove", (e) => {
      if (!map || !map.key_buckets.length) return;
      const box = canvas.getBoundingClientRect();
      const r = Math.min(map.times_ms.length - 1, Math.floor(((e.clientX - box.left) / box.width) * map.times_ms.length));
      const b = Math.min(map.key_buckets.length - 1, Math.floor(((e.clientY - box.top) / box.height) * map.key_buckets.length));
      const kr = map.key_buckets[b];
      const v = map.values[r * map.key_buckets.length + b];
      tip.hidden = false;
      tip.id = "heatmap-tip";
      tip.style.left = `${e.clientX - box.left + 12}px`;
      tip.style.top = `${e.clientY - box.top + 12}px`;
      tip.replaceChildren(
        h("div", {}, `partition ${map.bucket_partitions[b] || "(none now)"}`),
        h("div", {}, `keys ${kr.start} – ${kr.end}`),
        h("div", {}, `${time(map.times_ms[r])}: ${num(v)} ${METRICS[map.metric] || ""}`),
      );
    });
    canvas.addEventListener("mouseleave", () => (tip.hidden = true));

    init();
    const reload = throttle(load, 5000);
    return { refresh: load, on_pass: () => state.table && reload() };
  },
};
