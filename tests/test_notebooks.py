"""The notebooks in ``notebooks/``: committed without outputs, and they run top to bottom.

Each notebook is executed with nbclient in a kernel started from *this* interpreter (a
kernelspec written to a temporary folder whose argv is ``sys.executable -m ipykernel_launcher``),
so it sees the same environment as the tests whatever ``python`` is first on PATH. The
working directory is ``notebooks/``; the notebooks find the checkout by walking up to
``pyproject.toml`` and the shared traces beside it (``../shared/traces``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the 'test' extra provides nbformat")  # listed in [test]

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ["01_tpu_trace_tour.ipynb", "02_engine_kv_block_compare.ipynb"]
KERNEL = "traceview-test-python"


def test_notebooks_exist():
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_has_no_outputs(name):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name} cell {i} has outputs: strip them (nbstripout)"
            assert cell.execution_count is None, f"{name} cell {i} has an execution count"
        assert "attachments" not in cell or not cell.attachments, f"{name} cell {i} has attachments"
    assert "widgets" not in nb.metadata


@pytest.fixture(scope="module")
def kernel_manager_factory(tmp_path_factory):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kdir = tmp_path_factory.mktemp("kernels")
    spec = kdir / KERNEL
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "traceview tests", "language": "python"}))

    def make():
        return KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kdir)]))

    return make


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, kernel_manager_factory, shared_traces):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NB_DIR / name, as_version=4)
    client = NotebookClient(nb, km=kernel_manager_factory(), timeout=180, allow_errors=False,
                            resources={"metadata": {"path": str(NB_DIR)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{name} failed:\n{str(exc)[-3000:]}")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # the HTML summary of a Profile was displayed (its _repr_html_)
    html = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.output_type in ("execute_result", "display_data") and "text/html" in o.get("data", {})]
    assert any("traceview Profile" in h for h in html)
    # nothing was written into the repository by the run
    assert sorted(p.name for p in NB_DIR.iterdir() if not p.name.startswith(".")) == sorted(NOTEBOOKS)
