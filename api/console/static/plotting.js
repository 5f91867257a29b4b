// What the charts compute and draw beside uPlot: TensorBoard's smoothing, axis ranges that stay
// readable for one point or a flat line, short tick labels, and the checkpoint/warning markers.

/**
 * TensorBoard's debiased exponential moving average: weight `w` in [0, 1), 0 = the raw values.
 * Gaps (null) stay gaps and do not reset the average.
 */
export function ema(values, w) {
  if (!(w > 0)) return values.slice();
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || v === undefined) return null;
    last = last * w + (1 - w) * v;
    n++;
    return last / (1 - w ** n);
  });
}

/** A scale's range: a single value or a flat series gets room around it instead of a zero span. */
export function rangeOf(lo, hi) {
  if (lo === null || hi === null || !Number.isFinite(lo) || !Number.isFinite(hi)) return [0, 1];
  if (lo === hi) {
    const pad = Math.abs(lo) * 0.1 || 1;
    return [lo - pad, hi + pad];
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

/** Axis labels: short, no trailing zeros (uPlot's defaults print 0.8000). */
export function tick(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

export function drawMarkers(u, markers) {
  const { ctx } = u;
  const { left, top, width, height } = u.bbox;
  const dpr = devicePixelRatio || 1;
  ctx.save();
  ctx.font = `${10 * dpr}px system-ui, sans-serif`;
  ctx.textAlign = "left";  // uPlot leaves the axes' alignment set
  ctx.textBaseline = "alphabetic";
  let warnings = 0;
  for (const m of markers) {
    const row = m.kind === "checkpoint" ? 0 : 1 + (warnings++ % 2);  // stagger labels of close warnings
    const x = Math.round(u.valToPos(m.step, "x", true));
    if (!(x >= left && x <= left + width)) continue;
    const color = m.kind === "checkpoint" ? "#0f766e" : "#dc2626";
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = dpr;
    ctx.setLineDash(m.kind === "checkpoint" ? [4 * dpr, 3 * dpr] : []);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    const text = m.kind === "checkpoint" ? "◆" : `⚠ ${m.label}`;
    const flip = x + 3 * dpr + ctx.measureText(text).width > left + width;  // near the right edge: label on the left
    ctx.textAlign = flip ? "right" : "left";
    ctx.fillText(text, flip ? x - 3 * dpr : x + 3 * dpr, top + (11 + 12 * row) * dpr);
  }
  ctx.restore();
}
