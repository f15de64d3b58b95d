"""veth pairs against the real kernel: create, idempotence, move into a netns, delete."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from datapath.netns import move_into, read, remove
from datapath.veth import (
    HOST_END_SYSCTLS,
    create_veth,
    create_veth_in_netns,
    delete_veth,
    disable_tx_offload,
    host_veths,
    veth_names,
)


def _link(name: str, netns: str | None = None) -> dict | None:
    with IPRoute(netns=netns, flags=0) if netns else IPRoute() as ip:
        idx = ip.link_lookup(ifname=name)
        if not idx:
            return None
        link = ip.link("get", index=idx[0])[0]
        return {"mtu": link.get("mtu"), "address": link.get("address"), "state": link.get("state")}


def test_veth_lifecycle() -> None:
    eid = uuid.uuid4().hex * 2
    host, container = veth_names(eid)
    ns = f"np-veth-{eid[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        assert create_veth(eid, "02:42:0a:00:00:07", 1450) == (host, container)
        assert _link(host)["mtu"] == 1450 and _link(host)["state"] == "up"
        assert _link(container) == {"mtu": 1450, "address": "02:42:0a:00:00:07", "state": "down"}
        assert create_veth(eid, "02:42:0a:00:00:07", 1450) == (host, container)  # idempotent
        assert host in host_veths()
        for family, key, value in HOST_END_SYSCTLS:
            path = Path(f"/proc/sys/net/{family}/conf/{host}/{key}")
            assert path.read_text().strip() == value, path
        with IPRoute() as ip:  # no IPv6 link-local: the host stack stays off the port
            assert not ip.get_addr(index=ip.link_lookup(ifname=host)[0])
        disable_tx_offload(container)  # an ioctl, not a process
        out = subprocess.run(["ethtool", "-k", container], capture_output=True, text=True).stdout
        assert "tx-checksumming: off" in out
        assert "tx-tcp-segmentation: off" in out  # needs TX checksums: off with them
        with pytest.raises(OSError):
            disable_tx_offload("np-no-such-if")

        # Docker moves the container end into the sandbox; deleting the host end removes it.
        with IPRoute() as ip:
            ip.link(
                "set", index=ip.link_lookup(ifname=container)[0], net_ns_fd=f"/var/run/netns/{ns}"
            )
        assert _link(container) is None and _link(container, ns) is not None
        assert delete_veth(eid)
        assert _link(host) is None and _link(container, ns) is None
        assert not delete_veth(eid)
    finally:
        delete_veth(eid)
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_pool_port_is_readied_given_back_and_known_by_its_record(tmp_path: Path) -> None:
    from datapath.poollinks import NetlinkPoolLinks
    from datapath.portpool import PoolLink, PoolPort, Shape, pool_names
    from datapath.veth import tx_checksumming

    key = uuid.uuid4().hex[:11]
    host, container = pool_names(key)
    ns = f"np-pool-{key[:6]}"
    links = NetlinkPoolLinks(tmp_path / "records")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        links.create_pool_veth(host, container, Shape(1450, offloads_off=True))
        assert _link(host)["state"] == "up" and _link(container)["state"] == "down"
        assert _link(host)["mtu"] == _link(container)["mtu"] == 1450
        assert not tx_checksumming(container)
        for family, key_, value in HOST_END_SYSCTLS:
            path = Path(f"/proc/sys/net/{family}/conf/{host}/{key_}")
            assert path.read_text().strip() == value, path
        before = _link(container)
        port = PoolPort(host, container, 7, offloads_off=True, mtu=1450)
        eid = "ab" * 32
        # Of the endpoint's shape already: the kernel is not touched, the record is written.
        with _link_events() as events:
            links.claim(port, eid, Shape(1450, offloads_off=True))
        assert events() == [] and _link(container) == before
        assert links.survey()[host] == PoolLink(eid, True)
        assert (tmp_path / "records" / host).read_text() == eid
        # Docker hands it back to the host's namespace: the port may serve again.
        assert links.release(port) and links.survey()[host] == PoolLink("", True)
        # The next endpoint keeps its offloads and has another MTU: both change.
        links.claim(port, "cd" * 32, Shape(1400, offloads_off=False))
        assert tx_checksumming(container) and _link(container)["mtu"] == _link(host)["mtu"] == 1400
        # A container end that stays away (a pod's namespace): not reusable.
        with IPRoute() as ip:
            idx = ip.link_lookup(ifname=container)[0]
            ip.link("set", index=idx, net_ns_fd=f"/var/run/netns/{ns}")
        assert not links.release(port) and links.survey()[host] == PoolLink("", False)
        with pytest.raises(OSError, match="not whole"):
            links.claim(port, eid, Shape(1400))
        # An older netplugin recorded the endpoint in the host end's alias: still known.
        subprocess.run(["ip", "link", "set", host, "alias", eid], check=True)
        assert links.survey()[host] == PoolLink(eid, False)
        links.discard(host)
        assert host not in links.survey() and list((tmp_path / "records").iterdir()) == []
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.contextmanager
def _link_events() -> Iterator[Callable[[], list[str]]]:
    """The link changes the kernel reports in this namespace meanwhile (``ip monitor``)."""
    mon = subprocess.Popen(["ip", "-o", "monitor", "link"], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    time.sleep(0.2)  # subscribed
    try:
        yield lambda: lines
    finally:
        time.sleep(0.2)  # what was reported has arrived
        mon.terminate()
        out, _ = mon.communicate(timeout=5)
        lines += [line for line in out.splitlines() if line.strip()]


def test_a_veth_made_in_the_pods_namespace() -> None:
    """CNI's pair without the move: the pod's end is made in its namespace, named; the
    namespace side (addresses, routes) then finds it there; deleting the host end removes
    both; a name taken in the namespace makes nothing."""
    eid = uuid.uuid4().hex * 2
    host, container = veth_names(eid)
    ns = f"np-vethns-{eid[:6]}"
    path = f"/run/netns/{ns}"
    mac = "02:42:0a:00:00:09"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        assert create_veth_in_netns(eid, mac, 1400, path, "eth0", tx_offload=False) == host
        assert _link(host)["mtu"] == 1400 and _link(host)["state"] == "up"
        assert _link(container) is None  # nothing of it here but the host end
        assert _link("eth0", ns) == {"mtu": 1400, "address": mac, "state": "down"}
        out = subprocess.run(
            ["ip", "netns", "exec", ns, "ethtool", "-k", "eth0"], capture_output=True, text=True
        ).stdout
        assert "tx-checksumming: off" in out
        for family, key, value in HOST_END_SYSCTLS:
            path_ = Path(f"/proc/sys/net/{family}/conf/{host}/{key}")
            assert path_.read_text().strip() == value, path_
        with IPRoute() as ip:
            index = ip.link_lookup(ifname=host)[0]
        assert create_veth_in_netns(eid, mac, 1400, path, "eth0") == host  # kept as it is
        with IPRoute() as ip:
            assert ip.link_lookup(ifname=host) == [index]
        # The namespace side of an ADD finds it in place: up, addressed, routed.
        move_into(container, path, "eth0", ["10.77.0.5/24"], [("0.0.0.0/0", "10.77.0.1")])
        there = read(path, "eth0")
        assert there is not None and there.up and there.addresses == {"10.77.0.5/24"}
        assert not remove(path, "eth0", "02:00:00:00:00:01")  # another MAC: not ours, kept
        assert remove(path, "eth0", mac) and not remove(path, "eth0", mac)
        assert _link(host) is None and _link("eth0", ns) is None  # the pair went with it

        # A name taken in the namespace (another plugin's eth0): refused, nothing made.
        subprocess.run(
            ["ip", "netns", "exec", ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "x0"],
            check=True,
        )
        with pytest.raises(NetlinkError):  # EEXIST
            create_veth_in_netns(eid, mac, 1400, path, "eth0")
        assert _link(host) is None and _link("eth0", ns)["address"] != mac
    finally:
        delete_veth(eid)
        subprocess.run(["ip", "netns", "del", ns], check=False)
