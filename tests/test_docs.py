"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, anchor or
include fails it), every output it shows is what ``docs/gen.py`` produces today, every finding's
``doc`` link lands on its section, and the README stays a screen that CI's command is read from."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _gen():
    sys.path.insert(0, str(DOCS))
    try:
        import gen
    finally:
        sys.path.remove(str(DOCS))
    return gen


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"mkdocs build --strict failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return out


def test_site_builds_strict_with_every_page(site):
    import yaml

    # every page of the nav was built, the generated outputs and the API reference included
    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # Material's !!python tags
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        elif isinstance(node, list):
            for v in node:
                yield from pages(v)

    built = list(pages(nav))
    assert {"findings.md", "library.md", "commands/analyze.md", "commands/engine.md"} <= set(built)
    for page in built:
        html = site / ("index.html" if page == "index.md" else page[:-3] + "/index.html")
        assert html.exists(), page
    assert "custom-call.1: 5 populations" in (site / "index.html").read_text(encoding="utf-8")
    lib = (site / "library" / "index.html").read_text(encoding="utf-8")
    assert 'id="traceview.api.load"' in lib and 'id="traceview.api.Profile"' in lib
    assert ":class:" not in lib and ":func:" not in lib  # docs/hooks.py reads the roles as code


def test_every_finding_links_its_section(site):
    """Each registered finding id has its section on the findings page: the ``doc`` a finding
    carries names a file of the repository and an anchor the built page holds."""
    from traceview.analysis.findings import IDS, Finding

    page = (site / "findings" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<h2 id="([^"]+)"', page))
    for fid in IDS:
        doc = Finding(fid, "info", "").doc
        path, _, anchor = doc.partition("#")
        assert (ROOT / path).is_file() and anchor == fid, doc
        assert fid in anchors, f"{fid}: no section on the findings page"
    assert len(IDS) == len(set(IDS)) >= 20


def test_every_shown_output_is_current():
    """``python docs/gen.py --check`` reruns every command the docs show and fails naming the
    stale ones (a shown output that no longer matches what traceview prints)."""
    p = subprocess.run([sys.executable, str(DOCS / "gen.py"), "--check"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


def test_outputs_are_all_generated_and_included():
    """docs/outputs holds only what gen.py writes, and every include names one of them."""
    gen = _gen()
    names = {o.name for o in gen.OUTPUTS}
    assert len(names) == len(gen.OUTPUTS)
    on_disk = {p.stem for p in (DOCS / "outputs").glob("*")}
    assert on_disk == names, (sorted(on_disk - names), sorted(names - on_disk))
    included = set()
    for md in DOCS.rglob("*.md"):
        for ref in re.findall(r'^\s*--8<-- "docs/outputs/([^"]+)\.txt"', md.read_text(encoding="utf-8"), re.M):
            assert ref in names, (md, ref)
            included.add(ref)
    readme_blocks = set(re.findall(r"<!-- gen:([\w-]+) -->", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert readme_blocks == {o.name for o in gen.OUTPUTS if o.readme}
    assert names - included - readme_blocks == set(), "generated but shown nowhere"


def test_gen_normalises_what_ages_and_catches_a_change(tmp_path):
    gen = _gen()
    text = ("  reading x.xplane.pb: the file given (written 2026-12-02 13:43:01, 5 min old)\n"
            "  reading run R (2026-01-11 21:26:41, 325 days old, 1 host)\n")
    assert gen.normalise(text) == ("  reading x.xplane.pb: the file given (written <mtime>)\n"
                                   "  reading run R (2026-01-11 21:26:41, <age> old, 1 host)\n")
    # a block of the README is rewritten in place, the rest kept
    readme = "a\n<!-- gen:x -->\nold\n<!-- /gen:x -->\nb\n"
    assert gen.readme_block("x", "new\n", readme) == "a\n<!-- gen:x -->\n```text\nnew\n```\n<!-- /gen:x -->\nb\n"


def test_readme_fits_a_screen_and_holds_ci_command():
    """README.md is at most 150 lines, and .ci/run's command is the README's test command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci.startswith("sh .ci/system-deps && ") and ci in readme
