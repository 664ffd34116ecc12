// The console's shell: hash routes (#/page?query, each linkable), the live stream's banner,
// and the tab's token.

import { token } from "./api.js";
import * as live from "./live.js";
import { newRender, time } from "./ui.js";
import overview from "./pages/overview.js";
import heatmap from "./pages/heatmap.js";
import top from "./pages/top.js";
import partition from "./pages/partition.js";
import timeline from "./pages/timeline.js";
import act from "./pages/act.js";
import policies from "./pages/policies.js";

const PAGES = { overview, heatmap, top, partition, timeline, act, policies };

const main = document.getElementById("page");
const banner = document.getElementById("banner");
const liveBadge = document.getElementById("live");
let current = null;

/// `#/heatmap?table=orders` → {name: "heatmap", rest: [], params}
function route() {
  const raw = location.hash.replace(/^#\/?/, "") || "overview";
  const [path, query = ""] = raw.split("?");
  const [name, ...rest] = path.split("/").map(decodeURIComponent);
  return { name: PAGES[name] ? name : "overview", rest, params: new URLSearchParams(query) };
}

/// Changes the current page's query without a reload (filters, metric switches).
export function setParams(params) {
  const { name, rest } = route();
  const path = [name, ...rest.map(encodeURIComponent)].join("/");
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
  history.replaceState(null, "", `#/${path}${q ? `?${q}` : ""}`);
}

function show() {
  current?.dispose?.();
  const { name, rest, params } = route();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === name);
  main.replaceChildren();
  document.body.dataset.page = name;
  document.body.dataset.ready = "";
  newRender();
  current = PAGES[name].render(main, { rest, params, setParams }) || {};
}

function refresh() {
  current?.refresh?.();
}

live.live.addEventListener("up", () => {
  const wasDown = !banner.hidden;
  banner.hidden = true;
  banner.textContent = "";
  liveBadge.className = "live up";
  liveBadge.textContent = "live";
  document.body.dataset.stream = "up";
  if (wasDown) refresh();
});
live.live.addEventListener("down", (e) => {
  banner.hidden = false;
  banner.textContent = `Lost the master's live stream at ${time(live.state.lostAt)} (${e.detail.reason}). What you see may be out of date; reconnecting…`;
  liveBadge.className = "live down";
  liveBadge.textContent = "disconnected";
  document.body.dataset.stream = "down";
});
for (const name of ["pass", "record", "lagged"]) {
  live.live.addEventListener(name, (e) => current?.[`on_${name}`]?.(e.detail));
}

const dialog = document.getElementById("token-dialog");
const input = document.getElementById("token-input");
document.getElementById("signin").addEventListener("click", () => {
  input.value = token.get();
  dialog.showModal();
});
dialog.addEventListener("close", () => {
  if (dialog.returnValue === "save") token.set(input.value.trim());
  else if (dialog.returnValue === "clear") token.set("");
  else return;
  live.restart();
  show();
});

// Pages ask for a token when a write was refused with 401 or 403.
window.addEventListener("lb:ask-token", () => {
  input.value = token.get();
  if (!dialog.open) dialog.showModal();
});

window.addEventListener("hashchange", show);
show();
live.start();
