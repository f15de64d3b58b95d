"""The random 4-thread workload of stress.py, through RouteAnnouncer: does FRR converge?"""
import json, logging, os, sys, threading, time
sys.path.insert(0, "/tmp/bgpspike")
logging.basicConfig(filename="/tmp/bgpspike/announcer.log", level=logging.WARNING,
                    format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
from os_ken.services.protocols.bgp.bgpspeaker import BGPSpeaker
from announcer import RouteAnnouncer
from stress import workload, frr_set, wait, spk_state

s = BGPSpeaker(as_number=65001, router_id="50.1.1.1", bgp_server_port=0)
s.neighbor_add("50.1.1.2", 65000, connect_mode="active")
wait(lambda: spk_state(s) == "Established")
a = RouteAnnouncer(s, "50.1.1.1")
out = {}
for rnd in range(3):
    works = [workload(rnd * 10 + i) for i in range(4)]
    expected = set().union(*(w[1] for w in works))
    def run(ops):
        for op, p in ops:
            a.announce(p) if op == "add" else a.withdraw(p)
    t = time.time()
    ths = [threading.Thread(target=run, args=(w[0],)) for w in works]
    [th.start() for th in ths]; [th.join() for th in ths]
    conv = wait(lambda: frr_set() == expected, 20)
    got = frr_set()
    out[f"round{rnd}"] = {"converged_s": conv, "expected": len(expected), "missing": len(expected - got), "extra": len(got - expected)}
    for p in expected: a.withdraw(p)
    out[f"round{rnd}_cleared_s"] = wait(lambda: not frr_set(), 20)
# rapid add->del, the case that loses withdrawals when calling os-ken directly
for i in range(1, 51):
    a.announce(f"10.97.9.{i}/32"); a.withdraw(f"10.97.9.{i}/32")
for i in range(1, 51):
    a.announce(f"10.97.8.{i}/32"); time.sleep(0.005); a.withdraw(f"10.97.8.{i}/32")
out["rapid_add_del_clean_s"] = wait(lambda: not frr_set(), 20)
out["warnings_logged"] = sum(1 for l in open("/tmp/bgpspike/announcer.log") if "still announced" in l)
print(json.dumps(out, indent=1)); sys.stdout.flush(); os._exit(0)
