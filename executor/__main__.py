import sys

from executor.cli import launched_by_torchrun, main
from executor.running.processes import exit_rank

code = main()
if launched_by_torchrun():
    exit_rank(code)   # a torchrun rank: skip the interpreter finalization that gloo can abort in
sys.exit(code)
