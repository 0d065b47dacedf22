"""Writes (HackSoft style): ``<entity>_<action>(*, ...)`` functions that own the business rules."""
