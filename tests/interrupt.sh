# Sourced by the scripts' interruption tests (model_session.sh, report_interrupt.sh); needs fail().
#   interrupt_when PID LOG WHAT CMD...: polls CMD every 0.1 s for up to 60 s; once it succeeds,
#   sends PID a SIGTERM and sets $interrupted_rc to PID's exit status. Fails (showing LOG) when
#   CMD never succeeds ("WHAT never happened") or PID ends first.
#   running PATTERN: some process's command line matches the regular expression PATTERN (escape
#   its dots: unescaped, it would match the grep that looks for it).
running() {
  for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$c" 2>/dev/null; echo; done | grep -q -- "$1"
}
interrupt_when() {
  _pid=$1 _log=$2 _what=$3
  shift 3
  _n=0
  until "$@"; do
    _n=$((_n + 1))
    [ "$_n" -le 600 ] || { kill "$_pid"; cat "$_log"; fail "$_what never happened"; }
    kill -0 "$_pid" 2>/dev/null || { cat "$_log"; fail "it ended before $_what"; }
    sleep 0.1
  done
  kill -TERM "$_pid"
  interrupted_rc=0
  wait "$_pid" || interrupted_rc=$?
}
