"""A pod's labels from the Kubernetes API, for the CNI service (netplugin --kubeconfig): the
io.contiv.tenant, io.contiv.network and io.contiv.net-group labels choose a pod's network as
Contiv read them, and every label becomes the endpoint's (service selectors match them).

``api_from_kubeconfig`` (pure) reads the current context's server and credentials from a
kubeconfig (a token, a client certificate, a CA: inline data or files); PodLabels is the
thin GET /api/v1/namespaces/NS/pods/NAME over one requests session.
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
import yaml


@dataclass(frozen=True)
class KubeApi:
    server: str
    token: str = ""
    ca_file: str = ""  # "" : the system's CAs
    cert_file: str = ""
    key_file: str = ""
    insecure: bool = False


def _file_or_data(entry: Mapping[str, Any], key: str, base: str) -> str:
    """A path for ``key`` (a file relative to the kubeconfig) or ``key-data`` (written to a
    private temporary file); "" if neither is given."""
    if entry.get(key):
        path = str(entry[key])
        return path if os.path.isabs(path) else os.path.join(base, path)
    data = entry.get(f"{key}-data")
    if not data:
        return ""
    fd, path = tempfile.mkstemp(prefix="netplugin-kube-")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data))
    return path


def api_from_kubeconfig(text: str, base: str = ".") -> KubeApi:
    """The current context's API server and credentials; ValueError naming what is missing."""
    try:
        cfg = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"not a kubeconfig: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError("not a kubeconfig: not a mapping")

    def named(kind: str, name: str) -> dict[str, Any]:
        for item in cfg.get(f"{kind}s") or []:
            if isinstance(item, dict) and item.get("name") == name:
                return dict(item.get(kind) or {})
        raise ValueError(f"kubeconfig: no {kind} {name!r}")

    current = cfg.get("current-context")
    if not current:
        raise ValueError("kubeconfig: no current-context")
    context = named("context", current)
    cluster = named("cluster", str(context.get("cluster", "")))
    user = named("user", str(context.get("user", ""))) if context.get("user") else {}
    if not cluster.get("server"):
        raise ValueError(f"kubeconfig: cluster {context.get('cluster')!r} has no server")
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        with open(user["tokenFile"]) as f:
            token = f.read().strip()
    return KubeApi(
        server=str(cluster["server"]).rstrip("/"),
        token=token,
        ca_file=_file_or_data(cluster, "certificate-authority", base),
        cert_file=_file_or_data(user, "client-certificate", base),
        key_file=_file_or_data(user, "client-key", base),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


class PodLabels:
    """pod_labels(namespace, name) -> its labels, from the API server."""

    def __init__(self, api: KubeApi, session: requests.Session | None = None) -> None:
        self.api = api
        self.session = session or requests.Session()
        if api.token:
            self.session.headers["Authorization"] = f"Bearer {api.token}"
        if api.cert_file:
            self.session.cert = (api.cert_file, api.key_file) if api.key_file else api.cert_file
        self.session.verify = False if api.insecure else (api.ca_file or True)

    def __call__(self, namespace: str, name: str) -> dict[str, str]:
        url = f"{self.api.server}/api/v1/namespaces/{namespace}/pods/{name}"
        resp = self.session.get(url, timeout=10)
        if resp.status_code == 404:
            return {}  # not a pod the API knows (yet): no labels to go by
        resp.raise_for_status()
        labels = (resp.json().get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}


def load(path: str) -> PodLabels:
    """The pod labels of the API a kubeconfig file names."""
    with open(path) as f:
        api = api_from_kubeconfig(f.read(), os.path.dirname(os.path.abspath(path)))
    return PodLabels(api)
