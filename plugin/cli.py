"""netplugin: the per-host agent (Docker network + IPAM driver, Open vSwitch programming)."""

from __future__ import annotations

import socket

from common.credentials import AGENT_TOKEN_ENV
from common.flags import LOG_LEVELS, EnvArgumentParser, setup_logging
from datapath.plugcost import CHOICES

DEFAULT_SOCKET = "/run/docker/plugins/netplugin.sock"
DEFAULT_OVSDB = "unix:/var/run/openvswitch/db.sock"


def parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="netplugin", description=__doc__, env_prefix="NETPLUGIN")
    p.add_argument("--netmaster", default="http://127.0.0.1:9999", help="URL of a netmaster")
    p.add_argument(
        "--tls-ca",
        default="",
        help="CA certificate(s) that signed the masters' certificates (https:// masters; "
        "default: the CA bundle of requests, certifi)",
    )
    p.add_argument("--tls-cert", default="", help="client certificate for masters that require one")
    p.add_argument("--tls-key", default="", help="the private key of --tls-cert")
    p.add_argument(
        "--auth-token-file",
        default="",
        help=f"file holding this agent's bearer token (role agent); else ${AGENT_TOKEN_ENV}",
    )
    p.add_argument("--etcd-endpoints", default="", help="comma-separated etcd URLs (multi-host)")
    p.add_argument("--host", default=socket.gethostname(), help="this host's label in the cluster")
    p.add_argument("--vtep-ip", default="", help="underlay IP for VXLAN tunnels")
    p.add_argument("--ctrl-ip", default="", help="control-plane IP of this host")
    p.add_argument("--vlan-if", default="", help="uplink interface for VLAN networks")
    p.add_argument("--socket", default=DEFAULT_SOCKET, help="Docker plugin socket path")
    p.add_argument("--ovsdb", default=DEFAULT_OVSDB, help="OVSDB connection")
    p.add_argument(
        "--docker-host", default="", help="dockerd URL (default: $DOCKER_HOST or the local socket)"
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--bridge", default="netplugin", help="the OVS bridge netplugin owns")
    p.add_argument(
        "--of-port", type=int, default=6653, help="OpenFlow controller port on 127.0.0.1"
    )
    p.add_argument(
        "--mtu",
        type=int,
        default=0,
        help="MTU of container interfaces; 0: the uplink's, minus 50 for VXLAN across hosts",
    )
    p.add_argument(
        "--data-dir",
        default="/var/lib/netplugin",
        help="the embedded store netmaster keeps on this host (without --etcd-endpoints), "
        "and which endpoint each pool port serves (pool-ports/HOST/)",
    )
    p.add_argument("--etcd-ca", default="", help="CA certificate for etcd TLS")
    p.add_argument("--etcd-cert", default="", help="client certificate for etcd TLS")
    p.add_argument("--etcd-key", default="", help="client key for etcd TLS")
    p.add_argument(
        "--host-ttl",
        type=int,
        default=10,
        help="seconds this host stays in peers' view after netplugin stops answering",
    )
    p.add_argument(
        "--underlay-bridge",
        default="npunderlay",
        help="userspace datapath: the OVS bridge that takes over the VTEP's interface",
    )
    p.add_argument(
        "--audit-interval",
        type=float,
        default=300.0,
        help="seconds between full audits of the switch's flows and our iptables chains "
        "(repairs changes made behind netplugin's back); 0 disables",
    )
    p.add_argument(
        "--port-pool",
        type=int,
        default=16,
        metavar="N",
        help="switch ports kept plugged ahead of demand, so a new endpoint costs "
        "ovs-vswitchd no reconfiguration (made when the host is quiet, kept up to N); "
        "0 disables",
    )
    p.add_argument(
        "--cni-pair",
        choices=CHOICES,
        default="auto",
        help="where a CNI pod's interface comes from: a pool port, its end moved into the "
        "pod's namespace (the kernel's move costs about 20 ms), or a pair of its own, made "
        "there (a port add, which costs ovs-vswitchd more the more ports it has); auto: "
        "whichever costs less, as measured on this host",
    )
    p.add_argument(
        "--plugin-name",
        default="",
        help="the driver name dockerd knows this agent by (default: netplugin; as a managed "
        "plugin, its NAME:TAG, asked of dockerd)",
    )
    p.add_argument(
        "--proc-sys",
        default="/proc/sys",
        help="the host's /proc/sys, writable (a managed plugin's is read-only: /host/proc/sys)",
    )
    p.add_argument(
        "--swarm",
        action="store_true",
        help="serve Docker swarm mode (a managed plugin on every manager and worker): "
        "networks are made with `docker network create --scope swarm` on a manager and "
        "used by services; netctl's networks are not copied into docker",
    )
    p.add_argument(
        "--managed",
        action="store_true",
        help="running as a Docker managed (v2) plugin (set by its config.json)",
    )
    p.add_argument(
        "--api-socket",
        default="/run/netplugin/netplugin-api.sock",  # common.flags.AGENT_API_SOCKET
        help="unix socket (mode 0600) of the operator's inspect API and /metrics "
        "(netctl host inspect); empty disables it",
    )
    p.add_argument(
        "--cni-socket",
        default="/run/netplugin/cni.sock",  # common.cni.DEFAULT_SOCKET
        help="unix socket (mode 0600) netplugin-cni, the CNI plugin, hands its calls to; "
        "empty disables CNI",
    )
    p.add_argument(
        "--kubeconfig",
        default="",
        help="a kubeconfig: CNI pods' io.contiv.* labels choose their network, and their "
        "labels are their endpoints' (service selectors)",
    )
    p.add_argument(
        "--api-listen",
        default="",
        metavar="HOST:PORT",
        help="also serve the inspect API and /metrics on TCP, GET only (off by default)",
    )
    return p


MAX_PORT_POOL = 1024  # ports: each is a veth pair and a switch port


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    if args.audit_interval < 0:
        p.error(f"--audit-interval {args.audit_interval:g}: must be >= 0 (0 disables)")
    if not 0 <= args.port_pool <= MAX_PORT_POOL:
        p.error(f"--port-pool {args.port_pool}: must be 0 (none) to {MAX_PORT_POOL}")
    setup_logging(args.log_level, "netplugin")
    from .daemon import run

    run(args)


if __name__ == "__main__":
    main()
