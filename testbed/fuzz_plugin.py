"""Fuzzing the plugin's Docker API: every NetworkDriver.*, IpamDriver.* and Plugin.* method,
through the plugin's app, its Driver and the production AgentDatapath over the datapath agent
with fake effects (fakes_datapath.py), to the real master (master.app on a temporary store).

``scenarios()`` draws short sequences of Docker calls with Docker-shaped bodies whose fields
are right-ish or wrong (IDs known, unknown and hostile: "EID?x", "../../networks/..."), plus
the arbitrary, broken, nested and oversized bodies of fuzz_json.py. ``run_scenario`` plays
one against a fresh stack on which Docker already made a network (pool, gateway) and ran a
container on it (address, endpoint, join), and checks every answer:

- no 5xx: the plugin answers 5xx only when the master is unreachable or answers nonsense, or
  the host's datapath fails; none of these happens here, so a 5xx is a bug (an unhandled
  exception says "internal error" and is 500);
- every error is {"Err"} (IpamDriver: {"Err","Error"}, the same text), non-empty;
- a refused call changes nothing in the master's store, and leaves nothing behind: no OVS
  port, veth, NAT rule or flow, no network or endpoint in the driver's memory;
- a call that only reads (Join, EndpointOperInfo, ...), or that deletes or releases
  something no one created, changes nothing in the master's store, whatever its answer.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from hypothesis import strategies as st

from common.jsonbody import BodyError, decode_body
from datapath.host import HostConfig, HostDatapath
from plugin.app import create_app
from plugin.daemon import AgentDatapath
from plugin.driver import Driver
from plugin.master_client import MasterClient
from plugin.options import GATEWAY_REQUEST, GENERIC, INTERNAL, MAC_OPTION, PORTMAP

from .fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs
from .fuzz_json import any_text, body, json_values, junk, mix, record, weighted
from .fuzz_master import snapshot
from .fuzz_tally import CHANGED, CRASH, LEAK, SHAPE, STRAY, Problem, Tally, short
from .real_master import RealMaster, real_master

NID, EID, POOL = "f" * 64, "e" * 64, "default:10.5.0.0/24"  # seeded as Docker would
ACCEPT = {"Accept": "application/vnd.docker.plugins.v1.2+json"}
READ_ONLY = {
    "Plugin.Activate",
    "NetworkDriver.GetCapabilities",
    "NetworkDriver.EndpointOperInfo",
    "NetworkDriver.Join",
    "NetworkDriver.Leave",
    "NetworkDriver.ProgramExternalConnectivity",
    "NetworkDriver.RevokeExternalConnectivity",
    "NetworkDriver.DiscoverNew",
    "NetworkDriver.DiscoverDelete",
    "NetworkDriver.AllocateNetwork",
    "NetworkDriver.FreeNetwork",
    "IpamDriver.GetCapabilities",
    "IpamDriver.GetDefaultAddressSpaces",
}
# Deleting or releasing what the named ID stands for: with an ID no one created, a no-op.
RELEASES = {
    "NetworkDriver.DeleteNetwork": "NetworkID",
    "NetworkDriver.DeleteEndpoint": "EndpointID",
    "IpamDriver.ReleasePool": "PoolID",
    "IpamDriver.ReleaseAddress": "PoolID",
}

# --- Docker-shaped values ---
hostile = [f"{EID}?x", f"{EID}#x", f"x/../{EID}", f"../../networks/default:{NID[:12]}", "%2F"]
network_ids = mix((4, st.just(NID)), (4, st.sampled_from(["f2" * 32, "f3" * 32, "", *hostile])))
endpoint_ids = mix((4, st.just(EID)), (4, st.sampled_from(["e2" * 32, "e3" * 32, "", *hostile])))
pool_ids = mix(
    (4, st.just(POOL)),
    (4, st.sampled_from(["default:10.6.0.0/24", f"{POOL}?x", f"{POOL}/../x", "../pools/x", ""])),
)
pools = st.sampled_from(["10.5.0.0/24", "10.6.0.0/24", "10.7.0.0/30", "fd00::/64", "", "bad"])
sub_pools = st.sampled_from(["", "", "10.5.0.128/25", "10.6.0.0/28", "10.9.0.0/24", "x"])
cidr_addresses = st.sampled_from(
    ["10.5.0.9/24", "10.5.0.9", "10.5.0.1/24", "10.6.0.3/24", "", "fd00::5/64", "10.5.0.300/24"]
)
cidr_addresses |= st.sampled_from(["abc/24", "10.5.0.9/", "/24", "::/64", "10.5.0.2/24"])
macs = st.sampled_from(["", "02:42:0a:05:00:63", "zz:zz", "ff:ff:ff:ff:ff:ff"])
names = st.sampled_from(["", "default", "net1", "blue", "a" * 65, "bad name", NID[:12]])
texts = weighted(names, any_text)


ids = {"NetworkID": network_ids, "EndpointID": endpoint_ids}
generic = record(
    {},
    {
        "tenant": texts,
        "name": texts,
        "encap": st.sampled_from(["vxlan", "vlan", "gre", ""]),
        "pkt-tag": st.sampled_from(["100", "0", "4095", "x", "-1", "16777216", 7]),
        "network": texts,
        "group": texts,
    },
)
network_options = record(
    {},
    {
        "com.docker.network.enable_ipv6": st.booleans(),
        GENERIC: generic,
        INTERNAL: st.booleans() | st.sampled_from(["true", "1", "no"]),
    },
)
ipam_datum = record(
    {"Pool": pools, "Gateway": cidr_addresses},
    {"AddressSpace": texts, "AuxAddresses": st.dictionaries(texts, cidr_addresses, max_size=2)},
)
ipam_data = mix((4, st.lists(ipam_datum, min_size=1, max_size=1)), (1, st.lists(ipam_datum)))
port = record(
    {"Proto": st.sampled_from([6, 17, 1, "6"]), "Port": st.sampled_from([80, 0, "80", 70000])},
    {
        "IP": cidr_addresses,
        "HostIP": st.sampled_from(["", "127.0.0.1", "::", "fd00::1", "x", "1.2.3.4 -j ACCEPT"]),
        "HostPort": st.sampled_from([8080, 0, "8080", "x", -1, 70000, True]),
        "HostPortEnd": st.sampled_from([0, 8080, 8081]),
    },
)
interface = record(
    {}, {"Address": cidr_addresses, "AddressIPv6": cidr_addresses, "MacAddress": macs}
)
discovery = record({"DiscoveryType": st.sampled_from([0, 1, 2])}, {"DiscoveryData": json_values})
BODIES: dict[str, st.SearchStrategy[dict]] = {
    "Plugin.Activate": st.just({}),
    "NetworkDriver.GetCapabilities": st.just({}),
    "NetworkDriver.CreateNetwork": record(
        {"NetworkID": network_ids},
        {"Options": network_options, "IPv4Data": ipam_data, "IPv6Data": ipam_data},
    ),
    "NetworkDriver.DeleteNetwork": record({"NetworkID": network_ids}),
    "NetworkDriver.CreateEndpoint": record(
        ids, {"Interface": interface, "Options": st.dictionaries(texts, json_values, max_size=2)}
    ),
    "NetworkDriver.EndpointOperInfo": record(ids),
    "NetworkDriver.DeleteEndpoint": record(ids),
    "NetworkDriver.Join": record(
        ids, {"SandboxKey": st.sampled_from(["/var/run/docker/netns/x", ""]), "Options": generic}
    ),
    "NetworkDriver.Leave": record(ids),
    "NetworkDriver.ProgramExternalConnectivity": record(
        ids, {"Options": record({PORTMAP: mix((4, st.lists(port, max_size=2)), (1, junk))})}
    ),
    "NetworkDriver.RevokeExternalConnectivity": record(ids),
    "NetworkDriver.DiscoverNew": discovery,
    "NetworkDriver.DiscoverDelete": discovery,
    "NetworkDriver.AllocateNetwork": record({"NetworkID": network_ids}, {"IPv4Data": ipam_data}),
    "NetworkDriver.FreeNetwork": record({"NetworkID": network_ids}),
    "IpamDriver.GetCapabilities": st.just({}),
    "IpamDriver.GetDefaultAddressSpaces": st.just({}),
    "IpamDriver.RequestPool": record(
        {},
        {
            "AddressSpace": st.sampled_from(["", "LocalDefault", "GlobalDefault"]),
            "Pool": pools,
            "SubPool": sub_pools,
            "V6": st.booleans(),
            "Options": st.dictionaries(
                st.sampled_from(["tenant", "network", "x"]), texts, max_size=2
            ),
        },
    ),
    "IpamDriver.ReleasePool": record({"PoolID": pool_ids}),
    "IpamDriver.RequestAddress": record(
        {"PoolID": pool_ids},
        {
            "Address": cidr_addresses,
            "Options": record(
                {},
                {"RequestAddressType": st.sampled_from([GATEWAY_REQUEST, "x"]), MAC_OPTION: macs},
            ),
        },
    ),
    "IpamDriver.ReleaseAddress": record({"PoolID": pool_ids, "Address": cidr_addresses}),
}
UNKNOWN = ["NetworkDriver.Frobnicate", "IpamDriver.Frobnicate", "Plugin.Deactivate", "x", ""]


@dataclass(frozen=True)
class Call:
    method: str
    body: bytes
    fields: Any = None  # the JSON object sent, if the body is one

    def __str__(self) -> str:
        return f"POST /{self.method} {short(self.body)}"


@st.composite
def calls(draw: st.DrawFn) -> Call:
    method = draw(st.sampled_from([*sorted(BODIES), "NetworkDriver.Frobnicate", "other"]))
    if method == "other":
        method = draw(st.sampled_from(UNKNOWN))
    raw = draw(body(BODIES.get(method, st.just({}))))
    try:
        sent = decode_body(raw)
    except BodyError:
        sent = None
    return Call(method, raw, sent if isinstance(sent, dict) else None)


def scenarios(most: int = 5) -> st.SearchStrategy[list[Call]]:
    return st.lists(calls(), min_size=1, max_size=most)


# --- the stack under test ---


@dataclass
class Stack:
    master: RealMaster
    client: FlaskClient
    driver: Driver
    ovs: FakeOvs
    links: FakeLinks
    iptables: FakeIptables
    controller: FakeController
    agent: HostDatapath

    def call(self, method: str, payload: Any = None, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(payload).encode()
        return self.client.post(f"/{method}", data=data, headers=ACCEPT)

    def datapath(self) -> Any:
        """What the host holds: OVS ports, veths, NAT rules, flows; the driver's memory
        (once deleted endpoints' ports and veths are removed: that follows the answer)."""
        assert self.agent.settle(5) == 0, "a deleted endpoint's port is still being removed"
        flows = frozenset(self.controller.pushed[-1]) if self.controller.pushed else None
        memory = (dict(self.driver._networks), dict(self.driver._endpoints))
        nat = {chain: list(rules) for chain, rules in self.iptables.chains.items()}
        return sorted(self.ovs.ports), sorted(self.links.links), nat, flows, memory


@contextmanager
def plugin_stack(directory: Path) -> Iterator[Stack]:
    with real_master(directory) as m:
        client = MasterClient(m.url, backoff=0, session=m.session())
        ovs, ctl, ipt, links = FakeOvs(), FakeController(), FakeIptables(), FakeLinks()
        agent = HostDatapath(
            HostConfig(datapath_type="netdev"), ovs, ctl, ipt, links, FakeHostPorts()
        )
        agent.ready_timeout = 0.1
        agent.start()
        agent.resync([], [])
        driver = Driver(client, AgentDatapath(agent, client), host="host1")
        yield Stack(m, create_app(driver).test_client(), driver, ovs, links, ipt, ctl, agent)


def seed(stack: Stack) -> None:
    """`docker network create --subnet 10.5.0.0/24` and `docker run --net` on it."""
    pool = stack.call("IpamDriver.RequestPool", {"Pool": "10.5.0.0/24"}).get_json()
    assert pool["PoolID"] == POOL, pool
    gw = stack.call(
        "IpamDriver.RequestAddress",
        {"PoolID": POOL, "Options": {"RequestAddressType": GATEWAY_REQUEST}},
    )
    v4 = [{"Pool": "10.5.0.0/24", "Gateway": gw.get_json()["Address"]}]
    r = stack.call("NetworkDriver.CreateNetwork", {"NetworkID": NID, "IPv4Data": v4})
    assert r.status_code == 200, r.get_json()
    address = stack.call("IpamDriver.RequestAddress", {"PoolID": POOL}).get_json()["Address"]
    iface = {"Address": address}
    r = stack.call(
        "NetworkDriver.CreateEndpoint", {"NetworkID": NID, "EndpointID": EID, "Interface": iface}
    )
    assert r.status_code == 200, r.get_json()
    r = stack.call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": EID})
    assert r.status_code == 200, r.get_json()


def error_shape(method: str, data: bytes) -> str | None:
    """What is wrong with an error body, or None if it is Docker's shape for ``method``."""
    try:
        answer = json.loads(data)
    except ValueError:
        return f"not JSON: {short(data)}"
    want = {"Err", "Error"} if method.startswith("IpamDriver.") else {"Err"}
    if not isinstance(answer, dict) or set(answer) != want:
        return f"not {sorted(want)}: {short(data)}"
    if not isinstance(answer["Err"], str) or not answer["Err"]:
        return f"an empty or non-string Err: {short(data)}"
    if answer.get("Error", answer["Err"]) != answer["Err"]:
        return f"Err and Error differ: {short(data)}"
    return None


def _unhandled(method: str, data: bytes) -> bool:
    """Whether the answer is the plugin's word for an exception no handler expected."""
    try:
        err = json.loads(data).get("Err", "")
    except (ValueError, AttributeError):
        return False
    return isinstance(err, str) and err.startswith(f"{method.partition('.')[2]}: internal error:")


def problems(
    call: Call, status: int, data: bytes, before: Any, after: Any, known: set[str]
) -> list[Problem]:
    """What an answer breaks of the properties in the module's docstring; ``before`` and
    ``after`` are (master snapshot, datapath) pairs, ``known`` the IDs created so far."""
    found: list[Problem] = []
    text = str(call)
    if status >= 500 or _unhandled(call.method, data):
        found.append(Problem(CRASH, text, f"{status} {short(data, 300)}"))
    if status >= 400:
        wrong = error_shape(call.method, data)
        if wrong is not None:
            found.append(Problem(SHAPE, text, f"{status} {wrong}"))
        if before[0] != after[0]:
            found.append(Problem(CHANGED, text, f"{status} {short(data, 300)}"))
        if before[1] != after[1]:
            found.append(Problem(LEAK, text, f"{status} {short(data, 300)}: {after[1]}"))
        return found
    named = RELEASES.get(call.method)
    unknown = named is not None and (call.fields or {}).get(named) not in known
    if (call.method in READ_ONLY or unknown) and before[0] != after[0]:
        why = "only reads" if call.method in READ_ONLY else f"names an unknown {named}"
        found.append(Problem(STRAY, text, f"{status}: it {why}, yet the store changed"))
    return found


def learn(call: Call, status: int, data: bytes, known: set[str]) -> None:
    """Remember the IDs an accepted call created (a pool's ID comes in the answer)."""
    if status != 200 or call.fields is None:
        return
    for name in ("NetworkID", "EndpointID"):
        if call.method in ("NetworkDriver.CreateNetwork", "NetworkDriver.CreateEndpoint"):
            value = call.fields.get(name)
            if isinstance(value, str):
                known.add(value)
    if call.method == "IpamDriver.RequestPool":
        known.add(str(json.loads(data).get("PoolID")))


def run_scenario(calls_: list[Call], tally: Tally) -> None:
    """Play ``calls_`` against a fresh seeded stack; count every answer and problem."""
    with tempfile.TemporaryDirectory(prefix="fuzz-plugin-") as d, plugin_stack(Path(d)) as s:
        seed(s)
        known = {NID, EID, POOL}
        for call in calls_:
            before = snapshot(s.master), s.datapath()
            try:
                r = s.call(call.method, raw=call.body)
            except Exception as e:  # the test client itself failed: the app let it escape
                tally.count(599, [Problem(CRASH, str(call), f"{type(e).__name__}: {e}")])
                continue
            status, data = r.status_code, r.get_data()
            after = snapshot(s.master), s.datapath()
            tally.count(status, problems(call, status, data, before, after, known))
            learn(call, status, data, known)
