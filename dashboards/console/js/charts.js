// Time-series charts on uPlot (vendored), with vertical markers for actions.

const COLORS = ["#58a6ff", "#d29922", "#3fb950", "#f85149", "#bc8cff", "#39c5cf"];

/// A line chart. `times` in ms, `series` = [{label, values, color?}], `markers` = [{ts_ms, label,
/// color}] drawn as vertical lines. Returns the uPlot instance (destroy() it when leaving).
export function lineChart(el, { times, series, markers = [], height = 220, yLabel = "" }) {
  el.replaceChildren();
  const width = Math.max(320, el.clientWidth || 600);
  const opts = {
    width,
    height,
    scales: { x: { time: true } },
    axes: [
      { stroke: "#8a99a8", grid: { stroke: "#2b3642" } },
      { stroke: "#8a99a8", grid: { stroke: "#2b3642" }, label: yLabel, size: 60 },
    ],
    series: [
      {},
      ...series.map((s, i) => ({ label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5, points: { show: false } })),
    ],
    hooks: {
      draw: [
        (u) => {
          const ctx = u.ctx;
          ctx.save();
          for (const m of markers) {
            const x = u.valToPos(m.ts_ms / 1000, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = m.color || "#d29922";
            ctx.setLineDash([4, 3]);
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.fillStyle = m.color || "#d29922";
            ctx.font = `${11 * devicePixelRatio}px sans-serif`;
            ctx.fillText(m.label, x + 3, u.bbox.top + 12 * devicePixelRatio);
          }
          ctx.restore();
        },
      ],
    },
  };
  const data = [times.map((t) => t / 1000), ...series.map((s) => s.values)];
  // eslint-disable-next-line no-undef
  return new uPlot(opts, data, el);
}

/// Colour of a heat value in [0, 1]: dark blue → teal → yellow → white.
export function heatColor(x) {
  const stops = [
    [0, [13, 17, 23]],
    [0.25, [22, 60, 110]],
    [0.5, [20, 140, 140]],
    [0.75, [220, 190, 40]],
    [1, [255, 255, 255]],
  ];
  const v = Math.max(0, Math.min(1, x));
  for (let i = 1; i < stops.length; i++) {
    if (v <= stops[i][0]) {
      const [a, ca] = stops[i - 1];
      const [b, cb] = stops[i];
      const f = (v - a) / (b - a);
      return ca.map((c, j) => Math.round(c + (cb[j] - c) * f));
    }
  }
  return stops[stops.length - 1][1];
}

export const MARKER_COLORS = { split: "#f0f6fc", move: "#d29922", merge: "#bc8cff", group: "#f85149", reshard: "#39c5cf" };
