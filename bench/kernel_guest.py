"""The scaling table of bench/scaling.py, run inside a lab guest for bench/kernel.py: Docker's
endpoint calls straight at the guest's plugin socket, at 10, 100 and 1,000 standing
endpoints, on the kernel datapath. Prints the rows as JSON (progress on stderr).

    python -m bench.kernel_guest --network-id ID --pool-id POOL --plugin-pid PID \\
        [--levels 10,100,1000] [--samples 30] [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.scaling import DockerCalls, scaling

SOCKET = "/run/docker/plugins/netplugin.sock"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel_guest")
    p.add_argument("--network-id", required=True, help="the docker network's id")
    p.add_argument("--pool-id", required=True, help="its IPv4 pool's id (the IPAM driver's)")
    p.add_argument("--plugin-pid", type=int, required=True, help="the agent, for its RSS")
    p.add_argument("--levels", default="10,100,1000")
    p.add_argument("--samples", type=int, default=30)
    p.add_argument("--budget", type=float, default=0, help="seconds to stand endpoints up in")
    p.add_argument("--socket", default=SOCKET)
    args = p.parse_args(argv)
    calls = DockerCalls(args.socket, args.network_id, args.pool_id)
    levels = tuple(int(n) for n in args.levels.split(","))
    started = time.monotonic()
    deadline = started + args.budget if args.budget else None
    rows = scaling(calls, args.plugin_pid, levels, args.samples, deadline=deadline, keep=True)
    seconds = time.monotonic() - started
    print(f"kernel_guest: {len(rows)} levels in {seconds:.0f} s", file=sys.stderr)
    print(json.dumps({"rows": rows, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
