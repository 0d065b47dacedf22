"""Measuring on this host, as the ranks will run: layer profiles (``profiler``), a plan's stages timed action by
action (``stage_timing``), the link between two local ranks (``linkprobe``, also ``python -m
executor.measuring.linkprobe``), and the processes that measure at the same time (``alongside``).

It builds on ``executor.running`` (stage runners, synthetic data, core binding, process lifecycle) and never the
other way round.
"""
