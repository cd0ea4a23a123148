"""Where a vLLM server's time goes while a command runs: its own /metrics, sampled.

    python -m bench.vllm_metrics --url http://127.0.0.1:8000 --out DIR -- CMD ARGS...
    python -m bench.vllm_metrics --summarize DIR/vllm_metrics.json   # the table again

Reads /metrics every `--interval` s while CMD runs (a `bench.capacity` sweep, say), and
nvidia-smi's utilisation beside it. The run is cut into windows of activity (requests
running or waiting, apart by `--gap` idle seconds: each capacity point is one), and for
each window and for the whole run it writes, from the counters' and histograms' deltas:
requests by finish reason (aborts are the app's dropped speculative starts), prompt and
generated tokens, prefix-cache hits over queries, preemptions; engine steps
(`vllm:iteration_tokens_total`'s count) and their tokens, in the histogram's buckets
(prefill chunks beside decodes; a step over the largest CUDA graph runs without one);
p50/p90/mean of TTFT, queue time, prefill time, decode time, inter-token latency (one
decode step at this batch) and end-to-end; from the samples, requests running and waiting
(mean, max), KV-cache use and GPU utilisation. DIR/vllm_samples.json.gz keeps every
sample, DIR/vllm_metrics.json the summaries, DIR/vllm_metrics.md the table. The
sampler's own /metrics reads cost the server's API process a few ms each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
DROP = {"model_name", "engine", "server"}  # labels summed over
HISTOGRAMS = {  # name in the table -> metric family
    "TTFT": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "inference": "vllm:request_inference_time_seconds",
    "ITL": "vllm:inter_token_latency_seconds",
    "TPOT": "vllm:time_per_output_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "TPOT (req)": "vllm:request_time_per_output_token_seconds",
    "prompt tokens": "vllm:request_prompt_tokens",
    "prefill computed tokens": "vllm:request_prefill_kv_computed_tokens",
}
COUNTS = {"prompt tokens", "prefill computed tokens"}  # histograms of tokens, not seconds
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
          "kv use": "vllm:kv_cache_usage_perc", "kv use (old)": "vllm:gpu_cache_usage_perc"}


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{k=v,...}': value}, vllm: series only, the labels in DROP
    summed over."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        m = LINE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        kept = sorted((k, val) for k, val in LABEL.findall(labels or "") if k not in DROP)
        key = name + ("{" + ",".join(f"{k}={val}" for k, val in kept) + "}" if kept else "")
        out[key] = out.get(key, 0.0) + v
    return out


def scrape(url: str) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=5) as resp:
            return parse(resp.read().decode(errors="replace"))
    except OSError:
        return None


def gpu_util() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return float(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() \
            else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class Sampler:
    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._smi = shutil.which("nvidia-smi") is not None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _take(self) -> None:
        t = time.time()
        m = scrape(self.url)
        if m is not None:
            self.samples.append({"t": round(t, 3), "gpu": gpu_util() if self._smi else None,
                                 "m": m})

    def _run(self) -> None:
        self._take()
        while not self._stop.wait(self.interval):
            self._take()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._take()


def _le(key: str) -> float | None:
    m = re.search(r"le=([^,}]+)", key)
    if not m:
        return None
    return math.inf if m.group(1) in ("+Inf", "inf") else float(m.group(1))


def delta(a: dict, b: dict, prefix: str) -> dict[str, float]:
    return {k: b[k] - a.get(k, 0.0) for k in b if k.startswith(prefix)}


def buckets(d: dict[str, float], family: str) -> list[tuple[float, float]]:
    """Cumulative (le, count) of a histogram family's delta, other labels summed."""
    acc: dict[float, float] = {}
    for k, v in d.items():
        if k.startswith(family + "_bucket"):
            le = _le(k)
            if le is not None:
                acc[le] = acc.get(le, 0.0) + v
    return sorted(acc.items())


def quantile(cum: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus' histogram_quantile: linear inside the bucket."""
    if not cum or cum[-1][1] <= 0:
        return None
    rank, prev_le, prev_c = q * cum[-1][1], 0.0, 0.0
    for le, c in cum:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c
                                               else 0.0)
        prev_le, prev_c = le, c
    return prev_le


def total(d: dict[str, float], name: str) -> float:
    return sum(v for k, v in d.items() if k == name or k.startswith(name + "{"))


