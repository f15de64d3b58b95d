"""A private Open vSwitch in its own network namespace, and an OpenFlow controller process
beside it, for integration tests. Everything started here is stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .wait import wait_for

VENV_PYTHON = Path(sys.executable)
REPO_ROOT = Path(__file__).resolve().parent.parent
VSWITCH_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")


def run(*cmd: str, check: bool = True, timeout: float = 30) -> str:
    """Run a command and return its stdout; raise with its stderr on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def stop_pid(
    proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 10.0
) -> None:
    """Stop a process we started, by its PID: ``sig``, then SIGKILL after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class OvsInstance:
    """ovsdb-server + userspace ovs-vswitchd, private to one new network namespace and one
    work directory, so neither a system-wide OVS nor another test's OVS is touched."""

    def __init__(self, netns_name: str, workdir: Path, userspace_tso: bool = False) -> None:
        self.netns = netns_name
        self.workdir = Path(workdir)
        self.userspace_tso = userspace_tso  # as scripts/host-daemons.sh starts it
        self.db_file = self.workdir / "conf.db"
        self.db_sock = self.workdir / "db.sock"
        self.ovsdb_ctl = self.workdir / "ovsdb-server.ctl"
        self.vswitchd_ctl = self.workdir / "ovs-vswitchd.ctl"
        self._ovsdb: subprocess.Popen[bytes] | None = None
        self._vswitchd: subprocess.Popen[bytes] | None = None
        self._netns_created = False

    @property
    def db_target(self) -> str:
        """The OVSDB connection string for ovsdbapp and ovs-vsctl."""
        return f"unix:{self.db_sock}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for var in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"):
            env[var] = str(self.workdir)
        return env

    def start(self, timeout: float = 20.0) -> OvsInstance:
        """Create the namespace, the database, and start both daemons; wait until ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        run("ip", "netns", "add", self.netns)
        self._netns_created = True
        try:
            self.ns_exec("ip", "link", "set", "lo", "up")
            if not self.db_file.exists():
                run("ovsdb-tool", "create", str(self.db_file), str(VSWITCH_SCHEMA))
            self._ovsdb = self._spawn(
                "ovsdb-server",
                str(self.db_file),
                f"--remote=punix:{self.db_sock}",
                f"--unixctl={self.ovsdb_ctl}",
                f"--pidfile={self.workdir / 'ovsdb-server.pid'}",
                f"--log-file={self.workdir / 'ovsdb-server.log'}",
            )
            wait_for(self.db_sock.exists, timeout, "ovsdb-server made its socket", interval=0.05)
            self.vsctl("--no-wait", "init")
            if self.userspace_tso:
                self.vsctl(
                    "--no-wait",
                    "set",
                    "Open_vSwitch",
                    ".",
                    "other_config:userspace-tso-enable=true",
                )
            self.start_vswitchd(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def start_vswitchd(self, timeout: float = 20.0) -> None:
        """Start ovs-vswitchd (again) and wait until it has applied the database."""
        self._vswitchd = self._spawn(
            "ovs-vswitchd",
            self.db_target,
            f"--unixctl={self.vswitchd_ctl}",
            f"--pidfile={self.workdir / 'ovs-vswitchd.pid'}",
            f"--log-file={self.workdir / 'ovs-vswitchd.log'}",
        )
        wait_for(
            self.vswitchd_ctl.exists,
            timeout,
            "ovs-vswitchd made its control socket",
            interval=0.05,
        )
        # Without --no-wait, ovs-vsctl returns only once vswitchd has caught up.
        self.vsctl(f"--timeout={int(timeout)}", "show")

    def vswitchd_running(self) -> bool:
        return self._vswitchd is not None and self._vswitchd.poll() is None

    def stop_vswitchd(self) -> None:
        """Stop ovs-vswitchd by PID; the database and namespace stay."""
        stop_pid(self._vswitchd)
        self._vswitchd = None

    def _spawn(self, binary: str, *args: str) -> subprocess.Popen[bytes]:
        # `ip netns exec` execs the binary, so the child PID is the daemon's own PID.
        with open(self.workdir / f"{binary}.stderr", "ab") as log:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.netns, binary, "--no-chdir", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,
            )

    def stop(self) -> None:
        """Stop both daemons by PID and delete the namespace (and anything left inside it)."""
        stop_pid(self._vswitchd)
        self._vswitchd = None
        stop_pid(self._ovsdb)
        self._ovsdb = None
        if self._netns_created:
            run("ip", "netns", "del", self.netns, check=False)
            self._netns_created = False

    def __enter__(self) -> OvsInstance:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ns_exec(self, *cmd: str, check: bool = True, timeout: float = 30) -> str:
        """Run a command inside this instance's namespace."""
        return run("ip", "netns", "exec", self.netns, *cmd, check=check, timeout=timeout)

    def vsctl(self, *args: str) -> str:
        """ovs-vsctl against this instance's database."""
        return run("ovs-vsctl", f"--db={self.db_target}", *args)

    def ofctl(self, command: str, bridge: str, *args: str) -> str:
        """ovs-ofctl (OpenFlow 1.3) against a bridge of this instance's vswitchd."""
        target = f"unix:{self.workdir / (bridge + '.mgmt')}"
        return run("ovs-ofctl", "-O", "OpenFlow13", command, target, *args)

    def dump_flows(self, bridge: str) -> list[str]:
        """The bridge's flows, one ovs-ofctl line each, without the reply header."""
        out = self.ofctl("dump-flows", bridge, "--no-names")
        return [line.strip() for line in out.splitlines() if "cookie=" in line]


class ControllerProcess:
    """`python -m datapath.ofrunner` run inside an OvsInstance's namespace, so that its
    127.0.0.1 listener is the one the switch there reaches."""

    def __init__(self, ovs: OvsInstance, port: int, name: str = "ofapp") -> None:
        self.ovs = ovs
        self.port = port
        self.state_file = ovs.workdir / f"{name}-state.json"
        self.status_file = ovs.workdir / f"{name}-status.json"
        self.log = ovs.workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def write_state(self, state: dict[str, Any]) -> None:
        """Write the desired state the controller compiles (atomically)."""
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)

    def start(self) -> ControllerProcess:
        """Start the controller; it reads the state file at once."""
        self.status_file.unlink(missing_ok=True)
        cmd = [
            "ip", "netns", "exec", self.ovs.netns,
            str(VENV_PYTHON), "-m", "datapath.ofrunner",
            "--listen-host", "127.0.0.1",
            "--listen-port", str(self.port),
            "--state-file", str(self.state_file),
            "--status-file", str(self.status_file),
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True
            )
        return self

    def reload(self) -> None:
        """Ask the controller to re-read the state file and send the change (SIGHUP)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def resync(self) -> None:
        """Ask the controller for a full reconcile: read the switch back and diff (SIGUSR1)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def freeze(self, seconds: float) -> None:
        """Stop the controller (SIGSTOP) for this long, then let it go on: a controller
        too busy to answer anything."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop it by PID (SIGTERM, then SIGKILL)."""
        stop_pid(self.proc)
        self.proc = None

    def status(self) -> dict[str, Any]:
        """The last status the controller wrote, or {} if none yet."""
        try:
            return json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_status(self, predicate: Any, timeout: float = 20.0) -> dict[str, Any]:
        """Wait until predicate(status) is true and return that status."""

        def matched() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"controller exited:\n{self.log.read_text()[-4000:]}")
            st = self.status()
            return st if st and predicate(st) else None

        return wait_for(
            matched, timeout, "the controller's status to match", interval=0.05, last=self.status
        )
