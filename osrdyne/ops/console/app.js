// The console: signs in (when the API wants a token), follows the route in the address
// (#/ the pool, #/key/<key> one key), polls the API and renders, and runs the actions.

import * as api from "./api.js";
import { h, replace, visible } from "./dom.js";
import { KeyView, PoolView } from "./views.js";

const STATUS_EVERY = 2000;
const OVERVIEW_EVERY = 5000;
const POISON_EVERY = 10000;

class App {
  constructor() {
    this.root = document.getElementById("view");
    this.banner = document.getElementById("banner");
    this.toasts = document.getElementById("toasts");
    this.identity = document.getElementById("identity");
    this.state = { whoami: null, status: null, overview: null, timeline: null };
    this.view = null;
    this.timers = {};
    // Each status request is numbered: an answer to an older one (the view, page, filter or
    // order changed meanwhile) is dropped.
    this.statusAsked = 0;
    window.addEventListener("hashchange", () => this.route());
  }

  async start() {
    try {
      this.state.whoami = await api.get("/whoami");
    } catch (error) {
      if (error instanceof api.Unauthorized) return this.signIn(api.token() ? "That token was refused." : null);
      return this.fatal(error);
    }
    this.renderIdentity();
    this.route(); // polls the status of the view it shows
    this.pollOverview();
    this.pollPoison();
  }

  // -- signing in -----------------------------------------------------------------------------

  signIn(problem) {
    api.setToken(null);
    document.body.dataset.signedIn = "no";
    const input = h("input", { type: "password", id: "token", autocomplete: "current-password", "aria-label": "API token", required: true });
    replace(
      this.root,
      h(
        "form",
        {
          id: "sign-in",
          class: "panel sign-in",
          onsubmit: (event) => {
            event.preventDefault();
            api.setToken(input.value);
            replace(this.root, h("p", { class: "muted" }, "Signing in…"));
            this.start();
          },
        },
        h("h2", {}, "This controller's API wants a token"),
        h("p", {}, "Enter the bearer token (", h("code", {}, "api.token"), "). It is kept in this tab only, and sent to this API only."),
        problem ? h("p", { class: "error" }, problem) : null,
        h("div", { class: "inline" }, input, h("button", { type: "submit", class: "action" }, "Sign in")),
      ),
    );
    input.focus();
  }

  signOut() {
    api.setToken(null);
    Object.values(this.timers).forEach(clearTimeout);
    location.hash = "#/";
    location.reload();
  }

  renderIdentity() {
    const me = this.state.whoami;
    document.body.dataset.signedIn = "yes";
    document.title = `osrdyne · ${me.pool}`;
    replace(
      this.identity,
      h("span", { class: "pool" }, "pool ", visible(me.pool, { class: "text strong" })),
      me.token_required
        ? [h("span", { class: "muted" }, " · token " + (me.token || "")), " ", h("button", { type: "button", class: "subtle", id: "sign-out", onclick: () => this.signOut() }, "Sign out")]
        : null,
    );
  }

  // -- routing and rendering ------------------------------------------------------------------

  route() {
    const hash = location.hash || "#/";
    let key = null;
    if (hash.startsWith("#/key/")) {
      try {
        key = decodeURIComponent(hash.slice("#/key/".length));
      } catch {
        key = null;
      }
    }
    this.view = key === null ? new PoolView(this) : new KeyView(this, key);
    this.state.timeline = null;
    replace(this.root, this.view.node);
    this.render();
    this.pollStatus(); // the new view asks for what it shows
    if (key !== null) {
      this.refreshTimeline();
      this.refreshPoison();
    }
    window.scrollTo(0, 0);
  }

  render() {
    this.renderBanner();
    if (this.view) this.view.update();
  }

  renderBanner() {
    const { whoami, status } = this.state;
    const notes = [];
    if (whoami && !whoami.token_required) {
      notes.push(
        h("div", { class: "note warn", id: "no-token" }, "No API token is configured (", h("code", {}, "api.token"), "): anyone who can reach this address can read this pool and act on it. Keep ", h("code", {}, "api.host"), " on loopback, or set a token."),
      );
    }
    if (status && status.role !== "leader") {
      const leader = status.leader;
      const link = leader && leader.api && /^https?:\/\//.test(leader.api) ? h("a", { href: leader.api.replace(/\/+$/, "") + "/console/" }, visible(leader.api)) : null;
      notes.push(
        h(
          "div",
          { class: "note info", id: "standby" },
          `This controller is ${status.role}: it shows what it knows, and actions are taken by the leader`,
          leader ? [" (", visible(leader.instance), link ? [", ", link] : null, ")"] : "",
          ".",
        ),
      );
    }
    if (this.state.error) notes.push(h("div", { class: "note error" }, visible(this.state.error)));
    replace(this.banner, notes);
  }

