"""CNI: the executable's checks and its talk to the agent's socket (common.cni, cni.main),
and the agent's CNI service against the real control plane (ClusterState on SQLite) with
a fake datapath and fake namespaces: ADD, DEL, CHECK, which network, rollback, pod labels,
and the kubeconfig reader."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_plugin import FakeDatapath
from prometheus_client.parser import text_string_to_metric_families
from pyroute2.netlink.exceptions import NetlinkError

from cni import main as cni_main
from cni.launcher import install
from cni.main import exec_body, run
from common import cni
from common.models import EndpointGroup, Network
from datapath.netns import NetnsInterface, NetnsRoute
from datapath.veth import Into
from plugin.cni_api import create_cni_app
from plugin.cni_service import CniService, target
from plugin.kube import PodLabels, api_from_kubeconfig
from plugin.master_client import MasterClient
from plugin.metrics import AgentMetrics
from plugin.server import make_socket_server
from testbed.real_master import RealMaster, real_master

CONF = {"cniVersion": "1.0.0", "name": "pods", "type": "netplugin-cni", "network": "pn"}
ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c0ffee" * 10,
    "CNI_NETNS": "/run/netns/pod1",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/usr/lib/cni",
}


def req(command: str = "ADD", config: dict[str, Any] | None = None, **env: str) -> cni.Request:
    return cni.request_from_env(
        {**ENV, "CNI_COMMAND": command, **env}, dict(config if config is not None else CONF)
    )


# --- the protocol, pure ---


def test_version_is_answered_in_the_callers_version() -> None:
    assert run({"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}') == (
        0,
        {"cniVersion": "0.4.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]},
    )


@pytest.mark.parametrize(
    ("env", "stdin", "code", "says"),
    [
        ({**ENV, "CNI_COMMAND": "ADD"}, "{not json", cni.DECODE_FAILURE, "is not JSON"),
        ({**ENV, "CNI_COMMAND": "GC"}, json.dumps(CONF), cni.INVALID_ENV, "CNI_COMMAND 'GC'"),
        ({**ENV, "CNI_NETNS": ""}, json.dumps(CONF), cni.INVALID_ENV, "CNI_NETNS must be set"),
        ({**ENV, "CNI_ARGS": "broken"}, json.dumps(CONF), cni.INVALID_ENV, "'broken' is not"),
        (ENV, json.dumps({**CONF, "cniVersion": "0.2.0"}), cni.INCOMPATIBLE_VERSION, "0.2.0"),
        (ENV, json.dumps(CONF), cni.TRY_AGAIN_LATER, "is not answering on /nonexistent"),
    ],
)
def test_the_executable_refuses_with_a_cni_error_and_a_nonzero_status(
    env: dict[str, str], stdin: str, code: int, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cni.SOCKET_ENV, "/nonexistent/cni.sock")
    status, out = run({**env, cni.SOCKET_ENV: "/nonexistent/cni.sock"}, stdin)
    assert status == 1 and out is not None
    assert out["code"] == code and says in out["msg"], out
    assert set(out) <= {"cniVersion", "code", "msg", "details"}


def test_the_exec_body_carries_the_call_as_it_came() -> None:
    env = {b"CNI_COMMAND": b"ADD", b"CNI_ARGS": b"", b"CNI_NETNS": b"/run/netns/p=1"}
    body = exec_body(env, b'{"a": "\\u0000"}\n')
    assert cni.read_exec_body(body) == (
        {"CNI_COMMAND": "ADD", "CNI_ARGS": "", "CNI_NETNS": "/run/netns/p=1"},
        '{"a": "\\u0000"}\n',
    )
    assert cni.read_exec_body(exec_body({}, b"")) == ({}, "")
    for bad in (b"", b"CNI_COMMAND=ADD", b"PATH=/bin\0\0{}", b"CNI_X\0\0", b"\xff=1\0\0"):
        with pytest.raises(cni.CniError) as e:
            cni.read_exec_body(bad)
        assert e.value.code == cni.DECODE_FAILURE


def test_the_executable_starts_on_sys_alone() -> None:
    """What its start imports beside the interpreter's own (the launcher runs -IS): the fast
    path adds only _socket and posix, both built in or C."""
    root = str(Path(cni_main.__file__).resolve().parent.parent)
    code = (
        "import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); "
        "import cni.main; print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-IS", "-c", code, root], capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(out) <= {"__future__", "cni", "cni.main"}, out
    assert (cni_main.DEFAULT_SOCKET, cni_main.SOCKET_ENV, cni_main.EXEC_URL) == (
        cni.DEFAULT_SOCKET,
        cni.SOCKET_ENV,
        cni.EXEC_URL,
    )
    assert cni.EXIT_HEADER.lower().encode() == cni_main.EXIT_HEADER


def test_del_needs_no_namespace_and_args_parse() -> None:
    assert req("DEL", CNI_NETNS="").netns == ""
    assert cni.parse_args("IgnoreUnknown=1;K8S_POD_NAME=web-0;") == {
        "IgnoreUnknown": "1",
        "K8S_POD_NAME": "web-0",
    }


def test_results_take_the_configurations_shape() -> None:
    a = cni.Attachment(
        "vp1234", "", "eth0", "02:42:aa:bb:cc:dd", "/run/netns/p",
        (("10.1.0.5/24", "10.1.0.1"), ("fd00::5/64", "fd00::1")),
        routes=(("0.0.0.0/0", "10.1.0.1"), ("::/0", "fd00::1")),
    )  # fmt: skip
    new = cni.result("1.0.0", a)
    assert new["interfaces"][1] == {
        "name": "eth0",
        "mac": "02:42:aa:bb:cc:dd",
        "sandbox": "/run/netns/p",
    }
    assert new["ips"] == [
        {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1},
        {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 1},
    ]
    assert new["routes"] == [
        {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
        {"dst": "::/0", "gw": "fd00::1"},
    ]
    old = cni.result("0.3.1", a)
    assert [ip["version"] for ip in old["ips"]] == ["4", "6"] and old["cniVersion"] == "0.3.1"
    # The gateways are the networks', for information; routes only those installed, and
    # no "routes" at all for none, as Debian's ptp with host-local answers.
    bare = cni.result("1.0.0", cni.Attachment("vp1", "", "net1", "02:aa", "/p", a.addresses))
    assert "routes" not in bare and bare["ips"] == new["ips"]


def test_which_network_the_layers_choose() -> None:
    assert target(req()).network == "pn" and target(req()).tenant == "default"
    runtime = {**CONF, "runtimeConfig": {"netplugin": {"network": "rt", "tenant": "t"}}}
    assert (target(req(config=runtime)).network, target(req(config=runtime)).tenant) == ("rt", "t")
    args = "NETPLUGIN_NETWORK=arg;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0"
    t = target(req(config=runtime, CNI_ARGS=args))
    assert (t.network, t.tenant, t.pod) == ("arg", "t", ("ns", "web-0"))
    labels = {"io.contiv.network": "lab", "io.contiv.net-group": "g", "app": "web"}
    t = target(req(config=runtime, CNI_ARGS=args), labels)
    assert (t.network, t.group, t.labels["app"]) == ("lab", "g", "web")
    with pytest.raises(cni.CniError) as e:
        target(req(config={"cniVersion": "1.0.0", "name": "x", "type": "netplugin-cni"}))
    assert e.value.code == cni.INVALID_CONFIG


# --- the agent's service, against the real master ---


class FakeNetns:
    """Namespaces as dicts of interfaces and sets of routes; move_into "moves" a host
    interface of the fake datapath into one (with the MAC given: a pool port's is set
    there), refusing a route the namespace has via another interface, as the kernel does."""

    def __init__(self, dp: FakeDatapath) -> None:
        self.dp = dp
        self.spaces: dict[str, dict[str, NetnsInterface]] = {"/run/netns/pod1": {}}
        self.tables: dict[str, set[NetnsRoute]] = {"/run/netns/pod1": set()}
        self.fail = False
        self.sent_home: dict[str, str] = {}  # pod's interface -> the name it went home as

    def move_into(
        self, ifname: str, netns: str, name: str, addresses: Any, routes: Any, mac: str = ""
    ) -> None:
        if self.fail or netns not in self.spaces:
            raise OSError(f"network namespace {netns}: No such file or directory")
        if ifname:  # a port's container end here, moved
            assert any(p["name"] == ifname for p in self.dp.ports.values()), ifname
        else:  # made there by the datapath
            assert any(p.get("into") == Into(netns, name) for p in self.dp.ports.values())
        self.spaces[netns][name] = NetnsInterface(
            mac=mac, mtu=1500, up=True, addresses=frozenset(addresses)
        )
        table = self.tables[netns]
        for dst, gw in routes:
            if any(r.dst == dst and r.ifname != name for r in table):
                raise OSError(17, f"route {dst} exists already in {netns}, not via {name}")
            table.add(NetnsRoute(dst, gw, name))

    def read(self, netns: str, name: str) -> NetnsInterface | None:
        return self.spaces.get(netns, {}).get(name)

    def routes(self, netns: str) -> frozenset[NetnsRoute]:
        return frozenset(self.tables.get(netns, ()))

    def remove(self, netns: str, name: str, mac: str = "", home: str = "") -> bool:
        have = self.spaces.get(netns, {}).get(name)
        if have is None or (mac and have.mac.lower() != mac.lower()):
            return False
        if home:
            self.sent_home[name] = home
        self.tables[netns].difference_update({r for r in self.tables[netns] if r.ifname == name})
        return self.spaces[netns].pop(name) is not None


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path) as m:
        m.state.networks.put(Network(networkName="pn", subnet="10.9.0.0/24"))
        for name, n in (("d1", 7), ("d2", 6)):
            m.state.networks.put(
                Network(networkName=name, subnet=f"10.{n}.0.0/24", ipv6Subnet=f"fd0{n}::/64")
            )
        m.state.groups.put(EndpointGroup(groupName="web", networkName="pn"))
        yield m


@pytest.fixture
def service(master: RealMaster) -> tuple[CniService, FakeDatapath, FakeNetns]:
    client = MasterClient(master.url, backoff=0, session=master.session())
    dp = FakeDatapath()
    ns = FakeNetns(dp)
    labels = {("ns", "web-0"): {"app": "web", "io.contiv.net-group": "web"}}
    svc = CniService(client, dp, ns, "host1", pod_labels=lambda n, p: labels.get((n, p), {}))
    return svc, dp, ns


def test_add_check_del_and_del_again(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, dp, ns = service
    asked: list[str] = []  # the master's endpoint records read
    get = svc.master.get_endpoint
    svc.master.get_endpoint = lambda e: asked.append(e) or get(e)  # type: ignore[method-assign]
    result = svc.add(req())
    assert asked == []  # no port here: not a retry, nothing to read
    eid = cni.endpoint_id(ENV["CNI_CONTAINERID"], "eth0")
    ep = master.state.endpoints.get(eid)
    assert (ep.networkName, ep.host, ep.containerID) == ("pn", "host1", ENV["CNI_CONTAINERID"])
    assert result["ips"] == [
        {"address": f"{ep.ipAddress}/24", "gateway": "10.9.0.1", "interface": 1}
    ]
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.9.0.1"}]
    assert eid in dp.ports and "eth0" in ns.spaces["/run/netns/pod1"]
    # Made in the pod's namespace under its name, not moved there.
    assert dp.ports[eid]["into"] == Into("/run/netns/pod1", "eth0")
    assert svc.add(req()) == result  # retried: the same, nothing new
    assert asked == [eid]
    svc.check(req("CHECK", {**CONF, "prevResult": result}))
    ns.spaces["/run/netns/pod1"].clear()
    with pytest.raises(cni.CniError) as e:
        svc.check(req("CHECK", {**CONF, "prevResult": result}))
    assert e.value.code == cni.CHECK_FAILED and "no interface eth0" in e.value.msg
    svc.delete(req("DEL"))
    assert eid not in dp.ports
    with pytest.raises(Exception, match="not found"):
        master.state.endpoints.get(eid)
    svc.delete(req("DEL"))  # again: fine
    svc.delete(req("DEL", CNI_NETNS="", CNI_CONTAINERID="never-seen"))  # unknown: fine


def test_del_waits_for_the_switch_port_only_while_the_veth_may_be_left(
    service: tuple[CniService, FakeDatapath, FakeNetns],
) -> None:
    svc, dp, ns = service
    eid = cni.endpoint_id(ENV["CNI_CONTAINERID"], "eth0")
    pod1 = ns.spaces["/run/netns/pod1"]
    svc.add(req())
    svc.delete(req("DEL"))  # the pod's end deleted: the pair went with it
    assert "eth0" not in pod1 and eid not in dp.ports and dp.settled == []
    svc.add(req())
    pod1["eth0"] = NetnsInterface(mac="02:00:00:00:00:01", mtu=1500, up=True, addresses=frozenset())
    svc.delete(req("DEL"))  # another plugin's eth0 by now: left alone, and DEL waits
    assert pod1["eth0"].mac == "02:00:00:00:00:01" and dp.settled == [eid]
    svc.add(req(CNI_IFNAME="net1"))
    svc.delete(req("DEL", CNI_IFNAME="net1", CNI_NETNS=""))  # the namespace is gone
    assert dp.settled == [eid, cni.endpoint_id(ENV["CNI_CONTAINERID"], "net1")]


def test_del_sends_a_pool_ports_end_home_before_the_port_goes(
    service: tuple[CniService, FakeDatapath, FakeNetns],
) -> None:
    """A pod on a pool port: DEL moves its end back to the host under the pool's name, so
    the port serves again (no OVSDB change), and only then removes the endpoint's port."""
    svc, dp, ns = service
    eid = cni.endpoint_id(ENV["CNI_CONTAINERID"], "eth0")
    svc.add(req())
    dp.host_ends[eid] = "vq0123456789a"  # as the datapath reports a pool port
    order: list[str] = []
    remove, delete_port = ns.remove, dp.delete_endpoint_port
    ns.remove = lambda *a: order.append("home") or remove(*a)  # type: ignore[method-assign]
    dp.delete_endpoint_port = lambda e: order.append("port") or delete_port(e)  # type: ignore[method-assign]
    svc.delete(req("DEL"))
    assert ns.sent_home == {"eth0": "vr0123456789a"} and order == ["home", "port"]
    assert "eth0" not in ns.spaces["/run/netns/pod1"] and dp.settled == []


