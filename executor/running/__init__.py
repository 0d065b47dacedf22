"""Running a plan: lower it, start one rank process per device (or join torchrun's), run every step, time it.

``launch.run_plan`` starts this host's ranks (``python -m executor.running.worker JOB_FILE`` each, with torchrun's
environment variables, forked by a zygote that imported torch once: ``processes``); ``worker`` is one rank
(``run_rank``, also what ``python -m executor run`` calls under
torchrun): ``lowering`` inserts the messages, ``stage`` and ``runtime`` run the program, ``timing`` aligns the
clocks, ``events`` sends the timing events, ``capacity`` refuses what cannot fit. ``cores`` binds local ranks to
their share of the host's cores and ``processes`` ties each child process's life to its launcher; the measuring
package (``executor.measuring``) uses both. ``reference`` is the single-process training a run must equal, which
the exactness tests and ``run --verify`` compare runs with.
"""
