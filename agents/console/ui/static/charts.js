// Charts: uPlot (vendored, static/vendor) for the series over time, small SVG bars for counts.

import uPlot from "./vendor/uPlot.esm.js";
import { h, PALETTE, score } from "./dom.js";

/**
 * A line chart kept in an element: update() gives it new data; it is rebuilt only when its
 * series change (a stage appearing), so the page does not flicker as events arrive.
 */
export class LineChart {
  constructor(el, { xLabel, yLabel, height = 220, format = score }) {
    this.el = el;
    this.format = format;
    this.xLabel = xLabel;
    this.yLabel = yLabel;
    this.height = height;
    this.plot = null;
    this.key = "";
    new ResizeObserver(() => this.resize()).observe(el);
  }

  width() {
    return Math.max(300, this.el.clientWidth - 4);
  }

  resize() {
    if (this.plot && Math.abs(this.plot.width - this.width()) > 2) {
      this.plot.setSize({ width: this.width(), height: this.height });
    }
  }

  /** xs: the x values; lines: [{label, values, color, dash, stepped, points}]. */
  update(xs, lines) {
    const key = lines.map((l) => `${l.label}|${l.color}|${l.dash || ""}`).join(";");
    const data = [xs, ...lines.map((l) => l.values.map((v) => (v === undefined ? null : v)))];
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      latestInLegend(this.plot);
      return;
    }
    if (this.plot) this.plot.destroy();
    this.key = key;
    const opts = {
      width: this.width(),
      height: this.height,
      scales: { x: { time: false } },
      axes: [
        { label: this.xLabel, size: 40 },
        { label: this.yLabel, size: 70, values: (u, splits) => splits.map((v) => shortNumber(v)) },
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      // With the cursor off the plot the legend shows each line's latest value, not blanks.
      hooks: { setLegend: [latestInLegend] },
      series: [
        { label: this.xLabel, value: (u, v) => (v === null ? "" : shortNumber(v)) },
        ...lines.map((l) => ({
          label: l.label,
          stroke: l.color,
          width: l.width ?? 1.5,
          dash: l.dash,
          spanGaps: false,
          // A series of points (validations, accepted minibatch scores) draws no line at all.
          paths: l.points ? () => null : l.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
          points: l.points ? { show: true, size: 7, fill: l.color } : { show: false },
          value: (u, v) => (v === null || v === undefined ? "" : this.format(v)),
        })),
      ],
    };
    this.plot = new uPlot(opts, data, this.el);
    latestInLegend(this.plot);
  }
}

/** When no point is hovered, put each series' latest value in the legend. */
function latestInLegend(u) {
  if (u.legend.idx !== null && u.legend.idx !== undefined) return;
  const xs = u.data[0];
  if (!xs || !xs.length) return;
  const idxs = u.data.map((values, i) => {
    if (i === 0) return xs.length - 1;
    for (let j = values.length - 1; j >= 0; j--) if (values[j] !== null && values[j] !== undefined) return j;
    return null;
  });
  u.setLegend({ idxs }, false);
  u.legend.idx = null; // still "nothing hovered": the next setData shows the latest again
}

function shortNumber(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 100 || Number.isInteger(v)) return String(Math.round(v * 10) / 10);
  return v.toPrecision(3);
}

/**
 * Grouped or stacked vertical bars as SVG: categories on x, one bar (or one segment) per
 * group. groups: [{label, values, color}].
 */
export function bars(categories, groups, { stacked = false, height = 160, yLabel = "" } = {}) {
  const width = Math.max(260, 60 + categories.length * (stacked ? 34 : 18 * groups.length + 16));
  const top = 10, bottom = 28, left = 44;
  const plotH = height - top - bottom;
  const totals = categories.map((_, i) =>
    stacked ? groups.reduce((s, g) => s + (g.values[i] || 0), 0)
      : Math.max(0, ...groups.map((g) => g.values[i] || 0)));
  const max = Math.max(1e-9, ...totals);
  const slot = (width - left - 8) / Math.max(1, categories.length);
  const svg = h("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  svg.append(h("line", { x1: left, y1: top + plotH, x2: width - 4, y2: top + plotH, stroke: "#999" }));
  svg.append(h("text", { x: 2, y: top + 8 }, shortNumber(max)));
  svg.append(h("text", { x: 2, y: top + plotH }, "0"));
  if (yLabel) svg.append(h("text", { x: 2, y: height - 2 }, yLabel));
  categories.forEach((category, i) => {
    const x0 = left + i * slot + 4;
    let base = top + plotH;
    groups.forEach((g, j) => {
      const v = g.values[i] || 0;
      const barH = (v / max) * plotH;
      const w = stacked ? slot - 8 : (slot - 8) / groups.length;
      const x = stacked ? x0 : x0 + j * w;
      const y = stacked ? base - barH : top + plotH - barH;
      if (stacked) base -= barH;
      svg.append(h("rect", { x, y, width: Math.max(1, w - 1), height: barH, fill: g.color },
        h("title", {}, `${category}: ${g.label} ${v}`)));
    });
    svg.append(h("text", { x: x0, y: top + plotH + 14 }, String(category)));
  });
  return svg;
}

/** A legend for bars: colour swatches and labels. */
export function legend(groups) {
  return h("div", { class: "note" }, groups.map((g) =>
    h("span", { style: "margin-right: 1em" },
      h("span", { class: "legend-swatch", style: `background: ${g.color}` }), g.label)));
}

export { PALETTE };
