"""NetworkDriver.* routes: validate the body against its schema, call one driver method."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, request
from pydantic import BaseModel

from . import schemas as s
from .driver import Driver


def reply(payload: dict[str, Any], status: int = 200) -> Response:
    return Response(json.dumps(payload), status=status, mimetype="application/json")


def add_methods(
    bp: Blueprint, interface: str, methods: dict[str, tuple[type[BaseModel], Callable[[Any], Any]]]
) -> None:
    """One POST route per protocol method: /<interface>.<Method>."""
    for method, (schema, handler) in methods.items():

        def view(schema: type[BaseModel] = schema, handler: Callable[[Any], Any] = handler) -> Any:
            return reply(handler(s.parse_body(schema, request.get_data(cache=True))))

        bp.add_url_rule(f"/{interface}.{method}", f"{interface}_{method}", view, methods=["POST"])


def network_blueprint(driver: Driver) -> Blueprint:
    bp = Blueprint("network_driver", __name__)

    @bp.post("/NetworkDriver.GetCapabilities")
    def capabilities() -> Response:
        # "global" makes docker hand every network to swarm (refused off a swarm manager):
        # only in swarm mode. Otherwise the agents make the networks multi-host.
        scope = "global" if driver.swarm else "local"
        return reply({"Scope": scope, "ConnectivityScope": scope})

    add_methods(
        bp,
        "NetworkDriver",
        {
            "CreateNetwork": (s.CreateNetwork, driver.create_network),
            "DeleteNetwork": (s.DeleteNetwork, driver.delete_network),
            "CreateEndpoint": (s.CreateEndpoint, driver.create_endpoint),
            "EndpointOperInfo": (s.EndpointOperInfo, driver.endpoint_oper_info),
            "DeleteEndpoint": (s.DeleteEndpoint, driver.delete_endpoint),
            "Join": (s.Join, driver.join),
            "Leave": (s.Leave, driver.leave),
            "ProgramExternalConnectivity": (
                s.ProgramExternalConnectivity,
                driver.program_external_connectivity,
            ),
            "RevokeExternalConnectivity": (
                s.RevokeExternalConnectivity,
                driver.revoke_external_connectivity,
            ),
            "DiscoverNew": (s.DiscoverNew, driver.discover_new),
            "DiscoverDelete": (s.DiscoverDelete, driver.discover_delete),
            "AllocateNetwork": (s.AllocateNetwork, driver.allocate_network),
            "FreeNetwork": (s.FreeNetwork, driver.free_network),
        },
    )
    return bp
