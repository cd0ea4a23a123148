"""The page's pictures, drawn on the server as SVG from `TurnMetrics` records: pure
functions, no plotting library, so what the browser draws is exactly this markup (the
browser test counts its marks).

- `line_chart`: one figure per turn, a coloured line and dots per endpoint, a legend; a
  failed turn is a gap in its line.
- `waterfall`: where a turn's time went, one bar per stage on a common axis that starts at
  the user's last voiced frame; the anchor's LLM bars beside the primary's.
- `ab_bars`: the session's medians of both endpoints, paired, with the difference.
"""

from __future__ import annotations

import statistics
from html import escape

from app.metrics import TurnMetrics

COLORS = {"primary": "#d62728", "anchor": "#1f77b4", "voice-to-voice": "#2ca02c"}
FONT = "font-family='sans-serif' font-size='11'"
# (label, start event, end event) on the turn's timeline; "0" is the last voiced frame
BARS = [
    ("end-of-turn wait", "0", "committed"),
    ("pause seen", "0", "start"),
    ("ASR", "asr_start", "asr_end"),
    ("end-of-turn verdict", "asr_end", "judged"),
    ("TTFT", "llm_sent", "first_token"),
    ("first piece tokens", "first_token", "first_piece"),
    ("TTS first audio", "first_piece", "first_audio"),
    ("audio held", "first_audio", "first_sent"),  # for the commit, the voice or the mic
    ("transport", "first_sent", "received"),
    ("playback start", "received", "audible"),
]
BAR_COLORS = ["#999999", "#c7c7c7", "#9467bd", "#bcbd22", "#d62728", "#ff7f0e", "#2ca02c",
              "#e377c2", "#17becf", "#8c564b"]


