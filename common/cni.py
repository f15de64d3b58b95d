"""The CNI side of netplugin as both ends read it: the netplugin-cni executable (cni/) and
the agent that serves it (plugin/cni_service.py). Pure and stdlib only: the executable
imports it on its full path (VERSION, or no agent), which runs the same checks as the agent.

CNI 1.0.0 (https://www.cni.dev/docs/spec/): the runtime execs the plugin with CNI_COMMAND,
CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH set and the network
configuration on stdin; the plugin answers a result (ADD) or nothing (DEL, CHECK) on stdout
and exits 0, or an error {"cniVersion", "code", "msg", "details"} and exits non-zero.
Results of configurations of 0.3.0, 0.3.1 and 0.4.0 have an IP "version" each; 1.0.0's not.
"""

from __future__ import annotations

import json

# No typing, collections, dataclasses, ipaddress or hashlib at import: the executable
# imports this module for VERSION, and typing alone costs it 4 ms (about half its own start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0")
COMMANDS = ("ADD", "DEL", "CHECK", "VERSION")
DEFAULT_SOCKET = "/run/netplugin/cni.sock"  # the agent's (netplugin --cni-socket)
SOCKET_ENV = "NETPLUGIN_CNI_SOCKET"
EXEC_URL = "/cni/exec"  # the agent's: a call as the runtime made it (read_exec_body)
EXIT_HEADER = "Netplugin-Cni-Exit"  # /cni/exec's answer: the exit status to exit with

# The spec's error codes; 100 and above are the plugin's own.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
UNKNOWN_NETWORK = 100  # the network, tenant or group the configuration names does not exist
DATAPATH_FAILURE = 101  # the agent could not plug the interface
CHECK_FAILED = 102  # CHECK found the attachment not as ADD left it

# Per-pod choices of CNI_ARGS (K=V;K=V): they override the network configuration's keys.
ARG_KEYS = {
    "NETPLUGIN_TENANT": "tenant",
    "NETPLUGIN_NETWORK": "network",
    "NETPLUGIN_GROUP": "group",
}
# Contiv's pod labels (read from the kube API when the agent has a kubeconfig): they
# override everything else.
POD_LABELS = {
    "io.contiv.tenant": "tenant",
    "io.contiv.network": "network",
    "io.contiv.net-group": "group",
}


class CniError(Exception):
    """A CNI error result: the spec's code, a message naming what and why, details."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def parse_args(text: str) -> dict[str, str]:
    """CNI_ARGS ("K=V;K2=V2") as a dict; a part without "=" is an error (code 4)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise CniError(INVALID_ENV, f"CNI_ARGS: {part!r} is not KEY=VALUE")
        out[key] = value
    return out


