// Building the page's nodes. Data never goes through innerHTML: text is set as textContent
// (or as attribute values through setAttribute), so a key like <script> stays text.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function apply(node, props) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.setAttribute("class", value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  return node;
}

// h("td", {class: "num"}, "text", childNode...): an HTML element.
export function h(tag, props, ...children) {
  return append(apply(document.createElement(tag), props), children);
}

// s("rect", {x: 1, ...}): an SVG element.
export function s(tag, props, ...children) {
  return append(apply(document.createElementNS(SVG_NS, tag), props), children);
}

export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

// Control characters (C0, DEL, C1) and the format characters that reorder text (bidi) are
// shown as escapes, as the controller's logs write them: a key cannot hide or reverse text.
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function escapeText(text) {
  return String(text).replace(INVISIBLE, (c) => escapeOf(c));
}

function escapeOf(c) {
  const code = c.charCodeAt(0);
  return code < 0x100
    ? "\\x" + code.toString(16).padStart(2, "0")
    : "\\u" + code.toString(16).padStart(4, "0");
}

// A span showing `text` with its invisible characters as visible, marked escapes.
export function visible(text, props) {
  const node = h("span", props || { class: "text" });
  const value = String(text ?? "");
  let last = 0;
  for (const match of value.matchAll(INVISIBLE)) {
    node.append(value.slice(last, match.index));
    node.append(h("span", { class: "esc", title: "invisible character" }, escapeOf(match[0])));
    last = match.index + match[0].length;
  }
  node.append(value.slice(last));
  return node;
}

export function ago(epoch, now) {
  if (epoch === null || epoch === undefined) return "–";
  return duration(Math.max(0, now - epoch)) + " ago";
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return Math.round(seconds * 1000) + " ms";
  if (seconds < 60) return (seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)) + " s";
  if (seconds < 3600) {
    const rest = Math.round(seconds % 60);
    return Math.floor(seconds / 60) + "m" + (rest ? " " + rest + "s" : "");
  }
  if (seconds < 86400) return Math.floor(seconds / 3600) + "h " + Math.floor((seconds % 3600) / 60) + "m";
  return Math.floor(seconds / 86400) + "d " + Math.floor((seconds % 86400) / 3600) + "h";
}

export function number(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? value.toLocaleString("en") : value.toLocaleString("en", { maximumFractionDigits: 2 });
}

export function clock(epoch) {
  if (epoch === null || epoch === undefined) return "–";
  return new Date(epoch * 1000).toLocaleTimeString("en-GB");
}
