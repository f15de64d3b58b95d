"""The shared test harness: real etcd, OVS, netmaster, agents, dockerd and simulated hosts,
started and stopped by PID, for integration/, bench/ and tests/. It may import the product;
the product never imports it (pyproject.toml's import contract)."""
