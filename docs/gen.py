"""Every output shown in the documentation, produced from the shared traces and the fixtures.

    python docs/gen.py            # (re)write docs/outputs/*.txt and README.md's generated block
    python docs/gen.py --check    # exit 1 naming every shown output that is stale (nothing written)
    python docs/gen.py --only diff-topp-greedy analyze-gemm   # just those

Each output is one ``traceview`` command run from the repository root (``traceview.cli.main``
in a worker process, each distinct command once; the command line is shown above its
output), or one of the few Python views below (an XSpace's outline, the finding
thresholds), written to ``docs/outputs/NAME.txt``; the pages include
them with ``--8<-- "docs/outputs/NAME.txt"`` (pymdownx.snippets) and README.md between
``<!-- gen:NAME -->`` and ``<!-- /gen:NAME -->``.

Outputs must not depend on the machine, the checkout's path or the day: commands run with
``--no-cache`` (the parsed-table cache is this machine's state), ``--stale-days 0`` where the command
has it (a trace ages; the fixtures would turn stale a week after they were recorded), and
``COLUMNS=100`` (argparse's help). What the commands print about the files themselves is
normalised: a loose file's modification time and any age ("written <mtime>", "<age> old").
Paths are passed relative to the repository root (an output holding the checkout's absolute
path is an error). Nothing else is edited; no output shows a time measured on this machine
(the traces' own times only).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "outputs"
README = ROOT / "README.md"
SHARED = "../shared/traces"
GEMM = f"{SHARED}/mi300x_jax_gemm_sweep.xplane.pb"
V6E = f"{SHARED}/tpu_v6e_4chip_psum.xplane.pb"
VLLM = f"{SHARED}/vllm_tpu_qwen"
FRESH = ["--no-cache", "--stale-days", "0"]  # analyze, report, query
NOCACHE = ["--no-cache"]  # diff, verify, ladder, history
TMP, TMP_SHOWN = "{tmp}", "timeline"  # a command's output folder: a temporary one, shown as "timeline"


@dataclass
class Out:
    """One shown output: ``name`` (docs/outputs/NAME.txt), ``argv`` (after ``traceview``) or
    ``py`` (a function returning the text), ``cut``: (start regex, stop regex) keeps the
    lines from the first match of start up to (not including) the next match of stop (None:
    to the end), ``readme``: also written into README.md's block of that name."""

    name: str
    argv: list | None = None
    py: object = None
    cut: tuple | None = None
    readme: bool = False
    show_cmd: bool = True


def xspace_outline() -> str:
    """The XSpace of the shared TPU v6e trace as the profiler wrote it: per XPlane its XLines
    with their XEvent counts, and one XEvent of the ops line with its XStats by name."""
    sys.path.insert(0, str(ROOT))
    from traceview.read.xplane.protos import XSpace

    space = XSpace()
    space.ParseFromString((ROOT / V6E).read_bytes())
    out = [f"XSpace {Path(V6E).name}: {len(space.planes)} XPlanes, hostnames {list(space.hostnames)}"]
    example = None
    for plane in space.planes:
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        pstats = sorted(stat_names.get(s.metadata_id, "?") for s in plane.stats)
        out.append(f"XPlane id={plane.id} {plane.name!r}: {len(plane.lines)} XLines, "
                   f"{len(plane.event_metadata)} XEventMetadata, {len(plane.stat_metadata)} XStatMetadata"
                   + (f"; plane XStats: {', '.join(pstats[:8])}{' ...' if len(pstats) > 8 else ''}" if pstats else ""))
        for line in plane.lines[:12]:
            out.append(f"  XLine id={line.id} {line.name!r}" + (f" ({line.display_name!r})" if line.display_name else "")
                       + f": {len(line.events)} XEvents")
            if example is None and line.name == "XLA Ops" and line.events:
                example = (plane, line, line.events[0], stat_names)
        if len(plane.lines) > 12:
            out.append(f"  ... {len(plane.lines) - 12} more XLines")
    if example:
        plane, line, ev, stat_names = example
        md = plane.event_metadata[ev.metadata_id]
        out.append("")
        out.append(f"first XEvent of XLine {line.name!r} on {plane.name!r}:")
        out.append(f"  metadata {ev.metadata_id}: name {md.name!r}"
                   + (f", display_name {md.display_name!r}" if md.display_name else ""))
        out.append(f"  offset_ps {ev.offset_ps}, duration_ps {ev.duration_ps} (line timestamp_ns {line.timestamp_ns})")
        for s in list(md.stats) + list(ev.stats):
            which = "XEventMetadata" if s in md.stats else "XEvent"
            val = next((getattr(s, f) for f in ("str_value", "int64_value", "uint64_value", "double_value", "ref_value")
                        if s.HasField(f)), "")
            if s.HasField("ref_value"):
                val = stat_names.get(val, val)
            text = str(val)
            out.append(f"  XStat ({which}) {stat_names.get(s.metadata_id, '?')} = "
                       + (text if len(text) <= 90 else text[:87] + "..."))
    return "\n".join(out) + "\n"


