"""netplugin-cni: a CNI 1.0.0 plugin (ADD, DEL, CHECK, VERSION; configurations of 0.3.x and
0.4.0 too) that asks this host's netplugin agent to do the work.

A runtime execs it with the CNI_* environment and the network configuration on stdin. It
answers VERSION itself and posts everything else to the agent's socket: the configuration's
"socket" key, else $NETPLUGIN_CNI_SOCKET, else /run/netplugin/cni.sock. It imports only the
standard library and common.cni, so a pod's start does not wait on a heavy import.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from typing import Any

from common import cni

TIMEOUT = 60.0  # an ADD waits for the master and the switch; a runtime's own timeout is longer


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def call_agent(path: str, req: cni.Request) -> dict[str, Any] | None:
    """POST the call to the agent; its result (None for DEL and CHECK), or CniError."""
    conn = _UnixConnection(path, TIMEOUT)
    try:
        conn.request(
            "POST",
            f"/cni/{req.command.lower()}",
            body=json.dumps(req.to_json()),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        body = resp.read()
    except OSError as e:
        raise cni.CniError(
            cni.TRY_AGAIN_LATER,
            f"the netplugin agent is not answering on {path}: {e}",
            "is netplugin running on this host (and its --cni-socket this path)?",
        ) from None
    finally:
        conn.close()
    try:
        data = json.loads(body) if body else None
    except ValueError:
        raise cni.CniError(
            cni.IO_FAILURE, f"the agent answered {resp.status} without JSON"
        ) from None
    if resp.status >= 300:
        if isinstance(data, dict) and "code" in data:
            raise cni.CniError(
                int(data["code"]), str(data.get("msg", "")), str(data.get("details", ""))
            )
        raise cni.CniError(cni.IO_FAILURE, f"the agent answered {resp.status}: {data}")
    if req.command in ("DEL", "CHECK"):
        return None  # the spec: nothing on stdout when they succeed
    return data if isinstance(data, dict) else None


def run(env: dict[str, str], stdin: str) -> tuple[int, dict[str, Any] | None]:
    """One call: (exit status, what to print)."""
    version = cni.SUPPORTED_VERSIONS[-1]
    try:
        try:
            config = json.loads(stdin) if stdin.strip() else {}
        except ValueError as e:
            raise cni.CniError(
                cni.DECODE_FAILURE, f"the network configuration is not JSON: {e}"
            ) from None
        if not isinstance(config, dict):
            raise cni.CniError(cni.DECODE_FAILURE, "the network configuration is not a JSON object")
        if env.get("CNI_COMMAND") == "VERSION":
            return 0, cni.version_result(config)
        version = str(config.get("cniVersion") or version)
        version = cni.config_version(config)
        req = cni.request_from_env(env, config)
        path = str(config.get("socket") or env.get(cni.SOCKET_ENV) or cni.DEFAULT_SOCKET)
        return 0, call_agent(path, req)
    except cni.CniError as e:
        return 1, e.to_json(version)


def main() -> None:
    status, out = run(dict(os.environ), sys.stdin.read())
    if out is not None:
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
