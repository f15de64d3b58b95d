"""The VM lab's fixtures: the cached guest image and a place for guest logs.

QEMU missing is a failure under CI (``CI=1``) and a skip elsewhere, like etcd and OVS. When
the session has VM tests, a missing image starts building as soon as collection ends, in
a thread, so the few minutes of debootstrap and apt overlap the tests that run before.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from testbed.require import qemu_missing, require_qemu
from testbed.vm.image import Image, ensure_image

_build: dict[str, object] = {}


def _prebuild() -> None:
    try:
        _build["image"] = ensure_image(log=False)
    except Exception as e:  # reported by the fixture, in the test that needs the image
        _build["error"] = e


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    here = Path(__file__).parent
    wanted = any(Path(str(item.path)).parent == here for item in session.items)
    if wanted and not qemu_missing() and "thread" not in _build:
        thread = threading.Thread(target=_prebuild, name="vm-image", daemon=True)
        _build["thread"] = thread
        thread.start()


@pytest.fixture(scope="session")
def vm_image() -> Image:
    require_qemu()
    thread = _build.get("thread")
    if isinstance(thread, threading.Thread):
        thread.join()
        if "error" in _build:
            raise _build["error"]  # type: ignore[misc]
        return _build["image"]  # type: ignore[return-value]
    return ensure_image()


@pytest.fixture(scope="module")
def vm_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vm")
