# Sourced by scripts/report.sh, scripts/model-session.sh and scripts/mpi-vs-threads.sh: each
# measurement runs as a child the script waits for, so that a signal trapped by the script (Ctrl-C,
# a timeout's SIGTERM) stops the measurement too instead of leaving it running, orphaned, after the
# script has gone.
#   in_child CMD...  runs CMD in the background, in a session of its own, and waits for it; CMD's
#                    exit status. A terminal's Ctrl-C reaches the script's process group only,
#                    so CMD gets one signal, stop_child's: a second one would make bench_runner
#                    stop at once, without writing the run in progress as interrupted.
#   stop_child       for a signal trap: SIGTERM to that child, if one runs, and waits for it
#   stop_on_signals LINE
#                    INT, TERM and HUP stop the child and exit 128 + the signal's number after
#                    "<LINE>" with {SIG} replaced by the signal's name, on fd 3 (the script's own
#                    stderr, which it opens: a child's may go to a log); EXIT traps still run
child_pid=""
in_child() {
  # setsid(1) execs CMD in the same process (a script's background job leads no group).
  setsid "$@" &
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
stop_on_signals() {
  signal_line=$1
  trap 'on_signal_stop INT 2' INT
  trap 'on_signal_stop TERM 15' TERM
  trap 'on_signal_stop HUP 1' HUP
}
on_signal_stop() {  # on_signal_stop NAME NUMBER
  trap '' INT TERM HUP
  stop_child
  echo "${signal_line//\{SIG\}/SIG$1}" >&3
  exit $((128 + $2))
}
