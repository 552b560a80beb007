// The console's two views: the pool (cards, charts, the groups table, the poison queue) and
// one key (its group, timeline, dead letters and poison entries). Each builds its skeleton
// once (inputs keep their focus) and refreshes its parts when new data comes.

import { coldStartHistogram, routedOverTime } from "./charts.js";
import { ago, clock, duration, escapeText, h, number, replace, visible } from "./dom.js";

export function keyHref(key) {
  return "#/key/" + encodeURIComponent(key);
}

// -- small pieces ---------------------------------------------------------------------------

function badge(text, kind) {
  return h("span", { class: "badge " + (kind || text) }, text);
}

function card(title, ...body) {
  return h("section", { class: "card" }, h("h3", {}, title), ...body);
}

function rows(pairs) {
  return h(
    "dl",
    { class: "pairs" },
    pairs.filter(Boolean).map(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]),
  );
}

// A value of a status section the console does not know (yet): rendered generically.
export function generic(value, depth = 0) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "–");
  if (Array.isArray(value)) {
    if (!value.length) return h("span", { class: "muted" }, "none");
    if (value.every((v) => v && typeof v === "object" && !Array.isArray(v))) {
      const columns = [...new Set(value.flatMap((v) => Object.keys(v)))];
      return h(
        "table",
        { class: "mini" },
        h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, visible(c))))),
        h("tbody", {}, value.map((v) => h("tr", {}, columns.map((c) => h("td", {}, generic(v[c], depth + 1)))))),
      );
    }
    return h("span", {}, visible(value.map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v))).join(", ")));
  }
  if (typeof value === "object") {
    if (depth > 3) return visible(JSON.stringify(value));
    return rows(Object.entries(value).map(([k, v]) => [visible(k), generic(v, depth + 1)]));
  }
  if (typeof value === "boolean") return h("span", {}, value ? "yes" : "no");
  if (typeof value === "number") return h("span", { class: "num" }, number(value));
  return visible(value);
}

