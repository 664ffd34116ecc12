// Policies: the live policy config (every policy's mode and thresholds, the caps), its version,
// the file it comes from, and the last reload's outcome and error.

import * as api from "../api.js";
import { ago, h, notice, readySignal } from "../ui.js";

/// Nested config sections as tables: a section's scalars first, then its subsections.
function section(name, obj) {
  const scalars = Object.entries(obj).filter(([, v]) => v === null || typeof v !== "object" || Array.isArray(v));
  const nested = Object.entries(obj).filter(([, v]) => v !== null && typeof v === "object" && !Array.isArray(v));
  return h(
    "div",
    { class: "panel", dataset: { section: name } },
    h("h3", {}, name),
    scalars.length
      ? h("table", {}, scalars.map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "num" }, Array.isArray(v) ? v.join(", ") || "[]" : v === null ? "–" : String(v)))))
      : null,
    nested.map(([k, v]) => section(`${name}.${k}`, v)),
  );
}

export default {
  render(root) {
    const ready = readySignal();
    const out = h("div", { id: "policies" });
    root.append(h("h2", {}, "Policies"), out);
    async function load() {
      try {
        const p = await api.get("/api/v1/policy");
        const c = p.config;
        out.replaceChildren(
          h(
            "div",
            { class: "panel", id: "policy-source" },
            h("p", {}, "From ", h("code", {}, c.path), `, version ${c.version}, loaded ${ago(c.loaded_at_ms)}.`),
            h(
              "p",
              { id: "reload-outcome", class: c.last_error ? "bad" : "good" },
              `Last reload attempt ${ago(c.last_attempt_at_ms)}: ${c.last_outcome}`,
              c.changed_fields?.length ? ` (changed: ${c.changed_fields.join(", ")})` : "",
            ),
            c.last_error ? notice(`The file was not applied, the previous version stays live: ${c.last_error}`, "error") : null,
            p.halted ? notice("planner.halt is set: lb proposes nothing", "error") : null,
          ),
          h(
            "div",
            { class: "panel" },
            h("h3", {}, "Modes"),
            h("table", { id: "policy-modes" }, Object.entries(p.modes).map(([k, m]) => h("tr", { dataset: { policy: k } }, h("td", {}, k), h("td", { class: m === "auto" ? "good" : m === "off" ? "dim" : "warn" }, m)))),
            h("p", { class: "dim" }, "auto: acted on; dry_run: proposed, waits for approval on the Act page; off: not evaluated."),
          ),
          h("div", { class: "grid" }, section("planner", p.planner), section("evaluation", p.evaluation), section("placement", p.placement)),
        );
        ready();
      } catch (e) {
        out.replaceChildren(notice(e.message, "error"));
      }
    }
    load();
    return { refresh: load, on_record: (r) => r.kind === "config_reload" && load() };
  },
};
