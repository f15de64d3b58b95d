"""The agent's side of CNI: ADD, DEL and CHECK of an interface in a runtime's network
namespace, on the same networks, groups, policies, netprofiles and IPAM as Docker's
containers.

ADD books the endpoint with the master (idempotent by an endpoint ID made of the container
ID and the interface name), plugs its veth into the switch, moves the container's end into
CNI_NETNS as CNI_IFNAME with its addresses and routes (``plan_routes``: the configuration's
"routes", or else a default route per family the pod has none of yet), and answers the CNI
result, which lists exactly the routes installed.
A failure part-way undoes what it did. DEL removes whatever there is, and succeeds when
there is nothing. Which network: ``target`` (pure) reads the configuration, then the
per-pod choices of runtimeConfig and CNI_ARGS, then, with a kube API, the pod's
io.contiv.* labels; the pod's labels also become the endpoint's, so services select pods.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from common import cni
from common.client import MasterError
from common.models import Endpoint, EndpointRequest, Network
from datapath.effects import Netns
from datapath.netns import NetnsRoute
from datapath.portpool import container_end, is_pool_port
from datapath.veth import Into, veth_names

from . import attach
from .attach import Datapath, detach
from .cni_routes import Route, absent_routes, plan_routes, requested_routes, taken, via
from .options import mac_for

log = logging.getLogger(__name__)

PodLabels = Callable[[str, str], Mapping[str, str]]  # (namespace, name) -> labels
LocalNetwork = Callable[[str, str], "Network | None"]  # (tenant, name) -> the agent's mirror's

# The reads an ADD starts at once, and the pod's interface removed while DEL frees the rest.
LOOKUPS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="cni")
# The pod's interface configured while its port is made: a job waits for its end to be in
# the pod's namespace (hundreds of ms beside 1,000 ports), so not among the reads.
CONFIGURING = ThreadPoolExecutor(max_workers=8, thread_name_prefix="cni-configure")


class Master(attach.Master, Protocol):
    def get_network(self, tenant: str, name: str) -> Network: ...

    def get_group(self, tenant: str, name: str) -> Any: ...

    def get_endpoint(self, endpoint_id: str) -> Endpoint: ...


@dataclass(frozen=True)
class Target:
    tenant: str
    network: str  # "" until the group's network is looked up
    group: str
    pod: tuple[str, str] | None  # (namespace, name) from CNI_ARGS
    labels: Mapping[str, str]


def target(req: cni.Request, pod_labels: Mapping[str, str] | None = None) -> Target:
    """Which tenant, network and group the interface is for: the configuration's "tenant",
    "network" and "group", overridden by runtimeConfig's "netplugin" object, by CNI_ARGS
    (NETPLUGIN_TENANT, NETPLUGIN_NETWORK, NETPLUGIN_GROUP), and by the pod's io.contiv.*
    labels. A configuration naming none of network and group is refused (code 7)."""
    chosen: dict[str, str] = {}
    for layer in (
        req.config,
        (req.config.get("runtimeConfig") or {}).get("netplugin") or {},
        {v: req.args[k] for k, v in cni.ARG_KEYS.items() if k in req.args},
        {v: (pod_labels or {})[k] for k, v in cni.POD_LABELS.items() if k in (pod_labels or {})},
    ):
        if not isinstance(layer, dict):
            raise cni.CniError(cni.INVALID_CONFIG, "runtimeConfig.netplugin must be an object")
        for key in ("tenant", "network", "group"):
            if layer.get(key):
                chosen[key] = str(layer[key])
    if not chosen.get("network") and not chosen.get("group"):
        raise cni.CniError(
            cni.INVALID_CONFIG,
            f"network configuration {req.config.get('name', '')!r}: name a netplugin network "
            '("network") or endpoint group ("group")',
        )
    ns, name = req.args.get("K8S_POD_NAMESPACE", ""), req.args.get("K8S_POD_NAME", "")
    return Target(
        tenant=chosen.get("tenant", "default"),
        network=chosen.get("network", ""),
        group=chosen.get("group", ""),
        pod=(ns, name) if ns and name else None,
        labels=dict(pod_labels or {}),
    )


def _prefix(subnet: str) -> int:
    return ipaddress.ip_network(subnet, strict=False).prefixlen


def attachment(
    req: cni.Request,
    net: Network,
    ep: Endpoint,
    routes: tuple[Route, ...] = (),
    host_end: str = "",
) -> cni.Attachment:
    """What an ADD made for endpoint ``ep`` on ``net`` with ``routes``, to report;
    ``host_end``: its switch port (a pool port's name; default: its own veth's)."""
    addresses = []
    if ep.ipAddress:
        addresses.append((f"{ep.ipAddress}/{_prefix(net.subnet)}", net.gateway))
    if ep.ipv6Address:
        addresses.append((f"{ep.ipv6Address}/{_prefix(net.ipv6Subnet)}", net.ipv6Gateway))
    dns = req.config.get("dns") if isinstance(req.config.get("dns"), dict) else {}
    return cni.Attachment(
        host_ifname=host_end or veth_names(ep.endpointID)[0],
        host_mac="",
        ifname=req.ifname,
        mac=ep.macAddress,
        sandbox=req.netns,
        addresses=tuple(addresses),
        dns=dns or {},
        routes=routes,
    )


class CniService:
    def __init__(
        self,
        master: Master,
        datapath: Datapath,
        netns: Netns,
        host: str,
        mtu: int = 0,
        pod_labels: PodLabels | None = None,
        local_network: LocalNetwork | None = None,
    ) -> None:
        self.master = master
        self.local_network = local_network
        self.datapath = datapath
        self.netns = netns
        self.host = host
        self.mtu = mtu
        self.pod_labels = pod_labels
        # One call at a time per attachment: a runtime that gave up on an ADD sends DEL
        # while the agent may still be doing that ADD.
        self._guard = threading.Lock()
        self._busy: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def _one_at_a_time(self, eid: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._busy.get(eid, (threading.Lock(), 0))
            self._busy[eid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._busy[eid]
                if users == 1:
                    del self._busy[eid]
                else:
                    self._busy[eid] = (lock, users - 1)

    # --- the three calls

    def add(self, req: cni.Request) -> dict[str, Any]:
        version = cni.config_version(req.config)
        eid = cni.endpoint_id(req.container_id, req.ifname)
        with self._one_at_a_time(eid):
            try:
                return self._add(req, version, eid)
            except _Changed as changed:  # the mirror was behind: again, with the master's
                log.warning("CNI: %s; adding %s again", changed, eid[:12])
                return self._add(req, version, eid, local=False)

    def _add(self, req: cni.Request, version: str, eid: str, local: bool = True) -> dict[str, Any]:
        # Independent reads (the master's, the pod's namespace's) at once; their errors in
        # this order, as if one after the other. The master's record of the endpoint
        # matters only to an ADD retried, whose port is here. A fresh ADD needs the pod's
        # routes only to configure its interface: they are read while it is booked and
        # plugged. The network is the agent's mirror's where it has it; the master's, read
        # meanwhile, must be the same before the ADD answers.
        resolving = LOOKUPS.submit(self._resolve, req)
        reading = LOOKUPS.submit(self._routes, req)
        retried = self.datapath.has_endpoint(eid)
        looking = LOOKUPS.submit(self._existing, eid) if retried else None
        mirrored = self._mirrored(req) if local and not retried else None
        t, net = mirrored or resolving.result()
        requested = requested_routes(req.config)

        def routing() -> tuple[Route, ...]:
            return plan_routes(requested, net, taken(reading.result(), req.ifname))

        existing = looking.result() if looking is not None else None
        if existing is not None and self._in_place(req, existing):
            # An ADD retried: the same answer, with the routes that are still there.
            there = via(reading.result(), req.ifname)
            kept = tuple(r for r in routing() if r in there)
            host_end = self._host_end(eid)
            return cni.result(version, attachment(req, net, existing, kept, host_end))
        mac = mac_for("", "", eid)
        request = EndpointRequest(
            endpointID=eid,
            tenantName=t.tenant,
            networkName=net.networkName,
            groupName=t.group,
            host=self.host,
            macAddress=mac,
            containerID=req.container_id,
            containerName=t.pod[1] if t.pod else req.container_id[:12],
            labels=dict(t.labels),  # written with the endpoint: services select the pod
        )
        plan_routes(requested, net, {})  # the configuration's routes fit the network
        failed = f"container {req.container_id[:12]}: {req.ifname}"
        # A free pool port, moved in; if there is none, the pod's end made there. Its
        # interface is configured as soon as its addresses are booked and its end is there,
        # while the switch takes the port and confirms the flows.
        pod = PodEnd(Into(req.netns, req.ifname))

        def booked(ep: Endpoint) -> None:
            pod.job = CONFIGURING.submit(self._configure, pod, req, net, ep, routing)

        try:
            ep, pod.ifname = attach.attach(
                self.master, self.datapath, request, net, self.mtu, pod.into, booked
            )
        except Exception as e:  # attach undid itself; an interface of an earlier ADD may be left
            pod.abandon()
            self._remove_ours(eid, req)
            if mirrored is not None:
                resolving.result()  # the master's refusal of the network, if that was it
            if isinstance(e, MasterError):
                raise _refusal(e, f"endpoint {eid}") from None
            raise cni.CniError(cni.DATAPATH_FAILURE, f"{failed}: {e}") from e
        pod.into.made.set()  # (an end that was here: moved, or a path that did not say so)
        try:
            if pod.job is None:  # attach answers only once booked
                raise RuntimeError(f"endpoint {eid}: booked, but never configured")
            pod.job.exception()  # done, whatever it found, before anything is undone
            if mirrored is not None and resolving.result() != mirrored:
                raise _Changed(f"network {net.id} is not what this agent's mirror holds yet")
            routes = pod.job.result()
        except BaseException as e:  # nothing is left, whatever it was
            self._undo(eid, req)
            if isinstance(e, (cni.CniError, _Changed)) or not isinstance(e, Exception):
                raise  # the master's refusal, a route refused, a change
            # The interface (OSError, NetlinkError...), named.
            raise cni.CniError(cni.DATAPATH_FAILURE, f"{failed}: {e}") from e
        a = attachment(req, net, ep, routes, self._host_end(eid))
        log.info(
            "CNI: container %s %s on %s: %s%s",
            req.container_id[:12],
            req.ifname,
            net.id,
            ", ".join(cidr for cidr, _ in a.addresses),
            "".join(f"; route {dst} via {gw}" for dst, gw in a.routes),
        )
        return cni.result(version, a)

    def _configure(
        self,
        pod: PodEnd,
        req: cni.Request,
        net: Network,
        ep: Endpoint,
        routing: Callable[[], tuple[Route, ...]],
    ) -> tuple[Route, ...]:
        """Once the pod's end is in its namespace: its addresses, routes (``routing``
        plans them: a route the pod has via another interface is refused) and MAC; the
        routes. Nothing, if the ADD was given up meanwhile."""
        pod.into.made.wait()
        if pod.abandoned:
            return ()
        routes = routing()
        a = attachment(req, net, ep, routes)
        self.netns.move_into(
            pod.ifname, req.netns, req.ifname, [cidr for cidr, _ in a.addresses], routes, a.mac
        )
        return routes

    def _host_end(self, eid: str) -> str:
        """The endpoint's switch port on this host ("" if it has none)."""
        return str(self.datapath.endpoint_oper(eid).get("hostInterface", ""))

    def delete(self, req: cni.Request) -> None:
        """Remove whatever there is of the attachment; nothing is fine."""
        eid = cni.endpoint_id(req.container_id, req.ifname)
        with self._one_at_a_time(eid):
            self._undo(eid, req, settle=False)

    def check(self, req: cni.Request) -> None:
        version = cni.config_version(req.config)
        if version in ("0.3.0", "0.3.1"):
            raise cni.CniError(
                cni.INCOMPATIBLE_VERSION, f"CHECK needs cniVersion 0.4.0 or later, not {version}"
            )
        prev = req.config.get("prevResult")
        if not isinstance(prev, dict):
            raise cni.CniError(cni.INVALID_CONFIG, "CHECK needs the prevResult of the ADD")
        eid = cni.endpoint_id(req.container_id, req.ifname)
        ep = self._existing(eid)
        if ep is None:
            raise cni.CniError(
                cni.UNKNOWN_CONTAINER,
                f"container {req.container_id[:12]}: no endpoint for {req.ifname}",
            )
        _, net = self._resolve(req)
        want = attachment(req, net, ep)
        have = self.netns.read(req.netns, req.ifname)
        problems = []
        if have is None:
            problems.append(f"no interface {req.ifname} in {req.netns}")
        else:
            if have.mac.lower() != ep.macAddress.lower():
                problems.append(f"{req.ifname} has MAC {have.mac}, not {ep.macAddress}")
            missing = {cidr for cidr, _ in want.addresses} - have.addresses
            if missing:
                problems.append(f"{req.ifname} lacks {', '.join(sorted(missing))}")
            lost = absent_routes(prev, self._routes(req), req.ifname)
            if lost:
                problems.append(f"{req.ifname} has no route {', '.join(lost)}")
        if not self.datapath.has_endpoint(eid):
            problems.append("the switch has no port for it")
        prev_ips = {ip.get("address") for ip in prev.get("ips", []) if isinstance(ip, dict)}
        if prev_ips != {cidr for cidr, _ in want.addresses}:
            problems.append(f"prevResult's addresses {sorted(prev_ips)} are not the endpoint's")
        if problems:
            raise cni.CniError(
                cni.CHECK_FAILED, f"container {req.container_id[:12]}: " + "; ".join(problems)
            )

    # --- pieces

    def _routes(self, req: cni.Request) -> frozenset[NetnsRoute]:
        try:
            return self.netns.routes(req.netns)
        except OSError as e:
            raise cni.CniError(
                cni.DATAPATH_FAILURE, f"container {req.container_id[:12]}: {req.netns}: {e}"
            ) from None

    def _resolve(self, req: cni.Request) -> tuple[Target, Network]:
        labels: Mapping[str, str] | None = None
        pod = (req.args.get("K8S_POD_NAMESPACE", ""), req.args.get("K8S_POD_NAME", ""))
        if self.pod_labels is not None and all(pod):
            try:
                labels = self.pod_labels(*pod)
            except Exception as e:
                raise cni.CniError(
                    cni.TRY_AGAIN_LATER, f"pod {pod[0]}/{pod[1]}: cannot read its labels: {e}"
                ) from e
        t = target(req, labels)
        network = t.network
        if t.group:
            g = self._call(
                lambda: self.master.get_group(t.tenant, t.group),
                f"endpoint group {t.tenant}:{t.group}",
            )
            if network and g.networkName != network:
                raise cni.CniError(
                    cni.INVALID_CONFIG,
                    f"endpoint group {t.tenant}:{t.group} is on network {g.networkName}, "
                    f"not {network}",
                )
            network = g.networkName
        net = self._call(
            lambda: self.master.get_network(t.tenant, network), f"network {t.tenant}:{network}"
        )
        return Target(t.tenant, network, t.group, t.pod, t.labels), net

    def _mirrored(self, req: cni.Request) -> tuple[Target, Network] | None:
        """The target and its network from the agent's mirror, for a configuration that
        names a network and no group (a group's network, and labels from the kube API, are
        the master's and the API's to say); None if the mirror has no such network."""
        if self.local_network is None or self.pod_labels is not None:
            return None
        try:
            t = target(req)
        except cni.CniError:
            return None  # _resolve says so
        if t.group or not t.network:
            return None
        net = self.local_network(t.tenant, t.network)
        return (t, net) if net is not None else None

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        try:
            return fn()
        except MasterError as e:
            raise _refusal(e, what) from None

    def _existing(self, eid: str) -> Endpoint | None:
        try:
            ep = self.master.get_endpoint(eid)
        except MasterError as e:
            if e.status == 404:
                return None
            raise cni.CniError(cni.TRY_AGAIN_LATER, f"endpoint {eid}: {e.message}") from None
        return ep if ep.host == self.host else None

    def _in_place(self, req: cni.Request, ep: Endpoint) -> bool:
        have = self.netns.read(req.netns, req.ifname)
        return (
            have is not None
            and have.mac.lower() == ep.macAddress.lower()
            and self.datapath.has_endpoint(ep.endpointID)
        )

    def _undo(self, eid: str, req: cni.Request, settle: bool = True) -> None:
        """Remove the attachment, whatever of it exists (each step is idempotent): the pod's
        interface (a pool port's goes home, to serve again; the pair of its own is deleted)
        while the booking goes, then the flows and the port. Without ``settle`` (DEL), the
        answer waits for the switch port's removal only if the pair may be left: the runtime
        may reuse the pod's interface name at once, and a new ADD of this endpoint waits for
        its old port itself."""
        removing = LOOKUPS.submit(self._remove_ours, eid, req)
        try:
            detach(self.master, self.datapath, eid, first=removing.exception)
            if settle or not removing.result():
                self.datapath.settle(eid)
        except MasterError as e:
            raise cni.CniError(cni.TRY_AGAIN_LATER, f"endpoint {eid}: {e.message}") from None
        except Exception:
            log.exception("CNI: endpoint %s: removing its port failed", eid[:12])
        finally:
            removing.result()

    def _remove_ours(self, eid: str, req: cni.Request) -> bool:
        """Take the pod's interface out if it is ours (by its MAC: the name may be another
        plugin's interface): a pool port's container end back to this host, any other
        deleted; whether it was there."""
        if not req.netns:
            return False
        host = self._host_end(eid)
        home = container_end(host) if is_pool_port(host) else ""
        try:
            return self.netns.remove(req.netns, req.ifname, mac_for("", "", eid), home)
        except OSError as e:
            log.warning("CNI: %s in %s: %s", req.ifname, req.netns, e)
            return False


class PodEnd:
    """A CNI pod's interface while an ADD makes it: where (``into``), its name on this host
    if its end was not made or moved there (``ifname``), and the job that configures it."""

    def __init__(self, into: Into) -> None:
        self.into = into
        self.ifname = ""
        self.job: Future[tuple[Route, ...]] | None = None
        self.abandoned = False

    def abandon(self) -> None:
        """The ADD failed: the job configures nothing (and is waited for)."""
        self.abandoned = True
        self.into.made.set()
        if self.job is not None:
            self.job.exception()


class _Changed(Exception):
    """The master's network is not the mirror's: the ADD made with it is undone."""


def _refusal(e: MasterError, what: str) -> cni.CniError:
    """The master's error about ``what``, as CNI's."""
    if e.status == 404:
        return cni.CniError(cni.UNKNOWN_NETWORK, f"{what}: not found", e.message)
    if e.status >= 500:
        return cni.CniError(cni.TRY_AGAIN_LATER, f"{what}: {e.message}")
    return cni.CniError(cni.INVALID_CONFIG, f"{what}: {e.message}")