def findings_table() -> str:
    """Every finding id with the threshold ``--finding-threshold ID=VALUE`` sets and its default."""
    sys.path.insert(0, str(ROOT))
    from dataclasses import fields

    from traceview.analysis.findings import IDS, PRIMARY, Thresholds

    default = {f.name: f.default for f in fields(Thresholds)}
    rows = ["| finding | threshold (`--finding-threshold ID=VALUE`) | default |", "|---|---|---|"]
    for fid in IDS:
        name = PRIMARY.get(fid)
        rows.append(f"| [`{fid}`](#{fid}) | " + (f"`{name}` | {default[name]:g} |" if name else "a reading warning | - |"))
    return "\n".join(rows) + "\n"


def _mcp(call):
    """Run ``call(server)`` (a coroutine function) against traceview's MCP server rooted at
    the repository."""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from traceview.cli.mcp_server import Roots, build_server

    return asyncio.run(call(build_server(Roots([str(ROOT)]), no_cache=True)))


def mcp_tools() -> str:
    """The MCP server's tools as an agent sees them: name, description, parameters."""
    import textwrap

    def kind(schema):
        types = [s.get("type", "?") for s in schema.get("anyOf", [schema])]
        text = " | ".join(t for t in types if t != "null") + (" | null" if "null" in types else "")
        return text + (f": {' | '.join(schema['enum'])}" if "enum" in schema else "")

    async def tools(srv):
        return await srv.list_tools()

    out = []
    for t in _mcp(tools):
        out.append(f"{t.name}")
        out += textwrap.wrap(t.description, 96, initial_indent="  ", subsequent_indent="  ")
        req = set(t.input_schema.get("required", ()))
        for name, sch in t.input_schema.get("properties", {}).items():
            extra = "required" if name in req else f"default {sch.get('default')!r}"
            out += textwrap.wrap(f"{name} ({kind(sch)}, {extra}){': ' + sch['description'] if 'description' in sch else ''}",
                                 96, initial_indent="    - ", subsequent_indent="      ")
        out.append("")
    return "\n".join(out)


def mcp_verify() -> str:
    """One tool call: verify, with its arguments and the answer's text."""
    import json

    args = {"path": "fixtures/greedy_b4", "base": "fixtures/topp_b4",
            "checks": ["op matching binary_search vanished", "kernel RPAd* has bkv 256"]}

    async def call(srv):
        return await srv.call_tool("verify", args)

    res = _mcp(call)
    text = "".join(c.text for c in res.content if getattr(c, "type", "") == "text")
    return (f"call verify {json.dumps(args)}\n"
            f"-> is_error {res.is_error}\n{json.dumps(json.loads(text), indent=2, ensure_ascii=False)}\n")


def help_of(*cmd) -> Out:
    return Out("help-" + "-".join(cmd), [*cmd, "--help"])


