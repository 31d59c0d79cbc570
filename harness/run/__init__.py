"""Running cells: plans and plan files, one cell's run (lock, resume, fingerprint), the runner, the sweeper."""
