"""Contiv flag names with NETMASTER_*/NETPLUGIN_* environment fallbacks."""

from __future__ import annotations

import pytest

from master.cli import _bind
from master.cli import parser as master_parser
from plugin.cli import parser as plugin_parser


def test_master_defaults() -> None:
    a = master_parser().parse_args([])
    assert a.listen_url == "127.0.0.1:9999" and a.etcd_endpoints == "" and a.log_level == "info"


def test_env_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETMASTER_ETCD_ENDPOINTS", "http://127.0.0.1:2379")
    monkeypatch.setenv("NETMASTER_LISTEN_URL", "127.0.0.1:7777")
    a = master_parser().parse_args([])
    assert a.etcd_endpoints == "http://127.0.0.1:2379" and a.listen_url == "127.0.0.1:7777"
    assert master_parser().parse_args(["--listen-url", "127.0.0.1:1"]).listen_url == "127.0.0.1:1"
    monkeypatch.setenv("NETPLUGIN_VTEP_IP", "192.0.2.7")
    monkeypatch.setenv("NETPLUGIN_HOST", "h9")
    p = plugin_parser().parse_args([])
    assert p.vtep_ip == "192.0.2.7" and p.host == "h9"
    assert p.socket == "/run/docker/plugins/netplugin.sock"


def test_plugin_flags_are_contivs() -> None:
    names = {a.option_strings[0] for a in plugin_parser()._actions if a.option_strings}
    assert names >= {
        "--netmaster",
        "--etcd-endpoints",
        "--host",
        "--vtep-ip",
        "--ctrl-ip",
        "--vlan-if",
        "--socket",
        "--ovsdb",
        "--docker-host",
        "--log-level",
    }
    names = {a.option_strings[0] for a in master_parser()._actions if a.option_strings}
    assert names >= {
        "--etcd-endpoints",
        "--data-dir",
        "--listen-url",
        "--control-url",
        "--fwd-mode",
        "--log-level",
    }


def test_bind_parsing() -> None:
    assert _bind("http://127.0.0.1:9999/") == "127.0.0.1:9999"
    with pytest.raises(SystemExit, match="HOST:PORT"):
        _bind("localhost")


def test_noisy_library_debug_is_filtered_but_their_warnings_are_kept() -> None:
    import logging

    from common.flags import _quiet_libraries

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    assert not _quiet_libraries(record("pyroute2.netlink.core", logging.DEBUG))
    assert not _quiet_libraries(record("os_ken.base.app_manager", logging.INFO))
    assert _quiet_libraries(record("pyroute2.netlink.core", logging.WARNING))
    assert _quiet_libraries(record("netplugin", logging.DEBUG))
    assert _quiet_libraries(record("pyroute2x", logging.DEBUG))  # a prefix, not a substring
