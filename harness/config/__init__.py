"""A cell's configuration before anything runs: typed schema, config groups, preflight, validation, identity."""