def _nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 x 10^n at or above `value` (1,100 -> 2,000)."""
    for power in range(0, 7):
        for step in (1, 2, 5):
            top = step * 10 ** power
            if top >= value:
                return float(top)
    return value


def line_chart(series: dict[str, list[tuple[int, float | None]]], title: str, unit: str,
               width: int = 460, height: int = 190) -> str:
    """`series`: name -> [(turn, value or None)]. Dots for values, lines between
    consecutive values, nothing across a None (a failed turn)."""
    left, right, top, bottom = 46, 12, 24, 34
    pw, ph = width - left - right, height - top - bottom
    values = [v for pts in series.values() for _, v in pts if v is not None]
    turns = [t for pts in series.values() for t, _ in pts]
    y_max = _nice_max(max(values) * 1.1) if values else 1.0
    t_min, t_max = (min(turns), max(turns)) if turns else (1, 2)
    span = max(1, t_max - t_min)

    def x(t: float) -> float:
        return left + (t - t_min) / span * pw if span else left + pw / 2

    def y(v: float) -> float:
        return top + ph - v / y_max * ph

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='100%' "
           f"viewBox='0 0 {width} {height}' role='img' aria-label='{escape(title)}'>",
           f"<text x='{left}' y='14' {FONT} font-weight='bold'>{escape(title)}</text>"]
    for i in range(5):  # horizontal grid with values
        v = y_max * i / 4
        out.append(f"<line x1='{left}' x2='{left + pw}' y1='{y(v):.1f}' y2='{y(v):.1f}' "
                   "stroke='#ddd'/>")
        out.append(f"<text x='{left - 4}' y='{y(v) + 4:.1f}' {FONT} text-anchor='end'>"
                   f"{v:,.0f}</text>")
    for t in sorted(set(turns)):
        out.append(f"<text x='{x(t):.1f}' y='{top + ph + 14}' {FONT} text-anchor='middle'>"
                   f"{t}</text>")
    out.append(f"<text x='{left + pw / 2}' y='{height - 4}' {FONT} text-anchor='middle'>"
               f"turn</text>")
    out.append(f"<text x='10' y='{top + ph / 2}' {FONT} text-anchor='middle' "
               f"transform='rotate(-90 10 {top + ph / 2})'>{escape(unit)}</text>")
    legend_x = left + pw
    for name, pts in series.items():
        color = COLORS.get(name, "#555")
        run: list[tuple[float, float]] = []
        runs = []
        for t, v in sorted(pts):
            if v is None:
                runs.append(run)
                run = []
            else:
                run.append((x(t), y(v)))
        runs.append(run)
        for r in runs:
            if len(r) > 1:
                d = " ".join(f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}"
                             for i, (px, py) in enumerate(r))
                out.append(f"<path class='va-line' data-series='{name}' d='{d}' fill='none' "
                           f"stroke='{color}' stroke-width='2'/>")
        for t, v in pts:
            if v is not None:
                out.append(f"<circle class='va-mark' data-series='{name}' data-turn='{t}' "
                           f"cx='{x(t):.1f}' cy='{y(v):.1f}' r='3.5' fill='{color}'>"
                           f"<title>{escape(name)} turn {t}: {v:,.1f} {escape(unit)}</title>"
                           "</circle>")
        if pts:  # legend, right-aligned in the title row
            label = escape(name)
            legend_x -= 8 + 7 * len(name)
            out.append(f"<rect class='va-legend' data-series='{name}' x='{legend_x}' y='6' "
                       f"width='10' height='10' fill='{color}'/>")
            out.append(f"<text x='{legend_x + 13}' y='15' {FONT}>{label}</text>")
            legend_x -= 14
    if not values:
        out.append(f"<text x='{left + pw / 2}' y='{top + ph / 2}' {FONT} "
                   "text-anchor='middle' fill='#888'>no turns yet</text>")
    out.append("</svg>")
    return "".join(out)


def per_turn(rows: list[TurnMetrics], figure: str) -> dict[str, list[tuple[int, float | None]]]:
    """Series for `line_chart`: each endpoint's value per turn (None for a failed turn)."""
    out: dict[str, list[tuple[int, float | None]]] = {}
    for r in rows:
        if r.cancelled and getattr(r, figure) is None:
            continue
        out.setdefault(r.endpoint, []).append(
            (r.turn_id, None if r.error else getattr(r, figure)))
    return out


def _bars_of(line: dict[str, float]) -> list[tuple[str, float, float, str]]:
    bars = []
    for (label, a, b), color in zip(BARS, BAR_COLORS, strict=True):
        start = 0.0 if a == "0" else line.get(a)
        end = line.get(b)
        if start is not None and end is not None and end >= start:
            bars.append((label, start, end, color))
    return bars


