"""Issue 33.7: ``harness push`` publishes the finished cells of a results folder to a folder or a hub dataset
(the hub client is replaced by a fake here: no test touches the network)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from harness import api
from harness.cli.app import _subcommand
from test_api import FAST


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("push") / "results"
    api.sweep([{"method": "ar"}, {"method": "sd"}], decoding="greedy", results_dir=str(folder), **FAST)
    (folder / "cells" / "unfinished_cell").mkdir()  # a cell without a summary: never pushed
    return folder


def _tree(folder: Path):
    return sorted((p.relative_to(folder), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_push_to_a_folder_copies_finished_cells_tables_and_a_card(results, tmp_path, capsys):
    before = _tree(results)
    assert _subcommand("push", ["--results", str(results), "--to", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    cells = sorted(p.name for p in (out / "cells").iterdir() if p.is_dir())  # not the folder's .integrity.key
    assert len(cells) == 2 and "unfinished_cell" not in cells
    assert all((out / "cells" / c / "summary.json").is_file() for c in cells)
    assert sorted(pd.read_parquet(out / "cells.parquet")["cell_id"]) == cells
    assert len(pd.read_parquet(out / "records.parquet")) == 2 and (out / "records.csv").is_file()
    assert [c["cell_id"] for c in json.loads((out / "results.json").read_text())["cells"]] == cells
    assert "data_files: cells.parquet" in (out / "README.md").read_text()
    assert _tree(results) == before  # the source is only read
    assert "2 cells (2 copied, 0 already there, 1 unfinished or corrupt left out)" in capsys.readouterr().out
    assert _subcommand("push", ["--results", str(results), "--to", str(out)]) == 0  # again: nothing copied twice
    assert "(0 copied, 2 already there" in capsys.readouterr().out


def test_push_refuses_a_folder_without_cells_or_itself(results, tmp_path, capsys):
    assert _subcommand("push", ["--results", str(tmp_path / "nope"), "--to", str(tmp_path / "o")]) == 2
    assert _subcommand("push", ["--results", str(results), "--to", str(results)]) == 2
    assert "no cells/ folder" in capsys.readouterr().err


def test_push_to_the_hub_uploads_the_staged_folder_as_a_dataset(results, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw))
            return f"https://huggingface.co/datasets/{repo_id}"

        def upload_folder(self, folder_path, **kw):
            files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
            calls.append(("upload_folder", files, kw))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert _subcommand("push", ["--results", str(results), "--hub", "me/bench", "--private"]) == 0
    (create, repo, kw), (upload, files, ukw) = calls
    assert repo == "me/bench" and kw == {"repo_type": "dataset", "private": True, "exist_ok": True}
    assert ukw["repo_id"] == "me/bench" and ukw["repo_type"] == "dataset"
    assert {"README.md", "cells.parquet", "records.parquet", "results.json"} <= set(files)
    assert sum(f.endswith("/summary.json") for f in files) == 2
    assert not any(f.endswith(".integrity.key") for f in files)  # the staged folder's secret stays here


def test_a_failed_hub_upload_is_one_line_and_status_1(results, monkeypatch, capsys):
    import huggingface_hub

    class NoNetwork:
        def create_repo(self, repo_id, **kw):
            raise OSError("no route to host (test)")

    monkeypatch.setattr(huggingface_hub, "HfApi", NoNetwork)
    assert _subcommand("push", ["--results", str(results), "--hub", "me/bench"]) == 1
    err = capsys.readouterr().err
    assert "the upload to me/bench failed (OSError: no route to host (test))" in err and "Traceback" not in err
