"""Run the flow controller standalone (the integration tests and the benchmarks do, inside
the bridge's network namespace):
    python -m datapath.ofrunner --listen-port 6653 --state-file S.json --status-file T.json
It compiles S.json (a DesiredState) and keeps T.json current. On SIGHUP it re-reads S.json
and sends the switch only the delta (datapath.flowmodel), as the agent does; on SIGUSR1 it
reconciles in full (reads the switch's flows back and diffs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from datapath.flowmodel import FlowModel
from datapath.ofapp import DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT, FlowController
from datapath.pipeline import DesiredState, compile_flows

log = logging.getLogger(__name__)


def _load(path: Path) -> DesiredState:
    return DesiredState.from_dict(json.loads(path.read_text()))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    """Serve one bridge from a DesiredState JSON file until SIGTERM."""
    ap = argparse.ArgumentParser(prog="python -m datapath.ofrunner", description=__doc__)
    ap.add_argument("--listen-host", default=DEFAULT_LISTEN_HOST)
    ap.add_argument("--listen-port", type=int, default=DEFAULT_LISTEN_PORT)
    ap.add_argument("--state-file", type=Path, required=True, help="DesiredState JSON")
    ap.add_argument("--status-file", type=Path, help="where to keep the controller's status")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    dirty = threading.Event()
    reload = threading.Event()
    resync = threading.Event()
    stop = threading.Event()
    ctl = FlowController(args.listen_host, args.listen_port, on_change=dirty.set)
    signal.signal(signal.SIGHUP, lambda *_: reload.set())
    signal.signal(signal.SIGUSR1, lambda *_: resync.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    model = FlowModel()
    state = _load(args.state_file)
    model.replace(state)
    ctl.set_desired(compile_flows(state))
    ctl.start()
    while not stop.is_set():
        if resync.is_set():
            resync.clear()
            ctl.resync()
        if reload.is_set():
            reload.clear()
            try:
                ctl.apply(model.replace(_load(args.state_file)))
            except (OSError, ValueError, TypeError) as e:
                log.error("keeping the previous state: %s: %s", args.state_file, e)
        if args.status_file:
            _write_json(args.status_file, ctl.snapshot())
        dirty.wait(0.5)
        dirty.clear()
    ctl.stop()
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
