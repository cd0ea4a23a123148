"""What the page shows, computed from `TurnMetrics` records: pure functions, no Gradio."""

from __future__ import annotations

from html import escape

from app.metrics import FIGURES, LABELS, TurnMetrics, median

CARD = ("ttft_ms", "llm_turn_ms", "ms_per_token")
SERVER = ("server_ttft_ms", "server_itl_ms", "prefix_hit_tokens")
LABELS_ALL = {**LABELS, "server_ttft_ms": "server TTFT ms", "server_itl_ms": "server ms/token",
              "prefix_hit_tokens": "prefix-cache hit tokens"}


def fmt(value: float | int | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if isinstance(value, int) or abs(value) >= 100 else f"{value:.1f}"


def endpoints(rows: list[TurnMetrics]) -> list[str]:
    names = list(dict.fromkeys(r.endpoint for r in rows)) or ["primary"]
    return sorted(names, key=lambda n: (n != "primary", n))


def latest(rows: list[TurnMetrics], endpoint: str) -> TurnMetrics | None:
    mine = [r for r in rows if r.endpoint == endpoint]
    return mine[-1] if mine else None


def delta_pct(new: float | None, old: float | None) -> str:
    if new is None or old is None or old == 0:
        return "–"
    return f"{(new - old) / old * 100:+.0f} %"


def figures_html(rows: list[TurnMetrics]) -> str:
    """Live columns: each endpoint's latest turn, then the session medians."""
    names = endpoints(rows)
    last = {n: latest(rows, n) for n in names}
    head = "".join(f"<th>{escape(n)}<br><small>last turn</small></th>" for n in names)
    head += "".join(f"<th>{escape(n)}<br><small>median</small></th>" for n in names)
    lines = [f"<div class='va-figures'><table><tr><th>figure</th>{head}</tr>"]
    shown = list(FIGURES) + (list(SERVER) if any(r.server_ttft_ms for r in rows) else [])
    for name in shown:
        cells = "".join(
            f"<td class='num' data-endpoint='{n}' data-figure='{name}'>"
            f"{fmt(getattr(last[n], name) if last[n] else None)}</td>" for n in names)
        cells += "".join(f"<td class='num'>{fmt(median(_of(rows, n), name))}</td>"
                         for n in names)
        lines.append(f"<tr><td>{LABELS_ALL[name]}</td>{cells}</tr>")
    span = 2 * len(names)
    primary = last.get("primary")
    if primary is not None:
        lines.append(f"<tr><td>end of turn by</td><td colspan='{span}' class='va-eot'>"
                     f"{escape(primary.eot_signal or '–')}</td></tr>")
        lines.append(f"<tr><td>TTS engine</td><td colspan='{span}'>"
                     f"{escape(primary.tts_engine or '–')}</td></tr>")
    for n in names:
        row = last[n]
        if row is not None and row.error:
            lines.append(f"<tr><td>{escape(n)} error ({row.error_stage})</td>"
                         f"<td colspan='{span}' class='va-error'>{escape(row.error)}</td></tr>")
    lines.append("</table></div>")
    return "".join(lines)


def _of(rows: list[TurnMetrics], endpoint: str) -> list[TurnMetrics]:
    return [r for r in rows if r.endpoint == endpoint]


def medians_markdown(rows: list[TurnMetrics]) -> str:
    """The model card's form: TTFT / turn / ms·tok medians per endpoint, and the difference."""
    names = endpoints(rows)
    lines = ["| endpoint | model | TTFT / turn / ms·tok (medians) | turns |", "|---|---|---|---|"]
    meds = {}
    for n in names:
        mine = [r for r in _of(rows, n) if not r.error and not r.cancelled]
        meds[n] = [median(mine, f) for f in CARD]
        model = mine[-1].model if mine else ""
        lines.append(f"| {n} | {model} | {' / '.join(fmt(v) for v in meds[n])} | {len(mine)} |")
    if "primary" in meds and "anchor" in meds:
        diffs = " / ".join(delta_pct(p, a) for p, a in zip(meds["primary"], meds["anchor"],
                                                             strict=True))
        lines.append(f"| primary vs anchor | | {diffs} | |")
    return "\n".join(lines)


def turns_table(rows: list[TurnMetrics]) -> list[list]:
    return [[r.turn_id, r.endpoint, r.order or r.source] + [getattr(r, f) for f in FIGURES]
            + [r.server_ttft_ms, r.eot_signal, r.tts_engine,
               r.error_stage or (f"went on in {r.continued_in}" if r.continued_in
                                 else "cut" if r.cancelled
                                 else "reply budget" if r.budget_ended else "")]
            for r in rows]


TABLE_HEADERS = ["turn", "endpoint", "order"] + [LABELS[f] for f in FIGURES] \
    + ["server TTFT ms", "end of turn by", "TTS engine", "note"]


def pictures(rows: list[TurnMetrics]) -> list[str]:
    """The page's SVGs: TTFT, ms/token and voice-to-voice per turn, the last turn's and the
    session's waterfall, and the A/B medians."""
    from app.web.plots import ab_bars, line_chart, per_turn, waterfall

    v2v = {"voice-to-voice": per_turn([r for r in rows if r.endpoint == "primary"],
                                      "v2v_ms").get("primary", [])}
    primary = [r for r in rows if r.endpoint == "primary" and not r.cancelled]
    last = primary[-1] if primary else None
    anchor = next((r for r in reversed(rows) if r.endpoint == "anchor" and last is not None
                   and r.turn_id == last.turn_id), None)
    meds = {n: {label: median([r for r in _of(rows, n) if not r.cancelled], f)
                for f, label in zip(CARD, ("TTFT ms", "LLM turn ms", "ms/token"), strict=True)}
            for n in endpoints(rows) if n in ("primary", "anchor")}
    return [line_chart(per_turn(rows, "ttft_ms"), "TTFT per turn", "ms"),
            line_chart(per_turn(rows, "ms_per_token"), "ms/token per turn", "ms"),
            line_chart(v2v, "voice-to-voice per turn", "ms"),
            waterfall(last, anchor, primary), ab_bars(meds)]