def waterfall(last: TurnMetrics | None, anchor: TurnMetrics | None,
              session: list[TurnMetrics], width: int = 460) -> str:
    """Where the last turn's time went, and the session's medians, stage by stage."""
    blocks: list[tuple[str, list[tuple[str, float, float, str]]]] = []
    if last is not None and last.timeline:
        bars = _bars_of(last.timeline)
        if anchor is not None and anchor.ttft_ms is not None and "llm_sent" in last.timeline:
            sent = last.timeline["llm_sent"]
            after_ttft = next((i + 1 for i, b in enumerate(bars) if b[0] == "TTFT"), len(bars))
            bars.insert(after_ttft, ("anchor TTFT", sent, sent + anchor.ttft_ms, COLORS["anchor"]))
        blocks.append((f"turn {last.turn_id}", bars))
    lines = [r.timeline for r in session if r.timeline and not r.error]
    if len(lines) >= 2:
        keys = {k for line in lines for k in line}
        med = {k: statistics.median(line[k] for line in lines if k in line) for k in keys}
        blocks.append((f"median of {len(lines)} turns", _bars_of(med)))
    row_h, left, right = 15, 120, 58
    height = 22 + sum(18 + row_h * len(b) for _, b in blocks) + 18
    ends = [b[2] for _, bars in blocks for b in bars] or [1.0]
    x_max = _nice_max(max(ends))
    pw = width - left - right

    def x(ms: float) -> float:
        return left + ms / x_max * pw

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='100%' "
           f"viewBox='0 0 {width} {height}' role='img' aria-label='where the time went'>",
           f"<text x='4' y='14' {FONT} font-weight='bold'>Where the time went (ms after the "
           "last voiced frame)</text>"]
    yy = 22
    for title, bars in blocks:
        out.append(f"<text x='4' y='{yy + 12}' {FONT} font-style='italic'>{escape(title)}"
                   "</text>")
        yy += 18
        for label, start, end, color in bars:
            out.append(f"<text x='{left - 4}' y='{yy + 10}' {FONT} text-anchor='end'>"
                       f"{escape(label)}</text>")
            w = max(1.5, x(end) - x(start))
            out.append(f"<rect class='va-stage' data-stage='{escape(label)}' "
                       f"data-block='{escape(title)}' x='{x(start):.1f}' y='{yy + 2}' "
                       f"width='{w:.1f}' height='{row_h - 4}' fill='{color}'>"
                       f"<title>{escape(label)}: {start:,.0f} -> {end:,.0f} ms</title></rect>")
            out.append(f"<text class='va-stage-ms' x='{x(start) + w + 3:.1f}' y='{yy + 10}' "
                       f"{FONT}>{end - start:,.0f}</text>")
            yy += row_h
    if not blocks:
        out.append(f"<text x='{left}' y='{yy + 12}' {FONT} fill='#888'>speak a turn to see "
                   "its stages</text>")
    for i in range(5):
        v = x_max * i / 4
        out.append(f"<text x='{x(v):.1f}' y='{height - 4}' {FONT} text-anchor='middle'>"
                   f"{v:,.0f}</text>")
        out.append(f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='22' y2='{height - 16}' "
                   "stroke='#eee'/>")
    out.append("</svg>")
    return "".join(out)


def ab_bars(medians: dict[str, dict[str, float | None]], width: int = 460) -> str:
    """`medians`: endpoint -> {label: median ms}. Paired bars per figure, with the change."""
    names = [n for n in ("primary", "anchor") if n in medians]
    labels = list(next(iter(medians.values()), {}))
    row_h, left, right = 16, 80, 120
    height = 22 + len(labels) * (len(names) * row_h + 8) + 4
    pw = width - left - right
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='100%' "
           f"viewBox='0 0 {width} {height}' role='img' aria-label='A/B medians'>",
           f"<text x='4' y='14' {FONT} font-weight='bold'>A/B: session medians</text>"]
    yy = 22
    for label in labels:
        vals = [medians[n].get(label) for n in names]
        top = max([v for v in vals if v is not None] or [1.0])
        out.append(f"<text x='{left - 4}' y='{yy + 11}' {FONT} text-anchor='end'>"
                   f"{escape(label)}</text>")
        for n, v in zip(names, vals, strict=True):
            if v is not None:
                w = max(1.5, v / top * pw)
                out.append(f"<rect class='va-ab' data-series='{n}' data-figure='{escape(label)}' "
                           f"x='{left}' y='{yy + 2}' width='{w:.1f}' height='{row_h - 4}' "
                           f"fill='{COLORS[n]}'><title>{n}: {v:,.1f}</title></rect>")
                out.append(f"<text x='{left + w + 3:.1f}' y='{yy + 11}' {FONT}>{n} "
                           f"{v:,.1f}</text>")
            yy += row_h
        p, a = (vals + [None, None])[:2]
        if p is not None and a is not None and a:
            out.append(f"<text x='{width - 4}' y='{yy - row_h + 3}' {FONT} text-anchor='end' "
                       f"font-weight='bold'>{(p - a) / a * 100:+.0f} %</text>")
        yy += 8
    out.append("</svg>")
    return "".join(out)
