// Timeline: what lb proposed, did and concluded, newest first. One entry per action id (its
// proposal, the action's state, the evaluation's verdict), with the reason, numbers, rejected
// alternatives and, opened, a before/after chart of the partition that triggered it.

import * as api from "../api.js";
import { lineChart, MARKER_COLORS } from "../charts.js";
import { actionKind, describe, h, kv, notice, partitionsOf, readySignal, select, throttle, time } from "../ui.js";

const KINDS = ["", "split", "move", "merge", "group", "reshard"];
const VERDICTS = ["", "effective", "no_effect", "harmful", "inconclusive", "pending"];

export default {
  render(root, { params, setParams }) {
    const ready = readySignal();
    const f = {
      policy: params.get("policy") || "",
      kind: params.get("kind") || "",
      verdict: params.get("verdict") || "",
      table: params.get("table") || "",
      action: params.get("action") || "",
    };
    let stories = [];
    const controls = h("div", { class: "controls" });
    const list = h("div", { id: "timeline-list" });
    const errors = h("div");
    const charts = [];
    root.append(h("h2", {}, "Timeline"), controls, errors, list);

    async function load() {
      try {
        const since = Date.now() - 6 * 3600 * 1000;
        const [props, acts, evals] = await Promise.all(
          ["proposal", "action", "evaluation"].map((k) => api.get(`/api/v1/records/${k}`, { since_ms: since, limit: 1000 })),
        );
        const byId = new Map();
        const story = (id) => byId.get(id) || byId.set(id, { id }).get(id);
        for (const r of props.records) Object.assign(story(r.key), { proposal: r.body, proposed_at: r.at_ms });
        for (const r of acts.records) Object.assign(story(r.key), { action: r.body, acted_at: r.at_ms });
        for (const r of evals.records) Object.assign(story(r.key), { evaluation: r.body, evaluated_at: r.at_ms });
        stories = [...byId.values()].map((s) => {
          s.spec = s.proposal?.spec || s.action?.request?.spec || s.evaluation?.spec;
          s.policy = s.proposal?.policy || s.action?.request?.policy || s.evaluation?.policy || (s.action?.request?.origin === "manual" ? "manual" : "");
          s.at = Math.min(...[s.proposed_at, s.action?.record?.created_at_ms, s.acted_at, s.evaluated_at].filter(Boolean));
          s.path = s.action?.request?.actor_path || [];
          return s;
        });
        stories.sort((a, b) => b.at - a.at);
        errors.replaceChildren();
        drawControls();
        drawList();
        ready();
      } catch (e) {
        errors.replaceChildren(notice(e.message, "error"));
      }
    }

    function drawControls() {
      const policies = ["", ...new Set(stories.map((s) => s.policy).filter(Boolean))];
      const tables = ["", ...new Set(stories.map((s) => s.path.slice(0, 2).join("/")).filter((t) => t && !t.startsWith("manual/")))];
      const opt = (vals) => vals.map((v) => [v, v || "any"]);
      const change = (k) => (v) => {
        f[k] = v;
        setParams(f);
        drawList();
      };
      controls.replaceChildren(
        h("label", {}, "Policy ", select("tl-policy", opt(policies), f.policy, change("policy"))),
        h("label", {}, "Kind ", select("tl-kind", opt(KINDS), f.kind, change("kind"))),
        h("label", {}, "Verdict ", select("tl-verdict", opt(VERDICTS), f.verdict, change("verdict"))),
        h("label", {}, "Table ", select("tl-table", opt(tables), f.table, change("table"))),
      );
    }

    function verdictOf(s) {
      return s.evaluation?.verdict || "pending";
    }

    function drawList() {
      for (const c of charts.splice(0)) c.destroy();
      const shown = stories.filter(
        (s) =>
          (!f.policy || s.policy === f.policy) &&
          (!f.kind || actionKind(s.spec) === f.kind) &&
          (!f.verdict || verdictOf(s) === f.verdict) &&
          (!f.table || s.path.slice(0, 2).join("/") === f.table) &&
          (!f.action || s.id === f.action),
      );
      list.replaceChildren(...(shown.length ? shown.slice(0, 300).map(entry) : [notice("nothing in the last 6 hours matches")]));
    }

    function entry(s) {
      const v = verdictOf(s);
      const state = s.action?.record?.state || s.action?.outcome || (s.proposal?.mode === "dry_run" ? "dry run: waiting for approval" : "proposed");
      const chartEl = h("div", { class: "before-after" });
      const details = h(
        "details",
        {
          ontoggle: () => {
            if (details.open && !chartEl.dataset.drawn) beforeAfter(s, chartEl);
          },
          open: f.action === s.id,
        },
        h(
          "summary",
          {},
          h("span", { class: "tag" }, time(s.at)),
          h("span", { class: "tag" }, s.policy || "?"),
          h("b", {}, describe(s.spec)),
          " — ",
          h("span", {}, state),
          " — ",
          h("span", { class: v === "effective" ? "good" : v === "harmful" ? "bad" : v === "pending" ? "dim" : "warn", dataset: { verdict: v } }, v),
        ),
        h(
          "div",
          { class: "detail" },
          s.proposal && h("p", {}, s.proposal.reason),
          !s.proposal && s.action && h("p", {}, s.action.request.reason),
          s.proposal?.trigger && h("div", {}, h("h3", {}, "Trigger"), kv(s.proposal.trigger)),
          s.proposal?.predicted && h("div", {}, h("h3", {}, "Predicted"), kv(s.proposal.predicted)),
          s.proposal?.rejected_alternatives?.length
            ? h("div", {}, h("h3", {}, "Rejected alternatives"), h("ul", {}, s.proposal.rejected_alternatives.map((a) => h("li", {}, h("b", {}, a.candidate), ": ", a.why))))
            : null,
          s.action?.note && h("p", { class: "warn" }, s.action.note),
          s.evaluation && h("div", {}, h("h3", {}, `Evaluation: ${s.evaluation.verdict}`), h("p", {}, s.evaluation.why), h("div", { class: "grid" }, h("div", {}, h("b", {}, "before"), kv(s.evaluation.before)), h("div", {}, h("b", {}, "after"), kv(s.evaluation.after)))),
          h("h3", {}, "Before / after"),
          chartEl,
        ),
      );
      if (f.action === s.id) queueMicrotask(() => beforeAfter(s, chartEl));
      return h("div", { class: `event ${s.evaluation ? "evaluation" : s.action ? "action" : "proposal"} ${v}`, dataset: { id: s.id, kind: actionKind(s.spec), policy: s.policy } }, details);
    }

    async function beforeAfter(s, el) {
      el.dataset.drawn = "1";
      const partition = partitionsOf(s.spec)[0];
      if (!partition) {
        el.replaceChildren(notice("this action names no partition"));
        return;
      }
      const start = s.action?.record?.created_at_ms || s.at;
      const end = s.action?.record?.finished_at_ms || start;
      const from = start - 5 * 60 * 1000;
      const to = Math.min(Date.now(), end + 5 * 60 * 1000);
      try {
        const [ops, rej] = await Promise.all(
          ["ops", "rejected"].map((metric) => api.get(`/api/v1/partitions/${encodeURIComponent(partition)}/history`, { metric, from_ms: from, to_ms: to })),
        );
        const rejAt = new Map(rej.points.map((p) => [p.ts_ms, p.value]));
        charts.push(
          lineChart(el, {
            times: ops.points.map((p) => p.ts_ms),
            series: [
              { label: `${partition} ops/s`, values: ops.points.map((p) => p.value) },
              { label: "rejected/s", values: ops.points.map((p) => rejAt.get(p.ts_ms) ?? null), color: "#f85149" },
            ],
            markers: [
              { ts_ms: start, label: "submitted", color: MARKER_COLORS[actionKind(s.spec)] },
              ...(s.action?.record?.finished_at_ms ? [{ ts_ms: end, label: "finished", color: "#3fb950" }] : []),
            ],
            height: 200,
          }),
        );
      } catch (e) {
        el.replaceChildren(notice(`no history for ${partition}: ${e.message}`, "error"));
      }
    }

    load();
    const reload = throttle(load, 2000);
    return { dispose: () => charts.forEach((c) => c.destroy()), refresh: load, on_record: reload, on_lagged: load };
  },
};
