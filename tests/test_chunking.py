from app.stages.chunking import SentenceChunker, split_all


def stream(text: str, step: int = 3) -> list[str]:
    chunker = SentenceChunker()
    out = []
    for i in range(0, len(text), step):
        out += chunker.push(text[i:i + step])
    return out + chunker.flush()


def test_english_sentences():
    text = "Sure! I can help with that. Is it for today? Great."
    assert split_all(text, growth=5) == ["Sure!", "I can help with that.", "Is it for today?",
                                         "Great."]
    # the second piece is at most 4 words (3 x 1.5), the third 7
    assert split_all(text) == ["Sure!", "I can help with", "that.", "Is it for today?", "Great."]


def test_short_words_before_a_full_stop_end_sentences():
    # "you." and "42." are sentence ends, not abbreviations (the old rule kept them together)
    assert split_all("Hello! Nice to meet you. I can help with that.") == [
        "Hello!", "Nice to meet you.", "I can help with that."]
    assert split_all("Hi. The answer is 42. Ask me more.") == [
        "Hi.", "The answer is 42.", "Ask me more."]


def test_streaming_gives_the_same_pieces_as_whole_text():
    text = ("Well, the capital of France is Paris, a big city. It has 2.1 million people! "
            "On a sunny day in spring you can walk along the river for hours and never get "
            "bored of the view. Bye.")
    for step in (1, 2, 5, 17):
        assert stream(text, step) == split_all(text)


def test_decimals_times_abbreviations_do_not_cut():
    pieces = split_all("OK. Dr. Smith paid 3.5 dollars at 12:30 today. "
                       "That is 1,000 cents, e.g. a lot. Mr. J. K. Rowling came at 5 p.m. today.",
                       growth=5)  # sentences whole
    assert pieces == ["OK.", "Dr. Smith paid 3.5 dollars at 12:30 today.",
                      "That is 1,000 cents, e.g. a lot.", "Mr. J. K. Rowling came at 5 p.m. today."]


def test_first_piece_is_short():
    # a clause break, or the first few words when no break comes soon
    assert split_all("Honestly, if you ask me, it will rain.")[0] == "Honestly,"
    assert split_all("The capital of France is Paris.") == ["The capital of", "France is Paris."]
    assert split_all("Yes. The capital of France is Paris.") == [
        "Yes.", "The capital of France", "is Paris."]
    # --first-piece-words 2: the phrases after it grow by half from two
    assert split_all("The capital of France is Paris.", first_max_words=2) == [
        "The capital", "of France is", "Paris."]


def test_long_sentences_are_cut_into_phrases_that_grow():
    text = ("Okay. When you go outside in the cold of winter, you should wear a hat and gloves "
            "and a warm coat and thick socks and good boots so that you stay warm all day.")
    pieces = split_all(text)
    # at most 3 x 1.5^k words for piece k (4, 7, 10, then 14), cut at a clause break
    # inside when there is one
    assert pieces[:3] == ["Okay.", "When you go outside", "in the cold of winter,"]
    assert [len(p.split()) for p in pieces[3:]] == [10, 14]
    assert " ".join(pieces) == text
    pieces = split_all(text, growth=5)
    assert pieces[1] == "When you go outside in the cold of winter,"
    assert all(len(p.split()) <= 14 for p in pieces)


def test_mandarin_punctuation():
    text = "你好，我是小安。今天天气怎么样？我们去散步吧！好；走"
    assert split_all(text) == ["你好，", "我是小安。", "今天天气怎么样？", "我们去散步吧！",
                               "好；", "走"]


def test_mandarin_first_clause():
    text = "这个问题很有意思，我们可以从三个方面来看，首先是时间。"
    assert split_all(text)[0] == "这个问题很有意思，"
    # no clause break soon: cut after twelve characters
    assert split_all("我觉得今天下午我们应该一起去公园散步。")[0] == "我觉得今天下午我们应该一"


def test_newline_and_flush():
    assert split_all("First line\nsecond line without end") == [
        "First line", "second line without end"]
    assert SentenceChunker().flush() == []


def test_no_sentence_end_until_whitespace_follows():
    chunker = SentenceChunker()
    assert chunker.push("Ok. It costs 3.") == ["Ok."]
    assert chunker.push("5 euros. ") == ["It costs 3.5 euros."]
