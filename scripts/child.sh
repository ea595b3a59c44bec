# Sourced by scripts/report.sh and scripts/model-session.sh: each measurement runs as a child the
# script waits for, so that a signal trapped by the script (Ctrl-C, a timeout's SIGTERM) stops the
# measurement too instead of leaving it running, orphaned, after the script has gone.
#   in_child CMD...  runs CMD in the background and waits for it; CMD's exit status
#   stop_child       for a signal trap: SIGTERM to that child, if one runs, and waits for it
child_pid=""
in_child() {
  "$@" &
  child_pid=$!
  local rc=0
  wait "$child_pid" || rc=$?
  child_pid=""
  return "$rc"
}
stop_child() {
  if [ -n "$child_pid" ]; then
    kill -TERM "$child_pid" 2>/dev/null || true
    wait "$child_pid" 2>/dev/null || true
  fi
}
