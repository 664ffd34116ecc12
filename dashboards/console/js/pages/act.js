// Act: dry-run proposals to approve or reject, a manual action (previewed with the planner's own
// prediction, then submitted through the master), and the executor's halt switch.

import * as api from "../api.js";
import { describe, h, kv, notice, readySignal, throttle } from "../ui.js";

const KIND_FIELDS = {
  split: [["partition", "partition"], ["split_key", "split key (16 hex digits)"]],
  move: [["partition", "partition"], ["to_worker", "to worker"]],
  merge: [["left", "left partition"], ["right", "right partition (starts right after left)"], ["to_worker", "lands on (an owner of either; empty: the left's)"]],
  group: [["target_partition", "partition"], ["group", "group"]],
  reshard: [["tenant", "tenant"], ["dataset", "dataset"], ["tenant_shards", "tenant shards"], ["dataset_shards", "dataset shards"], ["load_balancing", "load balancing (fingerprint | round_robin)"]],
};

function askToken(e) {
  if (e instanceof api.ApiFailure && (e.status === 401 || e.status === 403)) window.dispatchEvent(new Event("lb:ask-token"));
}

export default {
  render(root) {
    const ready = readySignal();
    const pendingEl = h("div", { id: "pending" });
    // Decisions outlive the list's redraws (every pass), newest first.
    const decisions = h("div", { id: "decisions" });
    const haltEl = h("div", { id: "halt" });
    const form = manualForm();
    root.append(
      h("h2", {}, "Act"),
      h(
        "div",
        { class: "grid" },
        h("div", { class: "panel wide" }, h("h3", {}, "Waiting for approval (dry run)"), pendingEl, decisions),
        h("div", { class: "panel" }, h("h3", {}, "Manual action"), form),
        h("div", { class: "panel" }, h("h3", {}, "Executor halt switch"), haltEl),
      ),
    );

    // One read at a time: two redraws racing would replace a row under the pointer.
    let loading = null;
    function loadPending() {
      loading ??= readPending().finally(() => (loading = null));
      return loading;
    }

    async function readPending() {
      try {
        const { proposals } = await api.get("/api/v1/proposals/pending");
        // Redrawn only when the set changes: a row replaced under the pointer loses the click.
        const ids = proposals.map((p) => p.id).join(",");
        if (pendingEl.dataset.ids === ids && pendingEl.childElementCount) return;
        pendingEl.dataset.ids = ids;
        pendingEl.dataset.draws = String(Number(pendingEl.dataset.draws || 0) + 1);
        pendingEl.replaceChildren(
          proposals.length
            ? h(
                "table",
                {},
                h("tr", {}, h("th", {}, "proposal"), h("th", {}, "policy"), h("th", {}, "why"), h("th", {}, "")),
                proposals.map((p) => pendingRow(p)),
              )
            : notice("no dry-run proposal is waiting"),
        );
        ready();
      } catch (e) {
        pendingEl.replaceChildren(notice(e.message, "error"));
      }
    }

    function decided(p, outcome, message, kind = "") {
      decisions.prepend(h("div", { class: `notice ${kind}`, dataset: { proposal: p.id, outcome } }, `${describe(p.proposal.spec)}: ${message}`));
    }

    function pendingRow(p) {
      const decide = (verb) => async (ev) => {
        const buttons = ev.target.parentElement.querySelectorAll("button");
        buttons.forEach((b) => (b.disabled = true));
        try {
          const reply = await api.post(`/api/v1/proposals/${encodeURIComponent(p.id)}/${verb}`);
          if (verb === "approve") decided(p, "approved", `approved; action ${reply.request?.id || p.id} is ${reply.state} at the ops server.`);
          else decided(p, "rejected", "rejected; it will not be offered again for a while.");
          loadPending();
        } catch (e) {
          decided(p, "refused", e.message, "error");
          buttons.forEach((b) => (b.disabled = false));
          askToken(e);
        }
      };
      return h(
        "tr",
        { dataset: { proposal: p.id } },
        h("td", {}, h("b", {}, describe(p.proposal.spec)), h("div", { class: "dim" }, p.id)),
        h("td", {}, p.proposal.policy),
        h("td", {}, p.proposal.reason, p.proposal.predicted ? kv(p.proposal.predicted) : null),
        h(
          "td",
          {},
          h("button", { class: "primary approve", type: "button", onclick: decide("approve") }, "Approve"),
          " ",
          h("button", { class: "reject", type: "button", onclick: decide("reject") }, "Reject"),
        ),
      );
    }

    async function loadHalt() {
      try {
        const hs = await api.get("/api/v1/halt");
        const reason = h("input", { id: "halt-reason", placeholder: "why (shown to everyone)", size: 30 });
        const msg = h("div", { id: "halt-message" });
        const flip = async () => {
          try {
            await api.post("/api/v1/halt", { halted: !hs.halted, reason: reason.value || undefined });
            loadHalt();
          } catch (e) {
            msg.replaceChildren(notice(e.message, "error"));
            askToken(e);
          }
        };
        haltEl.replaceChildren(
          h(
            "div",
            {},
            h("p", { id: "halt-state", class: hs.halted ? "bad" : "good" }, hs.halted ? `Halted${hs.changed_by ? ` by ${hs.changed_by}` : ""}${hs.reason ? `: ${hs.reason}` : ""}. No new action starts; running ones finish.` : "Running: actions start as they are submitted."),
          hs.halted_by_config ? notice("executor.halted is set in the ops server's config; the switch cannot lift that.", "error") : null,
          h("p", {}, `${hs.queued} queued`),
          hs.halted ? null : reason,
          " ",
            h("button", { id: "halt-toggle", type: "button", class: hs.halted ? "primary" : "danger", onclick: flip }, hs.halted ? "Resume" : "Halt executor"),
            msg,
          ),
        );
      } catch (e) {
        haltEl.replaceChildren(notice(e.message, "error"));
      }
    }

    loadPending();
    loadHalt();
    const reload = throttle(loadPending, 1000);
    return { refresh: () => (loadPending(), loadHalt()), on_pass: reload };
  },
};

