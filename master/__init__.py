"""netplugin master: the cluster control plane and its REST API.

One job per module:
- app.py builds the REST app: routes.py registers each kind of kinds.py, forwarding.py sends
  a follower's requests to the leader, openapi.py describes them, auth.py checks bearer
  tokens and the role each route needs; cli.py starts netmaster (and refuses to serve
  beyond loopback without TLS and tokens) under gunicorn with httpworker.py (the worker
  that buffers requests), httperrors.py (the JSON answer to a request gunicorn cannot
  parse) and httplog.py (an access log without credentials); election.py and reclaim.py
  are the leader's duties (HA).
- kinds.py: the kinds table, each kind of common/kinds.py bound to its store family.
- state.py: ClusterState, which only builds the families over one store.
- txn.py: the compare-and-swap plumbing (retrying, commit, the compares, the hot cache).
- tags.py: the tags of groups, services and tenants (the index key per tag, the backfill).
- validate.py: the rules every kind shares (names, request bodies).
- decisions/: the rules, pure (no store): each kind's normalize_*, guards, plans (tags,
  pools, addresses), the inspect views. One module per family, unit-tested in
  tests/test_decisions_*.py.
- The store families, one module each: settings, tenants, networks, groups, policies,
  rules, netprofiles, services, bgps (the config objects); endpoints and pools (allocation;
  Docker's pools and addresses), with addresses.py (the PoolCache and an attempt's address
  claims). Each operation reads, calls its decision, and commits with a compare for every
  fact the decision relied on, so a refused request changes nothing.

How one REST call flows, and the checklist for a new kind: docs/DESIGN.md.
"""

__version__ = "0.1.0"
