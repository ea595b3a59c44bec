"""ParaLab's performance model (the main README's "Predictions beyond this machine"): its
commands are `python3 -m model.report` (scripts/report.sh) and `python3 -m model.session DIR`."""
try:
    import numpy  # noqa: F401
except ImportError:  # one line naming the interpreter, not a traceback
    import sys

    sys.exit("model: %s has no numpy; use /usr/bin/python3 (Debian's python3-numpy, which "
             "python3-matplotlib from scripts/install-deps.sh brings)" % sys.executable)