OUTPUTS = [
    Out("analyze-gemm", ["analyze", GEMM, "--top", "5", *FRESH]),
    Out("readme-analyze", ["analyze", GEMM, "--top", "3", "--width", "100", *FRESH], cut=(r"^devices ", r"^\s+source attribution"),
        readme=True),
    Out("analyze-vllm-kind", ["analyze", VLLM, "--by", "kind", "--top", "5", *FRESH],
        cut=(r"HLO ops keyed", r"^\s+custom kernels")),
    Out("analyze-topp-findings", ["analyze", "fixtures/topp_b4", "--top", "5", *FRESH], cut=(r"^findings", r"^devices ")),
    Out("analyze-greedy-steps", ["analyze", "fixtures/greedy_b4", "--top", "5", *FRESH],
        cut=(r"^step anatomy", r"^roofline peaks")),
    Out("analyze-v6e-comm", ["analyze", V6E, "--top", "5", *FRESH], cut=(r"^communication —", r"^roofline per family")),
    Out("analyze-nodonate-findings", ["analyze", "fixtures/nodonate_b4", "--top", "5", *FRESH],
        cut=(r"^findings", r"^devices ")),
    Out("analyze-vllm-phases", ["analyze", VLLM, "--by", "kind", "--top", "5", *FRESH], cut=(r"^phases —", r"^memory —")),
    Out("analyze-vllm-brief", ["analyze", VLLM, "--brief", "--width", "100", *FRESH]),
    Out("analyze-vllm-width100", ["analyze", VLLM, "--width", "100", "--top", "3", *FRESH],
        cut=(r"HLO ops keyed", r"^\s*(op names|custom kernels)")),
    Out("analyze-gemm-memory", ["analyze", GEMM, "--top", "5", *FRESH], cut=(r"^\s*memory —", None)),
    Out("analyze-llo-inside", ["analyze", f"{SHARED}/tpu_v6e_pallas_matmul_llo.xplane.pb", "--top", "5", *FRESH],
        cut=(r"^inside the kernels", r"^phases —")),
    # a finding on the trace that measured it (the findings page, under each section)
    Out("findings-hostmask", ["analyze", "fixtures/hostmask_b4", "--top", "5", *FRESH], cut=(r"^findings", r"^devices ")),
    Out("findings-collectives", ["analyze", "fixtures/collectives_8dev", "--top", "5", *FRESH],
        cut=(r"^findings", r"^devices ")),
    Out("findings-straggler", ["analyze", "fixtures/straggler_8dev", "--top", "5", *FRESH],
        cut=(r"^findings", r"^devices ")),
    Out("findings-v6e", ["analyze", V6E, "--top", "5", *FRESH], cut=(r"^findings", r"^devices ")),
    Out("findings-vllm", ["analyze", VLLM, "--by", "kind", "--top", "5", *FRESH], cut=(r"^findings", r"^devices ")),
    Out("findings-conv3d-all", ["analyze", f"{SHARED}/mi300x_jax_conv3d.xplane.pb", "--step-window", "all", "--top", "5",
                                *FRESH], cut=(r"^findings", r"^devices ")),
    Out("diff-topp-greedy", ["diff", "fixtures/topp_b4", "fixtures/greedy_b4", "--top", "6", "--width", "100", *NOCACHE]),
    Out("verify-topp-greedy", ["verify", "fixtures/topp_b4", "fixtures/greedy_b4", "--check",
                               "op matching binary_search vanished", "--check", "no finding sampler-search-dominates",
                               "--check", "kernel RPAd* has bkv 256", *NOCACHE]),
    Out("verify-donation", ["verify", "fixtures/greedy_b4", "fixtures/nodonate_b4", "--check",
                            "base: no finding state-copied-every-step", "--check",
                            "finding state-copied-every-step present", *NOCACHE]),
    Out("verify-unknown", ["verify", GEMM, "--check", "no finding host-bound-steps", "--check",
                           "family matmul share > 50%  # the GEMMs", *NOCACHE]),
    Out("ladder-greedy", ["ladder", "fixtures/greedy_b4", "fixtures/greedy_b8", *NOCACHE]),
    Out("history-greedy", ["history", "fixtures/greedy_b4", "fixtures/greedy_b8", *NOCACHE]),
    Out("query-v6e", ["query", V6E, "SELECT op_name, shape, occurrences, self_ps FROM populations "
                                    "ORDER BY self_ps DESC LIMIT 5", *FRESH]),
    Out("query-tables", ["query", V6E, "--tables", *FRESH]),
    Out("export-greedy", ["export", "fixtures/greedy_b4", "--steps", "1:2", "-o", "{tmp}/greedy_steps", *NOCACHE]),
    Out("error-corrupt", ["analyze", f"{SHARED}/corrupt_utf8_mangled.xplane.pb", *FRESH]),
    Out("error-notrace", ["analyze", "docs", *FRESH]),
    Out("xspace-outline", py=xspace_outline),
    Out("findings-thresholds", py=findings_table, show_cmd=False),
    Out("mcp-tools", py=mcp_tools),
    Out("mcp-verify", py=mcp_verify),
    *(help_of(*c) for c in (("analyze",), ("report",), ("diff",), ("verify",), ("ladder",), ("history",), ("query",),
                            ("export",), ("mcp",), ("engine",), ("engine", "bench"), ("engine", "profile"), ("engine", "transplant"),
                            ("engine", "patch"), ("engine", "compile-time"))),
]


def normalise(text: str) -> str:
    """Machine- and day-independent text (module docstring)."""
    for real in {str(ROOT), str(Path(ROOT, "..", "shared").resolve())}:
        if real in text:  # commands get relative paths; an absolute one would differ on every machine
            raise SystemExit(f"gen.py: an output holds the absolute path {real}: pass a relative one")
    text = re.sub(r"written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(, [^)]*? old)?", "written <mtime>", text)
    text = re.sub(r"\b\d+ (s|min|h|days) old\b", "<age> old", text)
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n") + "\n"