// A button that acts on the second click within a few seconds (the first arms it).
export function armedButton(label, confirmLabel, run, props) {
  let timer = null;
  const button = h("button", { type: "button", class: "action", ...(props || {}) }, label);
  button.addEventListener("click", async (event) => {
    event.stopPropagation();
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = confirmLabel;
      timer = setTimeout(() => {
        button.classList.remove("armed");
        button.textContent = label;
      }, 4000);
      return;
    }
    clearTimeout(timer);
    button.classList.remove("armed");
    button.textContent = label;
    button.disabled = true;
    try {
      await run();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

function actionButton(label, run, props) {
  const button = h("button", { type: "button", class: "action", ...(props || {}) }, label);
  button.addEventListener("click", async (event) => {
    event.stopPropagation();
    button.disabled = true;
    try {
      await run();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

function workersText(workers, scaling) {
  if (workers === null || workers === undefined) return h("span", { class: "muted" }, "–");
  if (!workers.length) return h("span", { class: "muted" }, "none");
  const names = workers.map((w) => (w.pid ? "pid " + w.pid : w.name || w.worker_id || "?"));
  const shown = names.slice(0, 3).join(", ") + (names.length > 3 ? ` +${names.length - 3}` : "");
  return [visible(shown), sizeText(scaling)];
}

// The group scaler's decision beside the workers: "→ 8" while it grows or shrinks the group
// to 8, a "saturated" badge when it needs more than the caps give.
function sizeText(scaling) {
  if (!scaling) return null;
  return h(
    "span",
    { class: "scaling" },
    scaling.desired !== scaling.current ? h("span", { class: "desired", title: "wanted by the group scaler: " + scaling.reason }, ` → ${number(scaling.desired)}`) : null,
    scaling.saturated ? [" ", badge("saturated", "stalled")] : null,
  );
}

function rate(value, unit) {
  return value === null || value === undefined ? "–" : `${value.toFixed(value < 10 ? 2 : 1)} ${unit}`;
}

// The group scaler's view of one group (the key's page), or a line saying it does not size it.
function scalingRows(scaling) {
  if (!scaling) return h("p", { class: "muted" }, "The group scaler has not sized this group (no scaler, a driver that does not size groups, or no load yet).");
  return rows([
    ["workers", `${number(scaling.current)} running, ${number(scaling.desired)} wanted`],
    ["reason", badge(scaling.reason, "none")],
    ["backlog", scaling.backlog === null || scaling.backlog === undefined ? "–" : number(scaling.backlog) + " ready"],
    ["arrivals", rate(scaling.arrival_rate, "/s")],
    ["service", rate(scaling.service_rate, "/s a worker")],
    ["busy", scaling.busy === null || scaling.busy === undefined ? "–" : `${Math.round(scaling.busy * 100)} %`],
    ["saturated", scaling.saturated ? badge("saturated", "stalled") : "no"],
  ]);
}

function workersTable(workers) {
  if (workers === null || workers === undefined) return h("p", { class: "muted" }, "This driver does not describe its workers.");
  if (!workers.length) return h("p", { class: "muted" }, "No worker.");
  const known = ["worker_id", "pid", "name", "restarts", "last_exit", "adopted"];
  const extra = [...new Set(workers.flatMap((w) => Object.keys(w)))].filter((c) => !known.includes(c));
  return h(
    "table",
    { class: "workers" },
    h("thead", {}, h("tr", {}, ["Worker", "Pid", "Container or pod", "Restarts", "Last exit", "Adopted", ...extra].map((c) => h("th", {}, visible(c))))),
    h(
      "tbody",
      {},
      workers.map((w) =>
        h(
          "tr",
          {},
          h("td", { class: "mono" }, visible(w.worker_id)),
          h("td", { class: "mono" }, w.pid ?? "–"),
          h("td", { class: "mono" }, visible(w.name ?? "–")),
          h("td", { class: "num" }, number(w.restarts)),
          h("td", { class: "num" }, w.last_exit ?? "–"),
          h("td", {}, w.adopted ? "yes" : "no"),
          extra.map((c) => h("td", {}, generic(w[c]))),
        ),
      ),
    ),
  );
}

function restartsText(group) {
  if (group.restarts === null || group.restarts === undefined) return "–";
  const exits = (group.workers || []).map((w) => w.last_exit).filter((e) => e !== null && e !== undefined);
  return number(group.restarts) + (exits.length ? ` (last exit ${exits[exits.length - 1]})` : "");
}

function stateBadges(group) {
  const trouble = group.health === "stalled" || group.health === "failing";
  return [badge(group.state), trouble ? badge(group.health, "stalled") : null];
}

// -- the pool -------------------------------------------------------------------------------

const KNOWN_STATUS = new Set([
  "pool",
  "instance",
  "role",
  "sessions",
  "last_error",
  "driver",
  "time",
  "generations",
  "groups",
  "queues_error",
  "leader",
  "broker",
  "admission",
  "broker_nodes",
  "group_counts",
  "groups_matching",
  "groups_stalled",
  "groups_failing",
  "page",
  "queues_read_at",
]);

// One broker node, on one line: up or down (with partitions and alarms), then the pool's share.
function nodeLine(node) {
  const trouble = [
    !node.running && "down",
    node.partitions.length && "partitioned from " + node.partitions.join(", "),
    node.mem_alarm && "memory alarm",
    node.disk_alarm && "disk alarm",
  ].filter(Boolean);
  const share = [
    `${node.queue_leaders} leaders`,
    node.pool_connections !== null && `${node.pool_connections} connections`,
    node.members_missing && `${node.members_missing} members missing`,
  ].filter(Boolean);
  return [trouble.length ? badge(trouble.join(", "), "stalled") : badge("running", "active"), " ", visible(share.join(", "))];
}

// "used / total (pct%)", or "?" when the broker does not say.
function ofTotal(used, total) {
  if (used === null || used === undefined || !total) return "?";
  return `${used} / ${total} (${Math.round((100 * used) / total)}%)`;
}

// Each column sorts on the controller (`sort` of /status), in its natural direction first:
// names and states A to Z, times most recent first, counts largest first, errors first.
const COLUMNS = [
  { id: "key", label: "Key" },
  { id: "state", label: "State" },
  { id: "since", label: "Since" },
  { id: "workers", label: "Workers" },
  { id: "restarts", label: "Restarts" },
  { id: "ready", label: "Ready" },
  { id: "unacked", label: "Unacked" },
  { id: "consumers", label: "Consumers" },
  { id: "activity", label: "Last activity" },
  { id: "cold_start", label: "Cold start" },
  { id: "error", label: "Error" },
];

// The order /status gives a page in. `groups` is a JSON object, and a browser lists an
// object's integer-like names ("42") first whatever their order in the text: the page's
// keys come in `page` as well.
function pageOf(status) {
  const groups = status.groups || {};
  const keys = status.page || Object.keys(groups);
  return keys.filter((key) => key in groups).map((key) => [key, groups[key]]);
}

const PAGE = 100;
// Milliseconds of no typing before the key filter is asked of the controller.
const FILTER_PAUSE = 250;

export class PoolView {
  constructor(app) {
    this.app = app;
    this.sort = { id: "key", descending: false };
    this.page = 0;
    this.showPoison = false;
    this.filter = h("input", {
      type: "search",
      id: "filter",
      placeholder: "Filter by key",
      "aria-label": "filter groups by key",
      oninput: () => {
        // Asked of the controller once typing pauses, not on every keystroke.
        clearTimeout(this.typing);
        this.typing = setTimeout(() => this.ask(), FILTER_PAUSE);
      },
    });
    this.stateFilter = h(
      "select",
      { id: "state-filter", "aria-label": "filter groups by state", onchange: () => this.ask() },
      ["all", "active", "unbound", "stopping", "unknown", "stalled", "failing"].map((v) => h("option", { value: v }, v)),
    );
    this.warmKey = h("input", { type: "text", id: "warm-key", placeholder: "key to warm", "aria-label": "key to warm" });
    const warmForm = h(
      "form",
      {
        id: "warm-form",
        class: "inline",
        onsubmit: (event) => {
          event.preventDefault();
          const key = this.warmKey.value;
          if (key) this.app.warm(key).then((ok) => ok && (this.warmKey.value = ""));
        },
      },
      this.warmKey,
      h("button", { type: "submit", class: "action", id: "warm-button" }, "Warm"),
    );
    this.cards = h("div", { class: "cards", id: "pool-cards" });
    this.cold = h("div", { id: "cold-starts" });
    this.routed = h("div", { id: "routed" });
    this.count = h("span", { class: "muted", id: "group-count" });
    this.thead = h("thead", {});
    this.tbody = h("tbody", {});
    this.pager = h("div", { class: "pager" });
    this.poisonBody = h("div", { id: "poison-list" });
    this.poisonToggle = h(
      "button",
      {
        type: "button",
        class: "action subtle",
        id: "poison-toggle",
        onclick: () => {
          this.showPoison = !this.showPoison;
          this.poisonToggle.textContent = this.showPoison ? "Hide entries" : "Show entries";
          if (this.showPoison) this.app.refreshPoison();
          else replace(this.poisonBody);
        },
      },
      "Show entries",
    );
    this.node = h(
      "div",
      { class: "view pool" },
      this.cards,
      h(
        "div",
        { class: "charts" },
        card("Cold starts", this.cold),
        card("Requests routed: fast path and orphans", this.routed),
      ),
      h(
        "section",
        { class: "panel" },
        h("div", { class: "toolbar" }, h("h2", {}, "Worker groups"), this.count, h("span", { class: "grow" }), this.filter, this.stateFilter, warmForm),
        h("div", { class: "scroll" }, h("table", { id: "groups", class: "groups" }, this.thead, this.tbody)),
        this.pager,
      ),
      h(
        "section",
        { class: "panel" },
        h("div", { class: "toolbar" }, h("h2", {}, "Poison queue"), h("span", { class: "muted" }, "requests kept after the delivery limit, or that could not be handled"), h("span", { class: "grow" }), this.poisonToggle),
        this.poisonBody,
      ),
    );
  }

  update() {
    this.renderCards();
    this.renderGroups();
  }

  // What /status is asked for: the page shown, filtered and sorted by the controller.
  statusQuery() {
    const query = { limit: PAGE, offset: this.page * PAGE, sort: this.sort.id };
    if (this.sort.descending) query.descending = "true";
    if (this.filter.value) query.key = this.filter.value;
    const state = this.stateFilter.value;
    if (state === "stalled" || state === "failing") query.health = state;
    else if (state !== "all") query.state = state;
    return query;
  }

  // The filter, the order or the page changed: from the first page (unless paging), now.
  ask(page = 0) {
    this.page = page;
    this.app.pollStatus();
  }

  renderCards() {
    const { status, overview } = this.app.state;
    if (!status) return;
    const counters = (overview && overview.counters) || {};
    const gens = status.generations;
    const byState = status.group_counts || {};
    const stalled = status.groups_stalled || 0;
    const failing = status.groups_failing || 0;
    const routed = counters.requests_routed || {};
    const fast = routed.fast || 0;
    const orphan = routed.orphan || 0;
    const shownCounters = new Set(["requests_routed", "orphans", "dead_letters", "poison", "invalid_keys"]);
    const cards = [
      card(
        "Controller",
        rows([
          ["role", badge(status.role)],
          ["instance", visible(status.instance)],
          ["driver", visible(status.driver)],
          ["sessions", number(status.sessions)],
          status.leader && ["leader", visible(status.leader.instance)],
          status.last_error && ["last error", visible(status.last_error, { class: "text error" })],
          status.queues_error && ["queue figures", visible(status.queues_error, { class: "text error" })],
        ]),
      ),
      card(
        "Generations",
        gens
          ? rows([
              ["tracker", number(gens.tracker)],
              ["queue loop", [number(gens.queues), lag(gens.tracker - gens.queues)]],
              ["group loop", [number(gens.groups), lag(gens.tracker - gens.groups)]],
            ])
          : h("p", { class: "muted" }, "Only the leader has generations."),
      ),
      card(
        "Groups",
        rows([
          ["active", number(byState.active || 0)],
          ["unbound", number(byState.unbound || 0)],
          ["stopping", number(byState.stopping || 0)],
          byState.unknown && ["unknown", number(byState.unknown)],
          ["stalled", stalled ? badge(String(stalled), "stalled") : "0"],
          ["failing", failing ? badge(String(failing), "stalled") : "0"],
        ]),
      ),
      card(
        "Requests routed",
        rows([
          ["fast path", number(fast)],
          ["orphans", number(orphan)],
          ["orphan share", fast + orphan ? Math.round((100 * orphan) / (fast + orphan)) + "%" : "–"],
        ]),
      ),
      card(
        "Limits",
        status.admission
          ? rows([
              ["new keys", status.admission.refusing ? badge("refused: " + status.admission.refusing, "stalled") : badge("admitted", "active")],
              ["groups", number(status.admission.groups)],
              status.admission.max_groups !== null && ["max groups", number(status.admission.max_groups)],
              status.admission.driver_capacity !== null && ["driver capacity", number(status.admission.driver_capacity)],
              status.admission.standby !== null && status.admission.standby !== undefined && ["standby workers", number(status.admission.standby)],
              status.admission.broker_room !== null && ["broker room", [number(status.admission.broker_room), " queues"]],
              status.broker && ["broker fds", ofTotal(status.broker.fd_used, status.broker.fd_total)],
              status.broker && ["broker processes", ofTotal(status.broker.proc_used, status.broker.proc_total)],
              status.broker && ["broker memory", ofTotal(status.broker.mem_used, status.broker.mem_limit)],
              status.broker && (status.broker.mem_alarm || status.broker.disk_alarm) && ["alarms", badge([status.broker.mem_alarm && "memory", status.broker.disk_alarm && "disk"].filter(Boolean).join(", "), "stalled")],
              status.broker && status.broker.error && ["broker figures", visible(status.broker.error, { class: "text error" })],
              Object.keys(status.admission.refused || {}).length && ["refused", visible(Object.entries(status.admission.refused).map(([r, n]) => `${r} ${n}`).join(", "))],
              ...(status.broker_nodes || []).map((node) => [visible(node.name), nodeLine(node)]),
            ])
          : h("p", { class: "muted" }, "Only the leader admits new keys."),
      ),
      card("Orphans", counterRows(counters.orphans, "none yet")),
      card(
        "Dead letters",
        counterRows(counters.dead_letters, "none"),
        rows([
          ["to poison", number(counters.poison || 0)],
          ["invalid keys", number(counters.invalid_keys || 0)],
        ]),
      ),
    ];
    for (const [name, value] of Object.entries(status)) {
      if (KNOWN_STATUS.has(name) || value === null || typeof value !== "object") continue;
      cards.push(h("section", { class: "card extra", dataset: { section: name } }, h("h3", {}, visible(name)), generic(value)));
    }
    const others = Object.entries(counters).filter(([name]) => !shownCounters.has(name));
    if (others.length) {
      cards.push(
        h(
          "section",
          { class: "card wide" },
          h("details", {}, h("summary", {}, "All counters"), rows(others.map(([n, v]) => [visible(n), generic(v)]))),
        ),
      );
    }
    replace(this.cards, cards);
    if (overview) {
      replace(this.cold, coldStartHistogram(overview.cold_start));
      replace(this.routed, routedOverTime(overview.routed, overview.time));
    }
  }

  renderGroups() {
    const { status } = this.app.state;
    if (!status) return;
    replace(
      this.thead,
      h(
        "tr",
        {},
        COLUMNS.map((c) =>
          h(
            "th",
            {
              class: "sortable" + (this.sort.id === c.id ? (this.sort.descending ? " desc" : " asc") : ""),
              dataset: { column: c.id },
              onclick: () => {
                this.sort = { id: c.id, descending: this.sort.id === c.id && !this.sort.descending };
                this.ask();
              },
            },
            c.label,
          ),
        ),
        h("th", {}, ""),
      ),
    );
    const shown = pageOf(status);
    const matching = status.groups_matching || 0;
    const total = Object.values(status.group_counts || {}).reduce((a, b) => a + b, 0);
    const pages = Math.max(1, Math.ceil(matching / PAGE));
    if (!shown.length && this.page > pages - 1) return this.ask(pages - 1); // the pool shrank
    this.count.textContent =
      matching === total ? `${number(total)} group(s)` : `${number(matching)} of ${number(total)} group(s)`;
    const now = status.time;
    replace(
      this.tbody,
      shown.length
        ? shown.map(([key, g]) => this.row(key, g, now))
        : h("tr", {}, h("td", { colspan: COLUMNS.length + 1, class: "empty" }, total ? "No group matches." : "No worker group yet: groups start with the first request for their key, or a warm.")),
    );
    const first = this.page * PAGE;
    replace(
      this.pager,
      pages > 1
        ? [
            h("button", { type: "button", class: "subtle", disabled: this.page === 0, onclick: () => this.ask(this.page - 1) }, "‹ previous"),
            h("span", { class: "muted" }, ` ${number(Math.min(matching, first + 1))}–${number(Math.min(matching, first + shown.length))} of ${number(matching)} `),
            h("button", { type: "button", class: "subtle", disabled: this.page >= pages - 1, onclick: () => this.ask(this.page + 1) }, "next ›"),
          ]
        : [],
    );
  }

  row(key, g, now) {
    const standby = this.app.state.status.role !== "leader";
    const problem = g.failing_reason ? "failing: " + g.failing_reason : g.error;
    return h(
      "tr",
      { class: "group state-" + g.state, dataset: { key } },
      h("td", { class: "key" }, h("a", { href: keyHref(key) }, visible(key))),
      h("td", {}, stateBadges(g)),
      h("td", { class: "muted" }, ago(g.since, now)),
      h("td", {}, workersText(g.workers, g.scaling)),
      h("td", { class: "num" }, restartsText(g)),
      h("td", { class: "num" }, number(g.messages_ready)),
      h("td", { class: "num" }, number(g.messages_unacknowledged)),
      h("td", { class: "num" }, number(g.consumers)),
      h("td", { class: "muted" }, ago(g.last_activity, now)),
      h("td", { class: "num" }, duration(g.cold_start)),
      h("td", { class: "error-cell", title: problem ? escapeText(problem) : null }, problem ? visible(problem, { class: "text error" }) : ""),
      h(
        "td",
        { class: "actions" },
        g.state === "active" || g.state === "unbound"
          ? armedButton("Stop", "Confirm stop", () => this.app.stop(key), { disabled: standby, class: "action stop" })
          : null,
      ),
    );
  }

  updatePoison(poison) {
    if (!this.showPoison) return;
    replace(this.poisonBody, poisonTable(this.app, poison, true));
  }
}

function lag(value) {
  return value > 0 ? h("span", { class: "lag" }, ` (${value} behind)`) : h("span", { class: "muted" }, " (caught up)");
}

function counterRows(map, empty) {
  const entries = Object.entries(map || {}).filter(([, v]) => v);
  if (!entries.length) return h("p", { class: "muted" }, empty);
  return rows(entries.sort((a, b) => b[1] - a[1]).map(([name, value]) => [visible(name), number(value)]));
}

export function poisonTable(app, poison, withKey) {
  if (!poison) return h("p", { class: "muted" }, "Loading…");
  if (poison.error) return h("p", { class: "error" }, visible(poison.error));
  if (!poison.entries.length) return h("p", { class: "muted" }, "No poison entry" + (withKey ? "." : " for this key."));
  const standby = app.state.status && app.state.status.role !== "leader";
  return h(
    "div",
    {},
    h(
      "table",
      { class: "poison" },
      h("thead", {}, h("tr", {}, withKey ? h("th", {}, "Key") : null, ["Id", "Reason", "Deaths", "Size", "Correlation id", "Headers", ""].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        poison.entries.map((e) =>
          h(
            "tr",
            { dataset: { entry: e.id } },
            withKey ? h("td", { class: "key" }, visible(e.key)) : null,
            h("td", { class: "mono" }, visible(e.id)),
            h("td", {}, visible(e.reason)),
            h("td", { class: "num" }, number(e.deaths)),
            h("td", { class: "num" }, number(e.size) + " B"),
            h("td", { class: "mono" }, visible(e.correlation_id ?? "–")),
            h("td", {}, h("details", {}, h("summary", {}, Object.keys(e.headers || {}).length + " header(s)"), generic(e.headers))),
            h(
              "td",
              { class: "actions" },
              armedButton("Replay", "Confirm replay", () => app.poisonAction("replay", e.id), { disabled: standby }),
              armedButton("Drop", "Confirm drop", () => app.poisonAction("drop", e.id), { disabled: standby, class: "action stop" }),
            ),
          ),
        ),
      ),
    ),
    poison.more ? h("p", { class: "muted" }, `The oldest ${number(poison.read)} entries were read; the queue holds more.`) : null,
  );
}

// -- one key --------------------------------------------------------------------------------

const GROUP_FIELDS = [
  ["queue", (g) => g.queue ?? "absent"],
  ["running", (g) => (g.running ? "yes" : "no")],
  ["messages", (g) => number(g.messages)],
  ["ready", (g) => number(g.messages_ready)],
  ["unacked", (g) => number(g.messages_unacknowledged)],
  ["consumers", (g) => number(g.consumers)],
  ["oldest message", (g) => duration(g.oldest_message_age)],
  ["restarts", (g) => restartsText(g)],
  ["cold start", (g) => duration(g.cold_start)],
  ["health", (g) => g.health ?? "–"],
  ["failed starts", (g) => number(g.failed_starts)],
  ["failing since", (g) => (g.failing_since ? new Date(g.failing_since * 1000).toISOString() : "–")],
];
const KNOWN_GROUP = new Set([
  "state",
  "queue",
  "running",
  "error",
  "last_activity",
  "workers",
  "restarts",
  "messages",
  "messages_ready",
  "messages_unacknowledged",
  "consumers",
  "oldest_message_age",
  "health",
  "failing_reason",
  "failing_since",
  "failed_starts",
  "since",
  "cold_start",
  "scaling",
]);

export class KeyView {
  constructor(app, key) {
    this.app = app;
    this.key = key;
    this.state = h("span", { class: "badges" });
    this.summary = h("div", { id: "key-summary" });
    this.workers = h("div", {});
    this.scaling = h("div", { id: "key-scaling" });
    this.timeline = h("ol", { class: "timeline", id: "timeline" });
    this.deadLetters = h("div", { id: "dead-letters" });
    this.poison = h("div", { id: "key-poison" });
    this.stopButton = armedButton("Stop", "Confirm stop", () => app.stop(key), { id: "stop-button", class: "action stop" });
    this.warmButton = actionButton("Warm", () => app.warm(key), { id: "key-warm-button" });
    this.node = h(
      "div",
      { class: "view key" },
      h("p", {}, h("a", { href: "#/", class: "back" }, "‹ all groups")),
      h("div", { class: "key-head" }, h("h2", { id: "key-title" }, visible(key)), this.state, h("span", { class: "grow" }), this.warmButton, this.stopButton),
      h("div", { class: "key-cards" }, card("Group", this.summary), card("Workers", this.workers), card("Scaling", this.scaling)),
      h("section", { class: "panel" }, h("h2", {}, "Timeline"), h("p", { class: "muted" }, "The last events of this key, newest first (kept in the controller's memory)."), this.timeline),
      h("section", { class: "panel" }, h("h2", {}, "Recent dead letters"), this.deadLetters),
      h("section", { class: "panel" }, h("h2", {}, "Poison entries"), this.poison),
    );
  }

  // What /status is asked for: this key's group alone.
  statusQuery() {
    return { key: this.key, exact: "true", limit: 1 };
  }

  update() {
    const { status, timeline } = this.app.state;
    if (!status) return;
    const g = (status.groups || {})[this.key];
    const standby = status.role !== "leader";
    this.stopButton.disabled = standby || !g || !(g.state === "active" || g.state === "unbound");
    this.warmButton.disabled = standby;
    const now = status.time;
    if (!g) {
      replace(this.state, badge("no group", "none"));
      replace(this.summary, h("p", { class: "muted" }, "This key has no group now. Warm it to start one."));
      replace(this.workers, h("p", { class: "muted" }, "–"));
      replace(this.scaling, h("p", { class: "muted" }, "–"));
    } else {
      replace(this.state, stateBadges(g), h("span", { class: "muted" }, " since " + ago(g.since, now)));
      const extra = Object.entries(g).filter(([name]) => !KNOWN_GROUP.has(name));
      replace(
        this.summary,
        rows([
          ...GROUP_FIELDS.map(([name, read]) => [name, read(g)]),
          ["last activity", ago(g.last_activity, now)],
          g.failing_reason && ["failing", visible(g.failing_reason, { class: "text error" })],
          g.error && ["error", visible(g.error, { class: "text error" })],
          ...extra.map(([name, value]) => [visible(name), generic(value)]),
        ]),
      );
      replace(this.workers, workersTable(g.workers));
      replace(this.scaling, scalingRows(g.scaling));
    }
    if (timeline && timeline.key === this.key) {
      const events = [...timeline.events].reverse();
      replace(
        this.timeline,
        events.length
          ? events.map((e) =>
              h("li", { class: "event " + e.kind }, h("time", {}, clock(e.time)), h("span", { class: "kind" }, e.kind.replaceAll("_", " ")), visible(e.detail)),
            )
          : h("li", { class: "muted" }, "Nothing recorded for this key since this controller started."),
      );
      const letters = [...timeline.dead_letters].reverse();
      replace(
        this.deadLetters,
        letters.length
          ? h(
              "table",
              {},
              h("thead", {}, h("tr", {}, ["Time", "Reason", "Correlation id", "Deaths", "Answered"].map((c) => h("th", {}, c)))),
              h(
                "tbody",
                {},
                letters.map((d) =>
                  h("tr", {}, h("td", {}, clock(d.time)), h("td", {}, badge(d.reason, "reason")), h("td", { class: "mono" }, visible(d.correlation_id ?? "–")), h("td", { class: "num" }, number(d.deaths)), h("td", {}, d.answered ? "yes" : "no (no reply_to)")),
                ),
              ),
            )
          : h("p", { class: "muted" }, "No request of this key died lately."),
      );
    }
  }

  updatePoison(poison) {
    replace(this.poison, poisonTable(this.app, poison, false));
  }
}
