"""Integration fixtures: real etcd servers on 127.0.0.1, started and stopped by PID; the
Docker version a test runs on (``dockerd``) and the single-host stack on it (``site``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.etcd import EtcdServer
from testbed.require import require_etcd, require_root
from testbed.site import DOCKERDS, Site, serve_site, use_site


@pytest.fixture(scope="session")
def root() -> None:
    """Root, checked before any module's lab starts: ``pytestmark =
    pytest.mark.usefixtures("root")`` (a session fixture is set up before module ones).
    Skips without it, fails under CI."""
    require_root("a test of namespaces, OVS or docker")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd shared by the whole session; tests call ``wipe()`` or use their own prefix.

    Fails when the etcd binary is missing and CI is set, skips otherwise.
    """
    require_etcd()
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(params=["embedded", "etcd"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test twice: the etcd endpoints to use ("" = the embedded store); an etcd test
    gets the shared etcd, wiped."""
    if request.param == "embedded":
        yield ""
    else:
        etcd = request.getfixturevalue("etcd_server")
        etcd.wipe()
        yield etcd.endpoint


@pytest.fixture
def etcd_factory(tmp_path: Path) -> Iterator[Callable[..., EtcdServer]]:
    """Private etcd servers for tests that stop, kill or restart them."""
    require_etcd()
    servers: list[EtcdServer] = []

    def make(**kwargs: object) -> EtcdServer:
        server = EtcdServer(tmp_path / f"etcd{len(servers)}", **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.cleanup()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that runs on a dockerd (uses ``dockerd``) runs on the host's Docker 20.10, and
    when marked ``docker26`` on Docker 26 too: ``test_x[docker20]``, ``test_x[docker26]``.
    Module-scoped: a module's tests on one version share its stack."""
    if "dockerd" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("docker26") is not None
        versions = list(DOCKERDS if both else DOCKERDS[:1])
        metafunc.parametrize("dockerd", versions, indirect=True, scope="module")


@pytest.fixture(scope="module")
def dockerd(request: pytest.FixtureRequest) -> str:
    """The Docker version of the test's dockerd: "docker20" or "docker26"."""
    return str(request.param)


@pytest.fixture(scope="module")
def site_stack(dockerd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from serve_site(dockerd, tmp_path_factory)


@pytest.fixture
def site(site_stack: Site, monkeypatch: pytest.MonkeyPatch) -> Site:
    """The single-host stack on the test's Docker version, master and agent serving; the
    test's docker CLI talks to its dockerd."""
    return use_site(site_stack, monkeypatch)