def by_label(d: dict[str, float], name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if k.startswith(name + "{") or k == name:
            m = re.search(label + r"=([^,}]+)", k)
            out[m.group(1) if m else "-"] = out.get(m.group(1) if m else "-", 0.0) + v
    return {k: v for k, v in out.items() if v}


def gauge(sample: dict, names: list[str]) -> float | None:
    vals = [v for k, v in sample["m"].items() if k.split("{")[0] in names]
    return sum(vals) if vals else None


def windows(samples: list[dict], gap_s: float) -> list[tuple[int, int]]:
    """[i, j] index spans of activity: some request running or waiting, or a counter of
    finished requests moving; spans closer than gap_s merged."""
    active = []
    for i, s in enumerate(samples):
        busy = (gauge(s, [GAUGES["running"]]) or 0) + (gauge(s, [GAUGES["waiting"]]) or 0)
        moved = i > 0 and total(s["m"], "vllm:request_success_total") != \
            total(samples[i - 1]["m"], "vllm:request_success_total")
        active.append(busy > 0 or moved)
    spans: list[list[int]] = []
    for i, a in enumerate(active):
        if not a:
            continue
        if spans and samples[i]["t"] - samples[spans[-1][1]]["t"] <= gap_s:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    # a span starts one sample before its first active one (the counters' base)
    return [(max(0, i - 1), j) for i, j in spans]


def summary(samples: list[dict], i: int, j: int) -> dict:
    a, b = samples[i]["m"], samples[j]["m"]
    d = delta(a, b, "vllm:")
    wall = samples[j]["t"] - samples[i]["t"]
    out: dict = {"start": samples[i]["t"], "wall_s": round(wall, 1)}
    out["finished"] = by_label(d, "vllm:request_success_total", "finished_reason")
    for k, name in (("prompt_tokens", "vllm:prompt_tokens_total"),
                    ("generation_tokens", "vllm:generation_tokens_total"),
                    ("prefix_queries", "vllm:prefix_cache_queries_total"),
                    ("prefix_hits", "vllm:prefix_cache_hits_total"),
                    ("preemptions", "vllm:num_preemptions_total"),
                    ("prompt_tokens_cached", "vllm:prompt_tokens_cached_total")):
        out[k] = total(d, name)
    out["prefix_hit_rate"] = round(out["prefix_hits"] / out["prefix_queries"], 3) \
        if out["prefix_queries"] else None
    out["prompt_tokens_by_source"] = by_label(d, "vllm:prompt_tokens_by_source_total", "source")
    cum = buckets(d, "vllm:iteration_tokens_total")
    steps = cum[-1][1] if cum else 0.0
    step_tokens = total(d, "vllm:iteration_tokens_total_sum")
    out["steps"] = steps
    out["steps_per_s"] = round(steps / wall, 1) if wall > 0 else None
    out["tokens_per_step_mean"] = round(step_tokens / steps, 1) if steps else None
    per_bucket, prev = [], 0.0
    for le, c in cum:
        per_bucket.append(("inf" if math.isinf(le) else int(le), c - prev))
        prev = c
    out["step_tokens_buckets"] = [(le, n) for le, n in per_bucket if n]
    for label, fam in HISTOGRAMS.items():
        cum = buckets(d, fam)
        n = cum[-1][1] if cum else 0.0
        if not n:
            continue
        s = total(d, fam + "_sum")
        scale = 1.0 if label in COUNTS else 1000.0

        def q(x, cum=cum, n=n, scale=scale):
            # inside the first bucket the histogram says only "under its bound" (vLLM's
            # request-time histograms start at 300 ms): no interpolated figure there
            if cum[0][1] >= x * n:
                return f"<{cum[0][0] * scale:g}"
            return round(quantile(cum, x) * scale, 1)
        out[label] = {"n": n, "mean": round(s / n * scale, 1), "p50": q(0.5), "p90": q(0.9)}
    span = samples[i:j + 1]
    for label, name in GAUGES.items():
        vals = [v for s in span if (v := gauge(s, [name])) is not None]
        if vals:
            out[label] = {"mean": round(sum(vals) / len(vals), 2), "max": max(vals)}
    g = [s["gpu"] for s in span if s.get("gpu") is not None]
    out["gpu_util"] = {"mean": round(sum(g) / len(g), 1), "max": max(g)} if g else None
    return out


def _fmt(x, key="p50") -> str:
    if x is None:
        return "–"
    if isinstance(x, dict):
        return f"{x.get(key, '–')}"
    return str(round(x, 1) if isinstance(x, float) else x)


def markdown(data: dict) -> str:
    rows = [("all", data["whole"])] + [(str(k + 1), w) for k, w in enumerate(data["windows"])]
    lines = [f"vLLM /metrics of {data['url']} every {data['interval']} s while "
             f"`{data['command']}` ran ({data['date']}); windows of activity, ms.", "",
             "| window | wall s | finished (reason: n) | prompt tok | cached (hits / queries) "
             "| preempt | steps | steps/s | tok/step | TTFT p50 / p90 / mean | queue p50 / p90 / "
             "mean | prefill p50 / p90 / mean | ITL p50 / p90 | e2e p50 | running mean / max | "
             "waiting mean / max | GPU util mean / max |",
             "|---" * 18 + "|"]
    for name, w in rows:
        fin = ", ".join(f"{k}: {int(v)}" for k, v in sorted(w["finished"].items())) or "–"
        hit = f"{w['prefix_hit_rate']} ({int(w['prefix_hits'])} / {int(w['prefix_queries'])})" \
            if w["prefix_hit_rate"] is not None else "–"

        def h(label, keys=("p50", "p90", "mean"), w=w):
            x = w.get(label)
            return " / ".join(_fmt(x, k) for k in keys) if x else "–"

        def g(label, w=w):
            x = w.get(label) or (w.get("kv use (old)") if label == "kv use" else None)
            return f"{x['mean']} / {x['max']}" if x else "–"
        lines.append(f"| {name} | {w['wall_s']} | {fin} | {int(w['prompt_tokens'])} | {hit} | "
                     f"{int(w['preemptions'])} | {int(w['steps'])} | {_fmt(w['steps_per_s'])} | "
                     f"{_fmt(w['tokens_per_step_mean'])} | {h('TTFT')} | {h('queue')} | "
                     f"{h('prefill')} | {h('ITL' if w.get('ITL') else 'TPOT', ('p50', 'p90'))} | "
                     f"{h('e2e', ('p50',))} | {g('running')} | {g('waiting')} | "
                     f"{g('gpu_util') if w.get('gpu_util') else '–'} |")
    lines += ["", "Per request: prompt tokens and the tokens its prefill computed (the rest "
              "came from the prefix cache), p50 / p90 / mean; decode time and TPOT, ms.", "",
              "| window | prompt tokens | prefill computed tokens | decode time | TPOT |",
              "|---|---|---|---|---|"]
    for name, w in rows:
        cells = [" / ".join(_fmt(w.get(k), q) for q in ("p50", "p90", "mean"))
                 if w.get(k) else "–"
                 for k in ("prompt tokens", "prefill computed tokens", "decode")]
        tpot = w.get("TPOT (req)") or w.get("TPOT")
        cells.append(" / ".join(_fmt(tpot, q) for q in ("p50", "p90", "mean")) if tpot else "–")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Engine steps by tokens in the step (`vllm:iteration_tokens_total`: bucket "
              "upper bound: steps).", ""]
    for name, w in rows:
        lines.append(f"- {name}: " + ", ".join(f"≤{le}: {int(n)}" for le, n in
                                                 w["step_tokens_buckets"]))
    src = [(name, w["prompt_tokens_by_source"]) for name, w in rows
           if w.get("prompt_tokens_by_source")]
    if src:
        lines += ["", "Prompt tokens by source (`vllm:prompt_tokens_by_source_total`).", ""]
        lines += [f"- {name}: " + ", ".join(f"{k}: {int(v)}" for k, v in s.items())
                  for name, s in src]
    return "\n".join(lines) + "\n"


def summarize(data: dict, gap_s: float) -> dict:
    samples = data["samples"]
    data["whole"] = summary(samples, 0, len(samples) - 1) if len(samples) > 1 else {}
    data["windows"] = [summary(samples, i, j) for i, j in windows(samples, gap_s) if j > i]
    return data


def write(out: Path, data: dict) -> str:
    """OUT/vllm_metrics.json (the summaries), OUT/vllm_samples.json.gz (every sample),
    OUT/vllm_metrics.md (the table)."""
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "vllm_samples.json.gz", "wt") as f:
        json.dump(data["samples"], f, separators=(",", ":"))
    (out / "vllm_metrics.json").write_text(json.dumps(
        {k: v for k, v in data.items() if k != "samples"}, indent=1))
    table = markdown(data)
    (out / "vllm_metrics.md").write_text(table)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--gap", type=float, default=4.0, help="idle seconds that end a window")
    ap.add_argument("--summarize", type=Path, help="a vllm_metrics.json to tabulate again")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = ap.parse_args()
    if args.summarize:  # a vllm_samples.json.gz beside it
        data = json.loads(args.summarize.read_text())
        with gzip.open(args.summarize.parent / "vllm_samples.json.gz", "rt") as f:
            data["samples"] = json.load(f)
        data = summarize(data, args.gap)
        print(write(args.out or args.summarize.parent, data))
        return
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd or args.out is None:
        raise SystemExit("give --out DIR and -- the command to run while sampling")
    with Sampler(args.url, args.interval) as sampler:
        proc = subprocess.Popen(cmd)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # the command's process group got it too: let it finish
            rc = proc.wait()
    data = {"date": time.strftime("%Y-%m-%d"), "url": args.url, "interval": args.interval,
            "command": " ".join(cmd), "rc": rc, "samples": sampler.samples}
    print(write(args.out, summarize(data, args.gap)))
    sys.exit(rc)


if __name__ == "__main__":
    main()
