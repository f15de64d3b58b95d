#!/usr/bin/env bash
# Start the host daemons netplugin needs (Open vSwitch, dockerd) the way a system service
# manager would, on hosts without systemd. Idempotent: a daemon that already answers is left
# alone, so running this again is a no-op. Needs root.
#
# The daemons are started in their own session (OVS --detach, setsid for dockerd) so they
# outlive this script and the `make run`/pytest that called it, and a Ctrl-C in the caller's
# terminal does not reach them.
#
# Environment:
#   DOCKERD_LOG        dockerd's log file (default /var/log/dockerd.log)
#   DOCKERD_ARGS       extra dockerd arguments
#   DOCKERD_TIMEOUT    seconds to wait for `docker info` (default 30)
#   DOCKERD_WAIT=0     start dockerd but do not wait for it: a dockerd restoring containers
#                      on netplugin networks blocks until netplugin runs, so `make run`
#                      starts netplugin before it waits for dockerd
#   OVS_DATAPATH       force "system" or "netdev" in the report (default: detected)
#   OVS_CTL            path of ovs-ctl; a missing path forces the by-hand start
#
# Prints one line per daemon, e.g. "openvswitch: running (datapath netdev)", "dockerd: started".
set -euo pipefail

OVS_RUNDIR=/var/run/openvswitch
OVS_DBDIR=/etc/openvswitch
OVS_DB=$OVS_DBDIR/conf.db
OVS_SCHEMA=/usr/share/openvswitch/vswitch.ovsschema
OVS_LOGDIR=/var/log/openvswitch
OVS_CTL=${OVS_CTL:-/usr/share/openvswitch/scripts/ovs-ctl}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
DOCKERD_TIMEOUT=${DOCKERD_TIMEOUT:-30}

