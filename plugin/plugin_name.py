"""The driver name dockerd knows this agent by.

Run from its socket (`make run`), netplugin is the driver "netplugin". Run as a managed
(v2) plugin, it is whatever the plugin was created or installed as, always with its tag:
"netplugin:latest", "registry:5000/netplugin:1.2", an `--alias`. Docker records that full
name as every network's Driver and IPAM driver, so the docker sync must compare with it and
create networks under it.

Inside a managed plugin the name is not in the environment, but the plugin's ID is in its
mounts: dockerd bind-mounts the host directory `/run/docker/plugins/<id>` onto the
plugin's `/run/docker/plugins` (where the socket is made). Asking dockerd for plugin <id>
then gives the name. dockerd may not answer yet when the agent starts (plugins start
before its API listens), so the name is resolved on first use, and retried until known.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOCKET_DIR = "/run/docker/plugins"
SOCKET_NAME = "netplugin.sock"  # config.json's interface.socket
_ID_RE = re.compile(r"^[0-9a-f]{64}$")


def unescape_mountinfo(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def plugin_id_from_mountinfo(text: str, socket_dir: str = SOCKET_DIR) -> str | None:
    """The managed plugin's ID: the last path element of the host directory mounted on
    ``socket_dir``, when it is a 64-hex plugin ID; None outside a managed plugin."""
    found = None
    for line in text.splitlines():
        fields = line.split()
        # id parent major:minor ROOT MOUNT_POINT options ... - fstype source super
        if len(fields) < 5 or unescape_mountinfo(fields[4]) != socket_dir:
            continue
        candidate = unescape_mountinfo(fields[3]).rstrip("/").rsplit("/", 1)[-1]
        if _ID_RE.match(candidate):
            found = candidate  # the last mount on the point is the visible one
    return found


def name_from_plugins(plugins: list[dict[str, Any]], plugin_id: str | None) -> str | None:
    """The name of the plugin with ``plugin_id`` among dockerd's plugins (GET /plugins); with
    no ID, the one enabled plugin that serves our socket as a network driver, if exactly one."""
    if plugin_id:
        for p in plugins:
            if p.get("Id") == plugin_id:
                return str(p.get("Name") or "") or None
        return None
    ours = [
        p
        for p in plugins
        if p.get("Enabled")
        and (p.get("Config") or {}).get("Interface", {}).get("Socket") == SOCKET_NAME
        and "docker.networkdriver/1.0"
        in [
            f"{t.get('Prefix')}.{t.get('Capability')}/{t.get('Version')}"
            for t in (p.get("Config") or {}).get("Interface", {}).get("Types") or []
        ]
    ]
    return str(ours[0].get("Name")) if len(ours) == 1 else None


class DriverName:
    """The driver name, given (``name``) or found out through dockerd on first use.

    ``plugins`` lists dockerd's plugins (raises while dockerd does not answer);
    ``mountinfo`` reads /proc/self/mountinfo.
    """

    def __init__(
        self,
        name: str,
        managed: bool,
        plugins: Callable[[], list[dict[str, Any]]],
        mountinfo: Callable[[], str] = lambda: Path("/proc/self/mountinfo").read_text(),
    ) -> None:
        self._name = name or ("" if managed else "netplugin")
        self._plugins = plugins
        self._mountinfo = mountinfo
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """The name; raises LookupError while it cannot be known (dockerd not answering)."""
        with self._lock:
            if not self._name:
                plugin_id = plugin_id_from_mountinfo(self._mountinfo())
                try:
                    plugins = self._plugins()
                except Exception as e:
                    raise LookupError(f"cannot ask dockerd for this plugin's name: {e}") from e
                found = name_from_plugins(plugins, plugin_id)
                if not found:
                    raise LookupError(
                        f"dockerd lists no plugin {plugin_id or 'serving ' + SOCKET_NAME}; "
                        "set NETPLUGIN_PLUGIN_NAME to the plugin's name"
                    )
                self._name = found
            return self._name
