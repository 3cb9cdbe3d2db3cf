#!/usr/bin/env bash
# Before/after timing of two traceview trees, run alternately, each command its own process.
#
#   BASE=TREE NEW=TREE bash benchmarks/alternate.sh ROUNDS OUT "TRACES" "COMMANDS"
#
# TREE: a checkout with its C extensions built (python setup.py build_ext --inplace) and its
# bytecode compiled (python -m compileall -q TREE/traceview). TRACES: names of the scaled
# traces in $TRACES_DIR (default /tmp/traceview-speed, as benchmarks/speed.py --cache-dir
# builds them); COMMANDS: analyze, json, report, diff (F F), verify. Each run appends
# "trace command side wall_s user_s sys_s maxrss_KiB" to OUT (side b = BASE, n = NEW);
# benchmarks/alternate_summary.py OUT prints the medians as a markdown table.
set -u
R=$1; OUT=$2; TR=$3; CMDS=${4:-analyze}
B=${BASE:?BASE tree}; N=${NEW:?NEW tree}; PY=${PY:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
D=${TRACES_DIR:-/tmp/traceview-speed}; TMP=$(mktemp -d)
: > "$OUT"
for r in $(seq "$R"); do for t in $TR; do for c in $CMDS; do for side in b n; do
  tree=$B; [ "$side" = n ] && tree=$N
  F=$D/$t.xplane.pb
  case $c in
    analyze) a=(analyze "$F");; json) a=(analyze "$F" --format json);; report) a=(report "$F" -o "$TMP/r.html");;
    diff) a=(diff "$F" "$F");; verify) a=(verify "$F" -c "op matching . present");;
    *) echo "unknown command $c" >&2; exit 2;;
  esac
  (cd "$TMP" && PYTHONPATH=$tree /usr/bin/time -f "$t $c $side %e %U %S %M" -a -o "$OUT" \
     "$PY" -P -m traceview.cli "${a[@]}" --no-cache > /dev/null 2> "$TMP/err") || { cat "$TMP/err" >&2; exit 1; }
done; done; done; done
rm -rf "$TMP"