die() {
  echo "host-daemons: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root"
# Daemons must not keep the caller's stdio: a caller that captures our output
# (subprocess.run, $(...)) would wait for EOF until the daemons exit. stdin is /dev/null for
# all; dockerd's output goes to its log; OVS --detach closes its stdio once started.
exec </dev/null

# Serialize concurrent runs (make run + make test). Every daemon start below closes fd 9
# (9>&-): a daemon inheriting it would hold the lock for its whole life.
LOCK=/run/lock/netplugin-host-daemons.lock
mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock -w 120 9 || die "another host-daemons.sh run holds $LOCK"

# ---------------------------------------------------------------- Open vSwitch

pid_alive() { # pidfile [comm]
  local pid
  [ -r "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # PID 1 here reaps orphans late: a dead daemon can linger as a zombie, which kill -0
  # still reports alive.
  [ "$(sed 's/.*) //; s/ .*//' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  # Guard against a stale pidfile whose PID was reused by another program.
  [ -z "${2:-}" ] || grep -qx "$2" "/proc/$pid/comm" 2>/dev/null
}

ovs_ok() {
  pid_alive "$OVS_RUNDIR/ovsdb-server.pid" ovsdb-server &&
    pid_alive "$OVS_RUNDIR/ovs-vswitchd.pid" ovs-vswitchd &&
    ovs-vsctl --timeout=2 show >/dev/null 2>&1
}

# "system" when the openvswitch kernel module is (or can be) loaded, else "netdev".
ovs_datapath() {
  if [ -n "${OVS_DATAPATH:-}" ]; then
    echo "$OVS_DATAPATH"
  elif [ -d /sys/module/openvswitch ] || modprobe -q openvswitch 2>/dev/null; then
    echo system
  else
    echo netdev
  fi
}

# Create the db, or convert it when the installed schema is newer (what ovs-ctl does).
ovs_db_prepare() {
  mkdir -p "$OVS_DBDIR" "$OVS_RUNDIR" "$OVS_LOGDIR"
  # Debian ships /etc/openvswitch/conf.db as a symlink into /var/lib/openvswitch, dangling
  # until the first start: follow it, so `test -e` and ovsdb-tool agree on the real file.
  local db
  db=$(readlink -f "$OVS_DB")
  mkdir -p "$(dirname "$db")"
  if [ ! -s "$db" ]; then
    rm -f "$db"
    ovsdb-tool create "$db" "$OVS_SCHEMA"
  elif [ "$(ovsdb-tool needs-conversion "$db" "$OVS_SCHEMA")" = yes ]; then
    cp -p "$db" "$db.backup-$(ovsdb-tool db-version "$db")"
    ovsdb-tool convert "$db" "$OVS_SCHEMA"
  fi
}

# Fallback when ovs-ctl is not installed or fails: the same steps by hand.
ovs_start_manual() {
  ovs_db_prepare
  if ! pid_alive "$OVS_RUNDIR/ovsdb-server.pid" ovsdb-server; then
    ovsdb-server "$OVS_DB" -vconsole:emer -vsyslog:err -vfile:info \
      --remote=punix:"$OVS_RUNDIR/db.sock" \
      --remote=db:Open_vSwitch,Open_vSwitch,manager_options \
      --pidfile="$OVS_RUNDIR/ovsdb-server.pid" --detach --monitor --no-chdir \
      --log-file="$OVS_LOGDIR/ovsdb-server.log" 9>&-
  fi
  ovs-vsctl --no-wait init
  # A stable system-id, as `ovs-ctl --system-id=random` keeps it.
  local idfile=$OVS_DBDIR/system-id.conf
  [ -s "$idfile" ] || cat /proc/sys/kernel/random/uuid >"$idfile"
  ovs-vsctl --no-wait set Open_vSwitch . \
    db-version="$(ovsdb-tool schema-version "$OVS_SCHEMA")" \
    ovs-version="$(ovs-vswitchd --version | awk '/Open vSwitch/{print $NF}')" \
    external-ids:system-id="\"$(cat "$idfile")\"" external-ids:rundir="\"$OVS_RUNDIR\""
  if ! pid_alive "$OVS_RUNDIR/ovs-vswitchd.pid" ovs-vswitchd; then
    ovs_userspace_tso
    ovs-vswitchd unix:"$OVS_RUNDIR/db.sock" -vconsole:emer -vsyslog:err -vfile:info \
      --pidfile="$OVS_RUNDIR/ovs-vswitchd.pid" --detach --monitor --no-chdir \
      --log-file="$OVS_LOGDIR/ovs-vswitchd.log" 9>&-
  fi
}

# The userspace datapath (no kernel module): TCP segmentation offload through OVS, read
# only when ovs-vswitchd starts, so set before it does. netplugin reads whether the running
# ovs-vswitchd has it and keeps container offloads off where OVS 3.1 cannot take them.
ovs_userspace_tso() {
  # Load the kernel datapath first, where there is one: then this does not apply.
  modprobe -q openvswitch 2>/dev/null || true
  [ -d /sys/module/openvswitch ] ||
    ovs-vsctl --no-wait set Open_vSwitch . other_config:userspace-tso-enable=true
}

ovs_start() {
  local out rc=0
  if [ -x "$OVS_CTL" ]; then
    # ovs-ctl does not need systemd: it creates/upgrades the db, sets a system-id, tries
    # the kernel module (skipped or failing harmlessly without it) and starts both daemons
    # with --detach --monitor. Its `ulimit -n 65535` may fail in containers: harmless.
    # --no-record-hostname: otherwise it leaves a background `ovs-vsctl` child behind in
    # the caller's session.
    out=$("$OVS_CTL" start --no-ovs-vswitchd --system-id=random --no-record-hostname 2>&1 9>&-) &&
      ovs_userspace_tso &&
      out=$("$OVS_CTL" start --no-ovsdb-server --no-record-hostname 2>&1 9>&-) || rc=$?
    if [ "$rc" != 0 ] || ! ovs_ok; then
      echo "host-daemons: ovs-ctl start failed (rc=$rc), starting by hand:" >&2
      printf '%s\n' "$out" | tail -n 20 >&2
      ovs_start_manual
    fi
  else
    ovs_start_manual
  fi
  ovs_ok || {
    tail -n 20 "$OVS_LOGDIR/ovsdb-server.log" "$OVS_LOGDIR/ovs-vswitchd.log" >&2 || true
    die "Open vSwitch did not start (logs in $OVS_LOGDIR)"
  }
}

if ovs_ok; then
  ovs_state=running
else
  ovs_start
  ovs_state=started
fi
echo "openvswitch: $ovs_state (datapath $(ovs_datapath))"

# ---------------------------------------------------------------- dockerd

docker_ok() { timeout 10 docker info >/dev/null 2>&1; }

DOCKERD_MARK="host-daemons: starting dockerd"
# The end of dockerd's log, from this script's last start of it.
show_dockerd_log() {
  local from
  from=$(grep -n -F -- "$DOCKERD_MARK" "$DOCKERD_LOG" 2>/dev/null | tail -n 1 | cut -d: -f1)
  echo "--- last lines of $DOCKERD_LOG:" >&2
  tail -n +"${from:-1}" "$DOCKERD_LOG" 2>/dev/null | tail -n 30 >&2 || true
}

if docker_ok; then
  echo "dockerd: running"
else
  pidfile=/var/run/docker.pid
  if pid_alive "$pidfile" dockerd; then
    # Started but not answering yet (e.g. a concurrent run of this script): just wait.
    started="running (was starting)"
  else
    command -v dockerd >/dev/null || die "dockerd not installed (apt-get install docker.io)"
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    # A stale pidfile makes dockerd refuse to start.
    rm -f "$pidfile"
    echo "--- $(date -Is) $DOCKERD_MARK" >>"$DOCKERD_LOG"
    # setsid: own session and process group, no controlling terminal, so the caller's
    # Ctrl-C or hang-up never reaches it. nohup for good measure (SIGHUP ignored).
    # shellcheck disable=SC2086
    setsid nohup dockerd --iptables=true --pidfile="$pidfile" ${DOCKERD_ARGS:-} \
      </dev/null >>"$DOCKERD_LOG" 2>&1 9>&- &
    # Not a process group leader (no job control here), so setsid execs: $! is dockerd.
    dockerd_pid=$!
    started=started
  fi
  if [ "${DOCKERD_WAIT:-1}" = 0 ]; then
    sleep 0.5
    if [ "$started" = started ] && ! kill -0 "$dockerd_pid" 2>/dev/null; then
      show_dockerd_log
      die "dockerd exited during startup (log: $DOCKERD_LOG)"
    fi
    started="$started (not waiting for it)"
  fi
  deadline=$((SECONDS + DOCKERD_TIMEOUT))
  until [ "${DOCKERD_WAIT:-1}" = 0 ] || docker_ok; do
    if ((SECONDS >= deadline)); then
      show_dockerd_log
      die "dockerd did not answer 'docker info' within ${DOCKERD_TIMEOUT}s (log: $DOCKERD_LOG)"
    fi
    if [ "$started" = started ] && ! kill -0 "$dockerd_pid" 2>/dev/null; then
      show_dockerd_log
      die "dockerd exited during startup (log: $DOCKERD_LOG)"
    fi
    sleep 0.2
  done
  echo "dockerd: $started"
fi

# ---------------------------------------------------------------- host networking

# After dockerd on purpose: a dockerd that finds ip_forward=0 turns it on *and* sets the
# iptables FORWARD policy to DROP, as on production hosts. Setting it first would leave the
# policy ACCEPT here and hide forwarding bugs that production would show.
sysctl -qw net.ipv4.ip_forward=1
mkdir -p /run/docker/plugins