def cut(text: str, span: tuple | None) -> str:
    if span is None:
        return text
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.search(span[0], ln))
    stop = next((i for i in range(start + 1, len(lines)) if span[1] and re.search(span[1], lines[i])), len(lines))
    kept = lines[start:stop]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept) + "\n"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEVIEW_", "COLUMNS", "LINES"))}
    env.update(COLUMNS="100", NO_COLOR="1", TERM="dumb", PYTHONIOENCODING="utf-8", TRACEVIEW_NO_CACHE="1",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


#: runs a batch of commands in one process (``traceview.cli.main``, as the tests call it):
#: the imports are paid once per batch, not once per command
_BATCH = """
import contextlib, io, json, sys
from traceview.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    out.append([buf.getvalue(), rc or 0])
sys.stdout.write(json.dumps(out))
"""


def run_commands(argvs: list, workers: int = 2) -> dict:
    """{tuple(argv): (stdout + stderr, exit code)}: each distinct command once, in ``workers``
    processes that each run their share in turn (every ``--help`` in the first)."""
    import json

    distinct = list(dict.fromkeys(tuple(a) for a in argvs))
    helps = [a for a in distinct if a[-1] == "--help"]
    others = [a for a in distinct if a[-1] != "--help"]
    batches = [others[i::workers] for i in range(workers)]
    batches[0] = helps + batches[0]

    def one(batch):
        if not batch:
            return []
        with tempfile.TemporaryDirectory(prefix="traceview-docs-") as tmp:  # outputs a command writes
            real = [[a.replace(TMP, tmp) for a in argv] for argv in batch]
            p = subprocess.run([sys.executable, "-c", _BATCH, json.dumps(real)], cwd=ROOT, env=_env(),
                               capture_output=True, text=True, encoding="utf-8", timeout=600)
            if p.returncode:
                raise SystemExit(f"gen.py: a batch of commands failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
            return list(zip(batch, ((t.replace(tmp, TMP_SHOWN), rc) for t, rc in json.loads(p.stdout))))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pair for got in pool.map(one, batches) for pair in got)


def produce(out: Out, ran: dict) -> str:
    """The text of one output (its command line first)."""
    if out.py is not None:
        body = out.py()
        return normalise(f"$ python docs/gen.py --only {out.name}\n" + body) if out.show_cmd else body
    text, rc = ran[tuple(out.argv)]
    shown = [a.replace(TMP, TMP_SHOWN) for a in out.argv if a != "--no-cache"]  # the cache only adds notes
    body = cut(text, out.cut)
    if rc:
        body += f"[exit {rc}]\n"
    return normalise(f"$ traceview {shlex.join(shown)}\n" + body)


def readme_block(name: str, text: str, readme: str) -> str:
    start, stop = f"<!-- gen:{name} -->", f"<!-- /gen:{name} -->"
    if start not in readme:
        raise SystemExit(f"gen.py: README.md has no {start} block")
    head, rest = readme.split(start, 1)
    _, tail = rest.split(stop, 1)
    return f"{head}{start}\n```text\n{text}```\n{stop}{tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale outputs")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="just these outputs")
    args = ap.parse_args(argv)
    todo = [o for o in OUTPUTS if not args.only or o.name in args.only]
    unknown = set(args.only or ()) - {o.name for o in OUTPUTS}
    if unknown:
        ap.error(f"unknown output(s): {', '.join(sorted(unknown))}")
    ran = run_commands([o.argv for o in todo if o.argv])
    texts = {o.name: produce(o, ran) for o in todo}
    stale = []
    readme = README.read_text(encoding="utf-8")
    new_readme = readme
    for o in todo:
        path = OUT / f"{o.name}.txt"
        if not path.exists() or path.read_text(encoding="utf-8") != texts[o.name]:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                OUT.mkdir(parents=True, exist_ok=True)
                path.write_text(texts[o.name], encoding="utf-8")
        if o.readme:
            new_readme = readme_block(o.name, texts[o.name], new_readme)
    if new_readme != readme:
        stale.append(f"README.md (block {', '.join(o.name for o in todo if o.readme)})")
        if not args.check:
            README.write_text(new_readme, encoding="utf-8")
    if args.check:
        if stale:
            print("stale outputs (run python docs/gen.py):\n  " + "\n  ".join(stale), file=sys.stderr)
            return 1
        print(f"{len(todo)} outputs up to date")
        return 0
    print(f"{len(todo)} outputs, {len(stale)} rewritten" + (": " + ", ".join(stale) if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
