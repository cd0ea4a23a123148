from app.metrics import TurnMetrics, from_json, median, percentile, to_csv, to_json, token_gap_ms


def test_token_gap_is_mean_gap_after_first_token():
    # 5 tokens: first at 1.0 s, last at 1.2 s -> 4 gaps of 50 ms
    assert token_gap_ms(1.0, 1.2, 5) == 50.0
    assert token_gap_ms(1.0, 1.0, 1) is None


def test_median_skips_missing_and_failed_turns():
    rows = [TurnMetrics(1, "primary", ttft_ms=100.0), TurnMetrics(2, "primary", ttft_ms=300.0),
            TurnMetrics(3, "primary"), TurnMetrics(4, "primary", ttft_ms=5.0, error="x",
                                                   error_stage="llm")]
    assert median(rows, "ttft_ms") == 200.0
    assert median([], "ttft_ms") is None


def test_percentile_nearest_rank():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([1, 2, 3, 4, 5], 90) == 5
    assert percentile([], 50) is None


def test_export_round_trip():
    rows = [TurnMetrics(1, "primary", ttft_ms=12.5, reply_tokens=7, tts_engine="piper"),
            TurnMetrics(2, "anchor", error_stage="llm", error="cannot reach")]
    assert from_json(to_json(rows)) == rows
    csv_text = to_csv(rows)
    assert csv_text.splitlines()[0].startswith("turn_id,endpoint,source,model,order,asr_ms")
    assert len(csv_text.strip().splitlines()) == 3
