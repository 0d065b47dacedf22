"""A team's history: the lists of specs, clusters, jobs, plans and runs with their filters, the dashboard, and
archiving, deleting and restoring them (curation)."""
