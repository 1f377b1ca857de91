"""The parts folder of a batch run: one Parquet file per finished chunk, a run record, and the merge.

``<out>.parts/`` holds ``run.json`` (the run's arguments, fingerprints included, and the finished
chunks with their row and fallback counts) and ``part-00012.parquet`` per finished chunk. Each part is written
to a temporary file, flushed to disk and renamed into place, and only then recorded as finished
(``run.json`` is replaced the same way), so a run killed at any moment leaves whole parts and a
record that never claims a part that is not there. A re-run with the same arguments skips the
recorded chunks; one with other arguments is refused (:class:`BatchError`). :meth:`Parts.merge`
streams the parts into the output file one at a time and removes the folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any  # JSON values

import pyarrow as pa
import pyarrow.parquet as pq

RUN_FILE = "run.json"


class BatchError(ValueError):
    """A batch run that cannot go on as asked (e.g. a resume with other arguments); the message says why."""


def _replace_atomically(path: Path, write: Any, sync: bool = True) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file and rename it into place; with ``sync``
    the bytes reach the disk first, so even a machine crash leaves the old file or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        write(fh)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 24 else text[:20] + "..."


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``["k: 100 -> 50", "data.sha256: ..."]``: the keys whose values differ, nested keys dotted."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a != b:
            if isinstance(a, Mapping) and isinstance(b, Mapping):
                out += [f"{key}.{d}" for d in _differences(a, b)]
            else:
                out.append(f"{key}: {_short(a)} -> {_short(b)}")
    return out


class Parts:
    """The parts folder ``dir`` of one run, whose arguments are ``key`` (JSON-ready)."""

    def __init__(self, directory: Path, key: Mapping[str, Any], resume: bool) -> None:
        self.dir = directory
        self.key = dict(key)
        self.finished: dict[int, tuple[int, int]] = {}  # chunk index -> (rows, rows with a fallback)
        run = directory / RUN_FILE
        if not run.exists() and directory.exists() and any(directory.iterdir()):
            # not ours to resume or to delete
            raise BatchError(
                f"{directory} exists and holds no batch run ({RUN_FILE} missing); remove it first"
            )
        if run.exists() and not resume:
            shutil.rmtree(directory)
        elif run.exists():
            self._resume(run)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.tmp"):  # left by a run killed while writing
            stale.unlink()
        self._record()

    def _resume(self, run: Path) -> None:
        try:
            recorded = json.loads(run.read_text())
            old_key, finished = recorded["key"], recorded["finished"]
            done = {int(i): (int(n), int(f)) for i, (n, f) in finished.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BatchError(
                f"{run}: not a batch run record ({e}); remove {self.dir} to start afresh"
            ) from None
        diff = _differences(old_key, self.key)
        if diff and not any(self.part(i).exists() for i in done):
            return  # nothing of the old run is left to lose (e.g. it stopped at bad input): start afresh
        if diff:
            raise BatchError(
                f"{self.dir} holds an unfinished run with other arguments ({'; '.join(diff[:4])}); "
                "re-run with the same arguments to resume it, or start afresh (--no-resume)"
            )
        # a part recorded but gone (removed by hand) is scored again
        self.finished = {i: n for i, n in done.items() if self.part(i).exists()}

    def _record(self) -> None:
        payload = {"key": self.key, "finished": {str(i): list(n) for i, n in sorted(self.finished.items())}}
        # Not synced (one sync per part is enough): after a machine crash an older record only means
        # that some finished parts are scored again.
        _replace_atomically(
            self.dir / RUN_FILE, lambda fh: fh.write(json.dumps(payload).encode()), sync=False
        )

    def part(self, index: int) -> Path:
        return self.dir / f"part-{index:05d}.parquet"

    def is_finished(self, index: int, rows: int) -> bool:
        """Whether chunk ``index`` is done; raises when its row count differs from the recorded one."""
        if index not in self.finished:
            return False
        if self.finished[index][0] != rows:
            raise BatchError(
                f"{self.part(index)}: recorded with {self.finished[index][0]} rows, but the input now "
                f"gives chunk {index} {rows}; start afresh (--no-resume)"
            )
        return True

    def write(self, index: int, table: pa.Table, rows: int, fallbacks: int) -> None:
        """Write chunk ``index`` (``rows`` input rows, ``fallbacks`` of them not personalised) atomically,
        then record it as finished."""
        _replace_atomically(self.part(index), lambda fh: pq.write_table(table, fh))
        self.finished[index] = (rows, fallbacks)
        self._record()

    def merge(self, out_path: Path, n_chunks: int, schema: pa.Schema) -> int:
        """Stream parts ``0..n_chunks-1`` into ``out_path`` (schema and metadata ``schema``), one part in
        memory at a time; remove the folder. Returns the rows written."""
        missing = [i for i in range(n_chunks) if i not in self.finished]
        if missing:
            raise BatchError(f"{self.dir}: chunks {missing[:5]} are not finished; cannot merge")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        rows = 0

        def write(fh: Any) -> None:
            nonlocal rows
            with pq.ParquetWriter(fh, schema) as writer:
                for i in range(n_chunks):
                    table = pq.read_table(self.part(i)).replace_schema_metadata(schema.metadata)
                    writer.write_table(table)
                    rows += table.num_rows
                    del table

        _replace_atomically(out_path, write)
        shutil.rmtree(self.dir)
        return rows


__all__ = ["BatchError", "Parts", "RUN_FILE"]
