"""The AdaPtis pipeline executor: lower any Plan, run it on torch.distributed ranks, time every action.

Two packages over the shared torch models (``executor.model``): ``executor.running`` runs a plan (lowering, the
rank processes, the per-rank runtime, timing events) and ``executor.measuring`` measures this host (profiles,
stage timings, the link between local ranks); measuring builds on running. ``executor.errors`` is what both raise
to their callers, ``executor.cli`` the command line over both.

Entry points: ``executor.running.launch.run_plan`` (local ranks), ``python -m executor run|profile`` (CLI, also
under torchrun), ``executor.model.scale_spec`` (shrink a realistic spec to CPU size),
``executor.measuring.profiler.measure_for_local_runs`` (a profile for this host's runs).
"""
