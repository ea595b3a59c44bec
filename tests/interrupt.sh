# Sourced by the scripts' interruption tests (model_session.sh, report_interrupt.sh); needs fail().
#   interrupt_when PID LOG WHAT CMD...: polls CMD every 0.1 s for up to 60 s; once it succeeds,
#   sends PID a SIGTERM and sets $interrupted_rc to PID's exit status. Fails (showing LOG) when
#   CMD never succeeds ("WHAT never happened") or PID ends first.
#   ctrl_c_when PID LOG WHAT CMD...: the same with a terminal's Ctrl-C, a SIGINT to PID's whole
#   process group; PID must lead its own group with SIGINT at its default action, as
#   in_own_group starts it.
#   in_own_group CMD... &: CMD in a session and process group of its own, SIGINT not ignored
#   (a background job of a script ignores it, and the script then could not trap it).
#   running PATTERN: some process's command line matches the regular expression PATTERN (escape
#   its dots: unescaped, it would match the grep that looks for it).
running() {
  for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$c" 2>/dev/null; echo; done | grep -q -- "$1"
}
interrupt_when() {
  _signal_to=$1
  _poll_then_signal -TERM "$@"
}
ctrl_c_when() {
  _signal_to=-$1
  _poll_then_signal -INT "$@"
}
in_own_group() {  # only as a background job: it replaces the job's subshell, so $! is CMD's
  exec env --default-signal=INT setsid "$@"
}
_poll_then_signal() {  # _poll_then_signal -SIGNAL PID LOG WHAT CMD...; sends to $_signal_to
  _sig=$1 _pid=$2 _log=$3 _what=$4
  shift 4
  _n=0
  until "$@"; do
    _n=$((_n + 1))
    [ "$_n" -le 600 ] || { kill "$_pid"; cat "$_log"; fail "$_what never happened"; }
    kill -0 "$_pid" 2>/dev/null || { cat "$_log"; fail "it ended before $_what"; }
    sleep 0.1
  done
  kill "$_sig" "$_signal_to"
  interrupted_rc=0
  wait "$_pid" || interrupted_rc=$?
}
