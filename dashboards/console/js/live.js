// The master's event stream (GET /api/v1/stream, server-sent events), read with fetch so the
// tab's token goes in a header rather than the URL. Emits `pass`, `record` and `lagged` events,
// `up` when (re)connected and `down` when the stream is lost; reconnects with backoff.

import { headers } from "./api.js";

export const live = new EventTarget();
export const state = { up: false, since: null, lastPass: null, lostAt: null };

function emit(name, detail) {
  live.dispatchEvent(new CustomEvent(name, { detail }));
}

function dispatch(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  let body;
  try {
    body = JSON.parse(data.join("\n"));
  } catch {
    return;
  }
  if (event === "hello") {
    state.up = true;
    state.since = Date.now();
    state.lostAt = null;
    emit("up", body);
  } else {
    if (event === "pass") state.lastPass = body;
    emit(event, body);
  }
}

async function readOnce(signal) {
  const response = await fetch("/api/v1/stream", { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!response.ok) {
    let said = "";
    try {
      said = (await response.json()).error;
    } catch {}
    throw new Error(`the master answered ${response.status}${said ? `: ${said}` : ""}`);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the master closed the stream");
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      dispatch(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
    }
  }
}

let controller = null;

/// Follows the stream until `stop()`; every loss is reported once, then retried every 1–5 s.
export function start() {
  controller = new AbortController();
  const signal = controller.signal;
  (async () => {
    let delay = 1000;
    while (!signal.aborted) {
      try {
        await readOnce(signal);
      } catch (e) {
        if (signal.aborted) return;
        if (state.up || state.lostAt === null) {
          state.up = false;
          state.lostAt = Date.now();
          emit("down", { reason: e.message });
        }
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = state.up ? 1000 : Math.min(delay * 2, 5000);
    }
  })();
}

/// Reconnects now (e.g. with a new token).
export function restart() {
  controller?.abort();
  state.up = false;
  start();
}
