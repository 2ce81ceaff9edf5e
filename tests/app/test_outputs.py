"""Batch outputs commit as one: all old or all new files, swept leftovers, one writer."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cognoxium.app import _outputs, batch, locomo
from cognoxium.app.batch import Request, read_requests, run_batch
from cognoxium.app.cli import EXIT_BAD_INPUT, EXIT_OK, app
from cognoxium.exceptions import OutputError
from cognoxium.items.io import read_items
from tests.app.test_locomo import tiny
from tests.pins import assert_same_outputs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"
AS_OF = "2026-01-01T00:00:00Z"
PACKS = "packs/part-00000.jsonl"
MANIFESTS = "manifests/part-00000.parquet"
HEADERS = "manifest_headers/part-00000.jsonl"
FILES = (PACKS, MANIFESTS, HEADERS)
"""The files of a run of the sample (one task: one part of each table)."""

runner = CliRunner()


def pack_args(requests: Path, out: Path, *, quiet: bool = True) -> list[str]:
    return [
        "pack",
        str(SAMPLE / "items.jsonl"),
        str(requests),
        "--out",
        str(out),
        "--as-of",
        AS_OF,
        "--rank",
        "bm25",
        "--no-progress",
        *(["--quiet"] if quiet else []),
    ]


def pack(requests: Path, out: Path) -> tuple[int, str]:
    result = runner.invoke(app, pack_args(requests, out))
    return result.exit_code, result.stderr


def contents(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in FILES}


@pytest.fixture
def fewer(tmp_path: Path) -> Path:
    """The sample's first three requests: a run whose outputs differ from the full sample's."""
    path = tmp_path / "fewer.jsonl"
    lines = (SAMPLE / "requests.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]))
    return path


@pytest.fixture
def runs(tmp_path: Path, fewer: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The bytes of a full-sample run (the old outputs) and of a run of ``fewer`` (the new)."""
    assert pack(SAMPLE / "requests.jsonl", tmp_path / "ref-old") == (EXIT_OK, "")
    assert pack(fewer, tmp_path / "ref-new") == (EXIT_OK, "")
    old, new = contents(tmp_path / "ref-old"), contents(tmp_path / "ref-new")
    assert old[PACKS] != new[PACKS]
    assert old[MANIFESTS] != new[MANIFESTS]
    assert old[HEADERS] != new[HEADERS]
    return old, new


def committed(out: Path) -> list[str]:
    """What a clean commit leaves beside ``out``: the link and its version (no lock file)."""
    assert out.is_symlink()
    return sorted([out.name, os.readlink(out)])


def beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.lstrip(".").startswith(out.name))


# Where a run is stopped, and which outputs a reader sees after it: the ones
# of the previous run until the link is swapped, the new ones after.
POINTS = {
    "write": "old",  # after the first pack line, the files half written
    "publish": "old",  # both files written and closed, not yet synced or linked
    "swap": "old",  # the temporary link made, not yet renamed onto the output
    "retire": "new",  # the link swapped, the previous version not yet removed
}


