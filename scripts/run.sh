#!/usr/bin/env bash
# Run netplugin in the foreground on the embedded store. Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
DATA_DIR=${DATA_DIR:-/var/lib/netplugin}
LISTEN=${LISTEN:-127.0.0.1:9999}

mkdir -p "$DATA_DIR"
exec "$BIN/netmaster" --data-dir "$DATA_DIR" --listen-url "$LISTEN" ${NETMASTER_ARGS:-}