/// The manual action form: Preview asks the master for the planner's prediction (dry run);
/// Submit sends the same request for real. A refusal is shown next to the field it names.
function manualForm() {
  const kind = h("select", { id: "manual-kind", name: "kind" }, Object.keys(KIND_FIELDS).map((k) => h("option", { value: k }, k)));
  const fields = h("div", { id: "manual-fields" });
  const reason = h("input", { id: "manual-reason", name: "reason", size: 40, placeholder: "why (for the audit trail)" });
  const reasonErr = h("span", { class: "field-error", "data-for": "reason" });
  const result = h("div", { id: "manual-result" });
  const preview = h("button", { id: "manual-preview", type: "button" }, "Preview");
  const submit = h("button", { id: "manual-submit", type: "button", class: "primary", disabled: true }, "Submit");
  let previewed = null;

  function drawFields() {
    fields.replaceChildren(
      ...KIND_FIELDS[kind.value].map(([name, label]) =>
        h("label", {}, `${label} `, h("input", { name, id: `manual-${name}`, size: 30, oninput: stale }), h("span", { class: "field-error", "data-for": name })),
      ),
    );
    stale();
  }
  function stale() {
    previewed = null;
    submit.disabled = true;
  }
  const value = (name) => fields.querySelector(`[name="${name}"]`)?.value.trim() || "";

  function spec() {
    switch (kind.value) {
      case "split":
        return { kind: "split", partition: value("partition"), split_key: value("split_key") };
      case "move":
        return { kind: "move", partition: value("partition"), to_worker: value("to_worker") };
      case "merge": {
        const to = value("to_worker");
        return { kind: "merge", left: value("left"), right: value("right"), ...(to ? { to_worker: to } : {}) };
      }
      case "group":
        return { kind: "group", target: { scope: "partition", partition: value("target_partition") }, group: value("group") };
      default:
        return {
          kind: "reshard",
          tenant: value("tenant"),
          dataset: value("dataset"),
          tenant_shards: Number(value("tenant_shards")),
          dataset_shards: Number(value("dataset_shards")),
          load_balancing: value("load_balancing") || "fingerprint",
        };
    }
  }

  /// `spec.split_key` → the input named split_key; `spec.target.partition` → target_partition.
  function fieldFor(path) {
    if (!path) return null;
    if (path === "reason") return "reason";
    const rest = path.replace(/^spec\./, "").replace(/\[\d+\]/g, "");
    return rest === "target.partition" ? "target_partition" : rest.split(".")[0];
  }

  function showError(e) {
    // The master names the field (`field`); a JSON shape error names it in its message.
    const named = e.field || (e.status === 422 ? (e.message.match(/^(spec(?:\.[a-z_]+)*|reason)[:\s]/) || [])[1] : null);
    const name = fieldFor(named);
    const slot = name && (name === "reason" ? reasonErr : fields.querySelector(`.field-error[data-for="${name}"]`));
    if (slot) {
      slot.textContent = e.message;
      slot.closest("label")?.querySelector("input")?.setAttribute("aria-invalid", "true");
    } else result.replaceChildren(notice(e.message, "error"));
    askToken(e);
  }

  async function send(dryRun) {
    for (const el of form.querySelectorAll(".field-error")) el.textContent = "";
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    result.replaceChildren(notice(dryRun ? "Asking the planner…" : "Submitting…"));
    const request = { spec: spec(), reason: reason.value.trim(), dry_run: dryRun };
    try {
      const reply = await api.post("/api/v1/actions", request);
      if (dryRun) {
        previewed = JSON.stringify(request.spec);
        submit.disabled = false;
        result.replaceChildren(
          h("p", {}, `Predicted effect of ${describe(reply.proposal.spec)} (nothing submitted yet):`),
          h("div", { id: "manual-prediction" }, kv(reply.proposal.predicted)),
        );
        result.dataset.state = "previewed";
      } else {
        submit.disabled = true;
        const a = reply.action;
        result.replaceChildren(
          notice(`Submitted: action ${a.request.id} is ${a.state}. It is tracked and evaluated like lb's own.`),
          h("a", { href: `#/timeline?action=${encodeURIComponent(a.request.id)}` }, "follow it on the timeline"),
        );
        result.dataset.state = "submitted";
        result.dataset.action = a.request.id;
      }
    } catch (e) {
      result.replaceChildren();
      result.dataset.state = "refused";
      showError(e);
    }
  }

  preview.addEventListener("click", () => send(true));
  submit.addEventListener("click", () => previewed === JSON.stringify(spec()) && send(false));
  kind.addEventListener("change", drawFields);
  reason.addEventListener("input", stale);
  const form = h(
    "form",
    { class: "manual", id: "manual-form", onsubmit: (e) => e.preventDefault() },
    h("label", {}, "Kind ", kind),
    fields,
    h("label", {}, "Reason ", reason, reasonErr),
    preview,
    " ",
    submit,
    result,
  );
  drawFields();
  return form;
}