def config_version(config: dict[str, Any]) -> str:
    """The configuration's cniVersion, if this plugin speaks it (code 1 otherwise)."""
    version = str(config.get("cniVersion") or "")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(
            INCOMPATIBLE_VERSION,
            f"cniVersion {version or '(none)'} is not supported",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    return version


def version_result(config: dict[str, Any]) -> dict[str, Any]:
    """VERSION's answer, in the version the caller speaks (the latest if it says none)."""
    version = str(config.get("cniVersion") or SUPPORTED_VERSIONS[-1])
    return {"cniVersion": version, "supportedVersions": list(SUPPORTED_VERSIONS)}


class Request:
    """One call of the plugin, as the executable hands it to the agent."""

    __slots__ = ("args", "command", "config", "container_id", "ifname", "netns")

    def __init__(
        self,
        command: str,
        container_id: str,
        netns: str,
        ifname: str,
        args: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.command = command
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = dict(args or {})
        self.config = dict(config or {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Request({self.to_json()!r})"

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "containerID": self.container_id,
            "netns": self.netns,
            "ifName": self.ifname,
            "args": self.args,
            "config": self.config,
        }

    @classmethod
    def from_json(cls, data: Any) -> Request:
        if not isinstance(data, dict):
            raise CniError(DECODE_FAILURE, "the request is not a JSON object")
        args, config = data.get("args") or {}, data.get("config")
        if not isinstance(args, dict) or not isinstance(config, dict):
            raise CniError(DECODE_FAILURE, "the request's args and config must be JSON objects")
        return cls(
            command=str(data.get("command") or ""),
            container_id=str(data.get("containerID") or ""),
            netns=str(data.get("netns") or ""),
            ifname=str(data.get("ifName") or ""),
            args={str(k): str(v) for k, v in args.items()},
            config=config,
        )


def request_from_env(env: dict[str, str], config: dict[str, Any]) -> Request:
    """The call the runtime made, checked as the spec asks for each command."""
    command = env.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        raise CniError(INVALID_ENV, f"CNI_COMMAND {command!r} is not one of {', '.join(COMMANDS)}")
    req = Request(
        command,
        env.get("CNI_CONTAINERID", ""),
        env.get("CNI_NETNS", ""),
        env.get("CNI_IFNAME", ""),
        parse_args(env.get("CNI_ARGS", "")),
        config,
    )
    missing = [
        name
        for name, value, needed in (
            ("CNI_CONTAINERID", req.container_id, ("ADD", "DEL", "CHECK")),
            ("CNI_IFNAME", req.ifname, ("ADD", "DEL", "CHECK")),
            ("CNI_NETNS", req.netns, ("ADD", "CHECK")),  # DEL: the namespace may be gone
        )
        if command in needed and not value
    ]
    if missing:
        raise CniError(INVALID_ENV, f"{command}: {', '.join(missing)} must be set")
    return req


def run(
    env: Mapping[str, str], stdin: str, call: Callable[[Request], dict[str, Any] | None]
) -> tuple[int, dict[str, Any] | None]:
    """One call of the plugin, checked as the spec asks: (exit status, what to print). VERSION
    is answered here; ``call`` does ADD, DEL and CHECK (its result, or CniError). Both ends
    run it: the executable before it asks the agent, the agent on what it was handed."""
    version = SUPPORTED_VERSIONS[-1]
    try:
        try:
            config = json.loads(stdin) if stdin.strip() else {}
        except ValueError as e:
            raise CniError(DECODE_FAILURE, f"the network configuration is not JSON: {e}") from None
        if not isinstance(config, dict):
            raise CniError(DECODE_FAILURE, "the network configuration is not a JSON object")
        if env.get("CNI_COMMAND") == "VERSION":
            return 0, version_result(config)
        version = str(config.get("cniVersion") or version)  # an error's, if unsupported
        version = config_version(config)
        return 0, call(request_from_env(env, config))
    except CniError as e:
        return 1, e.to_json(version)


def read_exec_body(body: bytes) -> tuple[dict[str, str], str]:
    """The CNI_* environment and stdin that netplugin-cni hands the agent (cni.main.exec_body:
    KEY=VALUE NUL ... NUL stdin); CniError (code 6) for a body not of that shape."""
    env: dict[str, str] = {}
    at = 0
    try:
        while body[at] != 0:
            end = body.index(b"\0", at)
            key, sep, value = body[at:end].decode().partition("=")
            if not sep or not key.startswith("CNI_"):
                raise ValueError(key)
            env[key] = value
            at = end + 1
        return env, body[at + 1 :].decode()
    except (IndexError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise CniError(DECODE_FAILURE, f"{EXEC_URL}: not a CNI call ({e})") from None


def endpoint_id(container_id: str, ifname: str) -> str:
    """The endpoint of one interface of one container: the same for every call about it."""
    import hashlib

    return hashlib.sha256(f"cni:{container_id}:{ifname}".encode()).hexdigest()


class Attachment:
    """What ADD made, to report: the interfaces, the addresses with their prefix and
    network's gateway ("" for none), the routes it installed via the interface, the DNS
    settings to hand back."""

    def __init__(
        self,
        host_ifname: str,
        host_mac: str,
        ifname: str,
        mac: str,
        sandbox: str,
        addresses: tuple[tuple[str, str], ...],
        dns: dict[str, Any] | None = None,
        routes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.host_ifname = host_ifname
        self.host_mac = host_mac
        self.ifname = ifname
        self.mac = mac
        self.sandbox = sandbox
        self.addresses = addresses  # ("10.1.0.5/24", "10.1.0.1" or "")
        self.dns = dict(dns or {})
        self.routes = routes  # ("0.0.0.0/0", "10.1.0.1"): each one is in the namespace


def result(version: str, a: Attachment) -> dict[str, Any]:
    """ADD's result in ``version``'s shape (the container's interface is index 1). An
    address's "gateway" is its network's, for information (the spec's); "routes" are the
    ones installed, left out when there are none, as the reference plugins do."""
    import ipaddress

    ips = []
    for cidr, gateway in a.addresses:
        ip: dict[str, Any] = {"address": cidr, "interface": 1}
        if gateway:
            ip["gateway"] = gateway
        if version != "1.0.0":
            ip["version"] = str(ipaddress.ip_interface(cidr).version)
        ips.append(ip)
    out: dict[str, Any] = {
        "cniVersion": version,
        "interfaces": [
            {"name": a.host_ifname, **({"mac": a.host_mac} if a.host_mac else {})},
            {"name": a.ifname, "mac": a.mac, "sandbox": a.sandbox},
        ],
        "ips": ips,
    }
    if a.routes:
        out["routes"] = [{"dst": dst, "gw": gw} for dst, gw in a.routes]
    out["dns"] = a.dns
    return out
