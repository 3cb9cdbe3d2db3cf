"""The offline HTML report (``traceview.render.html``) and the ``report`` / ``--html`` CLI.

Checks on the real shared traces: the figures the study reads (peaks with their sources, the
ridge point, the five ``custom-call.1`` GEMM populations) are on the page; the page is
self-contained (no network reference, no script); every trace string is escaped, including a
hostile one; and headless Chromium renders it to a non-blank screenshot.

Chromium is required, not optional: CI installs it with ``apt-get install -y chromium``; a
missing browser fails the test with that line instead of skipping it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import traceview
import traceview.errors
from traceview.cli import main
from traceview.api import Profile
from traceview.analysis.hardware.peaks import Peaks
from traceview.analysis.report import build_report, build_summary
from traceview.render import html as html_render


def render_report(prof, *, top: int = 30, title=None, **options) -> str:
    """The HTML report of a profile, as ``traceview report`` renders it."""
    return html_render.render_report(build_report(prof, html=True, **options), top=top, title=title)


def write_report(prof, path, **options):
    return prof.report(path, **options)


def profile_summary_html(prof) -> str:
    return html_render.summary_html(build_summary(prof))

EVIL = "<script>alert(1)</script>\"'</textarea>$\\frac{1}{0}$ & --> <!--"
EVIL_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"

GEMM_SHAPES = ["bf16[8192,8192]", "bf16[16384,4096]", "bf16[4096,4096]", "bf16[2048,2048]", "bf16[1024,1024]"]


@pytest.fixture(scope="module")
def tpu(shared_traces) -> Profile:
    return traceview.load(shared_traces / "tpu_v6e_4chip_psum.xplane.pb")


@pytest.fixture(scope="module")
def gemm(shared_traces) -> Profile:
    return traceview.load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb")


@pytest.fixture(scope="module")
def tpu_html(tpu) -> str:
    return render_report(tpu)


@pytest.fixture(scope="module")
def tpu_report_inline(tpu):
    """The TPU trace's HTML report and its page drawn in this process, built once for the
    chart worker tests (each compares the worker's page with this one)."""
    rep = build_report(tpu, html=True)
    return rep, html_render.render_report(rep)


@pytest.fixture(scope="module")
def gemm_html(gemm) -> str:
    return render_report(gemm)


def _text(html: str) -> str:
    """The page's visible text, roughly: tags and the inline SVG dropped, entities kept."""
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    html = re.sub(r"<style>.*?</style>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_tpu_report_has_peaks_sources_and_ridge(tpu_html):
    text = _text(tpu_html)
    assert "918 TFLOP/s" in text
    assert "1.638 TB/s" in text
    assert "560.4 FLOP/byte" in text  # ridge = 918e12 / 1.638e12
    assert "trace plane stats of /device:TPU:0" in text  # where the peaks come from
    assert "TPU v6 Lite" in text
    # roofline + step-time strip + step anatomy + communication per step + per-device skew + memory
    assert tpu_html.count("<svg") == 6 and 'id="memory"' in tpu_html
    assert 'id="communication"' in tpu_html and 'id="overlap"' in tpu_html and "host transfers" in text
    assert "Coverage:" in text and "families sum to" in text
    assert "copy-done.4" in text and "broadcast_add_fusion.1" in text


def test_gemm_report_has_the_five_populations(gemm_html):
    text = _text(gemm_html)
    for shape in GEMM_SHAPES:
        assert shape in text, shape
    # custom-call.1 is flagged as one name with five shape populations, and grouped
    assert "5 shapes" in text
    split = text[text.index("Op names split into several shape populations"):]
    assert "custom-call.1" in split
    assert all(s in split for s in GEMM_SHAPES)
    # MI300X ridge: the trace's clock × cores over the chip table's 5.3 TB/s; the planes' own
    # 2.662 TB/s stat is shown beside it, with the note that says why it gives way
    assert "246.7 FLOP/byte" in text
    assert "1.307 PFLOP/s" in text and "5.3 TB/s" in text and "the trace says 2.662 TB/s" in text
    assert "1.99x off the 5.3 TB/s of AMD Instinct MI300X" in text
    assert "generate_gemm_trace.py" in text  # source attribution
    assert "project" in text


@pytest.mark.parametrize("which", ["tpu_html", "gemm_html"])
def test_report_is_offline_and_scriptless(which, request):
    html = request.getfixturevalue(which)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"(?i)<script|<link\b|<iframe|<object|<embed|@import|url\((?!#)", html)
    for attr, value in re.findall(r"""(?i)\b(src|href|xlink:href)\s*=\s*["']?([^"'\s>]*)""", html):
        assert value.startswith("#"), f"{attr}={value!r} points outside the page"
    assert len(html) < 400_000  # small: text SVG, no embedded fonts or images


def _evil_profile(base: Profile) -> Profile:
    ops = base.ops.with_columns(
        (pl.lit(EVIL) + pl.col("op_name")).alias("op_name"),
        pl.lit("/home/u/" + EVIL + "/model.py").alias("source_file"),
        pl.lit("/home/u/" + EVIL + "/model.py:3").alias("source_stack"),
        (pl.lit(EVIL + " ") + pl.col("hlo_text")).alias("hlo_text"),
        pl.lit(EVIL).alias("module"),
        (pl.lit(EVIL) + pl.col("shape")).alias("shape"),
        pl.lit(EVIL).alias("framework_op"),
    )
    runs = base.module_runs.with_columns(pl.lit(EVIL).alias("module"))
    traces = [dataclasses.replace(t, host=EVIL, path="/tmp/" + EVIL + ".xplane.pb") for t in base.traces]
    devices = [dataclasses.replace(d, device_type=EVIL) for d in base.devices]
    return Profile(ops=ops, module_runs=runs, devices=devices, traces=traces, discovery=None,
                   warnings=[EVIL])


def _assert_escaped(html: str) -> None:
    assert "<script" not in html.lower()
    assert "</textarea>" not in html.lower()
    assert "<!--" not in html  # no comment opened by a trace string
    assert EVIL_ESCAPED in html
    assert "&#34;" in html or "&quot;" in html  # the quote
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        assert "alert" not in svg and "frac" not in svg  # no trace string reaches the charts


def test_trace_strings_are_escaped(gemm):
    evil = _evil_profile(gemm)
    html = render_report(evil, title=EVIL)
    _assert_escaped(html)
    text = _text(html)
    # every kind of trace string made it to the page, as text
    assert text.count(EVIL_ESCAPED) >= 5
    assert "alert(1)&lt;/script&gt;&#34;&#39;&lt;/textarea&gt;" in html
    assert "<svg" in html  # the charts were still drawn ($...$ never reached mathtext)


def test_summary_html_is_escaped_and_compact(gemm):
    html = profile_summary_html(gemm)
    assert "custom-call.1" in html and "5 shapes" in html
    assert "AMD GPU" in html
    assert html.count("<tr>") <= 11  # header + top 10
    assert "<script" not in html.lower() and "http" not in html
    _assert_escaped(profile_summary_html(_evil_profile(gemm)))
    assert gemm._repr_html_() == html


def test_no_peaks_and_no_costs_give_a_note(gemm):
    html = render_report(gemm, peaks=Peaks())
    assert "No roofline chart" in html and "peak FLOP/s and the peak memory bandwidth" in html
    assert html.count("<svg") == 3  # the step charts (strip and anatomy) and the memory chart
    nocost = dataclasses.replace(gemm, ops=gemm.ops.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("flops"), pl.lit(None, dtype=pl.Float64).alias("bytes_accessed")))
    html = render_report(nocost)
    assert "no FLOP or byte counts" in html


