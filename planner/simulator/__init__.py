"""Discrete-event pipeline simulator: per-device action orders + layer costs -> timings and memory."""

from planner.simulator.result import DeviceStats, Simulation
from planner.simulator.simulate import simulate, simulate_summary

__all__ = ["DeviceStats", "Simulation", "simulate", "simulate_summary"]

