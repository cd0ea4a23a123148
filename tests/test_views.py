from app.metrics import TurnMetrics
from app.views import delta_pct, figures_html, medians_markdown, plot_frame, turns_table


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
    assert figures_html([]).count("<tr>") == 9  # header + 8 figures, single column


def test_plot_frame_marks_failed_turn_as_gap():
    r = rows() + [TurnMetrics(4, "anchor", ttft_ms=5.0, error="x", error_stage="llm")]
    frame = plot_frame(r, "ttft_ms")
    assert list(frame.columns) == ["turn", "value", "endpoint"]
    assert len(frame) == 7 and frame["value"].isna().sum() == 1
    assert set(frame["endpoint"]) == {"primary", "anchor"}


def test_delta_and_table():
    assert delta_pct(75, 100) == "-25 %" and delta_pct(1, None) == "–"
    table = turns_table(rows())
    assert table[0][:3] == [1, "primary", "primary"] and table[1][2] == "after-primary"
