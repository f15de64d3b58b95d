"""The control plane's decisions: pure functions of what was read, no store, no I/O.

One module per family of objects, mirroring the store modules in master/: each takes
typed records and returns a plan or raises the ApiError a user sees (naming the object and
the reason). The store module then commits the plan with compares that re-check, in the
same txn, everything the decision relied on.
"""
