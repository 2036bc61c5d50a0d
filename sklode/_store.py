"""The results store of a comparison campaign: every finished fit, written as it completes.

A store is one SQLite file (Python's ``sqlite3``; pandas ``read_sql``, DuckDB's ``sqlite``
scanner and Polars ``read_database`` read it directly). Each fit is one row, inserted in its
own transaction: a run killed at any moment (SIGKILL included) leaves every committed fit
and no half-written one, and a rerun with the same store skips the fits already there. The
``key`` column names a fit by everything that determines it (problem, method, trial, seed,
noise, start and settings), so a record can never be stored twice.

Columns: ``key`` (primary key), ``problem``, ``method``, ``trial``, ``seed``, ``status``,
``record`` (the record as JSON, exactly as :func:`sklode.compare.compare` returns it; floats
round-trip exactly), ``settings`` and ``versions`` (JSON), ``finished`` (Unix time).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from . import __version__

__all__ = ["KNOWN_SUFFIXES", "Store", "read_store", "store_path"]

#: Extensions read as a store; a path with none of them gets ``.sqlite`` appended.
KNOWN_SUFFIXES = (".sqlite", ".sqlite3", ".db")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY,
    problem TEXT NOT NULL,
    method TEXT NOT NULL,
    trial INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL,
    record TEXT NOT NULL,
    settings TEXT NOT NULL,
    versions TEXT NOT NULL,
    finished REAL NOT NULL
)
"""


def store_path(path):
    """``path`` as a store file: a known extension kept, else ``.sqlite`` appended.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    pathlib.Path
    """
    path = Path(os.fspath(path))
    return path if path.suffix.lower() in KNOWN_SUFFIXES else path.with_name(
        path.name + ".sqlite")


def versions():
    """The versions that produced a record (sklode and the numerical stack)."""
    import numpy
    import scipy
    import sklearn
    import torch

    return {"sklode": __version__, "numpy": numpy.__version__, "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__, "torch": torch.__version__}


def fit_key(settings):
    """The key of one fit: its settings as canonical JSON (sorted keys)."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


class Store:
    """An open store (use as a context manager).

    Parameters
    ----------
    path : str or os.PathLike
        The file (:func:`store_path` decides the extension); created if absent.
    """

    def __init__(self, path):
        self.path = store_path(path)
        if self.path.exists() and self.path.is_dir():
            raise ValueError(f"store={os.fspath(path)!r} is a directory; give a file path.")
        try:
            self.connection = sqlite3.connect(self.path, timeout=30.0)
            # WAL: a writer's committed rows survive a kill of the process at any moment
            self.connection.execute("PRAGMA journal_mode=WAL")
            self.connection.execute(_SCHEMA)
            self.connection.commit()
            self.versions = json.dumps(versions())  # the same for every fit of this run
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path} is not an sklode results store (SQLite): {exc}. "
                             "Give a new path or an existing store.") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the file."""
        self.connection.close()

    def done(self):
        """The keys already stored.

        Returns
        -------
        set of str
        """
        return {row[0] for row in self.connection.execute("SELECT key FROM records")}

    def __len__(self):
        return int(self.connection.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    def add(self, key, settings, record):
        """Insert one finished fit in its own transaction (a key already there is kept).

        Parameters
        ----------
        key : str
        settings : dict
        record : dict
        """
        with self.connection:
            self.connection.execute(
                "INSERT OR IGNORE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, record.get("problem", ""), record["method"], int(record.get("trial", 0)),
                 int(record.get("seed", 0)), record["status"], json.dumps(record),
                 json.dumps(settings, sort_keys=True), self.versions, time.time()))

    def records(self, keys=None):
        """Stored records, in the order of ``keys`` (default: as inserted).

        Parameters
        ----------
        keys : sequence of str, optional

        Returns
        -------
        list of dict
        """
        rows = self.connection.execute("SELECT key, record FROM records ORDER BY rowid")
        by_key = {key: json.loads(text) for key, text in rows}
        if keys is None:
            return list(by_key.values())
        return [by_key[k] for k in keys if k in by_key]


def read_store(path, *, as_frame=False):
    """The records of a results store, as :func:`sklode.compare.compare` returns them.

    Parameters
    ----------
    path : str or os.PathLike
        A store written by ``compare(..., store=path)`` or ``sklode compare --store``.
    as_frame : bool, default=False
        Return a pandas DataFrame.

    Returns
    -------
    list of dict or DataFrame
        One record per stored fit, in the order they were stored.
    """
    path = store_path(path)
    if not path.exists():
        raise FileNotFoundError(f"No results store at {path}.")
    with Store(path) as store:
        records = store.records()
    if as_frame:
        import pandas as pd

        return pd.DataFrame.from_records(records)
    return records
