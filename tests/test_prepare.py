"""The one edit of an installed file (torchvision's fake-op registrations in the serving
environment, app/prepare.py says why): idempotent, and a file it does not know is an error."""

from __future__ import annotations

import pytest

from app.prepare import guard_fake_ops

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
