"""A module the zygote tests run as ``python -m tests.executor.zygote_child ARGS``: it writes what it was given to its
stderr, then exits with the code in ``ZYGOTE_TEST_EXIT``, or waits to be killed when that is ``wait``."""

import os
import sys
import time

sys.stderr.write(f"args={sys.argv[1:]} rank={os.environ.get('RANK')} cwd={os.getcwd()} "
                 f"stdin={sys.stdin.read()!r}\n")
sys.stderr.flush()
if os.environ["ZYGOTE_TEST_EXIT"] == "wait":
    time.sleep(600)
sys.exit(int(os.environ["ZYGOTE_TEST_EXIT"]))
