"""The managed (v2) plugin's entrypoint: PID 1 of the plugin, running the agent and, for a
single host, an embedded-store netmaster beside it.

Docker starts the entrypoint with the env of config.json (as `docker plugin set` changed
it) and its `args` appended. Without NETPLUGIN_ETCD_ENDPOINTS and NETPLUGIN_NETMASTER the
plugin is a whole single-host netplugin: netmaster on the embedded store in the `data`
mount, listening on NETPLUGIN_MASTER_LISTEN (netctl's default address), and the agent.
With either set, it runs only the agent, against the cluster.

As PID 1 it must handle SIGTERM itself (the kernel ignores unhandled signals for PID 1;
`docker plugin disable` would wait 10 s and SIGKILL), pass it on, and reap every child.
If a child dies on its own the plugin exits with its status, and dockerd starts it again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger("netplugin.managed")

DEFAULT_LISTEN = "127.0.0.1:9999"
STOP_GRACE = 8.0  # seconds before SIGKILL; dockerd itself kills the plugin after 10


@dataclass(frozen=True)
class Child:
    name: str
    argv: tuple[str, ...]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for the children: config.json declares every setting, most of them
    empty; an empty NETPLUGIN_* variable means "the flag's default", so it is dropped."""
    return {k: v for k, v in env.items() if not (k.startswith("NETPLUGIN_") and v == "")}


def plan(env: Mapping[str, str], args: Sequence[str], python: str = sys.executable) -> list[Child]:
    """What to run, in start order (stopped in reverse)."""
    agent = [python, "-m", "plugin.cli", *args]
    if env.get("NETPLUGIN_ETCD_ENDPOINTS") or env.get("NETPLUGIN_NETMASTER"):
        return [Child("netplugin", tuple(agent))]
    listen = env.get("NETPLUGIN_MASTER_LISTEN") or DEFAULT_LISTEN
    data_dir = env.get("NETPLUGIN_DATA_DIR") or "/var/lib/netplugin"
    master = [
        python,
        "-m",
        "master.cli",
        "--data-dir",
        data_dir,
        "--listen-url",
        listen,
        *shlex.split(env.get("NETPLUGIN_MASTER_ARGS", "")),
    ]
    agent[3:3] = ["--netmaster", f"http://{listen}"]
    return [Child("netmaster", tuple(master)), Child("netplugin", tuple(agent))]


class Supervisor:
    """Start the children, pass SIGTERM/SIGINT on, reap everything, exit when they are gone."""

    def __init__(self, children: Sequence[Child], env: Mapping[str, str]) -> None:
        self.children = list(children)
        self.env = dict(env)
        self.pids: dict[int, Child] = {}
        self.stopping = False
        self.status = 0
        self.exits: dict[str, int] = {}  # by child name: exit status, or -signal
        self._lock = threading.RLock()  # stop() may run again in a signal handler

    def start(self) -> None:
        for child in self.children:
            pid = os.posix_spawn(child.argv[0], list(child.argv), self.env)
            self.pids[pid] = child
            log.info("%s started (pid %d)", child.name, pid)

    def stop(self, reason: str) -> None:
        """SIGTERM to every child still running, last started first; SIGKILL after a grace."""
        with self._lock:
            if self.stopping:
                return
            self.stopping = True
            log.info("stopping (%s)", reason)
            for pid in reversed(list(self.pids)):
                _signal(pid, signal.SIGTERM)
        timer = threading.Timer(STOP_GRACE, self._kill)
        timer.daemon = True
        timer.start()

    def _kill(self) -> None:
        with self._lock:
            for pid, child in list(self.pids.items()):
                log.warning(
                    "%s (pid %d) did not stop in %gs: killing it", child.name, pid, STOP_GRACE
                )
                _signal(pid, signal.SIGKILL)

    def reap(self) -> int:
        """Wait for children (and orphans, as PID 1) until ours are all gone."""
        while self.pids:
            try:
                pid, wstatus = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            child = self.pids.pop(pid, None)
            if child is None:
                continue  # an orphan reparented to us
            code = os.waitstatus_to_exitcode(wstatus)
            self.exits[child.name] = code
            if not self.stopping:
                log.error("%s exited (status %d); stopping the plugin", child.name, code)
                self.status = code or 1
                self.stop(f"{child.name} exited")
        return self.status


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    env = child_env(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The data mount is the host's /var/lib: its netplugin directory may not exist yet.
    os.makedirs(env.get("NETPLUGIN_DATA_DIR") or "/var/lib/netplugin", exist_ok=True)
    supervisor = Supervisor(plan(env, args), env)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _f: supervisor.stop(f"signal {signum}"))
    supervisor.start()
    sys.exit(supervisor.reap())


if __name__ == "__main__":
    main()