def test_step_options_reach_the_anatomy(shared_traces):
    qwen = traceview.load(shared_traces / "vllm_tpu_qwen")
    html = render_report(qwen, step_module="jit_compute_logits_func", step_extent="run",
                         rules=["logits projection=compute_logits"])
    assert "one execution of jit_compute_logits_func (extent: run)" in html
    assert "logits projection" in html
    with pytest.raises(traceview.errors.UsageError):
        render_report(qwen, rules=["no equals sign"])


def test_empty_profile_renders(gemm):
    empty = Profile(ops=gemm.ops.clear(), module_runs=gemm.module_runs.clear(), devices=[], traces=[])
    html = render_report(empty)
    assert "No HLO op events" in html
    assert "<svg" not in html


def test_rendering_leaves_matplotlib_state_alone(gemm):
    import matplotlib

    before = copy.deepcopy(dict(matplotlib.rcParams))
    backend = matplotlib.get_backend()
    with matplotlib.rc_context({"axes.facecolor": "#123456", "lines.linewidth": 9.0}):
        html = render_report(gemm)
        assert matplotlib.rcParams["axes.facecolor"] == "#123456"
    assert "#123456" not in html  # the report is drawn in matplotlib's default style
    assert dict(matplotlib.rcParams) == before
    assert matplotlib.get_backend() == backend


