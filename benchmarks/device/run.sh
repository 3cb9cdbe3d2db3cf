#!/usr/bin/env bash
# One prepared device run: engine profiles on one NVIDIA GPU (H200 class), then traceview
# analyze / diff / verify and XProf's hlo_stats on each; everything under $OUT.
#
#   OUT=/path/out benchmarks/device/run.sh            # on the GPU machine (budget: 8 minutes)
#   DRY_RUN=1 OUT=/tmp/out benchmarks/device/run.sh   # the same steps on the CPU, toy sizes
#
# Environment: OUT (default benchmarks/out/device), PYTHON (default python3), DRY_RUN,
# BUDGET_S (seconds for all steps; default 420 on GPU, 600 dry), STEP_TIMEOUT_S (150),
# TRACE_MAX_MB (48: larger trace files are moved to $WORK, not left under $OUT).
# Needs: Python >= 3.11 with jax (jax[cuda12] on the GPU machine), polars, protobuf, numpy and
# traceview's other dependencies, and xprof==2.24.2 for the oracle: `pip install -e '.[test]'`
# installs them all (and `pip install -U 'jax[cuda12]'` the CUDA build of jax). The script
# installs nothing (the device machine has no network): it checks, says what is missing, and
# stops. traceview is imported from this checkout (no install needed).
# Exit: 0 all steps ran and every check held, 1 a step or a check failed (outputs written all
# the same), 2 a missing dependency, 3 no GPU without DRY_RUN=1. Details: device_run.py.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-python3}"
export OUT="${OUT:-$REPO/benchmarks/out/device}"
export WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/traceview-device.XXXXXX")}"
mkdir -p "$OUT" "$WORK" && OUT="$(cd "$OUT" && pwd)" && WORK="$(cd "$WORK" && pwd)" || exit 2
say() { echo "run.sh: $*" >&2; }

command -v "$PY" >/dev/null 2>&1 || { say "no Python at '$PY' (set PYTHON=)"; exit 2; }
"$PY" - <<'PYEOF' || { say "Python >= 3.11 is needed"; exit 2; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PYEOF

# traceview from this checkout, whatever else is installed: a folder of links mapping
# traceview.kernels and traceview.engine_shim as pyproject.toml does, first on PYTHONPATH
# (run from $WORK, so the current folder shadows nothing)
cd "$WORK" || exit 2
SITE="$WORK/site/traceview"
mkdir -p "$SITE"
for f in "$REPO"/traceview/*; do
  b="$(basename "$f")"
  [ "$b" = kernels ] || [ "$b" = engine_shim ] || [ "$b" = __pycache__ ] || ln -sfn "$f" "$SITE/$b"
done
ln -sfn "$REPO/kernels" "$SITE/kernels"
ln -sfn "$REPO/engine_shim" "$SITE/engine_shim"
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"

missing="$("$PY" - <<'PYEOF'
import importlib
need = ["jax", "polars", "google.protobuf", "numpy", "jinja2", "matplotlib", "rich", "orjson", "isal", "msgspec"]
bad = []
for m in need:
    try:
        importlib.import_module(m)
    except Exception as e:  # noqa: BLE001
        bad.append(f"{m} ({type(e).__name__})")
print(", ".join(bad))
PYEOF
)"
if [ -n "$missing" ]; then
  say "missing Python packages: $missing"
  say "install them first: $PY -m pip install -e '$REPO[test]'  (GPU: and $PY -m pip install -U 'jax[cuda12]')"
  exit 2
fi
"$PY" -c "import xprof" 2>/dev/null || say "xprof is not installed: the XProf oracle steps will fail (pip install xprof==2.24.2)"
"$PY" - "$REPO" <<'PYEOF' || { say "traceview does not import from $REPO"; exit 2; }
import pathlib, sys
import traceview, traceview.engine_shim.cli, traceview.kernels.naming
repo = pathlib.Path(sys.argv[1]).resolve()
for m in (traceview, traceview.engine_shim.cli, traceview.kernels.naming):
    if not pathlib.Path(m.__file__).resolve().is_relative_to(repo):
        sys.exit(f"run.sh: {m.__name__} imports from {m.__file__}, not from {repo}")
PYEOF

say "OUT=$OUT WORK=$WORK DRY_RUN=${DRY_RUN:-0} python=$("$PY" -c 'import platform; print(platform.python_version())')"
exec "$PY" "$HERE/device_run.py"
