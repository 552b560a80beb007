// Two small charts drawn as SVG by hand (no library, nothing fetched): the cold-start
// histogram and the split of requests between the fast path and orphans over time.

import { duration, h, number, s } from "./dom.js";

const W = 560;
const H = 170;
const PAD = { left: 44, right: 10, top: 12, bottom: 30 };

function frame(label) {
  return s("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "chart",
    role: "img",
    "aria-label": label,
    preserveAspectRatio: "xMidYMid meet",
  });
}

function yAxis(svg, max, format) {
  const plotH = H - PAD.top - PAD.bottom;
  for (const f of [0, 0.5, 1]) {
    const y = PAD.top + plotH * (1 - f);
    svg.append(s("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: "grid" }));
    svg.append(s("text", { x: PAD.left - 6, y: y + 4, class: "tick end" }, format(max * f)));
  }
}

function boundLabel(le) {
  return le === null ? "more" : "≤" + duration(le);
}

// buckets: [[upper bound in seconds or null for +Inf, cumulative count], ...]
export function coldStartHistogram(histogram) {
  const buckets = (histogram && histogram.buckets) || [];
  const counts = buckets.map(([le, cumulative], i) => ({
    le,
    count: cumulative - (i ? buckets[i - 1][1] : 0),
  }));
  const used = counts.map((b, i) => (b.count > 0 ? i : -1)).filter((i) => i >= 0);
  if (!used.length) return h("p", { class: "empty" }, "No cold start measured yet.");
  const first = Math.max(0, used[0] - 1);
  const last = Math.min(counts.length - 1, used[used.length - 1] + 1);
  const shown = counts.slice(first, last + 1);
  const max = Math.max(...shown.map((b) => b.count), 1);
  const svg = frame("cold starts by duration");
  yAxis(svg, max, (v) => number(Math.round(v)));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const step = plotW / shown.length;
  shown.forEach((b, i) => {
    const height = (b.count / max) * plotH;
    const x = PAD.left + i * step;
    svg.append(
      s(
        "rect",
        { x: x + step * 0.12, y: PAD.top + plotH - height, width: step * 0.76, height, class: "bar cold" },
        s("title", {}, `${boundLabel(b.le)}: ${number(b.count)} cold start(s)`),
      ),
    );
    svg.append(s("text", { x: x + step / 2, y: H - PAD.bottom + 16, class: "tick middle" }, boundLabel(b.le)));
  });
  const mean = histogram.count ? histogram.sum / histogram.count : null;
  return h(
    "figure",
    {},
    svg,
    h("figcaption", {}, `${number(histogram.count)} cold start(s), mean ${duration(mean)}`),
  );
}

// samples: [[epoch, cumulative fast, cumulative orphan], ...] every `interval` seconds.
export function routedOverTime(routed, now) {
  const samples = (routed && routed.samples) || [];
  if (samples.length < 2) return h("p", { class: "empty" }, "Collecting: the first samples come within a few seconds.");
  const steps = [];
  for (let i = 1; i < samples.length; i++) {
    const [t0, f0, o0] = samples[i - 1];
    const [t1, f1, o1] = samples[i];
    steps.push({ t0, t1, fast: Math.max(0, f1 - f0), orphan: Math.max(0, o1 - o0) });
  }
  // At most 60 bars: neighbouring intervals are added together.
  const per = Math.ceil(steps.length / 60);
  const bars = [];
  for (let i = 0; i < steps.length; i += per) {
    const group = steps.slice(i, i + per);
    const span = group[group.length - 1].t1 - group[0].t0 || 1;
    const fast = group.reduce((a, g) => a + g.fast, 0);
    const orphan = group.reduce((a, g) => a + g.orphan, 0);
    bars.push({ t: group[group.length - 1].t1, fast: fast / span, orphan: orphan / span, n: fast + orphan });
  }
  const max = Math.max(...bars.map((b) => b.fast + b.orphan), 0.1);
  const svg = frame("requests per second, fast path and orphans");
  yAxis(svg, max, (v) => (v >= 10 ? Math.round(v) : v.toFixed(1)) + "/s");
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const step = plotW / 60;
  const offset = plotW - bars.length * step;
  bars.forEach((b, i) => {
    const x = PAD.left + offset + i * step;
    const fastH = (b.fast / max) * plotH;
    const orphanH = (b.orphan / max) * plotH;
    const tip = `${duration(now - b.t)} ago: ${b.fast.toFixed(2)}/s fast path, ${b.orphan.toFixed(2)}/s orphans`;
    svg.append(
      s("rect", { x: x + 1, y: PAD.top + plotH - fastH, width: step - 2, height: fastH, class: "bar fast" }, s("title", {}, tip)),
    );
    svg.append(
      s(
        "rect",
        { x: x + 1, y: PAD.top + plotH - fastH - orphanH, width: step - 2, height: orphanH, class: "bar orphan" },
        s("title", {}, tip),
      ),
    );
  });
  const oldest = samples[0][0];
  const span = 60 * per * (routed.interval || 5);
  svg.append(s("text", { x: PAD.left, y: H - PAD.bottom + 16, class: "tick start" }, duration(span) + " ago"));
  svg.append(s("text", { x: W - PAD.right, y: H - PAD.bottom + 16, class: "tick end" }, "now"));
  const total = bars.reduce((a, b) => a + b.n, 0);
  const orphans = steps.reduce((a, g) => a + g.orphan, 0);
  return h(
    "figure",
    {},
    svg,
    h(
      "figcaption",
      {},
      h("span", { class: "swatch fast" }),
      " fast path ",
      h("span", { class: "swatch orphan" }),
      " orphans (cold keys)",
      total ? ` · ${Math.round((100 * orphans) / total)}% orphans over ${duration(now - oldest)}` : "",
    ),
  );
}