  toast(text, kind) {
    const node = h("div", { class: "toast " + (kind || "ok"), role: "status" }, visible(text));
    this.toasts.prepend(node);
    setTimeout(() => node.remove(), kind === "error" ? 15000 : 6000);
  }

  fatal(error) {
    replace(this.root, h("div", { class: "note error" }, "The console cannot read this API: ", visible(String(error.message || error))));
  }

  // -- polling ----------------------------------------------------------------------------------

  schedule(name, fn, delay) {
    clearTimeout(this.timers[name]);
    this.timers[name] = setTimeout(fn, delay);
  }

  // The status document with what the view shows only (a page of groups, or one key): a
  // pool of 10,000 groups is filtered, sorted and paged by the controller, not here.
  async pollStatus() {
    const asked = ++this.statusAsked;
    const began = performance.now();
    try {
      const status = await api.get("/status", this.view ? this.view.statusQuery() : { limit: 0 });
      if (asked !== this.statusAsked) return; // a newer request is on its way
      this.state.status = status;
      this.state.error = null;
      if (this.view instanceof KeyView) await this.refreshTimeline(false);
    } catch (error) {
      if (asked !== this.statusAsked) return;
      if (error instanceof api.Unauthorized) return this.signIn("The token was refused.");
      this.state.error = "Cannot read the status: " + error.message + " (retrying)";
    }
    this.render();
    // A slow answer (a loaded controller): poll less often rather than keep the API busy.
    const took = performance.now() - began;
    this.schedule("status", () => this.pollStatus(), Math.max(STATUS_EVERY, 5 * took));
  }

  async pollOverview() {
    try {
      this.state.overview = await api.get("/overview");
      if (this.view instanceof PoolView) this.view.renderCards();
    } catch (error) {
      if (error instanceof api.Unauthorized) return;
    }
    this.schedule("overview", () => this.pollOverview(), OVERVIEW_EVERY);
  }

  async pollPoison() {
    const poisonShown = this.view instanceof KeyView || (this.view && this.view.showPoison);
    if (poisonShown) await this.refreshPoison();
    this.schedule("poison", () => this.pollPoison(), POISON_EVERY);
  }

  async refreshTimeline(render = true) {
    if (!(this.view instanceof KeyView)) return;
    const key = this.view.key;
    try {
      const timeline = await api.get("/timeline", { key });
      if (this.view instanceof KeyView && this.view.key === key) this.state.timeline = timeline;
    } catch (error) {
      this.state.error = "Cannot read the timeline: " + error.message;
    }
    if (render) this.render();
  }

  async refreshPoison() {
    const view = this.view;
    if (!view) return;
    const params = view instanceof KeyView ? { key: view.key, limit: 500 } : { limit: 100 };
    let poison;
    try {
      poison = await api.get("/poison", params);
    } catch (error) {
      poison = { error: "Cannot read the poison queue: " + error.message };
    }
    if (this.view === view) view.updatePoison(poison);
  }

  // -- actions ------------------------------------------------------------------------------------

  async run(what, fn) {
    try {
      const result = await fn();
      this.toast(what(result));
      await this.pollStatus();
      if (this.view instanceof KeyView) await this.refreshTimeline();
      return true;
    } catch (error) {
      if (error instanceof api.Unauthorized) {
        this.signIn("The token was refused.");
        return false;
      }
      const leader = error.doc && error.doc.leader;
      const pointer = leader ? ` The leader is ${leader.instance}${leader.api ? " at " + leader.api : ""}.` : "";
      this.toast(`Refused: ${error.message}.${pointer}`, "error");
      return false;
    }
  }

  warm(key) {
    return this.run(
      (r) => `Warmed ${key}: queue ${r.queue === "bound" ? "bound, group starting" : "being created"}.`,
      () => api.act("/actions/warm", { key }),
    );
  }

  stop(key) {
    return this.run((r) => `Stopping ${key}: unbound now, workers stop in ${Math.round(r.stops_in)} s.`, () => api.act("/actions/stop", { key }));
  }

  async poisonAction(action, id) {
    const ok = await this.run((r) => `Poison entry ${r.id} (${r.key}): ${action === "replay" ? "replayed" : "dropped"}.`, () => api.act(`/actions/poison/${action}`, { id }));
    if (ok) await this.refreshPoison();
    return ok;
  }
}

new App().start();
