"""``harness push``: publish the finished cells of a results folder (issue 33.7) —

* ``harness push --to DIR``: into a folder (a shared drive, a synced directory): every finished cell whose
  records match their checksum is copied, as ``harness merge`` copies them (locks, atomic renames, cells already
  there left alone), plus ``cells.parquet`` / ``records.parquet`` (with their CSVs), ``results.json`` and a
  ``README.md`` dataset card;
* ``harness push --hub OWNER/NAME``: the same folder, staged in a temporary directory, uploaded as a Hugging Face
  hub *dataset* repository (created when missing, ``--private`` to keep it so; the token is the hub client's:
  ``HF_TOKEN`` or ``hf auth login``). The card's ``configs`` make the hub's viewer show the two tables.

Unfinished, failed and corrupt cells are never pushed. Nothing is read back: the results folder is the source.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.results.integrity import KEY_FILE

CARD = """---
configs:
- config_name: cells
  data_files: cells.parquet
- config_name: records
  data_files: records.parquet
tags:
- decoding-harness
- speculative-decoding
- benchmark
---
# {title}

Benchmark results of [decoding-harness](https://github.com/) {version}: {n_cells} finished cells
(method x decoding x pair x dataset x gpu x seed), {n_records} records (one per prompt).

* `cells.parquet` — one row per cell: the configuration, tokens/s, latency, energy (J/token), acceptance, quality.
* `records.parquet` — one row per prompt and cell.
* `results.json` — the command, the environment, one row per cell with its config and headline numbers.
* `cells/<cell id>/` — each cell's own files (`summary.json`, `records.jsonl`): what `harness-report --results`
  reads to rebuild the report.
"""


def stage(results: Path, dest: Path, title: str = "decoding-harness results") -> dict:
    """Copy the finished cells of ``results`` into ``dest`` and write the tables, ``results.json`` and the card
    there; returns merge's counts and the number of cells and records."""
    from harness import __version__
    from harness.analysis.load import read_results
    from harness.report.build import write_parquet
    from harness.results.provenance import write_results_json
    from harness.run.plan import merge

    counts = merge([results], dest)
    res = read_results(dest)
    write_parquet(res.cells, dest / "cells.parquet")
    write_parquet(res.records, dest / "records.parquet")
    write_results_json(dest, list(res.cells["cell_id"]) if len(res.cells) else [],
                       {"argv": ["harness", "push", *sys.argv[2:]], "source": str(Path(results).resolve())})
    (dest / "README.md").write_text(CARD.format(title=title, version=__version__, n_cells=len(res.cells),
                                                n_records=len(res.records)), encoding="utf-8")
    return {**counts, "cells": len(res.cells), "records": len(res.records)}


def push_hub(results: Path, repo_id: str, private: bool = False, message: str | None = None) -> str:
    """Stage the results in a temporary folder and upload it as the hub dataset ``repo_id``; returns its URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-push-") as tmp:
        counts = stage(results, Path(tmp), title=repo_id)
        # the staged folder's integrity key is a secret (whoever holds it can re-seal edited records): never upload it
        (Path(tmp) / "cells" / KEY_FILE).unlink(missing_ok=True)
        api.upload_folder(folder_path=tmp, repo_id=repo_id, repo_type="dataset",
                          commit_message=message or f"harness push: {counts['cells']} cells")
    return str(url)


def push_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="harness push", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=Path("results"), help="the results folder (default: results)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", type=Path, help="a folder to copy the finished cells and tables into")
    where.add_argument("--hub", metavar="OWNER/NAME", help="a Hugging Face hub dataset repository")
    p.add_argument("--private", action="store_true", help="--hub: create the repository private")
    p.add_argument("--message", help="--hub: the commit message")
    args = p.parse_args(argv)
    if not (args.results / "cells").is_dir():
        from harness.errors import ConfigError

        raise ConfigError(f"{args.results} has no cells/ folder: is --results mistyped? Nothing pushed")
    if args.to is not None:
        if Path(args.to).resolve() == args.results.resolve():
            from harness.errors import ConfigError

            raise ConfigError("--to is the results folder itself; choose another folder")
        counts = stage(args.results, Path(args.to))
        left_out = counts['skipped_unfinished'] + counts['skipped_corrupt']
        print(f"harness push: {counts['cells']} cells ({counts['merged']} copied, {counts['present']} already there, "
              f"{left_out} unfinished or corrupt left out) -> {args.to}")
        return 0
    try:
        url = push_hub(args.results, args.hub, args.private, args.message)
    except (OSError, ValueError) as e:  # the hub's HTTP errors (no token, no network, no rights) are OSErrors
        print(f"harness push: error: the upload to {args.hub} failed ({type(e).__name__}: {e}); nothing is lost: "
              f"the results folder is unchanged", file=sys.stderr)
        return 1
    print(f"harness push: -> {url}")
    return 0


__all__ = ["push_hub", "push_main", "stage"]
