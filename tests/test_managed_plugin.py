"""The managed plugin's pure parts: what its PID 1 runs, its environment, and how the agent
finds the driver name dockerd knows it by; and the supervisor with real child processes."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from plugin.managed import Child, Supervisor, child_env, plan
from plugin.plugin_name import DriverName, name_from_plugins, plugin_id_from_mountinfo
from testbed.wait import wait_for

PID = "e1f32162bd592dd79695d791ebe405a1e65923a976eaef5fddb046fbee73cad2"
MOUNTINFO = f"""\
1393 1306 0:60 / / rw,relatime - overlay overlay rw,lowerdir=/x
1400 1393 0:5 / /host/proc rw,nosuid - proc proc rw
1410 1393 0:25 /docker/plugins/{PID} /run/docker/plugins rw,nosuid - tmpfs tmpfs rw
1411 1393 0:25 /openvswitch /var/run/openvswitch rw - tmpfs tmpfs rw
"""


def test_single_host_runs_netmaster_then_the_agent_against_it() -> None:
    env = {"NETPLUGIN_MASTER_LISTEN": "127.0.0.1:9911", "NETPLUGIN_DATA_DIR": "/host/var/lib/np"}
    master, agent = plan(env, ["--log-level", "debug"], python="/py")
    assert master.argv[:3] == ("/py", "-m", "master.cli")
    assert master.argv[3:7] == ("--data-dir", "/host/var/lib/np", "--listen-url", "127.0.0.1:9911")
    assert agent.argv == (
        "/py", "-m", "plugin.cli", "--netmaster", "http://127.0.0.1:9911", "--log-level", "debug"
    )  # fmt: skip


def test_master_args_are_split_like_a_shell() -> None:
    master, _ = plan({"NETPLUGIN_MASTER_ARGS": "--workers 2 --log-level 'debug'"}, [], "/py")
    assert master.argv[-4:] == ("--workers", "2", "--log-level", "debug")


@pytest.mark.parametrize(
    "env",
    [
        {"NETPLUGIN_ETCD_ENDPOINTS": "http://10.0.0.1:2379"},
        {"NETPLUGIN_NETMASTER": "http://m:9999"},
    ],
)
def test_a_cluster_setting_runs_only_the_agent(env: dict[str, str]) -> None:
    (agent,) = plan(env, ["--vtep-ip", "10.0.0.2"], "/py")
    assert agent == Child("netplugin", ("/py", "-m", "plugin.cli", "--vtep-ip", "10.0.0.2"))


def test_empty_settings_fall_back_to_the_flags_defaults() -> None:
    env = child_env({"NETPLUGIN_MTU": "", "NETPLUGIN_HOST": "h1", "PATH": "", "OTHER": ""})
    assert env == {"NETPLUGIN_HOST": "h1", "PATH": "", "OTHER": ""}


def test_the_plugin_id_is_the_host_directory_of_the_socket_mount() -> None:
    assert plugin_id_from_mountinfo(MOUNTINFO) == PID
    assert plugin_id_from_mountinfo(MOUNTINFO.replace(PID, "not-an-id")) is None
    assert plugin_id_from_mountinfo("") is None  # run from a socket, not as a plugin


def plugin(pid: str, name: str, enabled: bool = True, socket: str = "netplugin.sock") -> dict:
    types = [{"Prefix": "docker", "Capability": "networkdriver", "Version": "1.0"}]
    return {
        "Id": pid,
        "Name": name,
        "Enabled": enabled,
        "Config": {"Interface": {"Socket": socket, "Types": types}},
    }


def test_the_name_is_dockerds_name_for_that_id() -> None:
    plugins = [plugin("0" * 64, "other:1"), plugin(PID, "reg:5000/netplugin:2.0")]
    assert name_from_plugins(plugins, PID) == "reg:5000/netplugin:2.0"
    assert name_from_plugins(plugins, "f" * 64) is None


def test_without_an_id_only_one_enabled_netplugin_will_do() -> None:
    one = [plugin("1" * 64, "netplugin:latest"), plugin("2" * 64, "np:old", enabled=False)]
    assert name_from_plugins(one, None) == "netplugin:latest"
    two = [*one, plugin("3" * 64, "netplugin:other")]
    assert name_from_plugins(two, None) is None
    assert name_from_plugins([plugin("4" * 64, "x:1", socket="x.sock")], None) is None


def test_driver_name_is_asked_once_and_retried_until_dockerd_answers() -> None:
    calls = []

    def plugins() -> list[dict]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("dockerd is starting")
        return [plugin(PID, "netplugin:latest")]

    name = DriverName("", True, plugins, mountinfo=lambda: MOUNTINFO)
    with pytest.raises(LookupError, match="dockerd is starting"):
        name()
    assert name() == "netplugin:latest"
    assert name() == "netplugin:latest"
    assert len(calls) == 2
    assert DriverName("", False, plugins)() == "netplugin"  # the socket plugin
    assert DriverName("mine:1", True, plugins)() == "mine:1"  # given


def test_driver_name_refusal_says_what_to_set() -> None:
    name = DriverName("", True, lambda: [], mountinfo=lambda: MOUNTINFO)
    with pytest.raises(LookupError, match="NETPLUGIN_PLUGIN_NAME"):
        name()


def sleeper(name: str, seconds: float = 30) -> Child:
    return Child(name, (sys.executable, "-c", f"import time; time.sleep({seconds})"))


def test_supervisor_passes_sigterm_on_and_exits_cleanly() -> None:
    sup = Supervisor([sleeper("a"), sleeper("b")], dict(os.environ))
    sup.start()
    assert len(sup.pids) == 2
    threading.Timer(0.2, sup.stop, args=("test",)).start()
    assert sup.reap() == 0
    assert sup.exits == {"a": -signal.SIGTERM, "b": -signal.SIGTERM}


def test_supervisor_stops_the_rest_when_a_child_dies() -> None:
    failing = Child("bad", (sys.executable, "-c", "import sys; sys.exit(3)"))
    sup = Supervisor([sleeper("master"), failing], dict(os.environ))
    sup.start()
    assert sup.reap() == 3  # the dead child's status: dockerd restarts the plugin
    assert sup.stopping and not sup.pids


def test_supervisor_kills_a_child_that_ignores_sigterm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("plugin.managed.STOP_GRACE", 0.3)
    ready = tmp_path / "ready"
    stubborn = Child(
        "stubborn",
        (
            sys.executable,
            "-c",
            f"import pathlib, signal, time; signal.signal({int(signal.SIGTERM)}, signal.SIG_IGN); "
            f"pathlib.Path({str(ready)!r}).touch(); time.sleep(30)",
        ),
    )
    sup = Supervisor([stubborn], dict(os.environ))
    sup.start()
    wait_for(ready.exists, 10, "the child got ready")
    sup.stop("test")
    assert sup.reap() == 0
    assert sup.exits == {"stubborn": -signal.SIGKILL}


# Agent flags an operator never sets on a managed plugin: config.json fixes them (a mount's
# place inside the plugin, or the plugin's own mode).
FIXED_BY_THE_MANIFEST = {
    "--socket": "docker serves the plugin's socket directory; the agent's default is in it",
    "--ovsdb": "the ovsrun mount's source is settable instead",
    "--docker-host": "the docker mount's source is settable instead",
    "--proc-sys": "the proc mount: /host/proc/sys",
    "--managed": "always set in a managed plugin",
    "--api-socket": "in the plugin's socket directory, where netctl host inspect looks",
    "--cni-socket": "in the plugin's socket directory (netplugin-cni's config names it)",
    "--etcd-endpoints": "",  # settable, but checked below under its own name
}


def test_every_agent_flag_an_operator_sets_is_a_settable_plugin_variable() -> None:
    import json

    from plugin.cli import parser

    manifest = json.loads((Path(__file__).parent.parent / "config.json").read_text())
    settable = {e["name"] for e in manifest["env"] if "value" in e.get("settable", [])}
    flags = [a for action in parser()._actions for a in action.option_strings if a[:2] == "--"]
    missing = [
        f"NETPLUGIN_{f[2:].replace('-', '_').upper()}"
        for f in flags
        if f not in FIXED_BY_THE_MANIFEST and f != "--help"
    ]
    missing = [v for v in missing if v not in settable]
    assert missing == [], f"config.json lacks settable variables for agent flags: {missing}"
    assert "NETPLUGIN_ETCD_ENDPOINTS" in settable
    # Every variable the manifest declares is one the agent or the supervisor reads.
    known = {f"NETPLUGIN_{f[2:].replace('-', '_').upper()}" for f in flags} | {
        "NETPLUGIN_MASTER_LISTEN",
        "NETPLUGIN_MASTER_ARGS",
        "NETPLUGIN_AUTH_TOKEN",
    }
    assert {e["name"] for e in manifest["env"]} <= known


def test_the_userspace_underlay_writes_sysctls_where_the_plugin_sees_the_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A managed plugin's /proc/sys is read-only: with --vtep-ip on the userspace datapath
    # the agent died at start writing eth1's arp_ignore there (seen in a simulated host).
    from types import SimpleNamespace

    import plugin.daemon as daemon

    seen: list[object] = []
    monkeypatch.setattr(daemon, "ensure_userspace_tunneling", lambda *a: seen.append(a[-1]))
    args = SimpleNamespace(vtep_ip="192.0.2.1", underlay_bridge="br-ul", proc_sys="/host/proc/sys")
    daemon._underlay(args, object(), "netdev")  # type: ignore[arg-type]
    assert seen == ["/host/proc/sys"]
