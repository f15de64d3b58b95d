"""IpamDriver.* routes: validate the body against its schema, call one driver method."""

from __future__ import annotations

from flask import Blueprint, Response

from . import schemas as s
from .ipam_driver import IpamDriver
from .network_routes import add_methods, reply


def ipam_blueprint(driver: IpamDriver) -> Blueprint:
    bp = Blueprint("ipam_driver", __name__)

    @bp.post("/IpamDriver.GetCapabilities")
    def capabilities() -> Response:
        return reply({"RequiresMACAddress": False, "RequiresRequestReplay": False})

    @bp.post("/IpamDriver.GetDefaultAddressSpaces")
    def default_address_spaces() -> Response:
        return reply(driver.address_spaces())

    add_methods(
        bp,
        "IpamDriver",
        {
            "RequestPool": (s.RequestPool, driver.request_pool),
            "ReleasePool": (s.ReleasePool, driver.release_pool),
            "RequestAddress": (s.RequestAddress, driver.request_address),
            "ReleaseAddress": (s.ReleaseAddress, driver.release_address),
        },
    )
    return bp
