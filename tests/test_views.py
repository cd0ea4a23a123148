from app.metrics import FIGURES, TurnMetrics
from app.web.plots import line_chart, per_turn, waterfall
from app.web.views import delta_pct, figures_html, medians_markdown, pictures, turns_table


def rows():
    out = []
    for t, (p, a) in enumerate([(100.0, 200.0), (120.0, 220.0), (110.0, 210.0)], start=1):
        out.append(TurnMetrics(t, "primary", model="fast", order="primary", ttft_ms=p,
                               llm_turn_ms=p * 3, ms_per_token=3.0, v2v_ms=400.0 + t))
        out.append(TurnMetrics(t, "anchor", model="slow", order="after-primary", ttft_ms=a,
                               llm_turn_ms=a * 3, ms_per_token=4.0))
    return out


def test_medians_in_card_form_with_difference():
    md = medians_markdown(rows())
    assert "| primary | fast | 110 / 330 / 3.0 | 3 |" in md
    assert "| anchor | slow | 210 / 630 / 4.0 | 3 |" in md
    assert "| primary vs anchor | | -48 % / -48 % / -25 % | |" in md


def test_failed_and_cut_turns_stay_out_of_medians():
    r = rows() + [TurnMetrics(4, "anchor", model="slow", ttft_ms=1.0, error="down",
                              error_stage="llm"),
                  TurnMetrics(5, "anchor", model="slow", ttft_ms=1.0, cancelled=True)]
    assert "| anchor | slow | 210 / 630 / 4.0 | 3 |" in medians_markdown(r)


def test_figures_show_both_columns_and_errors():
    r = rows() + [TurnMetrics(4, "anchor", error="cannot reach the model", error_stage="llm")]
    html = figures_html(r)
    assert "data-endpoint='primary' data-figure='ttft_ms'>110<" in html
    assert "data-endpoint='anchor' data-figure='ttft_ms'>–<" in html  # latest anchor row failed
    assert "anchor error (llm)" in html and "cannot reach the model" in html
    assert figures_html([]).count("<tr>") == 1 + len(FIGURES)  # header + figures, one column


def test_line_chart_draws_both_series_with_a_gap_for_a_failed_turn():
    r = rows() + [TurnMetrics(4, "anchor", ttft_ms=5.0, error="x", error_stage="llm"),
                  TurnMetrics(4, "primary", ttft_ms=90.0), TurnMetrics(5, "anchor", ttft_ms=200.0)]
    series = per_turn(r, "ttft_ms")
    assert series["anchor"][3] == (4, None)
    svg = line_chart(series, "TTFT per turn", "ms")
    assert svg.count("class='va-mark' data-series='primary'") == 4
    assert svg.count("class='va-mark' data-series='anchor'") == 4  # turn 4 failed: no dot
    # the anchor's line breaks at the failed turn: two runs, 1-3 and 5 (a lone dot)
    assert svg.count("class='va-line' data-series='anchor'") == 1
    assert svg.count("class='va-line' data-series='primary'") == 1
    assert "data-series='primary' x=" in svg and "data-series='anchor' x=" in svg  # legend
    assert "stroke='#1f77b4'" in svg and "stroke='#d62728'" in svg


def test_waterfall_has_a_bar_per_stage_with_its_milliseconds():
    last = TurnMetrics(3, "primary", timeline={
        "start": 130.0, "asr_start": 150.0, "asr_end": 250.0, "committed": 420.0, "llm_sent": 422.0,
        "first_token": 560.0, "first_piece": 800.0, "first_audio": 900.0, "first_sent": 901.0,
        "received": 903.0, "audible": 950.0})
    anchor = TurnMetrics(3, "anchor", ttft_ms=180.0)
    svg = waterfall(last, anchor, [last])
    stages = ["end-of-turn wait", "pause seen", "ASR", "TTFT", "anchor TTFT", "first piece tokens",
              "TTS first audio", "audio held", "transport", "playback start"]
    for stage in stages:
        assert f"data-stage='{stage}'" in svg, stage
    for ms in ("420", "130", "100", "138", "180", "240", "1", "2", "47"):
        assert f">{ms}</text>" in svg, ms
    assert len(pictures(rows())) == 5
    # the axis ends at the next round number above the longest bar (950 ms -> 1,000)
    assert ">1,000</text>" in svg and ">2,000</text>" not in svg


def test_delta_and_table():
    assert delta_pct(75, 100) == "-25 %" and delta_pct(1, None) == "–"
    table = turns_table(rows())
    assert table[0][:3] == [1, "primary", "primary"] and table[1][2] == "after-primary"
