"""The agent's CNI socket (netplugin --cni-socket): what netplugin-cni posts each call to.

POST /cni/exec takes a call as the runtime made it (common.cni.read_exec_body: the CNI_*
environment and the configuration, unparsed) and answers exactly what the executable is to
print, its exit status in the Netplugin-Cni-Exit header: the checks and the error objects
are common.cni.run's, as the executable's own. POST /cni/add, /cni/del and /cni/check take
common.cni.Request's JSON. ADD answers the CNI
result; DEL and CHECK an empty 200. Every failure is a CNI error object ({"code", "msg",
"details"}): 400 for what the call got wrong, 503 for what may pass on a retry, 500 for a
failure of this host. Calls are counted and timed like Docker's (method "CNI.ADD", ...).
"""

from __future__ import annotations

import json
import time
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from common import cni
from common.jsonbody import READ_LIMIT

from .cni_service import CniService
from .metrics import AgentMetrics

_STATUS = {
    cni.TRY_AGAIN_LATER: 503,
    cni.DATAPATH_FAILURE: 500,
    cni.IO_FAILURE: 500,
}


def _reply(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status, mimetype="application/json")


def _status(e: cni.CniError) -> int:
    return _STATUS.get(e.code, 400)


def parse_error(reason: str) -> dict[str, Any]:
    """The CNI error object for a request the socket's server could not parse."""
    return {"code": cni.IO_FAILURE, "msg": f"request: {reason}", "details": ""}


def create_cni_app(service: CniService, metrics: AgentMetrics | None = None) -> Flask:
    app = Flask("netplugin-cni")
    app.config["MAX_CONTENT_LENGTH"] = READ_LIMIT

    def parsed(command: str) -> cni.Request:
        try:
            data = json.loads(request.get_data() or b"null")
        except ValueError:
            raise cni.CniError(cni.DECODE_FAILURE, "the request is not JSON") from None
        req = cni.Request.from_json(data)
        if req.command != command:
            raise cni.CniError(
                cni.INVALID_ENV, f"{request.path} is for {command}, not {req.command!r}"
            )
        return req

    def internal(e: Exception) -> cni.CniError:
        """A failure of this agent, not of the request: logged with its traceback."""
        app.logger.exception("CNI %s failed", request.path)
        return cni.CniError(cni.DATAPATH_FAILURE, f"internal error: {type(e).__name__}: {e}")

    def dispatch(req: cni.Request) -> dict[str, Any] | None:
        try:
            if req.command == "ADD":
                return service.add(req)
            if req.command == "DEL":
                service.delete(req)
            else:
                service.check(req)
            return None
        except cni.CniError as e:
            g.status = _status(e)
            if g.status >= 500:
                app.logger.error("CNI %s: %s", req.command, e.msg)
            raise
        except Exception as e:
            g.status = 500
            raise internal(e) from e

    @app.post(cni.EXEC_URL)
    def execute() -> Response:
        try:
            env, stdin = cni.read_exec_body(request.get_data())
        except cni.CniError as e:
            status, out = 1, e.to_json(cni.SUPPORTED_VERSIONS[-1])
        else:
            command = env.get("CNI_COMMAND", "")
            g.method = f"CNI.{command}" if command in cni.COMMANDS else "CNI.EXEC"
            status, out = cni.run(env, stdin, dispatch)
        printed = "" if out is None else json.dumps(out) + "\n"
        resp = Response(printed, g.get("status", 200 if status == 0 else 400))
        resp.headers[cni.EXIT_HEADER] = str(status)
        resp.mimetype = "application/json"
        return resp

    @app.post("/cni/add")
    def add() -> Response:
        return _reply(service.add(parsed("ADD")))

    @app.post("/cni/del")
    def delete() -> Response:
        service.delete(parsed("DEL"))
        return _reply({})

    @app.post("/cni/check")
    def check() -> Response:
        service.check(parsed("CHECK"))
        return _reply({})

    @app.errorhandler(Exception)
    def error(e: Exception) -> Response:
        if isinstance(e, cni.CniError):
            status = _status(e)
            err = e
        elif isinstance(e, HTTPException):
            status = e.code or 500
            err = cni.CniError(cni.IO_FAILURE, f"{request.method} {request.path}: {e.name}")
        else:
            status = 500
            err = internal(e)
        if status >= 500:
            app.logger.error("CNI %s: %s", request.path, err.msg)
        return _reply({"code": err.code, "msg": err.msg, "details": err.details}, status)

    if metrics is not None:

        @app.before_request
        def started() -> None:
            g.started = time.perf_counter()

        @app.after_request
        def finished(resp: Response) -> Response:
            begun = g.get("started")
            if begun is not None:
                method = g.get("method") or (
                    f"CNI.{request.path.rsplit('/', 1)[1].upper()}"
                    if request.url_rule is not None
                    else "unknown"
                )
                metrics.docker_call(method, resp.status_code < 400, time.perf_counter() - begun)
            return resp

    return app
