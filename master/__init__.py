"""netplugin master: the cluster control plane and its REST API."""

__version__ = "0.1.0"
