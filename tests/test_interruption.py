from app.interruption import verdict, words
from app.pipeline import language_notice

REPLY = "The capital of France is Paris. It is a big city on the river Seine."


def test_the_users_own_words_interrupt():
    assert verdict("Wait, stop!", REPLY) == "interrupt"
    assert verdict("Actually, tell me about Spain instead.", REPLY) == "interrupt"
    assert verdict("等一下，停！", "巴黎是法国的首都。") == "interrupt"


def test_the_agents_own_voice_is_echo():
    # the start of the reply coming back through the speakers, as ASR heard it
    assert verdict("the capital of France is", REPLY) == "echo"
    assert verdict("a big city on the river", REPLY) == "echo"
    assert verdict("巴黎是法国", "巴黎是法国的首都。") == "echo"


def test_backchannels_and_noise_do_not_interrupt():
    assert verdict("Mhm.", REPLY) == "backchannel"
    assert verdict("yeah okay", REPLY) == "backchannel"
    assert verdict("嗯", REPLY) == "backchannel"
    assert verdict("", REPLY) == "noise"
    assert verdict(" ... ", REPLY) == "noise"


def test_words_split_cjk_into_characters():
    assert words("Hello, 你好!") == ["hello", "你", "好"]


def test_language_notice_names_what_the_model_speaks():
    text = language_notice("zh", ("en",))
    assert "Mandarin" in text and "only English" in text and "英语" in text
    assert language_notice("fr", ("en", "zh")).endswith("only English or Mandarin.")


def test_echo_is_matched_on_letters_not_words():
    # what ASR made of half a second of the agent's own voice (from the browser test's log)
    assert verdict("Say warm.", "Stay warm: Stay cool! Warming up: Stay healthy!") == "echo"
    assert verdict("to stay in warm.", "When it comes to staying warm, don't rely on it.") \
        == "echo"
    assert verdict("Wait, stop!", "When it comes to staying warm, don't rely on it.") \
        == "interrupt"
    assert verdict("M.H.N.", REPLY) == "backchannel"  # "Mhm." spelled out
    assert verdict("M.H.M.H.", REPLY) == "backchannel"
    assert verdict("and make a chance", REPLY, score=-1.9) == "noise"  # a guess at a hum
    assert verdict("Wait, stop, tell me.", REPLY, score=-0.84) == "interrupt"
    assert verdict("Stop, tell me", REPLY, score=-1.07) == "interrupt"
    assert verdict("and may Chen", REPLY, score=-1.30) == "noise"
    assert verdict("Stay warm. Stay warm. Stay warm. Stay warm. Stay", REPLY) == "noise"
