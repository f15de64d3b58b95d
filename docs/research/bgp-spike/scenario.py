"""Drive speaker.py against FRR in bgpspk-r and time what FRR sees.

python3 scenario.py basic|bulk|kill|idle|ipv6 [speaker args...]
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, "/tmp/bgpspike")
from ctl import ctl  # noqa: E402

PY = "/work/main/.venv/bin/python"
HERE = "/tmp/bgpspike"


def vtysh(cmd: str) -> str:
    return subprocess.run(["ip", "netns", "exec", "bgpspk-r", "vtysh", "--vty_socket", f"{HERE}/frr", "-c", cmd],
                          capture_output=True, text=True, check=True).stdout


def vjson(cmd: str):
    return json.loads(vtysh(cmd + " json"))


def peer_state() -> str:
    n = vjson("show bgp neighbors 50.1.1.1")
    return n.get("50.1.1.1", {}).get("bgpState", "?")


def frr_routes(afi="ipv4") -> dict:
    return vjson(f"show bgp {afi} unicast").get("routes", {})


def wait(pred, timeout=120.0, step=0.05):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return time.time() - t0, v
        time.sleep(step)
    return None, None


def start_speaker(*extra, log="speaker.log"):
    if os.path.exists(f"{HERE}/ctl.sock"):
        os.unlink(f"{HERE}/ctl.sock")
    p = subprocess.Popen(["ip", "netns", "exec", "bgpspk-h", PY, f"{HERE}/speaker.py", "--log", f"{HERE}/{log}", *extra],
                         stdout=open(f"{HERE}/speaker.out", "a"), stderr=subprocess.STDOUT)
    wait(lambda: os.path.exists(f"{HERE}/ctl.sock"), 20)
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def python_pid(p) -> int:
    # ip netns exec execs the program, so the Popen pid is the python process
    return p.pid


def cpu_secs(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def basic(extra):
    out = {}
    t0 = time.time()
    p = start_speaker(*extra)
    out["speaker_pid"] = p.pid
    dt, _ = wait(lambda: peer_state() == "Established", 60)
    out["established_after_start_s"] = dt
    print("session:", vtysh("show bgp summary"))
    # announce
    t = time.time()
    print("add:", ctl({"op": "add", "prefix": "10.99.0.5/32", "next_hop": "50.1.1.1"}))
    dt, r = wait(lambda: frr_routes().get("10.99.0.5/32"))
    out["announce_visible_s"] = dt
    out["frr_route"] = r
    print(vtysh("show ip bgp"))
    print(vtysh("show ip route 10.99.0.5"))
    # received route (FRR sends its table about 1 s after the session comes up)
    dt, _ = wait(lambda: any(e["kind"] == "best_path" and e["prefix"] == "192.0.2.0/24" for e in ctl({"op": "events"})["result"]), 30)
    evs = ctl({"op": "events"})["result"]
    up = next(e["t"] for e in evs if e["kind"] == "peer_up")
    got = next(e["t"] for e in evs if e["kind"] == "best_path")
    out["router_route_received_after_peer_up_s"] = got - up
    ev = ctl({"op": "events"})["result"]
    out["speaker_events"] = [e for e in ev if e["kind"] in ("peer_up", "best_path", "of_switch_connected")]
    out["speaker_state"] = ctl({"op": "state"})["result"]
    out["speaker_rib"] = ctl({"op": "rib"})["result"]
    # withdraw
    print("del:", ctl({"op": "del", "prefix": "10.99.0.5/32"}))
    dt, _ = wait(lambda: "10.99.0.5/32" not in frr_routes())
    out["withdraw_gone_s"] = dt
    # router withdraws what it originated -> speaker's handler sees is_withdraw
    n = len(ctl({"op": "events"})["result"])
    vtysh_conf(["router bgp 65000", "address-family ipv4 unicast", "no network 192.0.2.0/24"])
    dt, _ = wait(lambda: any(e["kind"] == "best_path" and e["withdraw"] for e in ctl({"op": "events", "since": n})["result"]), 30)
    out["router_withdraw_seen_by_speaker_s"] = dt
    vtysh_conf(["router bgp 65000", "address-family ipv4 unicast", "network 192.0.2.0/24"])
    dt, _ = wait(lambda: any(e["kind"] == "best_path" and not e["withdraw"] for e in ctl({"op": "events", "since": n})["result"]), 30)
    out["router_announce_seen_by_speaker_s"] = dt
    out["threads"] = ctl({"op": "threads"})["result"]
    stop(p)
    return out


def vtysh_conf(lines):
    args = ["ip", "netns", "exec", "bgpspk-r", "vtysh", "--vty_socket", f"{HERE}/frr", "-c", "configure terminal"]
    for line in lines:
        args += ["-c", line]
    subprocess.run(args, check=True, capture_output=True)


def bulk(extra, n=int(os.environ.get("BULK_N", "100"))):
    out = {}
    p = start_speaker(*extra)
    wait(lambda: peer_state() == "Established", 60)
    prefixes = [f"10.98.{i // 250}.{i % 250 + 1}/32" for i in range(n)]
    base = len(frr_routes())
    t = time.time()
    r = ctl({"op": "bulk_add", "prefixes": prefixes, "next_hop": "50.1.1.1"})
    out["api_secs"] = r["result"]["api_secs"]
    dt, _ = wait(lambda: len(frr_routes()) >= base + n, 120, 0.02)
    total = time.time() - t
    out[f"{n}_all_visible_in_frr_from_first_add_s"] = total
    out["routes_per_s"] = n / total
    rib = vjson("show ip route")  # zebra installed?
    out["zebra_installed"] = sum(1 for k in rib if k.startswith("10.98."))
    t = time.time()
    r = ctl({"op": "bulk_del", "prefixes": prefixes})
    dt, _ = wait(lambda: len(frr_routes()) <= base, 120, 0.02)
    out[f"{n}_withdrawn_in_frr_s"] = dt
    # one at a time, as containers start: N separate API calls with a pause
    t = time.time()
    for pfx in prefixes[:20]:
        ctl({"op": "add", "prefix": pfx, "next_hop": "50.1.1.1"})
        time.sleep(0.05)
    dt, _ = wait(lambda: len(frr_routes()) >= base + 20, 60, 0.02)
    out["20_spaced_50ms_last_visible_after_last_add_s"] = (time.time() - t) - 20 * 0.05 if dt is not None else None
    ctl({"op": "bulk_del", "prefixes": prefixes[:20]})
    stop(p)
    return out


def kill(extra):
    """SIGKILL the speaker; time until FRR drops the session and the route."""
    out = {}
    p = start_speaker(*extra)
    wait(lambda: peer_state() == "Established", 60)
    ctl({"op": "add", "prefix": "10.99.0.5/32", "next_hop": "50.1.1.1"})
    wait(lambda: frr_routes().get("10.99.0.5/32"))
    nb = vjson("show bgp neighbors 50.1.1.1")["50.1.1.1"]
    out["negotiated_hold_ms"] = nb.get("bgpTimerHoldTimeMsecs")
    out["negotiated_keepalive_ms"] = nb.get("bgpTimerKeepAliveIntervalMsecs")
    mode = os.environ.get("KILL_MODE", "kill")
    out["mode"] = mode
    t = time.time()
    if mode == "kill":
        os.kill(p.pid, signal.SIGKILL)  # kernel closes the TCP socket (FIN)
        p.wait()
    elif mode == "stop":
        os.kill(p.pid, signal.SIGSTOP)  # hung agent: socket open, no keepalives
    elif mode == "linkdown":  # veth down: the router sees carrier loss
        subprocess.run(["ip", "-n", "bgpspk-h", "link", "set", "bgpspk-hv", "down"], check=True)
    elif mode == "silent":  # host gone without a trace: packets dropped, link up
        subprocess.run(["ip", "netns", "exec", "bgpspk-h", "iptables", "-I", "OUTPUT", "-o", "bgpspk-hv", "-j", "DROP"], check=True)
    dt_route, _ = wait(lambda: "10.99.0.5/32" not in frr_routes(), 300, 0.1)
    out["route_gone_after_kill_s"] = dt_route
    out["state_then"] = peer_state()
    out["last_reset"] = vjson("show bgp neighbors 50.1.1.1")["50.1.1.1"].get("lastResetDueTo")
    if mode == "stop":
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    elif mode == "linkdown":
        subprocess.run(["ip", "-n", "bgpspk-h", "link", "set", "bgpspk-hv", "up"], check=True)
        stop(p)
    elif mode == "silent":
        subprocess.run(["ip", "netns", "exec", "bgpspk-h", "iptables", "-D", "OUTPUT", "-o", "bgpspk-hv", "-j", "DROP"], check=True)
        stop(p)
    return out


def idle(extra, secs=60):
    p = start_speaker(*extra)
    wait(lambda: peer_state() == "Established", 60)
    ctl({"op": "add", "prefix": "10.99.0.5/32", "next_hop": "50.1.1.1"})
    time.sleep(3)
    c0, t0 = cpu_secs(p.pid), time.time()
    time.sleep(secs)
    c1, t1 = cpu_secs(p.pid), time.time()
    rss = [l for l in open(f"/proc/{p.pid}/status") if l.startswith(("VmRSS", "Threads"))]
    out = {"idle_cpu_percent": 100 * (c1 - c0) / (t1 - t0), "window_s": secs, "status": [l.strip() for l in rss],
           "threads": ctl({"op": "threads"})["result"]}
    stop(p)
    return out


def ipv6(extra):
    out = {}
    p = start_speaker("--ipv6", *extra)
    dt, _ = wait(lambda: peer_state() == "Established", 60)
    out["established_s"] = dt
    nb = vjson("show bgp neighbors 50.1.1.1")["50.1.1.1"]
    out["afi_safis"] = list(nb.get("addressFamilyInfo", {}).keys())
    out["neighbor_caps"] = nb.get("neighborCapabilities", {}).get("multiprotocolExtensions")
    for nh in (None, "fd50::1", "50.1.1.1"):
        pfx = "fd99::5/128"
        r = ctl({"op": "add", "prefix": pfx, "next_hop": nh})
        dt, route = wait(lambda: frr_routes("ipv6").get(pfx), 8)
        out[f"add_{nh}"] = {"api": r, "visible_s": dt, "frr": route}
        ctl({"op": "del", "prefix": pfx})
        wait(lambda: pfx not in frr_routes("ipv6"), 8)
    time.sleep(1)
    out["speaker_v6_events"] = [e for e in ctl({"op": "events"})["result"] if e["kind"] == "best_path" and ":" in e.get("prefix", "")]
    out["session_after"] = peer_state()
    stop(p)
    return out


if __name__ == "__main__":
    what = sys.argv[1]
    res = globals()[what](sys.argv[2:])
    print("RESULT", what, json.dumps(res, indent=1, default=str))
    with open(f"{HERE}/results-{what}{'-' + '_'.join(a.strip('-') for a in sys.argv[2:]) if sys.argv[2:] else ''}.json", "w") as f:
        json.dump(res, f, indent=1, default=str)
