"""Fuzzing the master's REST API, driven by its own /api/v1/openapi.json.

``scenarios(doc)`` draws short sequences of requests: a route and method the document declares
(sometimes another method, or a path it does not declare), its path parameters from known
keys and odd ones, a body made from the route's request schema with right-ish and wrong values
(fuzz_json.py adds arbitrary, broken and oversized bodies) and a content type.
``run_scenario`` plays one against a fresh master (master.app over ClusterState on a
temporary SQLite store, seeded with a network, a group, an endpoint, a pool and an address)
and checks every answer with ``problems``:

- never a 5xx;
- every error is JSON of the documented shape {"error","object","reason"};
- a refused request (4xx) changes nothing: the whole store, every key and value, and its
  revision, are the same after it as before.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from common import keys
from common.models import NAME_RE

from .fuzz_json import (
    any_text,
    body,
    chance,
    content_types,
    json_values,
    mix,
    odd_text,
    record,
    weighted,
)
from .fuzz_tally import CHANGED, CRASH, SHAPE, Problem, Tally, short
from .real_master import RealMaster, real_master

EID = "a1" * 32  # the seeded endpoint
POOL = "default:10.9.0.0/24"  # the seeded pool, holding an address for owner "o1"
SEED: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/api/v1/networks/default:net1", {"subnet": "10.1.0.0/24"}),
    ("POST", "/api/v1/tenants/t1", {}),
    ("POST", "/api/v1/networks/t1:n2", {"subnet": "10.2.0.0/24", "encap": "vlan", "pktTag": 100}),
    ("POST", "/api/v1/policys/default:pol1", {}),
    ("POST", "/api/v1/endpointGroups/default:grp1", {"networkName": "net1", "policies": ["pol1"]}),
    ("POST", "/api/v1/rules/default:pol1:r1", {"fromEndpointGroup": "grp1", "protocol": "tcp"}),
    ("POST", "/api/v1/alloc/endpoints", {"endpointID": EID, "networkName": "net1"}),
    ("POST", "/api/v1/alloc/pools", {"addressSpace": "default", "pool": "10.9.0.0/24"}),
    ("POST", "/api/v1/alloc/addresses", {"poolID": POOL, "owner": "o1"}),
]
ERROR_KEYS = {"error", "object", "reason"}
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
ODD_PATHS = ["/", "/api/v1", "/api/v1/nosuch", "/api/v2/networks", "/api/v1/networks/a/b/c"]

# --- values: right-ish ones by field name, so that some requests are accepted ---
KNOWN_KEYS = [
    *("default:net1", "net1", "t1:n2", "default:grp1", "grp1", "t1", "default", "global"),
    *("default:pol1", "pol1", "pol1:r1", "default:pol1:r1", "pol1:r2", "host1"),
]
names = mix(
    (3, st.sampled_from(["default", "net1", "n2", "grp1", "t1", "net3", "g2", "global", "pol1"])),
    (1, st.from_regex(NAME_RE, fullmatch=True)),
)


def prefixed(addresses: st.SearchStrategy[Any], most: int) -> st.SearchStrategy[str]:
    return st.builds(lambda a, n: f"{a}/{n}", addresses, st.integers(0, most + 1))


good_cidrs4 = st.sampled_from(["10.3.0.0/24", "10.4.0.0/30", "10.5.0.0/31", "10.6.0.0/32"])
cidrs4 = mix(
    (4, good_cidrs4),
    (1, st.sampled_from(["10.1.0.0/24", "10.9.0.0/24", "0.0.0.0/0", "10.1.0.0/33", "10.1.0.1/24"])),
    (1, st.sampled_from(["300.1.0.0/24", "10.1.0.0", "10.1.0.0/-1", "10.1.0.0/24/1"])),
    (1, prefixed(st.ip_addresses(v=4), 32)),
)
cidrs6 = mix(
    (3, st.sampled_from(["fd00::/64", "fd00:1::/120", "fd00:2::/127"])),
    (1, st.sampled_from(["::/0", "2001:db8::/129", "fd00::1/64"])),
    (1, prefixed(st.ip_addresses(v=6), 128)),
)
addresses = mix(
    (2, st.just("")),
    (3, st.sampled_from(["10.1.0.7", "10.3.0.9", "10.9.0.5", "10.1.0.8", "10.4.0.2"])),
    (1, st.sampled_from(["10.1.0.1", "10.1.0.255", "10.1.0.0", "10.1.0.7/24", "10.1.0.300"])),
    (1, st.ip_addresses().map(str)),
)
addresses6 = st.sampled_from(["", "fd00::5", "fd00:1::9", "fd00::", "10.1.0.7"])
ranges = st.sampled_from(
    ["10.1.0.10-10.1.0.20", "10.1.0.20-10.1.0.10", "10.1.0.128/25", "10.2.0.1-10.2.0.9", "x-y"]
)
tag_ranges = st.sampled_from(["1-4094", "0-5", "5", "4095", "1-16777215", "1-16777216", "-"])
macs = st.sampled_from(["02:42:0a:01:00:05", "ff:ff:ff:ff:ff:ff", "zz", "", "02:42:0a:01:00"])
endpoint_ids = st.sampled_from([EID, "b2" * 32, "c3" * 32, "e" * 64, "x", "ep1"])
pool_ids = st.sampled_from(
    [POOL, POOL, "default:10.1.0.0/24", "t1:10.2.0.0/24", "default:10.8.0.0/24"]
)
pool_ids = mix((3, pool_ids), (1, st.sampled_from(["nosuch", "default:", ":10.9.0.0/24", "x/33"])))
HINTS: dict[str, st.SearchStrategy[Any]] = {
    **dict.fromkeys(["tenantName", "networkName", "groupName", "defaultNetwork"], names),
    **dict.fromkeys(["addressSpace", "host", "netProfile", "cfgdTag", "policyName"], names),
    **dict.fromkeys(["fromEndpointGroup", "toEndpointGroup", "fromNetwork", "toNetwork"], names),
    **dict.fromkeys(["fromIpAddress", "toIpAddress"], addresses | cidrs4 | cidrs6),
    "protocol": st.sampled_from(["", "tcp", "UDP", "icmp", "6", "47", "256", "x"]),
    "policies": st.lists(st.sampled_from(["pol1", "pol2", "a:b"]), max_size=2),
    **dict.fromkeys(["subnet", "pvtSubnet"], cidrs4),
    **dict.fromkeys(["pool"], cidrs4 | cidrs6 | st.just("")),
    **dict.fromkeys(["ipv6Subnet"], cidrs6),
    **dict.fromkeys(["gateway", "ipAddress", "address"], addresses),
    **dict.fromkeys(["ipv6Gateway", "ipv6Address"], addresses6),
    **dict.fromkeys(["ipPool", "subPool"], ranges | cidrs4),
    **dict.fromkeys(["vlans", "vxlans"], tag_ranges),
    "routerip": cidrs4,
    "neighbor": addresses,
    **dict.fromkeys(["as", "neighbor-as"], st.sampled_from(["65000", "1", 4294967295, "0", "x"])),
    "macAddress": macs,
    "endpointID": endpoint_ids,
    "poolID": pool_ids,
    "owner": st.sampled_from(["o1", "o2", "o3", "ep:" + EID, "gateway", ""]),
}
integers = st.sampled_from([0, 1, 100, 4094, 4095, 16777215, 16777216, -1, 2**63, 10**4000])
PARAMS: dict[str, st.SearchStrategy[str]] = {
    "key": mix(
        (2, st.sampled_from(KNOWN_KEYS)),
        (1, names),
        (1, st.builds(lambda t, n: f"{t}:{n}", names, names)),
    ),
    "endpoint_id": endpoint_ids,
    "pool_id": pool_ids,
    "global": mix((4, st.just("global")), (1, names)),
}


def _resolve(prop: Mapping[str, Any], schemas: Mapping[str, Any]) -> Mapping[str, Any]:
    if "$ref" in prop:
        return schemas[prop["$ref"].rsplit("/", 1)[1]]
    for alt in prop.get("anyOf", []):
        if alt.get("type") != "null":
            return _resolve(alt, schemas)
    return prop


def value_for(name: str, prop: Mapping[str, Any], schemas: Mapping[str, Any]) -> st.SearchStrategy:
    """A right-ish value for field ``name``, for its schema and what the name means."""
    prop = _resolve(prop, schemas)
    kind = prop.get("type")
    if "const" in prop or "enum" in prop:
        return st.sampled_from(prop.get("enum") or [prop["const"]])
    if name in HINTS:
        return HINTS[name]
    if kind == "integer":
        return integers
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(any_text, max_size=3)
    if kind == "object":
        return st.dictionaries(st.text(max_size=8), any_text, max_size=3)
    return any_text


# Fields a body usually carries, though the schema makes them optional; and the fields a
# route's URL key fills (a body mostly leaves them out rather than contradict the URL).
WANTED = {"subnet", "pool", "networkName"}
URL_FIELDS = {
    "tenants": {"tenantName"},
    "networks": {"tenantName", "networkName"},
    "endpointGroups": {"tenantName", "groupName"},
    "policys": {"tenantName", "policyName"},
    "rules": {"tenantName", "policyName", "ruleId"},
    "globals": {"name"},
    "Bgps": {"hostname"},
}


@st.composite
def object_for(
    draw: st.DrawFn,
    schema: Mapping[str, Any],
    schemas: Mapping[str, Any],
    url_fields: frozenset[str] = frozenset(),
) -> Any:
    """A valid-ish body for ``schema`` (fuzz_json.record): right-ish values of its fields,
    sometimes one or more of them junk; sometimes a field the URL names, or one ``schema``
    does not declare."""
    props: Mapping[str, Any] = schema.get("properties", {})
    wanted = set(schema.get("required", [])) | WANTED
    values = {name: value_for(name, prop, schemas) for name, prop in props.items()}
    out = draw(
        record(
            {k: v for k, v in values.items() if k in wanted and k not in url_fields},
            {k: v for k, v in values.items() if k not in wanted and k not in url_fields},
        )
    )
    for name in sorted(url_fields & set(values)):
        if draw(chance(1, 10)):
            out[name] = draw(values[name])
    if draw(chance(1, 10)):
        out[draw(st.text(max_size=8) | odd_text)] = draw(json_values)
    return out


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str = ""
    body: bytes = b""
    content_type: str | None = None

    def __str__(self) -> str:
        q = f"?{self.query}" if self.query else ""
        return f"{self.method} {self.path}{q} [{self.content_type}] {short(self.body)}"


def routes(doc: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any] | None]]:
    """(path template, method, request schema or None) for every operation in ``doc``."""
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            out.append((path, method.upper(), content.get("schema")))
    return sorted(out, key=lambda r: (r[0], r[1]))


@st.composite
def requests_for(draw: st.DrawFn, doc: Mapping[str, Any]) -> Request:
    """One request drawn from the routes ``doc`` declares (see the module's docstring)."""
    schemas = doc["components"]["schemas"]
    template, method, schema = draw(st.sampled_from(routes(doc)))
    if draw(chance(1, 8)):
        method = draw(st.sampled_from(METHODS))
    kind = template.split("/")[3] if template.count("/") > 3 else ""
    path = template
    for part in template.split("/"):
        if part.startswith("{"):
            param = "global" if kind == "globals" else part[1:-1]
            value = draw(weighted(PARAMS.get(param, names), any_text))
            path = path.replace(part, quote(value, safe=":" if draw(st.booleans()) else ":/"), 1)
    if draw(chance(1, 16)):
        path = draw(st.sampled_from(ODD_PATHS))
    if schema is not None:
        objects = object_for(
            _resolve(schema, schemas), schemas, frozenset(URL_FIELDS.get(kind, ()))
        )
    else:  # rename's body is {"networkName": ...}
        objects = st.fixed_dictionaries({"networkName": weighted(names, json_values)})
    sends_body = schema is not None or method in ("POST", "PUT") or draw(chance(1, 10))
    query = draw(
        st.sampled_from(["", "", "", "tenant=default", "tenant=t1", "tenant=", "tenant=%FF&x=1"])
    )
    return Request(
        method,
        path,
        query,
        draw(body(objects)) if sends_body else b"",
        draw(content_types),
    )


def scenarios(doc: Mapping[str, Any], most: int = 6) -> st.SearchStrategy[list[Request]]:
    return st.lists(requests_for(doc), min_size=1, max_size=most)


# --- playing a scenario against the real master ---


def snapshot(master: RealMaster) -> tuple[int, dict[str, bytes]]:
    """The store's revision and every key with its value."""
    return master.store.revision(), {kv.key: kv.value for kv in master.store.range(keys.ROOT).kvs}


def error_shape(data: bytes) -> str | None:
    """What is wrong with an error body, or None if it is {"error","object","reason"}."""
    try:
        answer = json.loads(data)
    except ValueError:
        return f"not JSON: {short(data)}"
    if not isinstance(answer, dict) or set(answer) != ERROR_KEYS:
        return f"not {{error, object, reason}}: {short(data)}"
    if not all(isinstance(answer[k], str) for k in ERROR_KEYS) or not answer["error"]:
        return f"not strings, or an empty error: {short(data)}"
    return None


def problems(req: Request, status: int, data: bytes, before: Any, after: Any) -> list[Problem]:
    """What an answer breaks of the properties in the module's docstring."""
    found: list[Problem] = []
    text = str(req)
    if status >= 500:
        found.append(Problem(CRASH, text, f"{status} {short(data, 300)}"))
    if status >= 400 and req.method != "HEAD":
        wrong = error_shape(data)
        if wrong is not None:
            found.append(Problem(SHAPE, text, f"{status} {wrong}"))
    if status >= 400 and before != after:
        found.append(Problem(CHANGED, text, f"{status} {short(data, 300)}"))
    return found


def send(client: Any, req: Request) -> tuple[int, bytes]:
    headers = {"Content-Type": req.content_type} if req.content_type else {}
    r = client.open(
        req.path, method=req.method, query_string=req.query, data=req.body, headers=headers
    )
    return r.status_code, r.get_data()


def seed(client: Any) -> None:
    for method, path, seed_body in SEED:
        r = client.open(path, method=method, json=seed_body)
        assert r.status_code < 300, (path, r.get_data())


def run_scenario(reqs: list[Request], tally: Tally) -> None:
    """Play ``reqs`` against a fresh seeded master; count every answer and problem."""
    with tempfile.TemporaryDirectory(prefix="fuzz-master-") as d, real_master(Path(d)) as m:
        client = m.app.test_client()
        seed(client)
        for req in reqs:
            before = snapshot(m)
            try:
                status, data = send(client, req)
            except Exception as e:  # the test client itself failed: the app let it escape
                tally.count(599, [Problem(CRASH, str(req), f"{type(e).__name__}: {e}")])
                continue
            tally.count(status, problems(req, status, data, before, snapshot(m)))


def openapi_doc() -> dict[str, Any]:
    """The document a fresh master serves at /api/v1/openapi.json."""
    with tempfile.TemporaryDirectory(prefix="fuzz-master-") as d, real_master(Path(d)) as m:
        r = m.app.test_client().get("/api/v1/openapi.json")
        assert r.status_code == 200
        return dict(r.get_json())
