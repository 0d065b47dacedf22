"""Runs of a plan: on the runs worker's CPU (local_runs) or launched on a cluster (cluster_runs), cancelling and
charting them (run_control), their live events, profiles measured on the runs' host (profiling) and re-planning
from what a run observed (calibration); their pages, endpoints, forms, serializers and reads."""
