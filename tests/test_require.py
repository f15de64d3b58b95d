"""testbed/require.py: a missing tool skips a test, and fails it under CI."""

from __future__ import annotations

import pytest

from testbed import require


def test_missing_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(require.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="mounting a tmpfs needs root"):
        require.require_root("mounting a tmpfs")


@pytest.mark.parametrize("check", ["root", "ovs", "etcd", "qemu"])
def test_missing_fails_under_ci(monkeypatch: pytest.MonkeyPatch, check: str) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.setattr(require.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(require.shutil, "which", lambda _tool: None)
    calls = {
        "root": require.require_root,
        "ovs": require.require_ovs,
        "etcd": lambda: require.require_etcd("/nonexistent/etcd"),
        "qemu": require.require_qemu,
    }
    with pytest.raises(pytest.fail.Exception, match="CI must run this test"):
        calls[check]()


def test_present_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.setattr(require.os, "geteuid", lambda: 0)
    monkeypatch.setattr(require.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    require.require_root()
    require.require_ovs()
    require.require_qemu()
