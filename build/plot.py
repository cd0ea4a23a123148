"""A PNG strip chart of per-request latency, drawn with Pillow (already in the app's
environment through gradio): one column per endpoint, one dot per request."""

from __future__ import annotations

from pathlib import Path

COLORS = [(214, 39, 40), (31, 119, 180), (44, 160, 44), (255, 127, 14)]


def strip_chart(result: dict, path: Path, figures=("ttft_ms", "ms_per_token")) -> Path:
    from PIL import Image, ImageDraw

    names = [e["name"] for e in result["endpoints"]]
    panel_w, h, margin = 360, 320, 50
    img = Image.new("RGB", (panel_w * len(figures), h), "white")
    draw = ImageDraw.Draw(img)
    for f_i, figure in enumerate(figures):
        x0 = f_i * panel_w
        values = {n: [r[figure] for r in result["requests"] if r["endpoint"] == n
                      and r["streams"] == 1 and r[figure] is not None] for n in names}
        top = max([max(v) for v in values.values() if v] + [1.0]) * 1.1
        draw.text((x0 + margin, 8), f"{figure} per request (ms)", fill="black")
        draw.line([(x0 + margin, 30), (x0 + margin, h - margin)], fill="black")
        draw.line([(x0 + margin, h - margin), (x0 + panel_w - 10, h - margin)], fill="black")
        for tick in range(5):
            v = top * tick / 4
            y = h - margin - (h - margin - 30) * tick / 4
            draw.text((x0 + 4, y - 6), f"{v:.0f}", fill="gray")
        col_w = (panel_w - margin - 20) / max(1, len(names))
        for n_i, name in enumerate(names):
            cx = x0 + margin + col_w * (n_i + 0.5)
            color = COLORS[n_i % len(COLORS)]
            for k, v in enumerate(values[name]):
                y = h - margin - (h - margin - 30) * v / top
                dx = ((k * 7) % 21 - 10) * col_w / 60  # jitter so dots do not hide each other
                draw.ellipse([cx + dx - 3, y - 3, cx + dx + 3, y + 3], fill=color)
            if values[name]:
                med = sorted(values[name])[len(values[name]) // 2]
                y = h - margin - (h - margin - 30) * med / top
                draw.line([(cx - col_w / 3, y), (cx + col_w / 3, y)], fill="black", width=2)
            draw.text((cx - col_w / 3, h - margin + 8), name, fill=color)
    img.save(path)
    return path
