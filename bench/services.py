"""Service LB and netprofile benchmarks, on the single-host stack: connections per second and
iperf3 through a VIP against straight to its provider, and a netprofile's meter: the rate
set against the rate measured (TCP and UDP), and how long a profile change takes to reach
the switch."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from bench.runs import sh
from testbed.host import IPERF_IMAGE
from testbed.lab import NetctlLab, ip_of
from testbed.probe import ContainerNet, who_answers
from testbed.wait import wait_for

RATES_MBPS = (1, 10, 100, 300)


def _conns_per_s(net: ContainerNet, ip: str, port: int, n: int) -> float:
    t0 = time.perf_counter()
    got = who_answers(net, ip, port, n)
    seconds = time.perf_counter() - t0
    assert "error" not in got, got
    return n / seconds


def _iperf(container: str, ip: str, seconds: int, udp_mbps: int = 0) -> float:
    """Mbit/s the server counted."""
    extra = ["-u", "-b", f"{udp_mbps}M"] if udp_mbps else []
    out = sh("docker", "exec", container, "iperf3", "-J", "-c", ip, "-t", str(seconds), *extra)
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def _meter_rate(name_kbps: int) -> bool:
    """Whether the switch holds a meter of this rate."""
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-meters", "netplugin"],
        capture_output=True,
        text=True,
    ).stdout
    return f"rate={name_kbps} " in out or out.rstrip().endswith(f"rate={name_kbps}")


def live(master_url: str, rounds: int = 3, conns: int = 500, seconds: int = 4) -> dict[str, Any]:
    with NetctlLab(master_url, "10.153.0.0/24") as lab:
        # --- connections/s and iperf3, through a VIP and straight to its one provider
        web = lab.container(lab.network, labels=("app=bw",))
        server = lab.container(lab.network, "iperf3", "-s", image=IPERF_IMAGE, labels=("app=bi",))
        client = lab.container(lab.network, image=IPERF_IMAGE)
        web_ip, server_ip = ip_of(web), ip_of(server)
        web_svc = lab.service("web", "-l", "app=bw", "-p", "80:8080:TCP")
        ip_svc = lab.service("ip", "-l", "app=bi", "-p", "5201:5201")
        web_vip, ip_vip = (lab.inspect("service", s)["serviceVip"] for s in (web_svc, ip_svc))
        lab.names(web, 8080)
        cnet = lab.net(client)
        wait_for(lambda: who_answers(cnet, web_vip, 80, 1) == {web: 1}, 20, "the VIP answers")
        wait_for(
            lambda: (
                subprocess.run(
                    ["docker", "exec", client, "iperf3", "-c", ip_vip, "-t", "1"],
                    capture_output=True,
                ).returncode
                == 0
            ),
            20,
            "iperf3 through its VIP",
        )
        direct_c, vip_c, direct_i, vip_i = [], [], [], []
        for i in range(rounds):  # in turn, each first every other round
            for via_vip in (True, False) if i % 2 == 0 else (False, True):
                if via_vip:
                    vip_c.append(_conns_per_s(cnet, web_vip, 80, conns))
                    vip_i.append(_iperf(client, ip_vip, seconds))
                else:
                    direct_c.append(_conns_per_s(cnet, web_ip, 8080, conns))
                    direct_i.append(_iperf(client, server_ip, seconds))

        # --- a netprofile's meter: set against measured, and a change's way to the switch
        profile = lab.profile("meter", "-b", f"{RATES_MBPS[0]}mbps")
        sender = lab.container(lab.group("lim", "-n", profile), image=IPERF_IMAGE)
        rates, apply_s = [], []
        for mbps in RATES_MBPS:
            t0 = time.perf_counter()
            lab.profile("meter", "-b", f"{mbps}mbps")
            wait_for(lambda m=mbps: _meter_rate(m * 1000), 10, f"{mbps} Mbit/s meter", interval=0)
            apply_s.append(time.perf_counter() - t0)
            tcp = _iperf(sender, server_ip, seconds)
            udp = _iperf(sender, server_ip, seconds, udp_mbps=int(mbps * 1.5))
            rates.append({"set": mbps, "tcp": tcp, "udp": udp})
        return {
            "conns": {"direct": direct_c, "vip": vip_c, "n": conns},
            "iperf": {"direct": direct_i, "vip": vip_i, "seconds": seconds},
            "meter": rates,
            "profile_apply_s": statistics.median(apply_s),
            "profile_apply_max_s": max(apply_s),
            "rounds": rounds,
        }


def section(r: dict[str, Any]) -> list[str]:
    """docs/BENCHMARKS.md's netprofile and service LB section."""
    med = statistics.median
    c, ip = r["conns"], r["iperf"]
    conn_ratio = med(c["vip"]) / med(c["direct"])
    ip_ratio = med(ip["vip"]) / med(ip["direct"])
    out = [
        "## Netprofiles and service load balancing (issue 12)",
        "",
        "Method: the single-host stack above. A service's provider is one container; the",
        "client is another container of the same network. Connections: "
        f"{c['n']} sequential TCP connections (connect, read the server's name, close), made",
        "by this Python process inside the client's network namespace against a Python",
        "server in the provider's, so the figure bounds the path, not the server. iperf3:",
        f"one TCP stream, {ip['seconds']} s, from the client container. Through the VIP and",
        f"straight to the provider in turn, {r['rounds']} rounds each; medians.",
        "",
        "| figure | straight to the provider | through the VIP | ratio |",
        "|---|---:|---:|---:|",
        f"| connections/s | {med(c['direct']):.0f} | {med(c['vip']):.0f} | {conn_ratio:.2f} |",
        f"| iperf3 Mbit/s | {med(ip['direct']):.0f} | {med(ip['vip']):.0f} | {ip_ratio:.2f} |",
        "",
        "A netprofile's meter: a container of a group whose profile is set to each rate in",
        f"turn (the burst left to its default, a quarter of the rate), iperf3 {ip['seconds']} s",
        "to a container of the same host; UDP offered at 1.5 x the rate. The receiver's",
        "count.",
        "",
        "| profile | TCP measured | TCP / set | UDP measured | UDP / set |",
        "|---:|---:|---:|---:|---:|",
    ]
    for m in r["meter"]:
        out.append(
            f"| {m['set']} Mbit/s | {m['tcp']:.2f} | {m['tcp'] / m['set']:.3f} "
            f"| {m['udp']:.2f} | {m['udp'] / m['set']:.3f} |"
        )
    out += [
        "",
        "A profile change (`netctl netprofile create` of a new rate) to the switch holding",
        f"the meter at that rate: median {r['profile_apply_s'] * 1000:.0f} ms, at most",
        f"{r['profile_apply_max_s'] * 1000:.0f} ms over {len(r['meter'])} changes (goal 1 s;",
        "netctl's own start is about 0.2 s of it).",
        "",
    ]
    return out
