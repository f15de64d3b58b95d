"""netplugin master: the cluster control plane and its REST API.

One job per module:
- app.py builds the REST app: routes.py registers each kind of kinds.py, forwarding.py sends
  a follower's requests to the leader, openapi.py describes them, auth.py checks bearer
  tokens and the role each route needs; cli.py starts netmaster (and refuses to serve
  beyond loopback without TLS and tokens) under gunicorn with httpworker.py (the worker
  that buffers requests), httperrors.py (the JSON answer to a request gunicorn cannot
  parse) and httplog.py (an access log without credentials); election.py and reclaim.py
  are the leader's duties (HA).
- state.py: ClusterState, the one entry point. Its methods only delegate to the family
  modules below, which it composes.
- txn.py: the compare-and-swap plumbing (retrying, commit, the compares, the hot cache).
- validate.py: the rules every kind shares (names, request bodies); each kind's own are its
  normalize_* in decisions/<kind>.py.
- decisions/: the rules against the cluster state, pure (no store): guards, plans (tags,
  pools, addresses), the inspect views. One module per family, unit-tested in
  tests/test_decisions_*.py.
- The store side, one module per family: settings, tenants, networks, groups, policies
  and rules (the config objects); endpoints and pools (allocation; Docker's pools and
  addresses), with addresses.py (the PoolCache and an attempt's address claims); views
  (inspect). Each operation reads, calls its decision, and commits with a compare for
  every fact the decision relied on, so a refused request changes nothing.

A new object kind (netprofile, service LB; policies and rules went this way) goes:
1. model, key and record in common/models.py, common/keys.py, common/records.py;
2. its pure rules in decisions/<kind>.py (checks of the object alone may sit there too),
   with tests/test_decisions_<kind>.py; a guard for objects that refer to it goes in
   their family's decisions (a policy named by a group cannot go);
3. its store module <kind>.py: a class over the TxnStore (and the families it refers to)
   with list/get/put/delete, each one ``retrying`` attempt: read, decide, commit;
4. its inspect view: the pure part in decisions/views.py, the reads in views.py;
5. its one-line methods on ClusterState, and its entry in kinds.py (routes and the OpenAPI
   document come from that table).
Keep every module under ~400 lines: split a family (or the views) before it grows past.
"""

__version__ = "0.1.0"
