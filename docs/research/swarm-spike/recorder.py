"""A recording network + IPAM plugin for the swarm spike (issue 26): it answers Docker's
remote driver calls as a global-scope driver would and appends every call, with its body
and its answer, to /log/calls.jsonl (one JSON object per line), tagged with this node's
name ($NODE). Not netplugin: it measures what Docker sends, on a manager and on a worker.

IPAM: a pool is the one asked for (or 10.99.0.0/24); an address is the one asked for, or
the next of a per-process counter. Plain stdlib, so it runs in any rootfs with python3."""

import http.server
import json
import os
import socketserver
import threading

SOCK = "/run/docker/plugins/recorder.sock"
LOG = "/log/calls.jsonl"
NODE = os.environ.get("NODE", "?")
lock = threading.Lock()
counter = [10]


def answer(path: str, body: dict) -> dict:
    method = path.rsplit(".", 1)[-1]
    if path == "/Plugin.Activate":
        return {"Implements": ["NetworkDriver", "IpamDriver"]}
    if path == "/NetworkDriver.GetCapabilities":
        return {"Scope": os.environ.get("SCOPE", "global"), "ConnectivityScope": "global"}
    if path == "/IpamDriver.GetCapabilities":
        return {"RequiresMACAddress": False, "RequiresRequestReplay": False}
    if method == "GetDefaultAddressSpaces":
        return {"LocalDefaultAddressSpace": "rl", "GlobalDefaultAddressSpace": "rg"}
    if method == "RequestPool":
        pool = body.get("Pool") or "10.99.0.0/24"
        return {"PoolID": f"{NODE}|{pool}", "Pool": pool, "Data": {}}
    if method == "RequestAddress":
        address = body.get("Address") or ""
        pool = body["PoolID"].split("|", 1)[1]
        prefix = pool.split("/")[1]
        base = pool.split("/")[0].rsplit(".", 1)[0]
        if not address:
            with lock:
                counter[0] += 1
                address = f"{base}.{counter[0]}"
        return {"Address": f"{address}/{prefix}", "Data": {}}
    if method == "AllocateNetwork":
        return {"Options": body.get("Options") or {}}
    if method == "CreateEndpoint":
        return {"Interface": {}}
    if method == "Join":
        return {"InterfaceName": {"SrcName": "none", "DstPrefix": "eth"}}
    return {}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}") or {}
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        out = answer(self.path, body)
        with lock, open(LOG, "a") as f:
            f.write(
                json.dumps({"node": NODE, "call": self.path, "body": body, "reply": out}) + "\n"
            )
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.docker.plugins.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):  # a unix socket has no peer address: BaseHTTPRequestHandler wants one
        conn, _ = self.socket.accept()
        return conn, ("local", 0)


if __name__ == "__main__":
    os.makedirs(os.path.dirname(SOCK), exist_ok=True)
    if os.path.exists(SOCK):
        os.unlink(SOCK)
    Server(SOCK, Handler).serve_forever()
