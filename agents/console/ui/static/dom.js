// Small DOM and formatting helpers. Text from the campaign (ids, reasons, sources, diffs) is
// only ever set as text, never as HTML.

export const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/** An element with attributes (on* names take a listener) and children (strings become text). */
export function h(tag, attrs = {}, ...children) {
  const svg = ["svg", "g", "line", "circle", "rect", "polygon", "text", "title", "path"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A score as `evobus` prints it: one decimal from 10 on, six below; "n/a" for none. */
export function score(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "n/a";
  return Math.abs(value) >= 10 ? value.toFixed(1) : value.toFixed(6);
}

/** A count with thousands separated. */
export function count(value) {
  return value === null || value === undefined ? "n/a" : Number(value).toLocaleString("en-US");
}

/** A budget left: "no limit" for -1. */
export function left(value, unit = "") {
  if (value === null || value === undefined) return "n/a";
  if (value < 0) return "no limit";
  return unit === "s" ? seconds(value) : count(Math.round(value));
}

/** Seconds for people: 42 s, 3 min 5 s, 1 h 2 min. */
export function seconds(value) {
  if (value === null || value === undefined) return "n/a";
  const s = Math.round(value);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** A clock time from epoch seconds. */
export function clock(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString("en-GB") : "n/a";
}

/** Replace the children of the element with this id (created by the layout). */
export function fill(id, ...children) {
  const el = document.getElementById(id);
  if (el) el.replaceChildren(...children.flat());
  return el;
}

/** Set the text of the element with this id, if it changed. */
export function text(id, value) {
  const el = document.getElementById(id);
  if (el && el.textContent !== String(value)) el.textContent = String(value);
}

/** A table from a header and rows of cells; numeric columns are right-aligned. */
export function table(head, rows, { numeric = [], onRow = null, selected = null } = {}) {
  return h("table", {},
    h("thead", {}, h("tr", {}, head.map((t, i) => h("th", { class: numeric.includes(i) ? "num" : null }, t)))),
    h("tbody", {}, rows.map((cells, r) => h("tr", {
      class: [onRow ? "clickable" : "", selected !== null && selected(r) ? "selected" : ""].join(" ").trim() || null,
      onclick: onRow ? () => onRow(r) : null,
    }, cells.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c))))));
}