def _stop_at(point: str, stop: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the run call ``stop`` at ``point`` (see :data:`POINTS`)."""
    if point == "write":
        calls = {"n": 0}
        real_json = batch.canonical_json

        def counting(value: Any) -> str:
            calls["n"] += 1
            if calls["n"] == 2:
                stop()
            return real_json(value)

        monkeypatch.setattr(batch, "canonical_json", counting)
        return
    real = getattr(_outputs, f"_{point}")

    def stopped(*args: Any) -> Any:
        stop()
        return real(*args)

    monkeypatch.setattr(_outputs, f"_{point}", stopped)


class InjectedError(RuntimeError):
    pass


def _raise() -> None:
    raise InjectedError("injected fault")


@pytest.mark.parametrize("point", ["write", "publish", "swap"])
def test_a_failed_run_leaves_the_previous_outputs_and_no_leftovers(
    tmp_path: Path,
    fewer: Path,
    runs: tuple[dict[str, bytes], dict[str, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    point: str,
) -> None:
    old, _ = runs
    out = tmp_path / "out"
    assert pack(SAMPLE / "requests.jsonl", out) == (EXIT_OK, "")
    before = committed(out)
    _stop_at(point, _raise, monkeypatch)
    with pytest.raises(InjectedError):
        run_batch(
            read_items(SAMPLE / "items.jsonl"),
            read_requests(fewer),
            out_dir=out,
            rank="bm25",
        )
    assert_same_outputs(out, old, FILES)
    assert beside(out) == before  # the new version and the temporary link are removed


_KILL_SCRIPT = """
import os, signal, sys
import pytest
from tests.app import test_outputs
from cognoxium.app.cli import main

point, *argv = sys.argv[1:]
patch = pytest.MonkeyPatch()
test_outputs._stop_at(point, lambda: os.kill(os.getpid(), signal.SIGKILL), patch)
sys.argv = ["cognoxium", *argv]
main()
"""


def kill_at(point: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the command line in a new process that SIGKILLs itself at ``point``."""
    return subprocess.run(
        [sys.executable, "-c", _KILL_SCRIPT, point, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@contextmanager
def flocked(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if held
        yield fd
    finally:
        os.close(fd)


@pytest.mark.parametrize("point", list(POINTS))
def test_a_killed_run_shows_all_old_or_all_new_and_the_next_run_cleans_up(
    tmp_path: Path, fewer: Path, runs: tuple[dict[str, bytes], dict[str, bytes]], point: str
) -> None:
    old, new = runs
    out = tmp_path / "out"
    assert pack(SAMPLE / "requests.jsonl", out) == (EXIT_OK, "")
    clean = committed(out)

    killed = kill_at(point, pack_args(fewer, out, quiet=False))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert_same_outputs(out, old if POINTS[point] == "old" else new, FILES)
    assert beside(out) != committed(out)  # the killed run left its temporaries behind
    with flocked(_outputs.lock_path(out)):  # the kernel released the dead run's lock
        pass

    assert pack(fewer, out) == (EXIT_OK, "")
    assert_same_outputs(out, new, FILES)
    assert beside(out) == committed(out)  # the leftovers are swept
    assert committed(out) != clean


def test_the_sweep_removes_only_leftovers_of_runs(tmp_path: Path, fewer: Path) -> None:
    out = tmp_path / "out"
    assert pack(fewer, out) == (EXIT_OK, "")
    dead = tmp_path / "out.20250101T000000Z-deadbeef"
    dead.mkdir()
    (dead / "packs").mkdir()
    (dead / PACKS).write_text("half\n")
    os.symlink(dead.name, tmp_path / ".out.20250101T000000Z-deadbeef.link")
    kept = ["out.backup", "out.20250101T000000Z-deadbeef.txt", "other.20250101T000000Z-deadbeef"]
    for name in kept:
        (tmp_path / name).mkdir()
    assert pack(fewer, out) == (EXIT_OK, "")
    assert beside(out) == sorted([*committed(out), *kept[:2]])
    assert (tmp_path / kept[2]).is_dir()


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(
    tmp_path: Path, fewer: Path
) -> None:
    out = tmp_path / "out"
    assert pack(SAMPLE / "requests.jsonl", out) == (EXIT_OK, "")
    before = contents(out)
    lock = _outputs.lock_path(out)
    with flocked(lock) as fd:
        os.pwrite(fd, b"4242\n", 0)
        code, stderr = pack(fewer, out)
        assert code == EXIT_BAD_INPUT
        assert stderr == (
            f"error: {out} is being written by another run (process 4242), which holds "
            f"{lock}; wait for it to end or choose another output directory\n"
        )
        with pytest.raises(OutputError, match="being written by another run") as info:
            run_batch(read_items(SAMPLE / "items.jsonl"), [Request(id="r", budget=1)], out_dir=out)
        assert info.value.path == str(out)
        assert info.value.code == "output.locked"
        assert info.value.to_dict()["file"] == str(out)
    assert_same_outputs(out, before, FILES)
    assert pack(fewer, out) == (EXIT_OK, "")  # released: the next run commits


def test_a_killed_writer_releases_the_lock(tmp_path: Path, fewer: Path) -> None:
    out = tmp_path / "out"
    killed = kill_at("publish", pack_args(fewer, out, quiet=False))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()  # nothing was ever committed
    with flocked(_outputs.lock_path(out)):
        pass
    assert pack(fewer, out) == (EXIT_OK, "")


def test_an_empty_directory_becomes_the_link(tmp_path: Path, fewer: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert pack(fewer, out) == (EXIT_OK, "")
    assert beside(out) == committed(out)


@pytest.mark.parametrize("kind", ["directory", "link"])
def test_an_output_no_run_wrote_is_refused_and_kept(tmp_path: Path, fewer: Path, kind: str) -> None:
    out = tmp_path / "out"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "packs.jsonl").write_text("keep me\n")
    if kind == "directory":
        mine.rename(out)
        expected = (
            f"error: {out} is a directory holding 1 entry (packs.jsonl); outputs are "
            "committed as a link out -> out.<run id>, which cannot replace a non-empty "
            "directory in one step. Move it away or remove it (for outputs of an earlier "
            "cognoxium, rm -r it), or choose another output directory\n"
        )
    else:
        out.symlink_to(mine)
        expected = (
            f"error: {out} is a link to {mine}, not to a version out.<run id> written by "
            "cognoxium; remove the link or choose another output directory\n"
        )
    assert pack(fewer, out) == (EXIT_BAD_INPUT, expected)
    assert (out / "packs.jsonl").read_text() == "keep me\n"
    assert not (tmp_path / ".out.lock").exists()  # refused before locking


def test_locomo_commits_every_file_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(tiny()), encoding="utf-8")
    out = tmp_path / "o"
    locomo.run_locomo(data, out, [64], rank="bm25")
    names = (
        "items.parquet",
        "requests.jsonl",
        *FILES,
        "report.json",
    )
    before = {name: (out / name).read_bytes() for name in names}
    before_beside = committed(out)
    real = locomo.run_batch
    calls = {"n": 0}

    def second_fails(*args: Any, **kwargs: Any) -> batch.BatchStats:
        calls["n"] += 1
        if calls["n"] == 2:  # the compared method, after the main batch was written
            raise InjectedError("injected fault")
        return real(*args, **kwargs)

    monkeypatch.setattr(locomo, "run_batch", second_fails)
    with pytest.raises(InjectedError):
        locomo.run_locomo(data, out, [64, 128], rank="bm25", compare=["recency"])
    assert_same_outputs(out, before, names)
    assert not (out / "compare").exists()
    assert beside(out) == before_beside
