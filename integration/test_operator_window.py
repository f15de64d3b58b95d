"""The operator's window, end to end: a real netmaster (gunicorn, 2 workers) and a real
netplugin agent on the host's OVS (a bridge and OpenFlow port of this test's own, no
dockerd: --docker-host names a socket nobody serves), Docker's calls made straight at the
plugin socket, then `netctl host inspect` on the agent's API socket and TCP listener, and
both /metrics, whose counts must have moved by exactly what was done.

The agent garbage-collects every netplugin veth on the host at start, so this test must not
run beside another agent that has containers: run it under the docker lock, like the tests
that use docker (flock /tmp/docker.lock pytest integration/test_operator_window.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import requests_unixsocket
from prometheus_client.parser import text_string_to_metric_families

from testbed.master import MasterProcess, free_port
from testbed.plugin import serving
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent


def value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    log: Path
    socket: str
    api_socket: str
    api_url: str
    bridge: str

    def post(self, method: str, body: dict[str, Any]) -> requests.Response:
        with requests_unixsocket.Session() as s:
            base = "http+unix://" + self.socket.replace("/", "%2F")
            return s.post(f"{base}/{method}", data=json.dumps(body), timeout=60)

    def call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.post(method, body)
        assert r.status_code == 200, f"{method}: {r.status_code} {r.text}"
        return dict(r.json())

    def inspect(self, section: str) -> Any:
        return requests.get(f"{self.api_url}/inspect/{section}", timeout=30).json()

    def metrics(self) -> str:
        return requests.get(f"{self.api_url}/metrics", timeout=30).text


def flows_seen(agent: Agent) -> str:
    """What a failed wait for the flows should show: the difference, the controller's
    state (its last error, the switches it saw connect) and the agent's log's end."""
    flows = agent.inspect("flows")
    keys = ("connected", "error", "generation", "reconciledGeneration", "settled")
    brief = {k: flows.get(k) for k in keys}
    diff = {k: flows.get(k) for k in ("missing", "changed", "extra")}
    switch = agent.inspect("driver").get("switch")
    ovs = subprocess.run(["ovs-vsctl", "show"], capture_output=True, text=True).stdout
    controllers = [line.strip() for line in ovs.splitlines() if "Controller" in line]
    return (
        f"{brief} {diff}\nswitch: {switch}\ncontrollers on the host: {controllers}\n"
        f"agent log:\n{agent.log.read_text()[-4000:]}"
    )


def netctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [str(BIN / "netctl"), *args], capture_output=True, text=True, timeout=60, env=env
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MasterProcess, Agent]]:
    tmp = tmp_path_factory.mktemp("window")
    master = MasterProcess(tmp / "data", extra=["--workers", "2"]).start()
    tag = uuid.uuid4().hex[:6]
    bridge, api_port = f"npw{tag}", free_port()
    agent: Agent | None = None
    try:
        log = tmp / "netplugin.log"
        cmd = [
            str(BIN / "netplugin"),
            *("--netmaster", master.url, "--data-dir", str(tmp / "data")),
            *("--socket", str(tmp / "plugin.sock"), "--api-socket", str(tmp / "api.sock")),
            *("--cni-socket", str(tmp / "cni.sock")),
            *("--api-listen", f"127.0.0.1:{api_port}", "--bridge", bridge),
            *("--of-port", str(free_port()), "--host", f"window-{tag}"),
            *("--docker-host", f"unix://{tmp / 'no-dockerd.sock'}", "--audit-interval", "0"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETPLUGIN_")}
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        agent = Agent(
            proc, log, str(tmp / "plugin.sock"), str(tmp / "api.sock"),
            f"http://127.0.0.1:{api_port}", bridge,
        )  # fmt: skip

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"netplugin exited:\n{log.read_text()[-3000:]}")
            if not (serving(agent.socket) and serving(agent.api_socket)):
                return False
            return bool(agent.inspect("driver")["ready"])

        wait_for(ready, 30, "netplugin resynced and serving its sockets", interval=0.1)
        yield master, agent
    finally:
        if agent is not None and agent.proc.poll() is None:
            agent.proc.send_signal(signal.SIGTERM)
            try:
                agent.proc.wait(15)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait()
        master.stop()
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], check=False)


def test_docker_calls_show_in_the_window_and_in_both_metrics(
    stack: tuple[MasterProcess, Agent],
) -> None:
    master, agent = stack
    eid = uuid.uuid4().hex * 2
    net_id = uuid.uuid4().hex * 2
    subnet = f"10.251.{int(eid[:2], 16) % 200 + 20}.0/24"
    agent_before, master_before = agent.metrics(), requests.get(f"{master.url}/metrics").text

    # `docker network create` and `docker run`, as dockerd calls the plugin.
    pool = agent.call(
        "IpamDriver.RequestPool",
        {"AddressSpace": "", "Pool": subnet, "SubPool": "", "V6": False, "Options": {}},
    )["PoolID"]
    gw_opts = {"RequestAddressType": "com.docker.network.gateway"}
    gateway = agent.call(
        "IpamDriver.RequestAddress", {"PoolID": pool, "Address": "", "Options": gw_opts}
    )["Address"]
    agent.call(
        "NetworkDriver.CreateNetwork",
        {
            "NetworkID": net_id,
            # A tag of its own: gateway ports are named by tag alone, and its bridge is not
            # the one the host's other agents use (a port name is the whole switch's).
            "Options": {
                "com.docker.network.generic": {
                    "name": f"win{eid[:6]}",
                    "pkt-tag": str(6000 + int(eid[:3], 16) % 3000),
                }
            },
            "IPv4Data": [{"AddressSpace": "", "Pool": subnet, "Gateway": gateway}],
            "IPv6Data": [],
        },
    )
    address = agent.call(
        "IpamDriver.RequestAddress", {"PoolID": pool, "Address": "", "Options": None}
    )["Address"]
    iface = {"Address": address, "AddressIPv6": "", "MacAddress": ""}
    body = {"NetworkID": net_id, "EndpointID": eid, "Interface": iface, "Options": {}}
    agent.call("NetworkDriver.CreateEndpoint", body)
    unknown = {**body, "NetworkID": "0" * 64, "EndpointID": "1" * 64}
    assert agent.post("NetworkDriver.CreateEndpoint", unknown).status_code >= 400

    # The window: netctl on the unix socket, tables and JSON; the TCP listener too.
    out = netctl("host", "inspect", "--socket", agent.api_socket)
    assert out.returncode == 0, out.stderr
    assert "Endpoints:" in out.stdout and "window-" in out.stdout
    out = netctl("host", "inspect", "--socket", agent.api_socket, "--json", "endpoints")
    assert out.returncode == 0, out.stderr
    (ep,) = json.loads(out.stdout)
    assert ep["endpointID"] == eid and ep["ipv4"] == address.split("/")[0]
    assert ep["ofport"] > 0 and ep["ovsPort"] == ep["hostVeth"]
    ports = subprocess.run(
        ["ovs-vsctl", "list-ports", agent.bridge], capture_output=True, text=True, check=True
    ).stdout.split()
    assert ep["ovsPort"] in ports
    out = netctl("host", "inspect", "--url", agent.api_url, "endpoints")
    assert out.returncode == 0 and eid[:12] in out.stdout, out.stderr
    wait_for(
        lambda: agent.inspect("flows")["inSync"],
        30,
        "the switch holds the flows",
        last=lambda: flows_seen(agent),
    )
    flows = agent.inspect("flows")
    assert flows["expected"] == flows["onSwitch"] > 0 and flows["missing"] == []
    cluster = agent.inspect("cluster")
    assert cluster["synced"] and cluster["storeRevision"] >= cluster["revision"] > 0
    assert requests.post(f"{agent.api_url}/inspect/driver", timeout=10).status_code == 405

    agent_mid = agent.metrics()
    assert value(agent_mid, "netplugin_local_endpoints") == 1
    agent.call("NetworkDriver.DeleteEndpoint", {"NetworkID": net_id, "EndpointID": eid})
    agent.call("IpamDriver.ReleaseAddress", {"PoolID": pool, "Address": address})
    for _ in range(6):
        assert requests.get(f"{master.url}/version", timeout=10).ok  # a new connection each

    # The agent's metrics moved by what was done.
    agent_after = agent.metrics()

    def agent_moved(name: str, **labels: str) -> float:
        return value(agent_after, name, **labels) - value(agent_before, name, **labels)

    docker = "netplugin_docker_requests_total"
    assert agent_moved(docker, method="NetworkDriver.CreateEndpoint", outcome="ok") == 1
    assert agent_moved(docker, method="NetworkDriver.CreateEndpoint", outcome="error") == 1
    assert agent_moved(docker, method="IpamDriver.RequestAddress", outcome="ok") == 2
    assert agent_moved(docker, method="NetworkDriver.DeleteEndpoint", outcome="ok") == 1
    assert agent_moved("netplugin_docker_request_duration_seconds_count") == 8
    assert agent_moved("netplugin_reconciles_total") >= 1
    assert agent_moved("netplugin_flows_changed_total", op="added") > 0
    assert agent_moved("netplugin_flows_changed_total", op="deleted") > 0
    assert value(agent_after, "netplugin_local_endpoints") == 0

    # The master's: every worker's requests added up, whichever worker answers the scrape.
    scrapes = [requests.get(f"{master.url}/metrics", timeout=10).text for _ in range(4)]
    for master_after in scrapes:

        def master_moved(name: str, text: str = master_after, **labels: str) -> float:
            return value(text, name, **labels) - value(master_before, name, **labels)

        requests_ = "netmaster_http_requests_total"
        route = "/api/v1/alloc/endpoints"
        assert master_moved(requests_, method="POST", route=route, status="201") == 1
        assert master_moved(requests_, method="GET", route="/version", status="200") == 6
        allocations = "netmaster_allocations_total"
        assert master_moved(allocations, kind="endpoint", op="allocate") == 1
        assert master_moved(allocations, kind="endpoint", op="release") == 1
        assert value(master_after, "netmaster_leader") == 1

    agent.call("NetworkDriver.DeleteNetwork", {"NetworkID": net_id})
    agent.call("IpamDriver.ReleaseAddress", {"PoolID": pool, "Address": gateway})
    agent.call("IpamDriver.ReleasePool", {"PoolID": pool})
