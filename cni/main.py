"""netplugin-cni: a CNI 1.0.0 plugin (ADD, DEL, CHECK, VERSION; configurations of 0.3.x and
0.4.0 too) that asks this host's netplugin agent to do the work.

A runtime execs it with the CNI_* environment and the network configuration on stdin, once
per call, so its start is part of every pod's. It answers VERSION itself. ADD, DEL and CHECK
it hands to the agent's socket as they came (``POST /cni/exec``: the CNI_* variables and
stdin, unparsed) and prints what the agent answers, with the exit status it names: the agent
runs the same checks (common.cni.run), so this process needs neither json nor socket.py,
whose imports alone cost more than the rest of it. The full path (json, common.cni) is taken
only for VERSION, for a configuration that may name its own "socket", and when the agent
does not answer: then the checks run here first, so the error is the one they find.
The socket: the configuration's "socket" key, else $NETPLUGIN_CNI_SOCKET, else
/run/netplugin/cni.sock.

``netplugin-cni install DIR`` writes DIR/netplugin-cni, a launcher that does the fast path
in Perl or starts Python without site-packages (cni.launcher; docs/BENCHMARKS.md, "CNI").
"""

from __future__ import annotations

import sys

# Stdlib only, and little of it: the fast path imports _socket (the C module) and posix.
TIMEOUT = 60.0  # an ADD waits for the master and the switch; a runtime's own timeout is longer
DEFAULT_SOCKET = "/run/netplugin/cni.sock"  # = common.cni.DEFAULT_SOCKET
SOCKET_ENV = "NETPLUGIN_CNI_SOCKET"  # = common.cni.SOCKET_ENV
EXEC_URL = "/cni/exec"  # = common.cni.EXEC_URL
EXIT_HEADER = b"netplugin-cni-exit"  # = common.cni.EXIT_HEADER, lower case
# The Perl launcher's word (cni.launcher), as arguments: the agent did not answer it (and
# why), or answered without an exit status.
FAILED_ARG = "--agent-failed"
NO_EXIT_ARG = "--agent-no-exit"


def exec_body(env: dict[bytes, bytes], stdin: bytes) -> bytes:
    """``POST /cni/exec``'s body: each CNI_* variable as KEY=VALUE and a NUL, one NUL more,
    then stdin as it came (common.cni.read_exec_body reads it)."""
    return b"".join(k + b"=" + v + b"\0" for k, v in env.items()) + b"\0" + stdin


def exec_on_agent(path: str, env: dict[bytes, bytes], stdin: bytes) -> tuple[int, bytes] | None:
    """Hand the call to the agent at ``path``: (exit status, what to print), or None for an
    answer without an exit status (not an agent of this version). OSError: no answer.
    Raw HTTP/1.0 on _socket: http.client's and socket.py's imports would double our start."""
    import _socket

    body = exec_body(env, stdin)
    head = (
        f"POST {EXEC_URL} HTTP/1.0\r\nHost: netplugin\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(TIMEOUT)
        s.connect(path)
        s.sendall(head.encode() + body)
        # Said all: werkzeug drains a request for up to 10 ms after answering before it
        # closes, unless it finds the stream ended (the answer ends with the connection).
        s.shutdown(_socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    finally:
        s.close()
    header, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    for line in header.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == EXIT_HEADER and value.strip().isdigit():
            return int(value), payload
    return None


def run(
    env: dict[str, str], stdin: str, failed: OSError | None = None, no_exit: bool = False
) -> tuple[int, dict[str, object] | None]:
    """One call, the full path: (exit status, what to print). The checks run here, then the
    agent does the call (the agent was asked already: ``failed``, it did not answer;
    ``no_exit``, its answer had no exit status)."""
    import json

    from common import cni

    def on_agent(req: cni.Request) -> dict[str, object] | None:
        raw_env = {k.encode(): v.encode() for k, v in env.items() if k.startswith("CNI_")}
        path = str(req.config.get("socket") or env.get(cni.SOCKET_ENV) or cni.DEFAULT_SOCKET)
        try:
            if failed is not None:
                raise failed
            answer = None if no_exit else exec_on_agent(path, raw_env, stdin.encode())
        except OSError as e:
            raise cni.CniError(
                cni.TRY_AGAIN_LATER,
                f"the netplugin agent is not answering on {path}: {e}",
                "is netplugin running on this host (and its --cni-socket this path)?",
            ) from None
        if answer is None:
            raise cni.CniError(cni.IO_FAILURE, f"the agent on {path} did not answer {EXEC_URL}")
        status, out = answer
        try:
            data = json.loads(out) if out.strip() else None
        except ValueError:
            raise cni.CniError(
                cni.IO_FAILURE, f"the agent answered {status} without JSON"
            ) from None
        if status != 0:
            if isinstance(data, dict) and "code" in data:
                raise cni.CniError(
                    int(data["code"]), str(data.get("msg", "")), str(data.get("details", ""))
                )
            raise cni.CniError(cni.IO_FAILURE, f"the agent answered {status}: {data}")
        return data if isinstance(data, dict) else None

    return cni.run(env, stdin, on_agent)


def fast(env: dict[bytes, bytes], stdin: bytes) -> bool:
    """Whether the call goes to the agent unparsed: not VERSION (answered here), and no
    configuration that may name its own socket (any backslash may spell "socket")."""
    return env.get(b"CNI_COMMAND") != b"VERSION" and b"socket" not in stdin and b"\\" not in stdin


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["install"]:
        from cni.launcher import install_main

        sys.exit(install_main(args[1:]))
    from posix import environ  # os's environ, without importing os

    stdin = sys.stdin.buffer.read()
    env = {k: v for k, v in environ.items() if k.startswith(b"CNI_")}
    failed: OSError | None = None
    no_exit = args == [NO_EXIT_ARG]
    if args[:1] == [FAILED_ARG] and len(args) == 2:  # the Perl launcher asked the agent
        failed = OSError(args[1])
    # Any backslash may spell "socket" in a key: the full path parses the configuration.
    elif not no_exit and fast(env, stdin):
        path = (environ.get(SOCKET_ENV.encode()) or DEFAULT_SOCKET.encode()).decode()
        try:
            answer = exec_on_agent(path, env, stdin)
        except OSError as e:
            answer, failed = None, e  # the full path says so, once the checks passed
        if answer is not None:
            status, out = answer
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            sys.exit(status)
        no_exit = failed is None  # it answered, without an exit status: not asked again
    import json
    import os

    status, printed = run(dict(os.environ), stdin.decode(), failed, no_exit)
    if printed is not None:
        sys.stdout.write(json.dumps(printed) + "\n")
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
