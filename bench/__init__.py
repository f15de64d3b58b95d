"""netplugin benchmarks: `make bench` runs them and writes docs/BENCHMARKS.md."""
