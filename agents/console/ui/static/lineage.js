// The lineage tree, laid out as the offline report lays it out (report/series.py): accepted
// candidates filled, their ancestors that were not accepted hollow, the seed a square, the
// validated best a red star, each node sized by its score; the best's ancestry drawn in red;
// dashed edges go to second parents (crossover). It zooms (wheel, buttons) and pans (drag),
// and a double-click folds a node's subtree, so a run of hundreds of candidates stays legible.

import { h, score } from "./dom.js";

const DX = 40, DY = 56, PAD = 30, LABELS = 60, R_MIN = 3, R_MAX = 9;
const BEST = "#d62728", SEED = "#7f7f7f", NODE = "#1f77b4", EDGE = "#b0b0b0";

/** The tree in an element: update() redraws it and keeps the zoom and the folded nodes. */
export class LineageView {
  constructor(el, onPick) {
    this.el = el;
    this.onPick = onPick;
    this.folded = new Set();
    this.box = null; // the viewBox shown: null fits the whole tree
    this.size = null; // the whole tree's extent
    this.nodes = [];
    this.selected = null;
    this.svg = h("svg", { id: "lineage-svg", class: "lineage", preserveAspectRatio: "xMidYMid meet" });
    this.svg.addEventListener("wheel", (e) => { e.preventDefault(); this.zoom(e.deltaY < 0 ? 0.8 : 1.25, e); }, { passive: false });
    this.svg.addEventListener("pointerdown", (e) => this.drag(e));
    this.status = h("span", { class: "note", id: "lineage-status" }, "");
    const button = (label, title, onclick) => h("button", { type: "button", title, onclick }, label);
    el.replaceChildren(
      h("div", { class: "toolbar" },
        button("+", "zoom in", () => this.zoom(0.7)),
        button("−", "zoom out", () => this.zoom(1.4)),
        button("fit", "the whole tree", () => { this.box = null; this.applyBox(); }),
        button("best", "zoom to the best and its ancestors", () => this.zoomToBest()),
        button("unfold all", "show every folded subtree again", () => { this.folded.clear(); this.draw(); }),
        this.status),
      this.svg);
  }

  update(nodes, selected) {
    this.nodes = nodes;
    this.selected = selected;
    this.draw();
  }

  draw() {
    const nodes = this.nodes;
    if (!nodes.length) {
      this.svg.replaceChildren(h("text", { x: 10, y: 20 }, "No candidate yet."));
      this.svg.setAttribute("viewBox", "0 0 300 40");
      text(this.status, "");
      return;
    }
    const children = new Map();
    for (const n of nodes) if (n.parents.length) push(children, n.parents[0], n.id);
    const hidden = new Set();
    const hide = (id) => (children.get(id) || []).forEach((c) => { if (!hidden.has(c)) { hidden.add(c); hide(c); } });
    for (const id of this.folded) hide(id);
    const shown = nodes.filter((n) => !hidden.has(n.id));
    const minX = Math.min(...nodes.map((n) => n.x));
    const at = new Map(nodes.map((n) => [n.id, [PAD + (n.x - minX) * DX, PAD + n.depth * DY]]));
    const width = Math.max(...[...at.values()].map((p) => p[0])) + PAD;
    const height = Math.max(...[...at.values()].map((p) => p[1])) + PAD + 14;
    this.size = [0, 0, width, height];
    const scores = nodes.map((n) => n.score).filter((v) => v !== null);
    const lo = Math.min(...scores), hi = Math.max(...scores);
    const radius = (n) => (n.score === null || hi === lo ? (R_MIN + R_MAX) / 2 : R_MIN + ((n.score - lo) / (hi - lo)) * (R_MAX - R_MIN));
    const edges = h("g", {}), marks = h("g", {});
    const byId = new Map(nodes.map((n) => [n.id, n]));
    for (const node of shown) {
      node.parents.forEach((parent, i) => {
        const from = at.get(parent);
        if (!from || hidden.has(parent)) return;
        const [x2, y2] = at.get(node.id);
        const best = node.on_best_path && byId.get(parent)?.on_best_path;
        edges.append(h("line", { x1: from[0], y1: from[1], x2, y2, stroke: best ? BEST : EDGE,
          "stroke-width": best ? 2.5 : 1, "stroke-dasharray": i === 0 ? null : "4 3", class: best ? "best-path" : null }));
      });
    }
    const labelled = shown.length <= LABELS;
    for (const node of shown) {
      const [x, y] = at.get(node.id);
      const r = radius(node);
      const filled = node.accepted || node.best || node.seed;
      const color = node.best ? BEST : node.seed ? SEED : NODE;
      const mark = node.best ? h("polygon", { points: star(x, y, r + 5, (r + 5) / 2.2), fill: color, stroke: color })
        : node.seed ? h("rect", { x: x - r, y: y - r, width: 2 * r, height: 2 * r, fill: color, stroke: color })
          : h("circle", { cx: x, cy: y, r, fill: filled ? color : "#fff", stroke: node.on_best_path ? BEST : color, "stroke-width": 1.5 });
      const folded = this.folded.has(node.id);
      const group = h("g", {
        class: "node", "data-candidate": node.id,
        onclick: () => this.onPick(node.id),
        ondblclick: () => { if (folded) this.folded.delete(node.id); else if (children.has(node.id)) this.folded.add(node.id); this.draw(); },
      },
      h("title", {}, `${node.id} (${node.operator}): ${score(node.score)}` +
        (node.validation !== null ? `, validation ${score(node.validation)}` : "") +
        (children.has(node.id) ? (folded ? "; double-click to unfold" : "; double-click to fold its subtree") : "")),
      mark);
      if (node.id === this.selected) {
        group.append(h("circle", { cx: x, cy: y, r: r + 6, fill: "none", stroke: "#000", "stroke-dasharray": "2 2" }));
      }
      if (folded) {
        const under = countUnder(children, node.id);
        group.append(h("text", { x: x + r + 3, y: y + 4, class: "folded" }, `+${under}`));
      }
      if (labelled || node.best || node.seed || node.on_best_path) {
        group.append(h("text", { x, y: y + r + 11, "text-anchor": "middle" }, node.id));
      }
      marks.append(group);
    }
    this.svg.replaceChildren(edges, marks);
    text(this.status, `${shown.length} of ${nodes.length} nodes shown` +
      (this.folded.size ? `, ${this.folded.size} folded` : "") +
      " · wheel or buttons: zoom · drag: move · double-click: fold");
    this.applyBox();
  }

