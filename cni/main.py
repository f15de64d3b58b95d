"""netplugin-cni: a CNI 1.0.0 plugin (ADD, DEL, CHECK, VERSION; configurations of 0.3.x and
0.4.0 too) that asks this host's netplugin agent to do the work.

A runtime execs it with the CNI_* environment and the network configuration on stdin. It
answers VERSION itself and posts everything else to the agent's socket: the configuration's
"socket" key, else $NETPLUGIN_CNI_SOCKET, else /run/netplugin/cni.sock. It imports only the
standard library and common.cni, so a pod's start does not wait on a heavy import.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

from common import cni

TIMEOUT = 60.0  # an ADD waits for the master and the switch; a runtime's own timeout is longer


def _post(path: str, url: str, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.0 POST over the unix socket ``path``: (status, body). Raw, not http.client:
    its import alone costs a pod's start more than this whole module."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT)
        s.connect(path)
        head = (
            f"POST {url} HTTP/1.0\r\nHost: netplugin\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        s.sendall(head.encode() + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    header, _, payload = raw.partition(b"\r\n\r\n")
    status_line = header.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"not an HTTP answer: {raw[:80]!r}")
    return int(status_line[1]), payload


def call_agent(path: str, req: cni.Request) -> dict[str, Any] | None:
    """POST the call to the agent; its result (None for DEL and CHECK), or CniError."""
    try:
        status, body = _post(
            path, f"/cni/{req.command.lower()}", json.dumps(req.to_json()).encode()
        )
    except OSError as e:
        raise cni.CniError(
            cni.TRY_AGAIN_LATER,
            f"the netplugin agent is not answering on {path}: {e}",
            "is netplugin running on this host (and its --cni-socket this path)?",
        ) from None
    try:
        data = json.loads(body) if body else None
    except ValueError:
        raise cni.CniError(cni.IO_FAILURE, f"the agent answered {status} without JSON") from None
    if status >= 300:
        if isinstance(data, dict) and "code" in data:
            raise cni.CniError(
                int(data["code"]), str(data.get("msg", "")), str(data.get("details", ""))
            )
        raise cni.CniError(cni.IO_FAILURE, f"the agent answered {status}: {data}")
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
