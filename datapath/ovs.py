"""Bridges and ports in OVSDB, through ovsdbapp, each change one transaction.

Everything is idempotent and never recreates what already exists: recreating a bridge,
a port or a controller row makes ovs-vswitchd tear it down and build it again, which cuts
traffic (a Contiv bug). Each command decides and writes inside one IDL transaction; a
concurrent writer that changes the controllers it read makes it retry, and OVSDB's unique
names make a racing duplicate create fail rather than double a port.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

with warnings.catch_warnings():
    # python-ovs imports eventlet only to ask whether select is monkey-patched (it is not:
    # we never patch), and eventlet warns about its own deprecation on import.
    warnings.simplefilter("ignore")
    from ovsdbapp import exceptions as ovsdb_exceptions
    from ovsdbapp.backend.ovs_idl import command, connection, idlutils
    from ovsdbapp.schema.open_vswitch import impl_idl

log = logging.getLogger(__name__)

DatapathType = Literal["netdev", "system"]
T = TypeVar("T")

# ovs-vswitchd probes a controller it has heard nothing from for this long, and drops the
# connection after as long again. Its default, 5 s, cuts a busy controller: one whose
# os-ken receive loop is still parsing a large flow read (thousands of flows on a slow or
# loaded host) answers the probe late. Ours is on loopback, where a dead process closes
# the socket at once; the probe only has to catch a hung one.
CONTROLLER_INACTIVITY_PROBE_MS = 30_000
# What the switch sends the controller (routing mode's IPv6 neighbour solicitations) is
# limited, packets per second and burst: over it, ovs-vswitchd queues them per input port
# and serves the ports in turn, so a container that floods solicitations neither swamps
# the agent nor starves the other containers' answers.
CONTROLLER_RATE_LIMIT = 500
CONTROLLER_BURST_LIMIT = 100


def detect_datapath_type(sys_root: str | Path = "/sys") -> DatapathType:
    """The OVS datapath to use: system if the kernel module is loaded (or its datapath
    exists), else netdev, the userspace one."""
    root = Path(sys_root)
    if (root / "module" / "openvswitch").exists() or (root / "class/net/ovs-system").exists():
        return "system"
    return "netdev"


class PortInfo(NamedTuple):
    """A bridge port as list_ports() reports it."""

    ofport: int | None
    external_ids: dict[str, str]
    options: dict[str, str] = {}  # a default never mutated


def _opt(value: Any) -> Any:
    """The value of an optional OVSDB column (the IDL gives [] or [value])."""
    return value[0] if isinstance(value, list) and value else (None if value == [] else value)


def _set_if_changed(row: Any, column: str, value: Any) -> bool:
    try:
        current = getattr(row, column)
    except AttributeError:  # a row inserted in this transaction has only what was set
        setattr(row, column, value)
        return True
    if isinstance(current, list) and not isinstance(value, list):
        current = _opt(current)
    if current == value:
        return False
    setattr(row, column, value)
    return True


class _EnsureBridge(command.BaseCommand):
    @property
    def what(self) -> str:
        return f"the settings of bridge {self.name}"

    def __init__(
        self,
        api: Any,
        name: str,
        datapath_type: str,
        fail_mode: str | None,
        controllers: list[str] | None,
        controller_config: Mapping[str, Any],
        protocols: list[str],
        other_config: Mapping[str, str],
    ) -> None:
        super().__init__(api)
        self.name = name
        self.datapath_type = datapath_type
        self.fail_mode = fail_mode
        self.controllers = controllers
        self.controller_config = controller_config
        self.protocols = protocols
        self.other_config = other_config

    def run_idl(self, txn: Any) -> None:
        br = idlutils.row_by_value(self.api.idl, "Bridge", "name", self.name, None)
        self.result = br is None
        if br is None:
            br = txn.insert(self.api._tables["Bridge"])
            br.name = self.name
            self.api._ovs.addvalue("bridges", br)
            iface = txn.insert(self.api._tables["Interface"])
            iface.name = self.name
            iface.type = "internal"
            port = txn.insert(self.api._tables["Port"])
            port.name = self.name
            port.interfaces = [iface]
            br.ports = [port]
        elif br.datapath_type != self.datapath_type:
            log.warning(
                "bridge %s: datapath_type %r -> %r rebuilds it in ovs-vswitchd",
                self.name,
                br.datapath_type,
                self.datapath_type,
            )
        _set_if_changed(br, "datapath_type", self.datapath_type)
        _set_if_changed(br, "fail_mode", self.fail_mode or [])
        # Columns of a row inserted in this transaction are unset until written.
        if sorted(getattr(br, "protocols", [])) != sorted(self.protocols):
            br.protocols = self.protocols
        other_config = dict(getattr(br, "other_config", {}))
        if any(other_config.get(k) != v for k, v in self.other_config.items()):
            br.other_config = {**other_config, **self.other_config}

        if self.controllers is None:
            return
        # Replacing the Controller rows makes vswitchd drop the OpenFlow connection.
        if not self.result:
            br.verify("controller")
        current = {c.target: c for c in getattr(br, "controller", [])}
        if sorted(current) != sorted(self.controllers):
            rows = []
            for target in self.controllers:
                row = txn.insert(self.api._tables["Controller"])
                row.target = target
                rows.append(row)
            br.controller = rows
            current = {r.target: r for r in rows}
        for row in current.values():
            for column, value in self.controller_config.items():
                _set_if_changed(row, column, value)


class _EnsurePort(command.BaseCommand):
    @property
    def what(self) -> str:
        return f"port {self.name} on bridge {self.bridge}"

    def __init__(
        self,
        api: Any,
        bridge: str,
        name: str,
        type_: str,
        external_ids: Mapping[str, str],
        interface_config: Mapping[str, Any],
    ) -> None:
        super().__init__(api)
        self.bridge = bridge
        self.name = name
        self.type = type_
        self.external_ids = dict(external_ids)
        self.interface_config = interface_config

    def run_idl(self, txn: Any) -> None:
        br = idlutils.row_by_value(self.api.idl, "Bridge", "name", self.bridge)
        port = idlutils.row_by_value(self.api.idl, "Port", "name", self.name, None)
        if port is not None:
            if port not in br.ports:
                raise RuntimeError(
                    f"port {self.name} is on another bridge than {self.bridge}; delete it first"
                )
            iface = port.interfaces[0]
            if iface.type != self.type:
                log.warning("port %s: type %r -> %r recreates it", self.name, iface.type, self.type)
                iface.type = self.type
            self.result = False
        else:
            iface = txn.insert(self.api._tables["Interface"])
            iface.name = self.name
            iface.type = self.type
            txn.expected_ifaces.add(iface.uuid)
            port = txn.insert(self.api._tables["Port"])
            port.name = self.name
            port.interfaces = [iface]
            br.addvalue("ports", port)
            self.result = True
        for column, value in self.interface_config.items():
            _set_if_changed(iface, column, value)
        for row in (iface, port):
            if dict(getattr(row, "external_ids", {})) != self.external_ids:
                row.external_ids = self.external_ids


class _DelPort(command.BaseCommand):
    @property
    def what(self) -> str:
        return f"the removal of port {self.name} from bridge {self.bridge}"

    def __init__(self, api: Any, bridge: str, name: str, if_exists: bool) -> None:
        super().__init__(api)
        self.bridge = bridge
        self.name = name
        self.if_exists = if_exists

    def run_idl(self, txn: Any) -> None:
        port = idlutils.row_by_value(self.api.idl, "Port", "name", self.name, None)
        self.result = port is not None
        if port is None:
            if not self.if_exists:
                raise RuntimeError(f"port {self.name} does not exist")
            return
        br = idlutils.row_by_value(self.api.idl, "Bridge", "name", self.bridge)
        if port not in br.ports:
            raise RuntimeError(f"port {self.name} is not on bridge {self.bridge}")
        br.delvalue("ports", port)
        for iface in port.interfaces:
            iface.delete()
        port.delete()


class Ovs:
    """One OVSDB (Open_vSwitch database) connection: bridges and ports."""

    def __init__(self, ovsdb: str | Path, timeout: float = 10.0) -> None:
        target = str(ovsdb)
        if not target.startswith(("unix:", "tcp:", "ssl:")):
            target = f"unix:{target}"
        self.target = target
        self.timeout = timeout
        idl = connection.OvsdbIdl.from_server(target, "Open_vSwitch")
        # ovsdbapp keeps the connection in a class attribute: a class per instance lets
        # one process talk to several databases (e.g. simulated hosts in tests).
        api_cls = type("OvsdbIdl", (impl_idl.OvsdbIdl,), {"_ovsdb_connection": None})
        self.api = api_cls(connection.Connection(idl, timeout))

    def close(self) -> None:
        """Stop the IDL thread."""
        self.api.ovsdb_connection.stop(timeout=self.timeout)

    def __enter__(self) -> Ovs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _commit(self, cmd: command.BaseCommand, *more: command.BaseCommand) -> Any:
        try:
            with self.api.transaction(check_error=True) as txn:
                for c in (cmd, *more):
                    txn.add(c)
        except ovsdb_exceptions.TimeoutException:
            # ovsdbapp waits for ovs-vswitchd to apply the change, not only for ovsdb-server.
            what = getattr(cmd, "what", cmd)
            raise RuntimeError(
                f"Open vSwitch did not apply {what} within {self.timeout:g}s; "
                f"is ovs-vswitchd running? (ovsdb {self.target})"
            ) from None
        return cmd.result

    def _read(self, fn: Callable[[Any], T]) -> T:
        with self.api.ovsdb_connection.lock:
            return fn(self.api.idl)

    def ensure_bridge(
        self,
        name: str,
        datapath_type: DatapathType | None = None,
        fail_mode: str | None = "secure",
        controller: str | Iterable[str] | None = None,
        protocols: Iterable[str] = ("OpenFlow13", "OpenFlow15"),
        hwaddr: str | None = None,
        controller_max_backoff_ms: int = 1000,
        controller_inactivity_probe_ms: int = CONTROLLER_INACTIVITY_PROBE_MS,
    ) -> bool:
        """Create the bridge or bring its settings in line; True if it was created.

        fail_mode "secure" keeps the flows while the controller is away. controller None
        leaves the controllers as they are; an empty list removes them, and OVS then
        flushes the bridge's flows. protocols default to OpenFlow 1.3 and 1.5: the controller
        speaks 1.5 (datapath.ofcodec), operators' ovs-ofctl -O OpenFlow13 keeps working.
        """
        controllers: list[str] | None
        if controller is None:
            controllers = None
        elif isinstance(controller, str):
            controllers = [controller]
        else:
            controllers = list(controller)
        other_config = {"hwaddr": hwaddr} if hwaddr else {}
        controller_config = {
            # A local controller must not get in-band hidden flows; reconnect quickly.
            "connection_mode": "out-of-band",
            "max_backoff": controller_max_backoff_ms,
            "inactivity_probe": controller_inactivity_probe_ms,
            "controller_rate_limit": CONTROLLER_RATE_LIMIT,
            "controller_burst_limit": CONTROLLER_BURST_LIMIT,
        }
        return bool(
            self._commit(
                _EnsureBridge(
                    self.api,
                    name,
                    datapath_type or detect_datapath_type(),
                    fail_mode,
                    controllers,
                    controller_config,
                    list(protocols),
                    other_config,
                )
            )
        )

    def add_port(
        self,
        bridge: str,
        name: str,
        type: str = "",
        external_ids: Mapping[str, str] | None = None,
        mac: str | None = None,
        options: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> int:
        """Add (or keep) a port and return its OpenFlow port number once vswitchd assigns it.

        type "" is a Linux device (e.g. a veth end), "internal" a port of the host's own
        (its MAC is mac), "vxlan" and others take options.
        """
        iface_config: dict[str, Any] = {}
        if mac is not None:
            iface_config["mac"] = mac
        if options is not None:
            iface_config["options"] = dict(options)
        created = self._commit(
            _EnsurePort(self.api, bridge, name, type, external_ids or {}, iface_config)
        )
        try:
            return self.wait_ofport(name, timeout if timeout is not None else self.timeout)
        except RuntimeError:
            if created:  # leave no half-made port behind for the next attempt to trip on
                self.del_port(bridge, name)
            raise

    def add_ports(
        self, bridge: str, names: list[str], external_ids: Mapping[str, str]
    ) -> dict[str, int]:
        """Add these Linux devices as ports in one transaction (one reconfiguration of
        ovs-vswitchd); their ofports by name. Any that gets none fails them all, removed."""
        if not names:
            return {}
        commands = [_EnsurePort(self.api, bridge, n, "", external_ids, {}) for n in names]
        self._commit(*commands)
        try:
            return {n: self.wait_ofport(n, self.timeout) for n in names}
        except RuntimeError:
            self.del_ports(bridge, [n for n, c in zip(names, commands, strict=True) if c.result])
            raise

    def wait_ofport(self, name: str, timeout: float) -> int:
        """Wait for the interface's ofport; raise with vswitchd's error if it gets none."""
        deadline = time.monotonic() + timeout
        while True:
            ofport, error = self._read(lambda idl: _iface_ofport(idl, name))
            if ofport is not None and ofport > 0:
                return ofport
            if ofport == -1 or time.monotonic() > deadline:
                why = error or f"no ofport after {timeout}s; is ovs-vswitchd running?"
                raise RuntimeError(f"port {name}: {why}")
            time.sleep(0.02)

    def del_port(self, bridge: str, name: str, if_exists: bool = True) -> bool:
        """Delete a port from the bridge; False if it was not there."""
        return bool(self._commit(_DelPort(self.api, bridge, name, if_exists)))

    def del_ports(self, bridge: str, names: list[str]) -> int:
        """Delete whichever of these ports are on the bridge, in one transaction (one
        reconfiguration of ovs-vswitchd); how many were."""
        if not names:
            return 0
        commands = [_DelPort(self.api, bridge, n, if_exists=True) for n in names]
        self._commit(*commands)
        return sum(bool(c.result) for c in commands)

    def ports_elsewhere(self, bridge: str) -> set[str]:
        """The names of the ports of every other bridge (another agent's, where a host runs
        several: simulated hosts, tests)."""

        def read(idl: Any) -> set[str]:
            bridges = idl.tables["Bridge"].rows.values()
            return {p.name for br in bridges if br.name != bridge for p in br.ports}

        return self._read(read)

    def list_ports(self, bridge: str) -> dict[str, PortInfo]:
        """The bridge's ports (without its own internal port) by name."""

        def read(idl: Any) -> dict[str, PortInfo]:
            br = idlutils.row_by_value(idl, "Bridge", "name", bridge)
            ports = {}
            for port in br.ports:
                if port.name == bridge or not port.interfaces:
                    continue
                iface = port.interfaces[0]
                ports[port.name] = PortInfo(
                    _opt(iface.ofport), dict(iface.external_ids), dict(iface.options)
                )
            return ports

        return self._read(read)


def _iface_ofport(idl: Any, name: str) -> tuple[int | None, str | None]:
    iface = idlutils.row_by_value(idl, "Interface", "name", name, None)
    if iface is None:
        return None, "interface is gone"
    return _opt(iface.ofport), _opt(iface.error)
