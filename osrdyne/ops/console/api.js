// Talking to the controller's API. The token lives in this tab's sessionStorage (gone when
// the tab closes) and travels only as `Authorization: Bearer` on same-origin requests.
// Actions are POSTs with a JSON body and the X-Osrdyne-Action header (docs/console.md).

const TOKEN = "osrdyne.token";

export class Unauthorized extends Error {}

export class Refused extends Error {
  constructor(status, doc) {
    super(doc && doc.error ? doc.error : "HTTP " + status);
    this.status = status;
    this.doc = doc || {};
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN, value);
  else sessionStorage.removeItem(TOKEN);
}

function headers(extra) {
  const all = { Accept: "application/json", ...extra };
  const t = token();
  if (t) all.Authorization = "Bearer " + t;
  return all;
}

async function answer(response) {
  if (response.status === 401) throw new Unauthorized("the API wants a token");
  let doc = null;
  const type = response.headers.get("Content-Type") || "";
  if (type.startsWith("application/json")) doc = await response.json();
  else doc = { error: (await response.text()).trim() };
  if (!response.ok) throw new Refused(response.status, doc);
  return doc;
}

export async function get(path, params) {
  const query = params ? "?" + new URLSearchParams(params).toString() : "";
  const response = await fetch(path + query, {
    headers: headers(),
    cache: "no-store",
    credentials: "omit",
  });
  return answer(response);
}

export async function act(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", "X-Osrdyne-Action": "console" }),
    body: JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  return answer(response);
}
