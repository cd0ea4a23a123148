import pytest

from app.config import from_args, parser


def test_defaults_bind_loopback():
    cfg = from_args(parser().parse_args([]))
    assert cfg.host == "127.0.0.1"
    assert cfg.vad.silence_ms == 400
    assert cfg.llm.temperature == 0.0
    assert cfg.auth is None


def test_flags_map_onto_components():
    cfg = from_args(parser().parse_args([
        "--base-url", "http://h:1/v1", "--model", "m", "--api-key", "secret",
        "--vad-silence-ms", "600", "--tts", "piper", "--language", "zh", "--max-tokens", "50"]))
    assert (cfg.primary.base_url, cfg.primary.model, cfg.primary.api_key) == (
        "http://h:1/v1", "m", "secret")
    assert cfg.vad.silence_ms == 600 and cfg.tts.engine == "piper"
    assert cfg.asr.language == "zh" and cfg.llm.max_tokens == 50


def test_api_key_is_not_in_repr():
    cfg = from_args(parser().parse_args(["--api-key", "sk-very-secret"]))
    assert "sk-very-secret" not in repr(cfg)


def test_public_host_needs_auth():
    with pytest.raises(SystemExit, match="without --auth"):
        from_args(parser().parse_args(["--host", "0.0.0.0"]))
    cfg = from_args(parser().parse_args(["--host", "0.0.0.0", "--auth", "me:pw"]))
    assert cfg.auth == ("me", "pw")
    with pytest.raises(SystemExit, match="user:password"):
        from_args(parser().parse_args(["--auth", "nopassword"]))
