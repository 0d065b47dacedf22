"""Planning: jobs (the pipeline search and the hybrid planner through planner.service), a stored plan's prediction
and JSON, the plan editor, exports and the compare page; their pages, endpoints, forms, serializers and reads."""
