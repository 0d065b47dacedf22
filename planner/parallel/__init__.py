"""Hybrid parallelism around the pipeline: TP x CP x PP x DP x EP configurations, their rank mapping, cost,
memory and search (``planner.parallel.search.search``)."""
