// Small DOM and formatting helpers shared by the pages.

/// h("td", {class: "num"}, "12") → <td class="num">12</td>. Attributes starting with "on" are
/// listeners; `null`/`false` children are skipped.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function num(v, digits = 1) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(digits) + " G";
  if (a >= 1e6) return (v / 1e6).toFixed(digits) + " M";
  if (a >= 1e4) return (v / 1e3).toFixed(digits) + " k";
  if (a >= 100) return v.toFixed(0);
  return v.toFixed(a >= 10 ? 1 : 2);
}

export const pct = (ratio) => (ratio === null || ratio === undefined ? "–" : `${(ratio * 100).toFixed(0)} %`);

export function time(ms) {
  if (!ms) return "–";
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false });
}

export function ago(ms) {
  if (!ms) return "never";
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

/// Units of each metric of the API.
export const METRICS = {
  ops: "ops/s",
  bytes: "B/s",
  cpu: "cores",
  rejected: "rejected/s",
  latency_p99: "µs p99",
  read_ops: "reads/s",
  write_ops: "writes/s",
  errors: "errors/s",
};

export function select(id, options, value, onchange) {
  return h(
    "select",
    { id, onchange: (e) => onchange(e.target.value) },
    options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)),
  );
}

export function notice(message, kind = "") {
  return h("div", { class: `notice ${kind}` }, message);
}

/// The action kind of a spec: a `split_into` (a multi-way split) is a split.
export function actionKind(spec) {
  return spec?.kind === "split_into" ? "split" : spec?.kind || "";
}

/// A one-line description of an action spec.
export function describe(spec) {
  if (!spec) return "";
  switch (spec.kind) {
    case "split":
      return `split ${spec.partition} at ${spec.split_key}`;
    case "split_into":
      return `split ${spec.partition} into ${(spec.split_keys || []).length + 1} pieces`;
    case "move":
      return `move ${spec.partition} → ${spec.to_worker}`;
    case "merge":
      return `merge ${spec.left} + ${spec.right}${spec.to_worker ? ` on ${spec.to_worker}` : ""}`;
    case "group": {
      const t = spec.target || {};
      return `group ${t.partition || t.dataset || t.tenant || JSON.stringify(t)} → ${spec.group || ""}`;
    }
    case "reshard":
      return `reshard ${spec.tenant}/${spec.dataset} → ${spec.dataset_shards ?? spec.shards ?? ""}`;
    default:
      return `${spec.kind} ${JSON.stringify(spec)}`;
  }
}

/// The partitions an action spec touches.
export function partitionsOf(spec) {
  if (!spec) return [];
  if (spec.partition) return [spec.partition];
  if (spec.kind === "merge") return [spec.left, spec.right];
  if (spec.target?.partition) return [spec.target.partition];
  return [];
}

/// key/value rows of an object (numbers formatted).
export function kv(obj) {
  return h(
    "dl",
    { class: "kv" },
    Object.entries(obj || {}).flatMap(([k, v]) => [
      h("dt", {}, k),
      h("dd", {}, v === null || v === undefined ? "–" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : typeof v === "object" ? JSON.stringify(v) : String(v)),
    ]),
  );
}

/// Calls `fn` at most once per `ms`, the last call delayed rather than dropped.
export function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  return () => {
    const wait = last + ms - Date.now();
    if (wait <= 0) {
      last = Date.now();
      fn();
    } else if (!timer) {
      timer = setTimeout(() => {
        timer = null;
        last = Date.now();
        fn();
      }, wait);
    }
  };
}

let render = 0;

/// A new page is being drawn (the router calls this): signals of the pages before it go dead.
export function newRender() {
  render += 1;
  // Which render this is, unique across reloads too: a test waits for it to change.
  document.body.dataset.render = `${performance.timeOrigin}-${render}`;
}

/// The page's "drawn" signal, bound to the render it was made in, so a page left behind cannot
/// mark the next one drawn. Tests wait for `data-ready`; `data-first-draw-ms` keeps when the first
/// page of this load was drawn (milliseconds since navigation start).
export function readySignal() {
  const mine = render;
  return () => {
    if (mine !== render) return;
    document.body.dataset.ready = "1";
    document.body.dataset.firstDrawMs ||= String(Math.round(performance.now()));
  };
}
