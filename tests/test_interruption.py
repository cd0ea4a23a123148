from app.language import words
from app.stages.interruption import verdict
from app.stages.replytext import language_notice

REPLY = "The capital of France is Paris. It is a big city on the river Seine."


def test_commands_and_the_users_own_words():
    assert verdict("Wait, stop!", REPLY) == "command"
    assert verdict("Actually, tell me about Spain instead.", REPLY) == "command"
    assert verdict("等一下，停！", "巴黎是法国的首都。") == "command"
    assert verdict("What about Spain?", REPLY) == "words"
    # a command read even when Whisper is unsure of it (the browser test's log)
    assert verdict("wait stop", REPLY, score=-1.24) == "command"
    # the agent saying "wait" through the speakers is its echo, not a command
    assert verdict("wait a moment", "Please wait a moment while I look.") == "echo"


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
        == "command"
    assert verdict("M.H.N.", REPLY) == "backchannel"  # "Mhm." spelled out
    assert verdict("M.H.M.H.", REPLY) == "backchannel"
    assert verdict("and make a chance", REPLY, score=-1.9) == "noise"  # a guess at a hum
    # ...and a confident one: words, which interrupt only if the user goes on talking
    assert verdict("and make CHEM.", REPLY, score=-0.5) == "words"
    assert verdict("Wait, stop, tell me.", REPLY, score=-0.84) == "command"
    assert verdict("Tell me about dogs", REPLY, score=-1.07) == "words"
    assert verdict("and may Chen", REPLY, score=-1.30) == "noise"
    assert verdict("Stay warm. Stay warm. Stay warm. Stay warm. Stay", REPLY) == "noise"


def test_a_reply_that_repeats_itself_heard_back_is_echo():
    # the CI run's reply; a loop is Whisper's on a sound, unless the agent said it so
    said = "Stay warm: stay warm, stay healthy, staying warm, stay safe."
    assert verdict("stay warm, stay healthy, stay warm, stay warm", said) == "echo"
    assert verdict("Stay warm. Stay warm. Stay warm. Stay warm. Stay", REPLY) == "noise"


def test_words_read_unsure_are_words_once_the_voice_went_on_over_the_paused_reply():
    # the rest of a sentence said over the reply, as a make test run read it
    rest = "Okay, that's good."
    assert verdict(rest, REPLY, score=-1.38) == "noise"
    assert verdict(rest, REPLY, score=-1.38, went_on=True) == "words"
    # one word, a loop, the echo or nothing is no more the user's for going on
    assert verdict("Hmm.", REPLY, score=-1.5, went_on=True) == "noise"
    assert verdict("Chen", REPLY, score=-1.5, went_on=True) == "noise"
    assert verdict("Stay warm. Stay warm. Stay warm. Stay warm. Stay", REPLY, score=-1.5,
                   went_on=True) == "noise"
    assert verdict("the capital of France is", REPLY, score=-1.5, went_on=True) == "echo"
    assert verdict("", REPLY, went_on=True) == "noise"


def test_a_sound_stuttered_into_one_word_is_a_loop_not_words():
    # the echo of a numbered list, read in the 10 s window as one hyphenated stutter: it
    # stopped the reply and became a turn of its own
    said = "9. Keep your home cozy-keep it cool! 10. Don't forget the fire"
    assert verdict("K-K-K-K-K-K-K", said, score=-0.98) == "noise"
    assert verdict("K-K-K-K-K-K-K-K", said, score=-0.77, went_on=True) == "noise"
    # words with a hyphen, a word said again, and a stutter inside words are the user's
    assert verdict("Bye-bye, see you tomorrow", REPLY) == "words"
    assert verdict("no no no, the other one", REPLY) == "words"
    assert verdict("I-I-I think you should stop", REPLY) == "command"
    assert verdict("Wait-wait-wait!", REPLY) == "words"
    assert verdict("No-no-no, stop.", REPLY) == "command"
    assert verdict("Uh-uh-uh, what about Spain?", REPLY) == "words"
