#!/usr/bin/env bash
# Start or stop a private Docker engine for the container tests (tests/testing/).
#
#   eval "$(bash tests/docker_engine.sh start DIR)"   # prints `export DOCKER_HOST=...`
#   bash tests/docker_engine.sh stop DIR
#
# Debian's docker.io (dockerd), with its own socket, data root, exec root and pid file under
# DIR, so it never touches a system engine. `--bridge=none --iptables=false`: no default bridge
# (no 172.17.x addresses, no NAT rules); every container uses host networking on 127.0.0.1.
# Needs root. `stop` is idempotent, for an EXIT trap.
set -euo pipefail
action=${1:?usage: docker_engine.sh start|stop DIR}
dir=${2:?usage: docker_engine.sh start|stop DIR}
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"

case "$action" in
start)
  mkdir -p "$dir"
  setsid dockerd --bridge=none --iptables=false --ip6tables=false \
    --host "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
    --pidfile "$pidfile" >"$dir/dockerd.log" 2>&1 </dev/null &
  pid=$!
  # dockerd answers within a second here; 30 s covers a loaded machine.
  for _ in $(seq 300); do
    if docker -H "unix://$sock" version >/dev/null 2>&1; then
      echo "export DOCKER_HOST=unix://$sock"
      exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "dockerd did not answer on $sock; its log ($dir/dockerd.log) ends:" >&2
  tail -n 20 "$dir/dockerd.log" >&2
  exit 1
  ;;
stop)
  [[ -f "$pidfile" ]] || exit 0
  pid=$(cat "$pidfile")
  # Containers first (dockerd would stop them too, with a 10 s grace each), then the engine.
  ids=$(docker -H "unix://$sock" ps -aq 2>/dev/null || true)
  [[ -z "$ids" ]] || docker -H "unix://$sock" rm -f $ids >/dev/null 2>&1 || true
  kill -TERM "$pid" 2>/dev/null || true
  # dockerd removes its pid file as it exits: that is the event to wait for.
  for _ in $(seq 300); do
    [[ -f "$pidfile" ]] || break
    sleep 0.1
  done
  if [[ -f "$pidfile" ]]; then
    echo "dockerd (pid $pid) did not stop in 30 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  fi
  # dockerd leaves its network namespace mount (exec/netns/default) behind; without this the
  # folder cannot be removed.
  { findmnt -rn -o TARGET | grep -F "$dir/" || true; } | sort -r | while read -r target; do
    umount "$target" 2>/dev/null || umount -l "$target" || true
  done
  ;;
*)
  echo "usage: docker_engine.sh start|stop DIR" >&2
  exit 2
  ;;
esac
