"""The command line: ``harness`` (the Hydra app with its subcommands) and ``harness ls``."""
