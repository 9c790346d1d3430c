"""The worker's runtime around the tasks: drain on SIGTERM, recovery sweeps, dead letters, logs."""