  applyBox() {
    const box = this.box || this.size;
    if (box) this.svg.setAttribute("viewBox", box.map((v) => v.toFixed(1)).join(" "));
  }

  /** Scale the view by ``factor`` around the pointer (or the centre). */
  zoom(factor, event) {
    const [x, y, w, hgt] = this.box || this.size || [0, 0, 1, 1];
    let fx = 0.5, fy = 0.5;
    if (event) {
      const rect = this.svg.getBoundingClientRect();
      fx = (event.clientX - rect.left) / rect.width;
      fy = (event.clientY - rect.top) / rect.height;
    }
    const nw = w * factor, nh = hgt * factor;
    this.box = [x + (w - nw) * fx, y + (hgt - nh) * fy, nw, nh];
    this.applyBox();
  }

  zoomToBest() {
    const path = this.nodes.filter((n) => n.on_best_path || n.best);
    if (!path.length || !this.size) return;
    const minX = Math.min(...this.nodes.map((n) => n.x));
    const xs = path.map((n) => PAD + (n.x - minX) * DX), ys = path.map((n) => PAD + n.depth * DY);
    const x0 = Math.min(...xs) - 2 * PAD, y0 = Math.min(...ys) - PAD;
    this.box = [x0, y0, Math.max(...xs) + 2 * PAD - x0, Math.max(...ys) + 2 * PAD - y0];
    this.applyBox();
  }

  drag(start) {
    if (start.button !== 0) return;
    const [x, y, w, hgt] = this.box || this.size || [0, 0, 1, 1];
    const rect = this.svg.getBoundingClientRect();
    const scale = Math.max(w / rect.width, hgt / rect.height);
    let moved = false;
    const move = (e) => {
      const dx = e.clientX - start.clientX, dy = e.clientY - start.clientY;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return; // a click, not a drag
      moved = true;
      this.box = [x - dx * scale, y - dy * scale, w, hgt];
      this.applyBox();
    };
    const up = () => { window.removeEventListener("pointermove", move); window.removeEventListener("pointerup", up); };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  }
}

function push(map, key, value) {
  if (!map.has(key)) map.set(key, []);
  map.get(key).push(value);
}

function countUnder(children, id) {
  let n = 0;
  const todo = [...(children.get(id) || [])];
  while (todo.length) {
    const c = todo.pop();
    n += 1;
    todo.push(...(children.get(c) || []));
  }
  return n;
}

function text(el, value) {
  if (el.textContent !== value) el.textContent = value;
}

function star(cx, cy, outer, inner) {
  const points = [];
  for (let i = 0; i < 10; i++) {
    const r = i % 2 ? inner : outer;
    const a = (Math.PI / 5) * i - Math.PI / 2;
    points.push(`${(cx + r * Math.cos(a)).toFixed(1)},${(cy + r * Math.sin(a)).toFixed(1)}`);
  }
  return points.join(" ");
}
