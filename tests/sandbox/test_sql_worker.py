"""The SQL worker's value-length cap holds with SQLite's own limit (Python >= 3.11) and without it (3.10)."""
import sqlite3

import pytest

from harness.sandbox import sql_worker


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (s TEXT)")
    con.execute("INSERT INTO t VALUES ('short'), (?)", ("x" * 64,))
    con.commit()
    con.close()
    return str(path)


class _NoSetlimit:
    """A connection as Python 3.10 gives it: everything but ``setlimit``."""

    def __init__(self, con):
        self._con = con

    def __getattr__(self, name):
        if name == "setlimit":
            raise AttributeError(name)
        return getattr(self._con, name)


@pytest.mark.parametrize("python_310", [False, True])
def test_a_value_over_the_cap_is_refused_and_short_ones_pass(db, monkeypatch, python_310):
    if python_310:
        connect = sqlite3.connect
        monkeypatch.setattr(sql_worker.sqlite3, "connect", lambda *a, **k: _NoSetlimit(connect(*a, **k)))
    elif not hasattr(sqlite3.Connection, "setlimit"):
        pytest.skip("this Python has no Connection.setlimit (< 3.11)")
    assert sql_worker.query(db, "SELECT s FROM t WHERE rowid = 1", 5.0, 10, 32) == [("short",)]
    with pytest.raises(sqlite3.Error, match="too big"):
        sql_worker.query(db, "SELECT s FROM t", 5.0, 10, 32)
