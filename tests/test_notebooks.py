"""The notebooks in notebooks/ are stored clean and run headless without an error.

Each notebook runs with nbclient in a temporary copy of the repository layout
it reads (``notebooks/`` and ``examples/sample/``), on a ``python3`` kernel
whose interpreter is the one running the tests. The notebooks assert their
own results (for example: used tokens <= budget), so a wrong result fails
here as an error in a cell.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the docs extra: pip install -e '.[docs]'")
nbclient = pytest.importorskip("nbclient", reason="needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("ipykernel", reason="needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("matplotlib", reason="needs the docs extra: pip install -e '.[docs]'")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell
KERNEL = "python3"


def test_the_notebooks_are_there() -> None:
    names = {path.name for path in NOTEBOOKS}
    assert names >= {"01_quick_start.ipynb", "02_batch_packing.ipynb", "03_manifest_analysis.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        index
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs or execution counts; strip them"
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_asserts_its_results(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert "\nassert " in f"\n{code}", f"{path.name} checks none of its results"


def _kernel_manager(spec_dir: Path) -> KernelManager:
    """A manager whose only ``python3`` kernel runs this interpreter (the project's venv)."""
    spec = spec_dir / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"})
    )
    specs = KernelSpecManager(kernel_dirs=[str(spec_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "notebooks", work / "notebooks")
    shutil.copytree(ROOT / "examples" / "sample", work / "examples" / "sample")
    nb = nbformat.read(work / "notebooks" / path.name, as_version=4)
    # One more cell, in memory only: which interpreter ran the notebook.
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = nbclient.NotebookClient(
        nb,
        km=_kernel_manager(tmp_path / "kernels"),
        timeout=CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(work / "notebooks")}},
    )
    client.execute()
    printed = "".join(out.get("text", "") for out in nb.cells[-1].outputs).strip()
    assert printed == sys.executable
    plots = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert plots, f"{path.name} drew no plot"
