// The lineage tree, as the offline report draws it (report/series.py lays it out): accepted
// candidates filled, their ancestors that were not accepted hollow, the seed a square, the
// validated best a red star; dashed edges go to second parents (crossover).

import { h, score } from "./dom.js";

const DX = 78, DY = 62, PAD = 40, LABELS = 60;

/** The tree as SVG; clicking a node calls onPick(candidate id). */
export function lineageTree(nodes, onPick, selected) {
  if (!nodes.length) return h("p", { class: "note" }, "No candidate yet.");
  const xs = nodes.map((n) => n.x);
  const minX = Math.min(...xs), maxX = Math.max(...xs);
  const rows = Math.max(...nodes.map((n) => n.depth)) + 1;
  const width = (maxX - minX) * DX + 2 * PAD + 40;
  const height = (rows - 1) * DY + 2 * PAD + 20;
  const at = new Map(nodes.map((n) => [n.id, [PAD + 20 + (n.x - minX) * DX, PAD + n.depth * DY]]));
  const svg = h("svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "lineage-svg" });
  for (const node of nodes) {
    node.parents.forEach((parent, i) => {
      const [x1, y1] = at.get(parent) || [];
      const [x2, y2] = at.get(node.id);
      if (x1 === undefined) return;
      svg.append(h("line", { x1, y1, x2, y2, stroke: "#999", "stroke-width": 1,
        "stroke-dasharray": i === 0 ? null : "4 3" }));
    });
  }
  const labelled = nodes.length <= LABELS;
  for (const node of nodes) {
    const [x, y] = at.get(node.id);
    const filled = node.accepted || node.best || node.seed;
    const color = node.best ? "#d62728" : node.seed ? "#7f7f7f" : "#1f77b4";
    let mark;
    if (node.best) {
      mark = h("polygon", { points: star(x, y, 11, 5), fill: color, stroke: color });
    } else if (node.seed) {
      mark = h("rect", { x: x - 6, y: y - 6, width: 12, height: 12, fill: color, stroke: color });
    } else {
      mark = h("circle", { cx: x, cy: y, r: 6, fill: filled ? color : "#fff", stroke: color, "stroke-width": 1.5 });
    }
    const group = h("g", { class: "node", "data-candidate": node.id, onclick: () => onPick(node.id) },
      h("title", {}, `${node.id} (${node.operator}): ${score(node.score)}` +
        (node.validation !== null ? `, validation ${score(node.validation)}` : "")),
      mark);
    if (node.id === selected) {
      group.append(h("circle", { cx: x, cy: y, r: 13, fill: "none", stroke: "#000", "stroke-dasharray": "2 2" }));
    }
    if (labelled || node.best || node.seed) {
      group.append(h("text", { x, y: y + 20, "text-anchor": "middle" }, node.id));
      group.append(h("text", { x, y: y + 31, "text-anchor": "middle" },
        score(node.score) + (node.validation !== null ? ` v ${score(node.validation)}` : "")));
    }
    svg.append(group);
  }
  return svg;
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
