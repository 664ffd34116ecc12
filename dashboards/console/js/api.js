// The master's /api/v1, with the tab's token. Every failure becomes an ApiFailure whose
// message is meant for a person: who refused, why, and what to do.

const TOKEN_KEY = "lb.token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => (value ? sessionStorage.setItem(TOKEN_KEY, value) : sessionStorage.removeItem(TOKEN_KEY)),
};

export class ApiFailure extends Error {
  constructor(status, body, message) {
    super(message);
    this.status = status;
    this.code = body?.code || "";
    this.field = body?.field || null;
  }
}

export function headers(extra = {}) {
  const h = { Accept: "application/json", ...extra };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/// What a status means to the person who clicked.
export function explain(status, body) {
  const said = body?.error || "";
  switch (status) {
    case 401:
      return token.get()
        ? `The master does not know this token (${said}). Enter another with “Token…”.`
        : `The master needs a token for this (${said}). Enter one with “Token…”.`;
    case 403:
      return `Refused: ${said}. An operator token is needed.`;
    case 404:
      return `Not found: ${said}`;
    case 409:
      return `Conflict: ${said}`;
    case 422:
      return said;
    case 429:
      return `Too many requests: ${said}`;
    case 503:
      return `Unavailable: ${said}`;
    default:
      return `The master answered ${status}: ${said || "no details"}`;
  }
}

async function call(method, path, { query, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiFailure(0, null, `The master does not answer (${e.message}).`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) throw new ApiFailure(response.status, json, explain(response.status, json));
  return json;
}

export const get = (path, query) => call("GET", path, { query });
export const post = (path, body) => call("POST", path, { body: body ?? {} });
