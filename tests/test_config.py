import pytest

from app.ops.cli import from_args, parser
from app.stages.asr_config import CPU_SHORT_WINDOW_S
from app.stages.endofturn import TurnConfig


def test_defaults_bind_loopback():
    cfg = from_args(parser().parse_args([]))
    assert cfg.host == "127.0.0.1"
    assert cfg.vad.silence_ms == 400
    assert cfg.llm.temperature == 0.0
    assert cfg.auth is None


def test_flags_map_onto_components():
    cfg = from_args(parser().parse_args([
        "--base-url", "http://h:1/v1", "--model", "m", "--api-key", "secret",
        "--vad-silence-ms", "600", "--tts", "offline", "--language", "zh", "--max-tokens", "50"]))
    assert (cfg.primary.base_url, cfg.primary.model, cfg.primary.api_key) == (
        "http://h:1/v1", "m", "secret")
    assert cfg.vad.silence_ms == 600 and cfg.tts.engine == "offline"
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


def test_https_flags_fail_at_start_with_the_files_named(tmp_path):
    from tests.conftest import self_signed

    cert, key = self_signed(tmp_path)
    cfg = from_args(parser().parse_args(["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]))
    assert (cfg.ssl_certfile, cfg.ssl_keyfile) == (str(cert), str(key))
    both = tmp_path / "both.pem"  # a PEM with the key inside the certificate file
    both.write_text(cert.read_text() + key.read_text())
    assert from_args(parser().parse_args(["--ssl-certfile", str(both)])).ssl_keyfile == ""
    with pytest.raises(SystemExit, match="needs --ssl-certfile"):
        from_args(parser().parse_args(["--ssl-keyfile", str(key)]))
    with pytest.raises(SystemExit, match=f"--ssl-certfile {tmp_path}/missing.pem"):
        from_args(parser().parse_args(["--ssl-certfile", str(tmp_path / "missing.pem")]))
    (tmp_path / "other").mkdir()
    _, other_key = self_signed(tmp_path / "other")
    with pytest.raises(SystemExit, match="private key"):  # the key of another certificate
        from_args(parser().parse_args(["--ssl-certfile", str(cert),
                                       "--ssl-keyfile", str(other_key)]))


def test_max_sessions_is_a_count(capsys):
    assert from_args(parser().parse_args([])).max_sessions == 0  # no limit
    assert from_args(parser().parse_args(["--max-sessions", "32"])).max_sessions == 32
    with pytest.raises(SystemExit):
        parser().parse_args(["--max-sessions", "-1"])
    assert "must be 0 or more" in capsys.readouterr().err


def test_turn_close_p_is_a_probability(capsys):
    assert from_args(parser().parse_args([])).turn.close_p == TurnConfig.close_p == 0.25
    assert from_args(parser().parse_args(["--turn-close-p", "1"])).turn.close_p == 1.0
    with pytest.raises(SystemExit):
        parser().parse_args(["--turn-close-p", "30"])
    assert "must be a probability, 0-1, not 30" in capsys.readouterr().err


def test_anchor_flags_env_and_config_file(tmp_path, monkeypatch):
    from app.ops.cli import parse

    cfg = from_args(parse(["--anchor-base-url", "http://a/v1", "--anchor-model", "anc"]))
    assert cfg.anchor.name == "anchor" and cfg.anchor.model == "anc"
    assert cfg.ab_mode == "sequential"
    with pytest.raises(SystemExit, match="both"):
        from_args(parse(["--anchor-model", "anc"]))
    conf = tmp_path / "ab.toml"
    conf.write_text('base_url = "http://p/v1"\nanchor_base_url = "http://a/v1"\n'
                    'anchor_model = "anc"\nab_mode = "concurrent"\n')
    cfg = from_args(parse(["--config", str(conf), "--model", "flag-wins"]))
    assert cfg.primary.base_url == "http://p/v1" and cfg.primary.model == "flag-wins"
    assert cfg.anchor.model == "anc" and cfg.ab_mode == "concurrent"
    conf.write_text('no_such_key = 1\n')
    with pytest.raises(SystemExit):
        parse(["--config", str(conf)])


@pytest.mark.parametrize("key, value, flag", [("tts", '"edgy"', "--tts"),
                                              ("ab_mode", '"whatever"', "--ab-mode"),
                                              ("language", '"fr"', "--language"),
                                              ("max_tokens", '"many"', "--max-tokens")])
def test_a_bad_toml_value_fails_like_the_flag(tmp_path, capsys, key, value, flag):
    from app.ops.cli import parse

    conf = tmp_path / "bad.toml"
    conf.write_text(f"{key} = {value}\n")
    with pytest.raises(SystemExit):
        parse(["--config", str(conf)])
    from_toml = capsys.readouterr().err.splitlines()[-1]
    with pytest.raises(SystemExit):
        parse([flag, value.strip('"')])
    from_flag = capsys.readouterr().err.splitlines()[-1]
    assert from_toml == from_flag and flag in from_flag, (from_toml, from_flag)


def test_toml_booleans_are_flags(tmp_path):
    from app.ops.cli import parse

    conf = tmp_path / "b.toml"
    conf.write_text("no_ab = true\nno_persona_padding = false\n")
    args = parse(["--config", str(conf)])
    assert args.no_ab is True and args.no_persona_padding is False


def test_gpu_plan():
    from app.ops.gpuplan import format_plan, plan_gpus

    one = plan_gpus("p", "a", [139.8])
    assert [p.gpu for p in one] == [0, 0] and sum(p.fraction for p in one) <= 0.92
    assert all(p.kv_gib > 1 for p in one)
    two = plan_gpus("p", "a", [32.0, 32.0])
    assert [p.gpu for p in two] == [0, 1] and two[0].fraction == 0.9
    assert plan_gpus("p", None, [24.0])[0].kv_gib > 1  # the card: fits a 24 GB card
    with pytest.raises(SystemExit, match="does not fit"):
        plan_gpus("p", "a", [32.0])
    with pytest.raises(SystemExit, match="needs an NVIDIA GPU"):
        plan_gpus("p", None, [])
    assert "weights 18.6 GiB" in format_plan(one, [139.8])


def test_gpu_servers_take_the_card_and_voice_flags(tmp_path):
    from app.ops.gpuplan import gpu_servers, plan_gpus

    dry = tmp_path / "dry-lowlat"
    dry.mkdir()
    (dry / "DRY_RUN.json").write_text("{}")
    plans = plan_gpus(str(tmp_path / "real"), str(dry), [139.8])
    primary, anchor = gpu_servers(plans, {"primary": "qwen36", "anchor": "anchor"},
                                  vllm_cmd="/opt/vllm/bin/python",
                                  extra=["--gdn-prefill-backend", "triton"])
    for srv, plan in zip((primary, anchor), plans, strict=True):
        cmd = srv.command()
        assert cmd[0] == "/opt/vllm/bin/python"
        assert cmd[cmd.index("--gdn-prefill-backend") + 1] == "triton"
        # one GPU shared: each server's KV budget is fixed by the plan, so both start at once
        assert int(cmd[cmd.index("--kv-cache-memory-bytes") + 1]) == int(plan.kv_gib * 2**30)
        assert "--enable-prefix-caching" in cmd and "--mamba-ssm-cache-dtype" in cmd
        assert cmd[cmd.index("--max-cudagraph-capture-size") + 1] == "256"
    # a dry-run directory has no weights: vLLM is told to make random ones
    assert "--load-format" not in primary.command()
    assert anchor.command()[anchor.command().index("--load-format") + 1] == "dummy"
    # a GPU each: vLLM sizes its own cache
    one_each = gpu_servers(plan_gpus("p", "a", [80.0, 80.0]), {"primary": "p", "anchor": "a"})
    assert all("--kv-cache-memory-bytes" not in s.command() for s in one_each)
    # one voice user is one stream: Marlin for the dense INT4 layers, unless asked otherwise
    assert all("MacheteLinearKernel" in s.env["VLLM_DISABLED_KERNELS"] for s in one_each)
    machete = gpu_servers(plans, {"primary": "p", "anchor": "a"}, dense_int4_kernel="machete")
    assert all("VLLM_DISABLED_KERNELS" not in s.env for s in machete)


def test_the_speculative_start_comes_sooner_where_asr_runs_on_a_gpu():
    from app.ops.cli import GPU_EAGER_MS
    from app.stages.vad import VadConfig

    assert from_args(parser().parse_args([])).vad.eager_ms == VadConfig.eager_ms == 64
    gpu = from_args(parser().parse_args(["--asr-device", "cuda"]))
    assert gpu.vad.eager_ms == GPU_EAGER_MS == 32
    assert from_args(parser().parse_args(["--asr-device", "cuda", "--eager-ms", "0"])) \
        .vad.eager_ms == 0  # a flag given wins, 0 (no speculation) too


def test_the_model_request_waits_for_a_longer_silence_on_the_cpu_only():
    from app.ops.cli import GPU_MODEL_AFTER_MS
    from app.stages.vad import VadConfig

    assert from_args(parser().parse_args([])).vad.model_after_ms == VadConfig.model_after_ms \
        == 128
    assert from_args(parser().parse_args(["--asr-device", "cuda"])).vad.model_after_ms \
        == GPU_MODEL_AFTER_MS == 0
    assert from_args(parser().parse_args(["--model-after-ms", "96"])).vad.model_after_ms == 96


def test_the_asr_short_window_is_a_span_a_clip_fits_or_off(capsys):
    assert from_args(parser().parse_args([])).asr.short_window_s == CPU_SHORT_WINDOW_S
    assert from_args(parser().parse_args(["--asr-device", "cuda"])).asr.short_window_s == 0
    assert from_args(parser().parse_args(["--asr-short-window-s", "0"])).asr.short_window_s == 0
    assert from_args(parser().parse_args(["--asr-short-window-s", "4"])).asr.short_window_s == 4
    for bad in ("1", "9.5", "-2"):
        with pytest.raises(SystemExit):
            parser().parse_args(["--asr-short-window-s", bad])
        assert "must be 0 (off) or 2-9 s" in capsys.readouterr().err


def test_the_first_piece_is_a_count_of_words(capsys):
    assert from_args(parser().parse_args([])).tts.first_piece_words == 2
    cfg = from_args(parser().parse_args(["--first-piece-words", "3"]))
    assert cfg.tts.first_piece_words == 3
    with pytest.raises(SystemExit):
        parser().parse_args(["--first-piece-words", "0"])
    assert "--first-piece-words" in capsys.readouterr().err


def test_asr_threads_one_per_core_unless_set_and_one_on_the_demo(capsys):
    from app.__main__ import apply_demo_preset
    from app.config import DEMO_ASR_THREADS

    assert from_args(parser().parse_args([])).asr.cpu_threads == 0  # one per ASR core
    assert from_args(parser().parse_args(["--asr-threads", "3"])).asr.cpu_threads == 3
    with pytest.raises(SystemExit):
        parser().parse_args(["--asr-threads", "0"])
    assert "--asr-threads" in capsys.readouterr().err
    for argv, threads in (([], DEMO_ASR_THREADS), (["--asr-threads", "2"], 2),
                          (["--asr-device", "cuda"], 0)):
        args = parser().parse_args(argv)
        apply_demo_preset(args)
        assert from_args(args).asr.cpu_threads == threads, argv


def test_the_demo_holds_replies_to_a_few_seconds_and_the_product_does_not(capsys):
    from app.__main__ import apply_demo_preset
    from app.config import DEMO_REPLY_S

    assert from_args(parser().parse_args([])).llm.reply_seconds == 0.0
    for argv, seconds in (([], DEMO_REPLY_S), (["--reply-seconds", "0"], 0.0),
                          (["--reply-seconds", "6.5"], 6.5)):
        args = parser().parse_args(argv)
        apply_demo_preset(args)
        assert from_args(args).llm.reply_seconds == seconds, argv
    with pytest.raises(SystemExit):
        parser().parse_args(["--reply-seconds", "-1"])
    assert "--reply-seconds" in capsys.readouterr().err
