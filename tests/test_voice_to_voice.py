"""bench.voice_to_voice's rounds: the order each round runs the settings in, and one
setting's rounds pooled into one result (figures over every turn, WER over every word)."""

import pytest

from bench.settings import parse_settings, round_orders
from bench.voice_to_voice import aligned_wer, markdown, pool, summarise

QUESTIONS = ["What is the capital of Italy?", "Why is the sky blue?"]


def run(name: str, v2v: list[float], transcripts: list[str], ran_at: float) -> dict:
    rows = [{"endpoint": "primary", "error": "", "cancelled": False, "v2v_ms": v + 5}
            for v in v2v]
    result = {"pipeline": name, "probe": [{"v2v": v} for v in v2v], "rows": rows,
              "transcripts": transcripts, "page_cost": {"browser_task_ms": 10.0},
              "env": {}, "isa_in_effect": {}, "ran_at": ran_at}
    result["summary"] = summarise(result, QUESTIONS)
    return result


def test_every_other_round_runs_the_settings_in_reverse():
    assert round_orders(["on", "off"], 4) == [["on", "off"], ["off", "on"],
                                              ["on", "off"], ["off", "on"]]
    assert round_orders(["a", "b", "c"], 1) == [["a", "b", "c"]]


def test_settings_keep_their_order_and_say_what_is_wrong():
    assert parse_settings(["off=--turn-detector off", "on=", "q=--persona 'a b.md'"]) == {
        "off": ["--turn-detector", "off"], "on": [], "q": ["--persona", "a b.md"]}
    for bad, says in [("--no-ab", "expected NAME=FLAGS"), ("=--no-ab", "expected NAME=FLAGS"),
                      ("x='--a", "No closing quotation")]:
        with pytest.raises(SystemExit, match=says):
            parse_settings([bad])
    with pytest.raises(SystemExit, match="given twice"):
        parse_settings(["a=", "a=--no-ab"])


def test_rounds_pool_into_one_result_with_each_rounds_medians_shown():
    on = pool([run("on", [900, 1100], ["What is the capital of Italy?",
                                       "Why is the sky blue?"], 1.0),
               run("on", [700, 1300], ["What is the capital of Italy", "Why is sky blue"], 4.0)],
              QUESTIONS)
    off = pool([run("off", [800, 1000], QUESTIONS, 2.0), run("off", [600, 1200], QUESTIONS, 3.0)],
               QUESTIONS)
    s = on["summary"]
    assert s["probe_v2v_ms"]["n"] == 4 and s["probe_v2v_ms"]["p50"] == 1000.0
    assert s["v2v_ms"]["p50"] == 1005.0
    assert (s["wer_edits"], s["wer_words"], s["wer"]) == (1, 22, 0.045)  # "the" lost once
    assert on["page_cost"]["browser_task_ms"] == 20.0
    table = markdown([on, off], "cmd", "2026-12-02", "a CPU")
    assert "| probe_v2v_ms | 1000.0 / " in table and " | 900.0 / " in table
    assert "off / on: 0.90, over 2 rounds" in table
    assert "- round 1: on 1000.0, then off 900.0 ms (p50)" in table
    assert "- round 2: off 900.0, then on 1000.0 ms (p50)" in table


def test_a_misread_last_question_still_has_its_turn():
    # "How do airplanes fly?" read as six words costs 4 edits aligned to its turn, and 4 as a
    # lost question whose turn is a free extra one at the end: the turn is there, not lost
    questions = ["What is the capital of Italy?", "How do airplanes fly?"]
    transcripts = ["What is the capital of Italy?", "How do you play this slide?",
                   "What is the capital of Italy?"]
    assert aligned_wer(questions, transcripts) == (4, 10, 0)
    assert aligned_wer(questions, transcripts[:1]) == (4, 10, 1)
