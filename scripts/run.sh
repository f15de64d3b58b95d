#!/usr/bin/env bash
# Run netplugin in the foreground on the embedded store: netmaster + the netplugin agent.
# dockerd and Open vSwitch are started first if needed, as services: they keep running after
# Ctrl-C, so containers keep their network while netplugin restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
DATA_DIR=${DATA_DIR:-/var/lib/netplugin}
LISTEN=${LISTEN:-127.0.0.1:9999}

# dockerd may block at start until netplugin serves (containers with a restart policy on
# netplugin networks): start it without waiting, and check on it once netplugin is up.
DOCKERD_WAIT=0 scripts/host-daemons.sh
mkdir -p "$DATA_DIR"

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

"$BIN/netmaster" --data-dir "$DATA_DIR" --listen-url "$LISTEN" ${NETMASTER_ARGS:-} &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS "http://$LISTEN/version" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "run: netmaster exited; see its log above" >&2; exit 1; }
  sleep 0.1
done

if [ "${NETMASTER_ONLY:-}" = "" ]; then
  "$BIN/netplugin" --netmaster "http://$LISTEN" --data-dir "$DATA_DIR" ${NETPLUGIN_ARGS:-} &
  pids+=($!)
fi

(
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && exit 0; sleep 0.5; done
  echo "run: dockerd is not answering after 60s; see /var/log/dockerd.log" >&2
) &

# Whichever exits first ends the run (the trap stops the other).
set +e
wait -n "${pids[@]}"
code=$?
echo "run: a netplugin process exited (status $code); stopping" >&2
exit "$code"
