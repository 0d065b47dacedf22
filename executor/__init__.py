"""The AdaPtis pipeline executor: lower any Plan, run it on torch.distributed ranks, time every action.

Entry points: ``executor.launch.run_plan`` (local ranks), ``python -m executor run|profile`` (CLI, also
under torchrun), ``executor.model.scale_spec`` (shrink a realistic spec to CPU size).
"""