def test_write_report_and_profile_report(gemm, tmp_path):
    out = write_report(gemm, tmp_path / "r.html", top=5, title="GEMM sweep")
    assert out == tmp_path / "r.html" and out.stat().st_size > 10_000
    html = out.read_text(encoding="utf-8")
    assert "<title>GEMM sweep</title>" in html
    assert gemm.report(tmp_path / "p.html").exists()


# -- CLI --------------------------------------------------------------------------------------

def test_cli_report(shared_traces, tmp_path, capsys):
    out = tmp_path / "gemm.html"
    rc = main(["report", str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"), "-o", str(out), "--top", "8"])
    assert rc == 0, capsys.readouterr().err
    html = out.read_text(encoding="utf-8")
    assert all(s in html for s in GEMM_SHAPES)
    assert f"wrote {out}" in capsys.readouterr().err
    # peaks flags reach the report
    rc = main(["report", str(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb"), "-o", str(out),
               "--peak-flops", "1e15", "--peak-bw", "1e12"])
    assert rc == 0
    assert "1000.0 FLOP/byte" in out.read_text(encoding="utf-8")
    assert "given on the command line" in out.read_text(encoding="utf-8")


def test_cli_report_refuses_to_write_into_the_profile(shared_traces, tmp_path, capsys):
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", run / "host.xplane.pb")
    rc = main(["report", str(tmp_path / "logs"), "-o", str(run / "r.html"), "--stale-days", "0"])
    assert rc == 2
    assert "refusing to write" in capsys.readouterr().err
    assert not (run / "r.html").exists()
    rc = main(["analyze", str(tmp_path / "logs"), "--html", str(run / "r.html"), "--stale-days", "0"])
    assert rc == 2 and not (run / "r.html").exists()


def test_cli_analyze_html(shared_traces, tmp_path, capsys):
    out = tmp_path / "a.html"
    rc = main(["analyze", str(shared_traces / "tpu_v6e_4chip_psum.xplane.pb"), "--top", "3", "--html", str(out)])
    assert rc == 0
    assert "560.4 FLOP/byte" in out.read_text(encoding="utf-8")
    assert "wrote" in capsys.readouterr().err


# -- headless Chromium ------------------------------------------------------------------------

def _chromium() -> str:
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium not found (looked for $CHROMIUM, chromium, chromium-browser, google-chrome): "
                "install it with `apt-get install -y chromium` (Debian) or point $CHROMIUM at a Chrome binary")


def test_chromium_renders_a_non_blank_page(gemm, tmp_path):
    import matplotlib.image
    import numpy as np

    page = write_report(gemm, tmp_path / "report.html")
    png = tmp_path / "shot.png"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={tmp_path / 'chrome'}", f"--screenshot={png}", "--window-size=1280,2000",
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert png.exists(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    img = matplotlib.image.imread(png)[..., :3]
    assert img.shape[:2] == (2000, 1280)
    non_white = (img < 0.94).any(axis=-1).mean()
    colors = np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0).shape[0]
    assert non_white > 0.05, f"only {non_white:.1%} of the screenshot is not white"
    assert colors > 200, f"only {colors} distinct colors in the screenshot"
    # the dark header band is there (the stylesheet applied)
    assert img[20:60, 20:400].mean() < 0.3


# -- the chart worker (traceview.cli.chartworker) ---------------------------------------------

def test_chart_worker_draws_the_same_page(tpu_report_inline):
    """The CLI's worker process draws the charts; the page is byte-identical to one drawn in this
    process (the worker really answered: its process is still up after both charts)."""
    from traceview.cli.chartworker import ChartWorker

    rep, inline = tpu_report_inline
    with ChartWorker() as worker:
        drawn = html_render.render_report(rep, charts=worker)
        # roofline, memory, strip, steps, communication bars, skew strip
        assert worker.alive == 1 and worker.answered == 6
    assert drawn == inline and drawn.count("<svg") == 6


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_chart_worker_runs_niced(tpu_report_inline):
    """The worker lowers its own priority by NICE once started (read off /proc/PID/stat, field
    19), so its imports and charts take the CPU the command's threads leave."""
    from traceview.cli import chartworker

    rep, _ = tpu_report_inline
    with chartworker.ChartWorker() as worker:
        html_render.render_report(rep, charts=worker)  # answered: the worker is past its nice call
        assert worker.answered == 6
        proc = worker._children[0].proc
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        assert int(fields[16]) == min(19, os.nice(0) + chartworker.NICE)


def test_charts_submitted_while_the_report_is_built_are_drawn_once(tpu, tpu_report_inline):
    """``report``'s path: build_report's on_roofline hands the roofline's rows to
    submit_roofline before the step anatomy is computed, its on_section the half-built report
    to submit_charts (the roofline again, the strip and steps once the anatomy is in; memory,
    overlap and skew once they are), the renderer then asks for the same charts and gets the
    pending ones: each chart drawn once, by the worker, and the page byte-identical to one
    drawn in this process."""
    from traceview.cli.chartworker import ChartWorker

    _, inline = tpu_report_inline
    seen = []
    with ChartWorker() as worker:
        def roof(rows, peaks):
            seen.append("roofline")
            html_render.submit_roofline(rows, peaks, worker)

        def early(rep):
            seen.append(len(worker._asked))
            html_render.submit_charts(rep, worker)

        rep = build_report(tpu, html=True, on_section=early, on_roofline=roof)
        # the roofline first, alone; then strip and steps; then memory, overlap steps and skew
        assert seen == ["roofline", 1, 3] and len(worker._asked) == 6
        drawn = html_render.render_report(rep, charts=worker)
        assert worker.alive == 1 and worker.answered == 6 and len(worker._asked) == 6
    assert drawn == inline


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_chart_worker_whose_parent_is_gone_ends_before_importing(tmp_path):
    """The worker's program asks to die with its parent first thing and ends at once when the
    parent it was started for is gone already (Ctrl-C during a report's first moments): it left a
    worker importing matplotlib for 1-2 s after the command had exited. Here its parent pid is
    not its parent's: it exits 0 without importing traceview (a traceview package first on its
    path would say so)."""
    from traceview.cli import chartworker

    fake = tmp_path / "fake" / "traceview"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    p = subprocess.run([sys.executable, "-P", "-c", chartworker._CHILD, "1"], env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 0 and not (tmp_path / "imported").exists(), p.stderr
    p = subprocess.run([sys.executable, "-P", "-c", chartworker._CHILD, str(os.getpid())], env=env,
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (tmp_path / "imported").exists()  # (its parent alive: it goes on to import)


@pytest.mark.parametrize("child", ["import sys; sys.exit(3)",  # dies before answering
                                   "import sys, time; sys.stdout.buffer.write(b'\\x05' * 8); time.sleep(30)",  # garbage
                                   "import time; time.sleep(30)"])  # never answers (timeout)
def test_chart_worker_failures_draw_here(tpu_report_inline, monkeypatch, child):
    """A worker that dies, answers garbage or does not answer in time costs nothing but time:
    the chart is drawn in this process and the page is the same."""
    from traceview.cli import chartworker

    monkeypatch.setattr(chartworker, "_CHILD", child)
    monkeypatch.setattr(chartworker, "ANSWER_S", 1.0)
    rep, inline = tpu_report_inline
    with chartworker.ChartWorker() as worker:
        drawn = html_render.render_report(rep, charts=worker)
        assert worker.alive == 0  # given up on
    assert drawn == inline


def test_chart_worker_errors_are_raised_here(tpu):
    """A chart that fails in the worker is drawn again here, so its error is this process's own."""
    from traceview.cli.chartworker import ChartWorker

    with ChartWorker() as worker:
        pending = worker.submit("steps", [[1.0, 2.0]], [])  # zip of no colors: draws nothing
        assert "<svg" in pending()
        pending = worker.submit("roofline", "not a frame", None)
        with pytest.raises(AttributeError):
            pending()
        assert worker.alive == 1  # an error answer is not a worker failure


# -- the report leads with the answer (issue 28) ----------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def qwen_rep(shared_traces):
    prof = traceview.load(shared_traces / "vllm_tpu_qwen")
    return prof, build_report(prof, html=True)


@pytest.fixture(scope="module")
def qwen_page(qwen_rep) -> str:
    return html_render.render_report(qwen_rep[1])


@pytest.fixture(scope="module")
def engine_rep():
    prof = traceview.load(FIXTURES / "greedy_b4")
    return prof, build_report(prof, html=True)


@pytest.fixture(scope="module")
def engine_page(engine_rep) -> str:
    return html_render.render_report(engine_rep[1])


def test_top_ops_group_the_copies_of_one_op_across_layers(qwen_rep, qwen_page):
    """vLLM Qwen: the 63 per-layer copies of convolution_bitcast_fusion at one shape are one row
    of the top-ops table, expandable to its 63 op names; their figures add up to the (name,
    shape) table's rows of those names, summed independently."""
    _, rep = qwen_rep
    g = rep.op_groups.row(0, named=True)
    assert (g["op_name"], g["members"], g["occurrences"]) == ("convolution_bitcast_fusion", 63, 126)
    names = [m["op_name"] for m in g["members_rows"]]
    assert sorted(names) == sorted(g["op_names"]) and len(set(names)) == 63
    assert sum(m["total_ps"] for m in g["members_rows"]) == g["total_ps"]
    bs = rep.by_shape.filter(pl.col("op_name").is_in(names) & (pl.col("shape") == g["shape"]))
    assert bs.height == 63
    assert int(bs["total_ps"].sum()) == g["total_ps"] and int(bs["self_ps"].sum()) == g["self_ps"]
    assert int(bs["occurrences"].sum()) == g["occurrences"]
    # the page: one expandable row per group, its members inside it, 30 groups for --top 30
    ops = qwen_page[qwen_page.index('<section id="ops">'):qwen_page.index('</section>', qwen_page.index('<section id="ops">'))]
    assert ops.count('<details><summary class="row">') == 30
    first = ops[ops.index('<details><summary class="row">'):ops.index("</details>")]
    assert "×63" in first and all(f"<code>{n}</code>" in first for n in names)
    # the op names of one group are not rows of their own
    assert ops.count("convolution_bitcast_fusion.47") == 1


def test_overview_leads_with_step_time_utilisation_memory_families_and_findings(qwen_rep, qwen_page):
    from traceview.model.units import fmt_time_ps

    _, rep = qwen_rep
    ov = rep.overview
    d = rep.steps.distribution
    assert ov["step"]["median_ps"] == d["median_ps"] and ov["step"]["p10_ps"] == d["p10_ps"]
    top = qwen_page[:qwen_page.index('<section id="findings">')]
    assert 'id="overview"' in top and qwen_page.index('id="overview"') < qwen_page.index('id="ops"')
    for ps in (d["median_ps"], d["p10_ps"], d["p90_ps"]):
        assert fmt_time_ps(ps) in top
    # no peaks in a trace JSON export, no allocator events: unknown, and why
    assert "MFU unknown: the chip&#39;s peak FLOP/s is unknown" in top
    assert "no allocator events in this trace" in top
    # the families bar: one segment per family and the idle time, as the anatomy measured them
    fams = rep.steps.families.filter(pl.col("self_ps") > 0)["family"].to_list()
    bar = top[top.index('class="famsbar"'):top.index("</div>", top.index('class="famsbar"'))]
    assert bar.count("<span") == len(fams) + 1 and "matmul/convolution" in bar
    # the findings in the report's (impact) order
    ids = [f.id for f in rep.findings]
    shown = re.findall(r'<a href="#finding-([a-z0-9-]+)">', top)
    assert shown == ids[:len(shown)] and shown


def test_overview_memory_peak_when_known(tpu_html, tpu):
    from traceview.model.units import fmt_bytes

    rep = build_report(tpu, html=True)
    a = rep.memory.allocators[0]
    assert rep.overview["memory"]["peak_bytes"] == a.peak_in_use
    top = tpu_html[:tpu_html.index('<section id="findings">')]
    assert fmt_bytes(a.peak_in_use) in top and "device memory peak" in top


def test_evidence_is_a_table_not_json(engine_page):
    sec = engine_page[engine_page.index('<section id="findings">'):engine_page.index('<section id="ops">')]
    assert '{"' not in sec and "&#34;:" not in sec
    kv = sec[sec.index('id="finding-kv-block-covers-context"'):]
    kv = kv[:kv.index("</div>")]
    # kernels: one nested row, its columns the evidence's keys in words (the JSON key as the
    # header's title), values with their units
    assert '<th title="pages_per_seq">pages per seq</th>' in kv and "<td>RPAd-p_16-bq_1_1-bkv_128_128</td>" in kv
    assert "<td>10.5%</td>" in kv
    assert "_" not in "".join(re.findall(r"<th[^>]*>([^<]*)</th>", sec))  # no raw key as a header


def test_charts_of_fewer_than_three_points_are_sentences(qwen_rep, qwen_page):
    """vLLM Qwen: one step on two devices: the step strip, the per-step anatomy, the
    communication bars and the skew strip would have one or two points: each is a sentence."""
    _, rep = qwen_rep
    assert rep.steps.steps.height == 2
    assert "<svg" not in qwen_page  # no peaks: no roofline either
    assert "2 step(s), too few to chart: <code>/device:TPU:0</code> step 0 67.244 ms" in qwen_page
    assert "1 step(s), too few to chart per step" in qwen_page


def test_step_numbers_are_one_numbering_with_the_traces_own(engine_rep, engine_page):
    """greedy_b4: the steps are the trace's StepTraceAnnotation markers 3, 4, 5; every table
    numbers them 0, 1, 2 (as the JSON and the charts) and shows the trace's own number beside."""
    prof, rep = engine_rep
    want = dict(enumerate(sorted(prof.step_markers["step_num"].to_list())))
    assert want == {0: 3, 1: 4, 2: 5}
    assert rep.overview["step_numbers"] == want
    ph = engine_page[engine_page.index('<section id="phases">'):]
    for i, n in want.items():
        assert f'<td class="r">{i} <span class="muted" title="the trace\'s own step number">(#{n})</span></td>' in ph


def test_export_commands_are_on_the_page(engine_rep, engine_page):
    """The command that exports a finding's step is in its box, the median step's in the step
    anatomy (traceview export)."""
    _, rep = engine_rep
    assert rep.findings and rep.export_command
    for f in rep.findings:
        box = engine_page[engine_page.index(f'id="finding-{f.id}"'):]
        box = box[:box.index("</ul></div>")]
        assert f.export_command and f"timeline: <code>{f.export_command}</code>" in box
    steps = engine_page[engine_page.index('<section id="steps">'):]
    assert f"neighbours: <code>{rep.export_command}</code>" in steps


_WIDTHS = """<script>(function(){var o=[];document.querySelectorAll("body *").forEach(function(e){
var r=e.getBoundingClientRect();if(e.offsetParent!==null&&r.right>1280.5)o.push(e.tagName+"."+e.className+" "+Math.round(r.right));});
var p=document.createElement("pre");p.id="tv-widths";p.textContent="W "+document.documentElement.scrollWidth+" "+o.length+" "+o.slice(0,8).join(" | ");
document.body.appendChild(p);})();</script></body>"""


@pytest.mark.parametrize("which", ["qwen_page", "engine_page"])
def test_report_fits_1280_px(which, request, tmp_path):
    """Headless Chromium at 1280 x 900: the page does not scroll sideways and no element runs
    past the right edge (a copy of the page with a script that writes the widths into the DOM)."""
    page = request.getfixturevalue(which)
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _WIDTHS), encoding="utf-8")
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1280,900", "--dump-dom", probe.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="tv-widths">W (\d+) (\d+) ?([^<]*)</pre>', proc.stdout)
    assert m, f"no widths in the DOM (exit {proc.returncode}): {proc.stderr[-2000:]}"
    width, over, which_over = int(m.group(1)), int(m.group(2)), m.group(3)
    assert width <= 1280 and over == 0, f"scrollWidth {width}, {over} element(s) past 1280 px: {which_over}"


def test_a_cut_in_the_middle_keeps_arrows_whole():
    """The report's middle cut (the ``mid`` macro: the head ellipsised by CSS, the tail shown)
    never splits ``<-`` or ``->``: the head would lose the ``<`` behind its ellipsis."""
    from traceview.render.html import _env

    env = _env()
    src = env.loader.get_source(env, "report.html.j2")[0]
    mid = env.from_string(next(ln for ln in src.splitlines() if ln.startswith("{% macro mid(")) + "{{ mid(x, n) }}")
    shape = "f32[1,2] <- f32[3,4], f32[5,6,7,8,9,10,11,12]"
    for n in range(8, len(shape) - 6):
        head, tail = re.search(r'class="h">(.*?)</span><span class="t">(.*?)</span>', mid.render(x=shape, n=n)).groups()
        assert (head + tail).replace("&lt;", "<").replace("&gt;", ">") == shape
        assert not head.endswith("&lt;") and not (head.endswith("-") and tail.startswith("&gt;"))
    assert 'class="t">&lt;- f32[3,4]' in mid.render(x=shape, n=35)  # the naive cut fell after the "<"


def test_the_roofline_table_shows_layer_copies_as_one_row(qwen_page):
    """vLLM Qwen: the report's roofline table and chart read Report.roofline_layers: the 63
    copies of the MLP up-projection are row 1, ×63 (their names in its title)."""
    i = qwen_page.index("<th>shape (result ← operands)</th><th class=\"r\">occ.</th><th class=\"r\">total</th>"
                        "<th class=\"r\">FLOP/B</th>")
    first = qwen_page[i:qwen_page.index("</tr>", qwen_page.index("<tr><td", i))]
    assert 'title="convolution_bitcast_fusion"' in first and ">×63</span>" in first
    assert "convolution_bitcast_fusion.3, " in first  # the members, in the title


def test_no_finding_is_worded_by_the_renderers_none_line(gemm, gemm_html):
    """The overview's and the findings section's line for no finding are none_line's (the
    terminal's and the brief's wording), not the template's own: with rules that could not run
    (the GEMM sweep) and without (its report with every rule said to have run)."""
    from traceview.render.findings import none_line

    rep = build_report(gemm, html=True)
    assert rep.findings == [] and rep.findings_not_evaluated
    skipped = none_line(rep.findings_not_evaluated)
    assert skipped.startswith("none among the rules that could run; not evaluated: sampler-search-dominates, ")
    rep.findings_not_evaluated = {}
    for page, want in ((gemm_html, skipped), (html_render.render_report(rep), none_line({}))):
        sec = page[page.index('<section id="findings">'):]
        sec = _text(sec[:sec.index("</section>")])
        assert sec == f" Findings {want} "  # the section: its heading and the one line
        assert f" Findings: {want} " in _text(page[:page.index('<section id="findings">')])  # the overview
    assert none_line({}) == "none (no rule found its evidence in this trace)"


def test_findings_section_names_the_rules_that_could_not_run(gemm_html):
    """The GEMM sweep has no finding, and no step rule could judge it: the page says which
    could not run and why, not "no rule found its evidence"."""
    sec = gemm_html[gemm_html.index('<section id="findings">'):]
    sec = _text(sec[:sec.index("</section>")])
    assert "no rule found its evidence" not in sec
    assert "not evaluated: " in sec and "host-bound-steps" in sec and "warmup-in-window" in sec
    assert "(the steps are not one repeated step: the commonest op mix runs 3 time(s) per device, in 3 of 13" in sec


def test_the_step_chart_stacks_its_families_in_one_order(shared_traces):
    """The families the anatomy's table leaves out are stacked after its own, longest first:
    their order came from a group_by's rows and changed from run to run (the gemm report's
    step chart differed between two runs of one tree)."""
    from traceview.analysis import derived
    from traceview.analysis.report import step_chart
    from traceview.model.load import load

    prof = load(shared_traces / "mi300x_jax_gemm_sweep.xplane.pb", cache=False)
    anat = derived.step_anatomy(prof, None)
    assert anat.families["family"].to_list() == ["matmul/convolution"]
    for _ in range(20):  # the group_by's order varied about every other call
        chart = step_chart(anat)
        assert [f for f, _ in chart.series] == ["matmul/convolution", "elementwise fusions", "copies and conversions"]
        assert [round(sum(v)) for _, v in chart.series] == [3233884000, 142640000, 21160000]


def test_split_names_ties_are_broken_by_name():
    """Two op names with the same total self time came out in a group_by's order, which varies
    from run to run (an engine trace recorded on an H200 gave two JSONs in three runs)."""
    from traceview.analysis.report import split_names

    rows = [("b", "f32[2]", 3), ("b", "f32[4]", 1), ("a", "f32[2]", 2), ("a", "f32[8]", 2), ("c", "f32[1]", 9)]
    by_shape = pl.DataFrame({"op_name": [r[0] for r in rows], "shape": [r[1] for r in rows],
                             "occurrences": [1] * 5, "mean_ps": [1.0] * 5, "self_ps": [r[2] for r in rows],
                             "share": [0.1] * 5, "modules": [["m"]] * 5})
    for _ in range(20):
        assert split_names(by_shape)["op_name"].to_list() == ["a", "b"]


def test_a_missing_value_is_a_dash_never_python_none():
    """Every page's templates print None (a figure or reason the report lacks, as the steps'
    'why' of a scaled v6e trace) as '-' (it printed 'None' in 30 cells there)."""
    from traceview.render.html import _env

    assert _env().from_string("<td>{{ why }}</td><td>{{ n }}</td>").render(why=None, n=0) == "<td>-</td><td>0</td>"
