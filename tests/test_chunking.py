from app.chunking import SentenceChunker, split_all


def stream(text: str, step: int = 3) -> list[str]:
    chunker = SentenceChunker()
    out = []
    for i in range(0, len(text), step):
        out += chunker.push(text[i:i + step])
    return out + chunker.flush()


def test_english_sentences():
    text = "Sure! I can help with that. Is it for today? Great."
    assert split_all(text) == ["Sure!", "I can help with that.", "Is it for today?", "Great."]


def test_streaming_gives_the_same_pieces_as_whole_text():
    text = "Well, the capital of France is Paris, a big city. It has 2.1 million people! Bye."
    for step in (1, 2, 5, 17):
        assert stream(text, step) == split_all(text)


def test_decimals_times_abbreviations_do_not_cut():
    pieces = split_all("Dr. Smith paid 3.5 dollars at 12:30 today. "
                       "That is 1,000 cents, e.g. a lot.")
    assert pieces == ["Dr. Smith paid 3.5 dollars at 12:30 today.",
                      "That is 1,000 cents, e.g. a lot."]


def test_first_piece_may_end_at_a_clause_break():
    text = "Honestly, if you ask me about the weather, I would say it will rain later today."
    pieces = split_all(text)
    assert pieces[0] == "Honestly, if you ask me about the weather,"
    # only the first piece is cut at a comma
    assert pieces[1] == "I would say it will rain later today."


def test_mandarin_punctuation():
    text = "你好，我是小安。今天天气怎么样？我们去散步吧！好；走"
    assert split_all(text) == ["你好，我是小安。", "今天天气怎么样？", "我们去散步吧！", "好；走"]


def test_mandarin_first_clause():
    text = "这个问题很有意思，我们可以从三个方面来看，首先是时间。"
    assert split_all(text)[0] == "这个问题很有意思，"


def test_newline_and_flush():
    assert split_all("First line\nsecond line without end") == [
        "First line", "second line without end"]
    assert SentenceChunker().flush() == []


def test_no_sentence_end_until_whitespace_follows():
    chunker = SentenceChunker()
    assert chunker.push("It costs 3.") == []
    assert chunker.push("5 euros. ") == ["It costs 3.5 euros."]