def test_a_failed_add_leaks_nothing(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, dp, ns = service
    before = master.snapshot()
    ns.fail = True
    with pytest.raises(cni.CniError) as e:
        svc.add(req())
    assert e.value.code == cni.DATAPATH_FAILURE and "No such file" in e.value.msg
    assert master.snapshot() == before and dp.ports == {}
    with pytest.raises(cni.CniError) as e:
        svc.add(req(config={**CONF, "network": "nope"}))
    assert e.value.code == cni.UNKNOWN_NETWORK and "network default:nope: not found" in e.value.msg
    assert master.snapshot() == before and dp.ports == {}


POD = "/run/netns/pod1"


def default_routes(ns: FakeNetns) -> set[tuple[str, str, str]]:
    return {(r.dst, r.gateway, r.ifname) for r in ns.routes(POD) if r.dst in ("0.0.0.0/0", "::/0")}


def result_routes(result: dict[str, Any], ifname: str) -> set[tuple[str, str, str]]:
    return {(r["dst"], r["gw"], ifname) for r in result.get("routes", [])}


def test_a_second_interface_gets_no_default_route_and_its_result_says_so(
    service: tuple[CniService, FakeDatapath, FakeNetns],
) -> None:
    """Issue 22: net1's result claimed a default route via its gateway that the namespace
    did not have (eth0's was there first), and CHECK of that result failed (102)."""
    svc, _, ns = service
    eth0 = svc.add(req(config={**CONF, "network": "d1"}))
    net1 = svc.add(req(config={**CONF, "network": "d2"}, CNI_IFNAME="net1"))
    assert eth0["routes"] == [
        {"dst": "0.0.0.0/0", "gw": "10.7.0.1"},
        {"dst": "::/0", "gw": "fd07::1"},
    ]
    assert "routes" not in net1
    assert [ip["gateway"] for ip in net1["ips"]] == ["10.6.0.1", "fd06::1"]  # informational
    assert default_routes(ns) == result_routes(eth0, "eth0") | result_routes(net1, "net1")
    svc.check(req("CHECK", {**CONF, "network": "d1", "prevResult": eth0}))
    svc.check(req("CHECK", {**CONF, "network": "d2", "prevResult": net1}, CNI_IFNAME="net1"))
    assert svc.add(req(config={**CONF, "network": "d2"}, CNI_IFNAME="net1")) == net1  # retried
    assert svc.add(req(config={**CONF, "network": "d1"})) == eth0
    # A result claiming a route the namespace lacks is what CHECK exists to catch.
    claimed = {**net1, "routes": [{"dst": "0.0.0.0/0", "gw": "10.6.0.1"}]}
    with pytest.raises(cni.CniError) as e:
        svc.check(req("CHECK", {**CONF, "network": "d2", "prevResult": claimed}, CNI_IFNAME="net1"))
    assert (
        e.value.code == cni.CHECK_FAILED
        and "net1 has no route 0.0.0.0/0 via 10.6.0.1" in e.value.msg
    )
    svc.delete(req("DEL", {**CONF, "network": "d2"}, CNI_IFNAME="net1"))
    assert default_routes(ns) == result_routes(eth0, "eth0")  # eth0's stay
    svc.check(req("CHECK", {**CONF, "network": "d1", "prevResult": eth0}))


def test_routes_the_configuration_asks_for_are_exactly_what_the_interface_gets(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, dp, ns = service
    svc.add(req(config={**CONF, "network": "d1"}))
    routes = [{"dst": "10.99.0.0/16"}, {"dst": "fd99::/48", "gw": "fd06::fe"}]
    asked = {**CONF, "network": "d2", "routes": routes}
    net1 = svc.add(req(config=asked, CNI_IFNAME="net1"))
    assert net1["routes"] == [
        {"dst": "10.99.0.0/16", "gw": "10.6.0.1"},
        {"dst": "fd99::/48", "gw": "fd06::fe"},
    ]
    assert {(r.dst, r.gateway) for r in ns.routes(POD) if r.ifname == "net1"} == {
        ("10.99.0.0/16", "10.6.0.1"), ("fd99::/48", "fd06::fe"),
    }  # fmt: skip
    svc.check(req("CHECK", {**asked, "prevResult": net1}, CNI_IFNAME="net1"))
    # "routes": [] on a first interface: no default route at all.
    ns.spaces["/run/netns/pod2"], ns.tables["/run/netns/pod2"] = {}, set()
    bare = svc.add(req(config={**CONF, "routes": []}, CNI_CONTAINERID="beef" * 16,
                       CNI_NETNS="/run/netns/pod2"))  # fmt: skip
    assert "routes" not in bare and ns.routes("/run/netns/pod2") == frozenset()
    # A default route eth0 has already: refused, and nothing of net2 is left.
    before, ports = master.snapshot(), set(dp.ports)
    with pytest.raises(cni.CniError) as e:
        svc.add(req(config={**asked, "routes": [{"dst": "0.0.0.0/0"}]}, CNI_IFNAME="net2"))
    assert e.value.code == cni.DATAPATH_FAILURE
    assert "route 0.0.0.0/0: the pod has it already via eth0" in e.value.msg
    assert master.snapshot() == before and set(dp.ports) == ports
    assert "net2" not in ns.spaces[POD]


def test_a_route_the_network_cannot_have_is_refused_before_anything_is_booked(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, dp, _ = service
    before = master.snapshot()
    v6 = {**CONF, "network": "d1", "routes": [{"dst": "fd99::/48", "gw": "10.7.0.9"}]}
    with pytest.raises(cni.CniError) as e:
        svc.add(req(config=v6))
    assert e.value.code == cni.INVALID_CONFIG and "is not an IPv6 address" in e.value.msg
    assert master.snapshot() == before and dp.ports == {}


@pytest.mark.parametrize(
    ("method", "error"),
    [
        ("routes", OSError(13, "Permission denied")),  # read while the pod is being plugged
        ("move_into", NetlinkError(101, "Network is unreachable")),  # not an OSError
    ],
)
def test_the_kernel_refusing_the_pods_namespace_is_a_datapath_failure_that_leaks_nothing(
    method: str,
    error: Exception,
    master: RealMaster,
    service: tuple[CniService, FakeDatapath, FakeNetns],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc, dp, ns = service
    before = master.snapshot()

    def refused(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(ns, method, refused)
    with pytest.raises(cni.CniError) as e:
        svc.add(req())
    assert e.value.code == cni.DATAPATH_FAILURE
    assert e.value.msg.startswith("container c0ffeec0ffee: eth0: ") or method == "routes"
    assert str(error.args[-1]) in e.value.msg
    assert master.snapshot() == before and dp.ports == {} and ns.spaces[POD] == {}


def test_the_network_comes_from_the_agents_mirror_and_a_stale_one_is_not_kept(
    master: RealMaster, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the agent's mirror has the network, ADD does not wait for the master's read of
    it; the master's is read meanwhile, and a mirror behind it (the network made again
    with another subnet) costs a second ADD, never a pod on the old network."""
    client = MasterClient(master.url, backoff=0, session=master.session())
    dp = FakeDatapath()
    ns = FakeNetns(dp)
    current = master.state.networks.get("default", "pn")
    mirror: dict[str, Network] = {"pn": current}
    asked: list[str] = []

    def local(tenant: str, name: str) -> Network | None:
        asked.append(f"{tenant}:{name}")
        return mirror.get(name)

    svc = CniService(client, dp, ns, "host1", local_network=local)
    first = svc.add(req())
    assert asked == ["default:pn"] and first["ips"][0]["gateway"] == "10.9.0.1"
    svc.delete(req("DEL"))
    before = master.snapshot()
    mirror["pn"] = current.model_copy(update={"subnet": "10.8.0.0/24", "gateway": "10.8.0.1"})
    with caplog.at_level(logging.WARNING, logger="plugin.cni_service"):
        again = svc.add(req())
    assert again["ips"][0]["address"].startswith("10.9.0.")  # the master's network
    assert again["ips"][0]["gateway"] == "10.9.0.1" and len(dp.ports) == 1
    assert "network default:pn is not what this agent's mirror holds yet" in caplog.text
    svc.delete(req("DEL"))
    assert master.snapshot() == before and dp.ports == {}
    # A network the mirror still has and the master no longer: the master's word on it.
    mirror["gone"] = current.model_copy(update={"networkName": "gone"})
    with pytest.raises(cni.CniError) as e:
        svc.add(req(config={**CONF, "network": "gone"}))
    assert e.value.code == cni.UNKNOWN_NETWORK and "network default:gone: not found" in e.value.msg
    assert master.snapshot() == before and dp.ports == {}
    del mirror["gone"]
    asked.remove("default:gone")
    # A network the mirror does not have yet, and a group's: the master's.
    del mirror["pn"]
    svc.add(req(config={**CONF, "network": "", "group": "web"}))
    svc.add(req(CNI_IFNAME="net1"))
    assert asked[-1] == "default:pn" and len(asked) == 3 and len(dp.ports) == 2


def test_the_pods_interface_is_configured_while_the_switch_takes_its_port(
    master: RealMaster,
) -> None:
    """Once the pod's end is in its namespace and its addresses are booked, its interface
    is configured at once: the switch's port add and flows do not wait for it, nor it for
    them. A plug that fails after that leaves nothing either."""
    client = MasterClient(master.url, backoff=0, session=master.session())
    configured: list[bool] = []

    class Switch(FakeDatapath):
        fail_flows = False

        def plug(self, endpoint_id: str, network: Network, mac: str, mtu: int,
                 into: Any = None) -> str:  # fmt: skip
            name = super().plug(endpoint_id, network, mac, mtu, into)
            into.made.set()  # its own pair, made there
            return name

        def create_endpoint_port(self, *args: Any, **kwargs: Any) -> str:
            deadline = time.monotonic() + 5
            while "eth0" not in ns.spaces[POD] and time.monotonic() < deadline:
                time.sleep(0.005)
            configured.append("eth0" in ns.spaces[POD])  # while the flows are confirmed
            if self.fail_flows:
                raise RuntimeError("the switch refused the flows")
            return super().create_endpoint_port(*args, **kwargs)

    dp = Switch()
    ns = FakeNetns(dp)
    svc = CniService(client, dp, ns, "host1")
    result = svc.add(req())
    assert configured == [True] and result["interfaces"][1]["name"] == "eth0"
    svc.delete(req("DEL"))
    before = master.snapshot()
    dp.fail_flows = True
    with pytest.raises(cni.CniError) as e:
        svc.add(req())
    assert e.value.code == cni.DATAPATH_FAILURE and "refused the flows" in e.value.msg
    assert configured == [True, True]
    assert master.snapshot() == before and dp.ports == {} and ns.spaces[POD] == {}


def test_an_add_of_a_0_3_0_configuration_answers_in_0_3_0(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    """README "CNI": configurations of 0.3.0 work; ADD's result is in their shape (each
    IP with its "version")."""
    svc, dp, _ = service
    out = svc.add(req(config={**CONF, "cniVersion": "0.3.0"}))
    assert out["cniVersion"] == "0.3.0" and out["ips"], out
    for ip in out["ips"]:
        assert ip["version"] == str(ipaddress.ip_interface(ip["address"]).version), ip
    assert master.state.endpoints.get(cni.endpoint_id(ENV["CNI_CONTAINERID"], "eth0"))
    assert dp.ports


def test_pod_labels_choose_the_group_and_become_the_endpoints(
    master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, _, _ = service
    svc.add(req(CNI_ARGS="K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0"))
    ep = master.state.endpoints.get(cni.endpoint_id(ENV["CNI_CONTAINERID"], "eth0"))
    assert (ep.groupName, ep.containerName, ep.labels["app"]) == ("web", "web-0", "web")


@pytest.mark.parametrize("kind", ["perl", "python"])
def test_the_socket_serves_the_executable(
    kind: str, master: RealMaster, service: tuple[CniService, FakeDatapath, FakeNetns]
) -> None:
    svc, _, _ = service
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "cni.sock")
        metrics = AgentMetrics()
        server = make_socket_server(path, create_cni_app(svc, metrics))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            status, out = run({**ENV, cni.SOCKET_ENV: path}, json.dumps(CONF))
            assert status == 0 and out is not None and out["cniVersion"] == "1.0.0"
            bad = {**CONF, "network": "nope"}
            status, out = run({**ENV, cni.SOCKET_ENV: path}, json.dumps(bad))
            assert status == 1 and out is not None and out["code"] == cni.UNKNOWN_NETWORK
            status, out = run({**ENV, "CNI_COMMAND": "DEL", cni.SOCKET_ENV: path}, json.dumps(CONF))
            assert (status, out) == (0, None)  # DEL says nothing when it succeeds
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)  # it is a socket, mode 0600
            assert os.stat(path).st_mode & 0o777 == 0o600
            # The installed launcher, as a runtime execs it: the call goes to the agent as it
            # came, and the answers are run()'s.
            launcher = install(d, kind)
            env = {**ENV, cni.SOCKET_ENV: path}
            status, out = launched(launcher, env, json.dumps(CONF))
            assert status == 0 and out is not None and out["cniVersion"] == "1.0.0"
            assert out["interfaces"][1]["name"] == "eth0"
            assert launched(launcher, env, json.dumps(bad)) == run(env, json.dumps(bad))
            del_env = {**env, "CNI_COMMAND": "DEL"}
            assert launched(launcher, del_env, json.dumps(CONF)) == (0, None)
            for stdin in ("{not json", json.dumps({**CONF, "cniVersion": "0.2.0"})):
                assert launched(launcher, env, stdin) == run(env, stdin)
            version = launched(launcher, {"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}')
            assert version == run({"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}')
            count = "netplugin_docker_requests_total"
            # By the call's command, refusals too (the launcher's bad JSON and version).
            assert metric(metrics, count, method="CNI.ADD", outcome="ok") == 2
            assert metric(metrics, count, method="CNI.ADD", outcome="error") == 3 + 2
            assert metric(metrics, count, method="CNI.DEL", outcome="ok") == 2
        finally:
            server.shutdown()
        # No agent: the checks still come first, then "not answering" (code 11) and why.
        for stdin, code in (("{not json", cni.DECODE_FAILURE), (json.dumps(CONF), 11)):
            status, out = launched(launcher, env, stdin)
            assert status == 1 and out is not None and out["code"] == code, out
        assert "not answering on " + path in out["msg"] and "Connection refused" in out["msg"], out


@pytest.mark.parametrize("kind", ["perl", "python"])
def test_an_answer_without_an_exit_status_is_an_io_failure(kind: str) -> None:
    """Something else on the socket (not an agent of this version): the launcher does not
    print its answer, the full path says what answered."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "cni.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(4)

        asked: list[bytes] = []

        def answer() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    asked.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}")

        threading.Thread(target=answer, daemon=True).start()
        try:
            status, out = launched(
                install(d, kind), {**ENV, cni.SOCKET_ENV: path}, json.dumps(CONF)
            )
        finally:
            listener.close()
    assert status == 1 and out is not None and out["code"] == cni.IO_FAILURE, out
    assert out["msg"] == f"the agent on {path} did not answer {cni.EXEC_URL}"
    assert len(asked) == 1  # an ADD the agent may have done is not sent again


def test_the_perl_launcher_quotes_its_paths_and_passes_arguments(tmp_path: Path) -> None:
    """A Python whose path holds characters Perl would interpolate, or a quote, still runs;
    arguments (``install DIR``) go to the plugin."""
    from cni import launcher

    odd = tmp_path / 'v"e@nv $x'
    odd.mkdir()
    (odd / "python").symlink_to(sys.executable)
    root = str(Path(cni_main.__file__).resolve().parent.parent)
    plugin = tmp_path / "netplugin-cni"
    plugin.write_text(launcher.launcher("perl", str(odd / "python"), root))
    plugin.chmod(0o755)
    version = launched(str(plugin), {"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}')
    assert version == run({"CNI_COMMAND": "VERSION"}, '{"cniVersion": "0.4.0"}')
    into = tmp_path / "bin"
    into.mkdir()
    made = subprocess.run([str(plugin), "install", "--launcher", "python", str(into)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0 and made.stdout.strip() == str(into / "netplugin-cni")
    assert (into / "netplugin-cni").read_text().startswith(f"#!{odd / 'python'} -IS")


def test_the_launchers_install_whole_and_say_what_they_run(tmp_path: Path) -> None:
    from cni import launcher

    perl = Path(install(str(tmp_path), "perl")).read_text()
    assert perl.startswith("#!/usr/bin/perl\n") and sys.executable in perl
    python = Path(install(str(tmp_path), "python")).read_text()
    assert python.startswith(f"#!{sys.executable} -IS\n")
    assert [p.name for p in tmp_path.iterdir()] == ["netplugin-cni"]  # nothing staged left
    assert launcher.chosen("auto") == ("perl" if os.access("/usr/bin/perl", os.X_OK) else "python")
    # A path with a quote in it is quoted for Perl.
    assert launcher._perl_str("/o'pt\\x") == "'/o\\'pt\\\\x'"
    with pytest.raises(ValueError):
        launcher.launcher("sh", sys.executable, "/")
    assert launcher.install_main(["--launcher", "sh", str(tmp_path)]) == 2


def metric(metrics: AgentMetrics, name: str, **labels: str) -> float:
    text = metrics.exposition().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def launched(launcher: str, env: dict[str, str], stdin: str) -> tuple[int, Any]:
    """Exec the launcher as a runtime does: (exit status, its JSON answer or None)."""
    proc = subprocess.run(
        [launcher], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stderr == ""
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


# --- the kubeconfig reader ---

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: k
contexts:
- name: k
  context: {cluster: c, user: u}
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443/", certificate-authority-data: "Q0E="}
users:
- name: u
  user: {token: abc}
"""


def test_a_kubeconfigs_current_context() -> None:
    api = api_from_kubeconfig(KUBECONFIG)
    assert (api.server, api.token) == ("https://10.0.0.1:6443", "abc")
    assert Path(api.ca_file).read_bytes() == b"CA"
    with pytest.raises(ValueError, match="no current-context"):
        api_from_kubeconfig("apiVersion: v1\n")


class FakeKubeSession:
    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.urls: list[str] = []

    def get(self, url: str, timeout: float) -> Any:
        self.urls.append(url)
        status = 200 if url.endswith("/pods/web-0") else 404
        body = {"metadata": {"labels": {"io.contiv.network": "pn", "app": "web"}}}
        return type("R", (), {"status_code": status, "json": lambda self: body,
                              "raise_for_status": lambda self: None})()  # fmt: skip


def test_pod_labels_from_the_api() -> None:
    session = FakeKubeSession()
    labels = PodLabels(api_from_kubeconfig(KUBECONFIG), session)  # type: ignore[arg-type]
    assert labels("ns", "web-0") == {"io.contiv.network": "pn", "app": "web"}
    assert labels("ns", "gone") == {}
    assert session.urls[0] == "https://10.0.0.1:6443/api/v1/namespaces/ns/pods/web-0"
    assert session.headers["Authorization"] == "Bearer abc"
