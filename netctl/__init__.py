"""netctl: the command-line client of the netplugin master's REST API."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("netplugin")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.1.0"
