"""What a run leaves: crash-safe files, the per-prompt record and the cell summary, provenance."""
