"""What script a text is in, and Mandarin written in simplified characters."""

from app.language import has_cjk, simplified


def test_traditional_characters_become_simplified():
    assert simplified("請問現在幾點了?") == "请问现在几点了?"
    assert simplified("你現在在做什麼呢？今天會下雨嗎？") == "你现在在做什么呢？今天会下雨吗？"


def test_simplified_mandarin_and_english_are_left_as_they_are():
    for text in ("我想预订明天晚上两个人的位子。", "去上海的火车票", "Hello, 3.5 km.", ""):
        assert simplified(text) == text
    assert has_cjk("好的") and not has_cjk("ok")


def test_the_language_is_decided_among_the_agents_unless_another_is_certain():
    from app.stages.whisper_read import CERTAIN_LANGUAGE, decide_language

    ours = ("en", "zh")
    # an English clip whose top language is Thai, as surely as Mandarin clips get Mandarin
    assert decide_language({"th": 0.85, "en": 0.012, "zh": 0.0004}, ours) == "en"
    assert decide_language({"zh": 0.84, "en": 0.009, "ja": 0.05}, ours) == "zh"
    assert decide_language({"ja": 0.5, "zh": 0.2, "en": 0.25}, ours) == "en"
    assert decide_language({"ja": CERTAIN_LANGUAGE, "en": 0.01}, ours) == "ja"
    assert decide_language({"fr": 0.6, "en": 0.1}, ("en", "zh", "fr")) == "fr"
    assert decide_language({"la": 0.9}, ours) == "en"  # neither: English
