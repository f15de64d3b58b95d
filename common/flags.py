"""Command-line flags with environment fallbacks (Contiv's names, NETMASTER_*/NETPLUGIN_* env)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error")
# The agent's inspect API (netplugin --api-socket; netctl host inspect --socket).
AGENT_API_SOCKET = "/run/netplugin/netplugin-api.sock"
# A managed plugin's agent serves its API beside its Docker socket, in the directory the
# host sees as /run/docker/plugins/<plugin id>/ (config.json's NETPLUGIN_API_SOCKET).
PLUGIN_API_SOCKET_NAME = "netplugin-api.sock"


class EnvArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose options default to $PREFIX_<OPTION_NAME> when set."""

    def __init__(self, *args: Any, env_prefix: str, **kwargs: Any) -> None:
        self.env_prefix = env_prefix  # before super(): argparse adds -h in its constructor
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
        long = next((a for a in args if a.startswith("--")), None)
        if long:
            env = f"{self.env_prefix}_{long[2:].replace('-', '_').upper()}"
            if env in os.environ:
                raw = os.environ[env]
                kwargs["default"] = (
                    raw.lower() in ("1", "true", "yes")
                    if kwargs.get("action") == "store_true"
                    else raw
                )
            help_text = kwargs.get("help", "")
            kwargs["help"] = f"{help_text} [env {env}]" if help_text else f"[env {env}]"
        return super().add_argument(*args, **kwargs)


def split_endpoints(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


NOISY_LIBRARIES = ("pyroute2", "os_ken", "ovsdbapp", "urllib3", "werkzeug")


def setup_logging(level: str, name: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    # Their debug output (every netlink message, every OpenFlow event) drowns ours. A filter
    # on our handlers, not setLevel: pyroute2 sets levels on its own child loggers.
    for handler in logging.getLogger().handlers:
        handler.addFilter(_quiet_libraries)


def _quiet_libraries(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] not in NOISY_LIBRARIES
