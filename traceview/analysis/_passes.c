/*
 * traceview.analysis._passes: single passes of the analyses over time-ordered op-event
 * arrays (optional accelerator; the numpy/polars code beside each call computes the same).
 *
 *   step_pass(idx, starts, durs, selfs, counts, lo, hi, rows, ops, optime, busy) -> bool:
 *     ops against step windows in one merge pass (traceview.analysis.steps.anatomy);
 *   window_max(...) -> bool: latest activity end per step window, by merge;
 *   chunk_heads(...) -> bool: module runs' op chunks (traceview.analysis.steps.anatomy.align_module_runs);
 *   median_by(...) -> bool: medians per group by quickselect (traceview.analysis.ops.aggregate);
 *   quantiles_by(...) -> bool: quantiles per group, and the values grouped
 *     (traceview.analysis.ops.distributions).
 *   row_hashes(...) -> bool: per step row, a hash of its events' op populations
 *     (traceview.analysis.steps.stepstats).
 *   rank_match(...) -> bool: the k-th start of a key with the k-th done of that key
 *     (traceview.analysis.communication.overlap._match: async pairs, collectives and host transfers).
 *   pair_by_key(...) -> int: async starts matched with their dones by key and rank, events
 *     already in time order within each key (traceview.analysis.communication.collectives._pair_index);
 *   union_where(...) -> int: the union of the intervals of some codes, starts in order
 *     (traceview.analysis.communication.overlap._union_where);
 *   record_sums(...) -> bool: per description, the overlap's records counted and summed
 *     (traceview.analysis.communication.overlap._finish);
 *   pair_spans(...) -> bool: the time in flight and the done's self time of matched async pairs
 *     (traceview.analysis.communication.collectives._pair_spans);
 *   covered(...) -> bool: time of windows covered by disjoint sorted intervals
 *     (traceview.analysis.communication.overlap._covered);
 *   partition(...) -> bool: a device's step windows split into exposed / compute / hidden /
 *     host time (traceview.analysis.communication.overlap._partition).
 *   attr_sums(...) -> bool: per op description, sums of event columns over the events inside
 *     step rows (traceview.analysis.steps.phases, traceview.analysis.steps.family_roofline);
 *   row_sums(...) -> bool: per step row, sums of per-description weights over its events
 *     (traceview.analysis.steps.phases).
 *   direction_busy(...) -> bool: per host-transfer direction, bytes moved and the time at least
 *     one transfer was in flight, merged per device (traceview.analysis.communication.collectives).
 *   chunks_inside(...) -> bool: whether every module run starts its op chunk inside itself
 *     (traceview.analysis.steps.anatomy.align_module_runs, after chunk_heads).
 *   attr_counts, direction_busy_in_order: np.bincount of attr ids, and direction_busy over
 *     transfers already in order (traceview.analysis.communication.collectives).
 *   comm_records_stream(...) -> int: the overlap's per-op records, synchronous collectives and
 *     async pairs in (device, start) order (traceview.analysis.communication.overlap._comm_ops).
 *   events_placed(...) -> int: each event's device and class, the (device, start) order
 *     checked (traceview.analysis.communication.overlap._Events).
 *
 * Each releases the GIL and returns False on input outside its preconditions (unordered
 * input, an index outside its table); the caller then takes the general path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* step_pass(idx, starts, durs, selfs, counts, lo, hi, rows, ops, optime, busy[, row_offset]) -> bool
 * One device's ops, given as indices idx (int32 or int64, by its byte length relative to
 * rows) into the event arrays starts / durs / selfs / counts (int64, whole table), in time
 * order (starts[idx] non-decreasing), against its step windows (lo non-decreasing,
 * disjoint: lo[j+1] >= hi[j], hi[j] >= lo[j]). rows (int32, one per idx) = row_offset + the
 * window holding the op's start (the last window with lo <= start, if start < hi or start ==
 * lo), else -1; per window: ops = sum of counts, optime = sum of selfs, busy = length of the
 * union of the ops' [start, start + dur) clipped to the window. Sums wrap like numpy's.
 * Returns False, outputs unspecified, when the inputs are not so ordered or sized (the
 * caller falls back). */
static PyObject *step_pass(PyObject *self, PyObject *args) {
    Py_buffer b[11];
    Py_ssize_t row_offset = 0;  /* added to every window index written to rows */
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*|n", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9], &b[10], &row_offset))
        return NULL;
    Py_ssize_t n = b[7].len / 4, N = b[1].len / 8, m = b[5].len / 8;
    int wide = b[0].len == n * 8;
    int ok = (wide || b[0].len == n * 4) && b[2].len / 8 == N && b[3].len / 8 == N && b[4].len / 8 == N
             && b[6].len / 8 == m && b[8].len / 8 == m && b[9].len / 8 == m && b[10].len / 8 == m;
    const int32_t *ix32 = b[0].buf;
    const int64_t *ix64 = b[0].buf;
    const int64_t *st = b[1].buf, *du = b[2].buf, *sf = b[3].buf, *ct = b[4].buf, *lo = b[5].buf, *hi = b[6].buf;
    int32_t *rows = b[7].buf;
    int64_t *ops = b[8].buf, *opt = b[9].buf, *busy = b[10].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < m && ok; j++) {
            if (hi[j] < lo[j] || (j + 1 < m && lo[j + 1] < hi[j])) ok = 0;
            ops[j] = opt[j] = busy[j] = 0;
        }
        int64_t prev = INT64_MIN;
        for (Py_ssize_t i = 0; i < n && ok; i++) {
            int64_t e = wide ? ix64[i] : (int64_t)ix32[i];
            if (e < 0 || e >= N || st[e] < prev) ok = 0; else prev = st[e];
        }
        if (ok) {
            Py_ssize_t j = 0, cur = -1;
            int64_t first_s = 0, emax = 0;
            uint64_t gaps = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t e = wide ? ix64[i] : (int64_t)ix32[i];
                int64_t s = st[e], en = (int64_t)((uint64_t)s + (uint64_t)du[e]);
                while (j + 1 < m && lo[j + 1] <= s) j++;
                Py_ssize_t w = -1;
                if (m > 0 && lo[j] <= s && (s < hi[j] || s == lo[j])) w = j;
                rows[i] = w < 0 ? -1 : (int32_t)(w + row_offset);
                if (w < 0) continue;
                ops[w] = (int64_t)((uint64_t)ops[w] + (uint64_t)ct[e]);
                opt[w] = (int64_t)((uint64_t)opt[w] + (uint64_t)sf[e]);
                int64_t cs = s < lo[w] ? lo[w] : (s > hi[w] ? hi[w] : s);
                int64_t ce = en < lo[w] ? lo[w] : (en > hi[w] ? hi[w] : en);
                if (w != cur) {
                    if (cur >= 0) { int64_t v = (int64_t)((uint64_t)emax - (uint64_t)first_s - gaps); busy[cur] = v > 0 ? v : 0; }
                    cur = w; first_s = cs; emax = ce; gaps = 0;
                } else {
                    if (cs > emax) gaps += (uint64_t)(cs - emax);
                    if (ce > emax) emax = ce;
                }
            }
            if (cur >= 0) { int64_t v = (int64_t)((uint64_t)emax - (uint64_t)first_s - gaps); busy[cur] = v > 0 ? v : 0; }
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 11; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* window_max(a_start, a_len, is_dur, starts, nxt, end) -> bool
 * For consecutive windows [starts[k], nxt[k]) (starts non-decreasing, nxt[k] >= starts[k] and
 * nxt[k] <= starts[k + 1]) raise end[k] to the latest end of the activity starting inside the
 * window; the activity (a_start non-decreasing) ends at a_start + a_len (wrapping like numpy
 * int64 addition) when is_dur, else at a_len. One merge pass: the step windows' range maxima
 * of traceview.analysis.steps.anatomy._module_windows. int64 arrays; returns False, leaving end unchanged,
 * when an order condition fails (the caller then binary-searches). */
static PyObject *window_max(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    int is_dur;
    if (!PyArg_ParseTuple(args, "y*y*py*y*w*", &b[0], &b[1], &is_dur, &b[2], &b[3], &b[4])) return NULL;
    Py_ssize_t n = b[0].len / 8, m = b[2].len / 8;
    int ok = b[1].len / 8 == n && b[3].len / 8 == m && b[4].len / 8 == m;
    const int64_t *as = b[0].buf, *al = b[1].buf, *st = b[2].buf, *nx = b[3].buf;
    int64_t *end = b[4].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 1; i < n && ok; i++) if (as[i] < as[i - 1]) ok = 0;
        for (Py_ssize_t k = 0; k < m && ok; k++) {
            if (nx[k] < st[k]) ok = 0;
            if (k + 1 < m && (st[k + 1] < st[k] || nx[k] > st[k + 1])) ok = 0;
        }
        if (ok) {
            Py_ssize_t i = 0;
            for (Py_ssize_t k = 0; k < m; k++) {
                while (i < n && as[i] < st[k]) i++;
                int64_t mx = INT64_MIN;
                for (; i < n && as[i] < nx[k]; i++) {
                    int64_t e = is_dur ? (int64_t)((uint64_t)as[i] + (uint64_t)al[i]) : al[i];
                    if (e > mx) mx = e;
                }
                if (mx > end[k]) end[k] = mx;
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 5; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

/* chunk_heads(attr, starts, durs, prog, m, offs, heads, ends) -> bool
 * traceview.analysis.steps.anatomy.align_module_runs's chunks in one pass over one device's events in time
 * order: the j-th event of program p = prog[attr] (-1: none of the programs asked) belongs
 * to chunk j / m[p]; heads[offs[p] + chunk] = start of its first event, ends[...] = latest
 * end (start + duration, wrapping) of its events. Returns False when a program has more
 * events than its chunks hold or an index is outside its table (nothing meaningful written).
 * attr uint32; prog int32; the rest int64. */
static PyObject *chunk_heads(PyObject *self, PyObject *args) {
    Py_buffer b[8];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, na = b[3].len / 4, np_ = b[4].len / 8, nh = b[6].len / 8;
    int ok = b[1].len / 8 == n && b[2].len / 8 == n && b[5].len / 8 == np_ && b[7].len / 8 == nh;
    const uint32_t *attr = b[0].buf;
    const int64_t *st = b[1].buf, *du = b[2].buf, *m = b[4].buf, *offs = b[5].buf;
    const int32_t *prog = b[3].buf;
    int64_t *heads = b[6].buf, *ends = b[7].buf;
    /* per program: its event count within the current chunk, and that chunk (no division) */
    int64_t *cnt = ok ? PyMem_RawCalloc(np_ ? 2 * (size_t)np_ : 1, sizeof(int64_t)) : NULL;
    if (ok && !cnt) { for (int k = 0; k < 8; k++) PyBuffer_Release(&b[k]); return PyErr_NoMemory(); }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        int64_t *within = cnt, *chunk = cnt + np_;
        for (Py_ssize_t p = 0; p < np_ && ok; p++) if (m[p] < 1 || offs[p] < 0) ok = 0;
        for (Py_ssize_t i = 0; i < n && ok; i++) {
            if ((Py_ssize_t)attr[i] >= na) { ok = 0; break; }
            int32_t p = prog[attr[i]];
            if (p < 0) continue;
            if (p >= np_) { ok = 0; break; }
            int64_t w = within[p], o = offs[p] + chunk[p];
            if (o >= nh) { ok = 0; break; }
            int64_t e = (int64_t)((uint64_t)st[i] + (uint64_t)du[i]);
            if (w == 0) { heads[o] = st[i]; ends[o] = e; }
            else if (e > ends[o]) ends[o] = e;
            if (++w == m[p]) { w = 0; chunk[p]++; }
            within[p] = w;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(cnt);
    for (int k = 0; k < 8; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

static void tv_select(int64_t *v, Py_ssize_t n, Py_ssize_t k) {
    /* v[k] becomes the k-th smallest, smaller ones before it (Hoare quickselect) */
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
        int64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) { int64_t t = v[i]; v[i] = v[j]; v[j] = t; i++; j--; }
        }
        if (k <= j) hi = j; else if (k >= i) lo = i; else return;
    }
}

/* median_by(attr, key_of_attr, values, out, have) -> bool
 * Median of values (int64) per key = key_of_attr[attr[i]] (int32; -1: not counted), as polars'
 * median computes it: the middle value, or for an even count lo + (hi - lo) * 0.5 in double
 * of the two middle ones. out (double) and have (uint8: the key has values) per key. Values
 * are grouped by key into one buffer, then each group is quickselected: O(n). Returns False
 * when an index is outside its table. attr uint32. */
static PyObject *median_by(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4])) return NULL;
    Py_ssize_t n = b[0].len / 4, na = b[1].len / 4, nk = b[3].len / 8;
    int ok = b[2].len / 8 == n && b[4].len == nk;
    const uint32_t *attr = b[0].buf;
    const int32_t *key = b[1].buf;
    const int64_t *val = b[2].buf;
    double *out = b[3].buf;
    uint8_t *have = b[4].buf;
    Py_ssize_t *start = ok ? PyMem_RawCalloc((size_t)nk + 1, sizeof(Py_ssize_t)) : NULL;
    int64_t *buf = ok ? PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof(int64_t)) : NULL;
    if (ok && (!start || !buf)) {
        PyMem_RawFree(start); PyMem_RawFree(buf);
        for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
        return PyErr_NoMemory();
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && ok; i++) {   /* counts */
            if ((Py_ssize_t)attr[i] >= na) { ok = 0; break; }
            int32_t k = key[attr[i]];
            if (k < 0) continue;
            if (k >= nk) { ok = 0; break; }
            start[k + 1]++;
        }
        if (ok) {
            for (Py_ssize_t k = 0; k < nk; k++) start[k + 1] += start[k];
            Py_ssize_t *fill = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(Py_ssize_t));
            if (!fill) ok = 0;
            else {
                memcpy(fill, start, ((size_t)nk + 1) * sizeof(Py_ssize_t));
                for (Py_ssize_t i = 0; i < n; i++) {
                    int32_t k = key[attr[i]];
                    if (k >= 0) buf[fill[k]++] = val[i];
                }
                PyMem_RawFree(fill);
                for (Py_ssize_t k = 0; k < nk; k++) {
                    Py_ssize_t c = start[k + 1] - start[k];
                    have[k] = c > 0;
                    if (!c) { out[k] = 0.0; continue; }
                    int64_t *v = buf + start[k];
                    Py_ssize_t mid = c / 2;
                    tv_select(v, c, mid);
                    if (c % 2) out[k] = (double)v[mid];
                    else {
                        int64_t lo = v[0];  /* the largest value before mid */
                        for (Py_ssize_t i = 1; i < mid; i++) if (v[i] > lo) lo = v[i];
                        double dl = (double)lo, dh = (double)v[mid];
                        out[k] = dl + (dh - dl) * 0.5;
                    }
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(start); PyMem_RawFree(buf);
    for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
    if (!ok && !PyErr_Occurred()) Py_RETURN_FALSE;
    return PyBool_FromLong(ok);
}

/* quantiles_by(attr, key_of_attr, values, qs, out, counts, grouped) -> bool
 * Per key = key_of_attr[attr[i]] (int32; -1: not counted), the quantiles qs (double,
 * ascending in [0, 1]) of values (int64) with linear interpolation between the two nearest
 * ranks (numpy's default, polars' "linear": v[f] + (v[f+1] - v[f]) * (q(c-1) - f)), so q = 0.5
 * is polars' median; out[key * nq + j] (double). counts (int64) per key: its values.
 * grouped (double, as long as values): the counted values as doubles, grouped by key (key
 * 0's first), in event order within a key (a stable counting sort: numpy's stable argsort
 * of the keys), for the caller's mean and deviation; the entries past sum(counts) are left
 * as they were. The quantiles by one narrowing quickselect per quantile on an int64 copy:
 * O(n). Returns False when an index is outside its table or qs is not ascending in [0, 1].
 * attr uint32. */
static PyObject *quantiles_by(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6])) return NULL;
    Py_ssize_t n = b[0].len / 4, na = b[1].len / 4, nq = b[3].len / 8, nk = b[5].len / 8;
    int ok = b[2].len / 8 == n && b[4].len / 8 == nk * nq && b[6].len / 8 == n;
    const uint32_t *attr = b[0].buf;
    const int32_t *key = b[1].buf;
    const int64_t *val = b[2].buf;
    const double *qs = b[3].buf;
    double *out = b[4].buf;
    int64_t *counts = b[5].buf;
    double *grouped = b[6].buf;
    for (Py_ssize_t j = 0; j < nq && ok; j++)
        if (!(qs[j] >= 0.0 && qs[j] <= 1.0) || (j && qs[j] < qs[j - 1])) ok = 0;
    Py_ssize_t *start = ok ? PyMem_RawCalloc((size_t)nk + 1, sizeof(Py_ssize_t)) : NULL;
    Py_ssize_t *fill = ok ? PyMem_RawMalloc(((size_t)nk + 1) * sizeof(Py_ssize_t)) : NULL;
    int64_t *buf = ok ? PyMem_RawMalloc((n ? (size_t)n : 1) * sizeof(int64_t)) : NULL;
    if (ok && (!start || !fill || !buf)) {
        PyMem_RawFree(start); PyMem_RawFree(fill); PyMem_RawFree(buf);
        for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
        return PyErr_NoMemory();
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && ok; i++) {   /* counts */
            if ((Py_ssize_t)attr[i] >= na) { ok = 0; break; }
            int32_t k = key[attr[i]];
            if (k < 0) continue;
            if (k >= nk) { ok = 0; break; }
            start[k + 1]++;
        }
        if (ok) {
            for (Py_ssize_t k = 0; k < nk; k++) { counts[k] = start[k + 1]; start[k + 1] += start[k]; }
            memcpy(fill, start, ((size_t)nk + 1) * sizeof(Py_ssize_t));
            for (Py_ssize_t i = 0; i < n; i++) {
                int32_t k = key[attr[i]];
                if (k >= 0) { Py_ssize_t at = fill[k]++; buf[at] = val[i]; grouped[at] = (double)val[i]; }
            }
            for (Py_ssize_t k = 0; k < nk; k++) {
                Py_ssize_t c = start[k + 1] - start[k];
                double *o = out + k * nq;
                if (!c) { for (Py_ssize_t j = 0; j < nq; j++) o[j] = 0.0; continue; }
                int64_t *v = buf + start[k];
                Py_ssize_t lo = 0;  /* v[lo..c) holds the values >= every selected one */
                for (Py_ssize_t j = 0; j < nq; j++) {
                    double pos = qs[j] * (double)(c - 1);
                    Py_ssize_t f = (Py_ssize_t)pos;  /* pos >= 0: the cast is the floor */
                    if (f > c - 1) f = c - 1;
                    if (f < lo) f = lo;
                    tv_select(v + lo, c - lo, f - lo);
                    double frac = pos - (double)f;
                    if (frac > 0.0 && f + 1 < c) {
                        int64_t nx = v[f + 1];  /* the next rank: the smallest value after f */
                        for (Py_ssize_t i = f + 2; i < c; i++) if (v[i] < nx) nx = v[i];
                        double dl = (double)v[f], dh = (double)nx;
                        o[j] = dl + (dh - dl) * frac;
                    } else o[j] = (double)v[f];
                    lo = f;
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(start); PyMem_RawFree(fill); PyMem_RawFree(buf);
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* row_hashes(rows, attr, pop, keep, words, counts, distinct, out) -> bool
 * Per step row r, a hash of the op populations of its events
 * (traceview.analysis.steps.stepstats.row_hashes): over the events i with rows[i] = r >= 0 and
 * keep[r], p = pop[attr[i]]; distinct = 0: out[r] += words[p] * counts[i] (a multiset);
 * distinct = 1: out[r] += words[p] once per distinct p of the row (a set), which needs each
 * kept row's events consecutive (events of other rows, or of none, may not come between).
 * Sums wrap (mod 2**64). rows int32 or int64 (by byte length against attr); attr uint32;
 * pop int64 per attr; keep uint8 per row; words uint64 per population; counts int64 per
 * event (read only when distinct = 0); out uint64 per row, zeroed by the caller. Returns
 * False, out unspecified, on an index outside its table or a set row's events split. */
static PyObject *row_hashes(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    int distinct;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*pw*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &distinct, &b[6]))
        return NULL;
    Py_ssize_t n = b[1].len / 4, na = b[2].len / 8, m = b[3].len, npop = b[4].len / 8;
    int wide = b[0].len == n * 8;
    int ok = (wide || b[0].len == n * 4) && b[6].len / 8 == m && (distinct || b[5].len / 8 == n);
    const int32_t *r32 = b[0].buf;
    const int64_t *r64 = b[0].buf, *pop = b[2].buf, *cnt = b[5].buf;
    const uint32_t *attr = b[1].buf;
    const uint8_t *keep = b[3].buf;
    const uint64_t *words = b[4].buf;
    uint64_t *out = b[6].buf;
    int64_t *last = NULL;
    uint8_t *entered = NULL;
    if (ok && distinct) {
        last = PyMem_RawMalloc((size_t)(npop ? npop : 1) * sizeof(int64_t));
        entered = PyMem_RawCalloc((size_t)(m ? m : 1), 1);
        if (!last || !entered) {
            PyMem_RawFree(last); PyMem_RawFree(entered);
            for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
            return PyErr_NoMemory();
        }
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        if (distinct) for (Py_ssize_t p = 0; p < npop; p++) last[p] = -1;
        int64_t prev = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t r = wide ? r64[i] : (int64_t)r32[i];
            if (r < 0) continue;
            if (r >= m) { ok = 0; break; }
            if (!keep[r]) continue;
            if (attr[i] >= (uint64_t)na) { ok = 0; break; }
            int64_t p = pop[attr[i]];
            if (p < 0 || p >= npop) { ok = 0; break; }
            if (!distinct) { out[r] += words[p] * (uint64_t)cnt[i]; continue; }
            if (r != prev) {
                if (entered[r]) { ok = 0; break; }  /* the row's events are split */
                entered[r] = 1;
                prev = r;
            }
            if (last[p] != r) { last[p] = r; out[r] += words[p]; }
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(last); PyMem_RawFree(entered);
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* rank_match(ks, kd, out) -> bool
 * Per element i of ks (int64 start keys, in order), out[i] (int64) = the index j into kd
 * (int64 done keys, in order) of the done with key ks[i] and the same rank among its key's
 * dones as ks[i] has among its key's starts (the k-th start takes the k-th done); -1 where
 * ks[i] < 0 or its key has fewer dones. Keys below 0 in kd match nothing. Returns False,
 * out unspecified, when out is not sized as ks. */
static PyObject *rank_match(PyObject *self, PyObject *args) {
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "y*y*w*", &b[0], &b[1], &b[2]))
        return NULL;
    Py_ssize_t ns = b[0].len / 8, nd = b[1].len / 8;
    int ok = b[2].len / 8 == ns;
    const int64_t *ks = b[0].buf, *kd = b[1].buf;
    int64_t *out = b[2].buf;
    int64_t nk = 0;
    for (Py_ssize_t i = 0; ok && i < ns; i++) if (ks[i] + 1 > nk) nk = ks[i] + 1;
    for (Py_ssize_t j = 0; ok && j < nd; j++) if (kd[j] + 1 > nk) nk = kd[j] + 1;
    /* head[k]: where key k's dones begin in `order` (counting sort, stable); seen[k]: starts met */
    int64_t *head = NULL, *seen = NULL, *order = NULL;
    if (ok) {
        head = PyMem_RawCalloc((size_t)nk + 1, sizeof(int64_t));
        seen = PyMem_RawCalloc((size_t)nk + 1, sizeof(int64_t));
        order = PyMem_RawMalloc((size_t)(nd ? nd : 1) * sizeof(int64_t));
        if (!head || !seen || !order) {
            PyMem_RawFree(head); PyMem_RawFree(seen); PyMem_RawFree(order);
            for (int k = 0; k < 3; k++) PyBuffer_Release(&b[k]);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < nd; j++) if (kd[j] >= 0) head[kd[j] + 1]++;
        for (int64_t k = 0; k < nk; k++) head[k + 1] += head[k];
        /* seen doubles as the fill cursor, then is reset */
        for (Py_ssize_t j = 0; j < nd; j++) if (kd[j] >= 0) order[head[kd[j]] + seen[kd[j]]++] = j;
        memset(seen, 0, ((size_t)nk + 1) * sizeof(int64_t));
        for (Py_ssize_t i = 0; i < ns; i++) {
            int64_t k = ks[i];
            out[i] = -1;
            if (k < 0) continue;
            int64_t r = seen[k]++;
            if (r < head[k + 1] - head[k]) out[i] = order[head[k] + r];
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(head); PyMem_RawFree(seen); PyMem_RawFree(order);
    for (int k = 0; k < 3; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* record_sums(attr, sync, start, end, hid, wait, cnt, first, n_sync, s_flight, s_hid, s_wait) -> bool
 * Per description of the overlap's records (traceview.analysis.communication.overlap._finish):
 * records r (attr: uint32; sync: uint8; start, end, hid, wait: int64), per attr id a < size
 * (the outputs' length, all int64): cnt[a] records, first[a] the first record (len(attr)
 * when none), n_sync[a] synchronous ones, and the sums of end - start, hid and wait (int64,
 * wrapping as numpy's int64 arithmetic does). Outputs are written, not added to. Returns
 * False (outputs unspecified) on an attr id >= size or sizes that do not match. */
static PyObject *record_sums(PyObject *self, PyObject *args) {
    Py_buffer b[12];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9], &b[10], &b[11]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, size = b[6].len / 8;
    int ok = b[0].len == n * 4 && b[1].len == n && b[2].len == n * 8 && b[3].len == n * 8 && b[4].len == n * 8
             && b[5].len == n * 8;
    for (int k = 7; k < 12; k++) if (b[k].len != size * 8) ok = 0;
    const uint32_t *attr = b[0].buf;
    const uint8_t *sync = b[1].buf;
    const int64_t *st = b[2].buf, *en = b[3].buf, *hid = b[4].buf, *wait = b[5].buf;
    int64_t *cnt = b[6].buf, *first = b[7].buf, *nsync = b[8].buf;
    uint64_t *sf = b[9].buf, *sh = b[10].buf, *sw = b[11].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t a = 0; a < size; a++) { cnt[a] = nsync[a] = 0; first[a] = n; sf[a] = sh[a] = sw[a] = 0; }
        for (Py_ssize_t r = 0; r < n; r++) {
            uint32_t a = attr[r];
            if ((Py_ssize_t)a >= size) { ok = 0; break; }
            if (!cnt[a]++) first[a] = r;
            nsync[a] += sync[r] != 0;
            sf[a] += (uint64_t)en[r] - (uint64_t)st[r];
            sh[a] += (uint64_t)hid[r];
            sw[a] += (uint64_t)wait[r];
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 12; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* union_where(starts, ends, durs, codes, lut, out_s, out_e) -> int
 * traceview.analysis.communication.overlap._union of the elements i with lut[codes[i]] != 0
 * (codes: int8, lut: uint8 indexed by code, codes outside it not kept) whose starts (int64)
 * are non-decreasing: ends[i] = ends (int64) when durs is empty, else starts + durs (int64,
 * wrapping as numpy adds); a new interval opens where a start exceeds the running maximum
 * of the ends before it, and each interval ends at that running maximum after its last
 * element. Writes the intervals to out_s, out_e (int64, sized to the elements at least);
 * returns how many, or -1 (outputs unspecified) when the kept starts are not in order or
 * sizes do not match (the caller sorts). */
static PyObject *union_where(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, nl = b[4].len, cap = b[5].len / 8;
    int with_dur = b[2].len > 0;
    int ok = (with_dur ? b[2].len == n * 8 && b[1].len == 0 : b[1].len == n * 8) && b[3].len == n
             && b[6].len == cap * 8;
    const int64_t *st = b[0].buf, *en = b[1].buf, *du = b[2].buf;
    const int8_t *codes = b[3].buf;
    const uint8_t *lut = b[4].buf;
    int64_t *os = b[5].buf, *oe = b[6].buf;
    Py_ssize_t m = 0;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        int64_t run = 0, last = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int c = codes[i];
            if (c < 0 || c >= nl || !lut[c]) continue;
            int64_t s_ = st[i], e = with_dur ? (int64_t)((uint64_t)s_ + (uint64_t)du[i]) : en[i];
            if (m == 0) { if (cap < 1) { ok = 0; break; } os[m++] = s_; run = e; last = s_; continue; }
            if (s_ < last) { ok = 0; break; }
            last = s_;
            if (s_ > run) {
                if (m >= cap) { ok = 0; break; }
                oe[m - 1] = run;
                os[m++] = s_;
            }
            if (e > run) run = e;
        }
        if (ok && m) oe[m - 1] = run;
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromSsize_t(ok ? m : -1);
}

/* How many of the n ascending values v are <= t: a galloping search from *hint (the
 * previous answer), so that queries in (nearly) ascending order cost O(1) each. */
static Py_ssize_t count_le(const int64_t *v, Py_ssize_t n, int64_t t, Py_ssize_t *hint) {
    Py_ssize_t lo, hi, h = *hint, step = 1;
    if (h > 0 && v[h - 1] > t) {  /* the answer lies below h */
        hi = h - 1;
        lo = hi - 1;
        while (lo >= 0 && v[lo] > t) { hi = lo; lo -= step; step <<= 1; }
        lo = lo < 0 ? 0 : lo + 1;
    } else {  /* at or above h */
        lo = h;
        hi = h;
        while (hi < n && v[hi] <= t) { lo = hi + 1; hi += step; step <<= 1; }
        if (hi > n) hi = n;
    }
    while (lo < hi) { Py_ssize_t mid = lo + (hi - lo) / 2; if (v[mid] <= t) lo = mid + 1; else hi = mid; }
    *hint = lo;
    return lo;
}

/* Time in (-inf, t) covered by n disjoint sorted intervals [us, ue) with prefix lengths
 * cum (n + 1), as traceview.analysis.communication.overlap._covered computes it. Sums wrap like numpy's. */
static int64_t covered_upto(const int64_t *us, const int64_t *ue, const uint64_t *cum, Py_ssize_t n, int64_t t,
                            Py_ssize_t *hint) {
    Py_ssize_t i = count_le(us, n, t, hint);  /* the intervals starting at or before t */
    if (i == 0) return 0;
    Py_ssize_t k = i - 1;
    int64_t inside = (int64_t)((uint64_t)(ue[k] < t ? ue[k] : t) - (uint64_t)us[k]);
    return (int64_t)(cum[k] + (uint64_t)(inside > 0 ? inside : 0));
}

/* covered(us, ue, a, b, out) -> bool
 * Per window [a_i, b_i) (int64), out_i (int64) = the time inside it covered by the intervals
 * [us_j, ue_j) (int64, us strictly ascending: disjoint, sorted): upto(b) - upto(a), upto(t)
 * the covered time before t (traceview.analysis.communication.overlap._covered). Returns False, out
 * unspecified, when us is not strictly ascending or the sizes disagree. */
static PyObject *covered(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, m = b[2].len / 8;
    int ok = b[1].len / 8 == n && b[3].len / 8 == m && b[4].len / 8 == m;
    const int64_t *us = b[0].buf, *ue = b[1].buf, *wa = b[2].buf, *wb = b[3].buf;
    int64_t *out = b[4].buf;
    uint64_t *cum = ok ? PyMem_RawMalloc(((size_t)n + 1) * sizeof(uint64_t)) : NULL;
    if (ok && !cum) {
        for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
        return PyErr_NoMemory();
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        cum[0] = 0;
        for (Py_ssize_t j = 0; j < n && ok; j++) {
            if (j && us[j] <= us[j - 1]) ok = 0;
            cum[j + 1] = cum[j] + ((uint64_t)ue[j] - (uint64_t)us[j]);
        }
        Py_ssize_t ha = 0, hb = 0;
        for (Py_ssize_t i = 0; i < m && ok; i++)
            out[i] = n ? (int64_t)((uint64_t)covered_upto(us, ue, cum, n, wb[i], &hb)
                                   - (uint64_t)covered_upto(us, ue, cum, n, wa[i], &ha)) : 0;
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(cum);
    for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* partition(cs, ce, ss, se, as, ae, hs, he, wa, wb, exposed, compute, hidden, host) -> bool
 * traceview.analysis.communication.overlap._partition in one merge: four sets of intervals (compute c,
 * synchronous collectives s, async collectives in flight a, host transfers h), each given
 * as start and end arrays (int64, each non-decreasing), and windows [wa, wb) (int64). At
 * each distinct bound v, a set holds the time after v when (its starts <= v) - (its ends <=
 * v) > 0; per window, the time of exposed = s | (a & ~c), compute = c & ~s, hidden = a & c &
 * ~s and host = h & ~(c | s | a) inside it (outputs int64 per window). Sums wrap like
 * numpy's. Returns False, outputs unspecified, when a bound array is out of order or the
 * sizes disagree. */
static PyObject *partition(PyObject *self, PyObject *args) {
    Py_buffer b[14];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6],
                          &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13]))
        return NULL;
    Py_ssize_t m = b[8].len / 8, total = 0, len[8];
    const int64_t *run[8];
    int ok = b[9].len / 8 == m;
    for (int k = 0; k < 8; k++) {
        len[k] = b[k].len / 8;
        run[k] = b[k].buf;
        total += len[k];
        if (k % 2 && len[k] != len[k - 1]) ok = 0;
    }
    for (int k = 10; k < 14; k++) if (b[k].len / 8 != m) ok = 0;
    const int64_t *wa = b[8].buf, *wb = b[9].buf;
    int64_t *outs[4] = {b[10].buf, b[11].buf, b[12].buf, b[13].buf};
    int64_t *pts = NULL;
    uint8_t *flag = NULL;
    uint64_t *cum = NULL;
    if (ok) {
        pts = PyMem_RawMalloc(((size_t)total + 1) * sizeof(int64_t));
        flag = PyMem_RawMalloc((size_t)total + 1);
        cum = PyMem_RawMalloc(4 * ((size_t)total + 1) * sizeof(uint64_t));
        if (!pts || !flag || !cum) {
            PyMem_RawFree(pts); PyMem_RawFree(flag); PyMem_RawFree(cum);
            for (int k = 0; k < 14; k++) PyBuffer_Release(&b[k]);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        for (int k = 0; k < 8 && ok; k++)
            for (Py_ssize_t j = 1; j < len[k]; j++) if (run[k][j] < run[k][j - 1]) { ok = 0; break; }
        Py_ssize_t p[8] = {0}, nu = 0;
        /* when each set's bounds interleave in order (s0 <= e0 <= s1 <= e1 ...: disjoint sorted
         * intervals, as _union gives), a set holds the time after v exactly when an odd number
         * of its bounds are <= v: a merge of four sequences, empty sets left out */
        int inter = ok, live[4], nlive = 0;
        for (int x = 0; x < 4 && inter; x++) {
            const int64_t *S = run[2 * x], *E = run[2 * x + 1];
            for (Py_ssize_t k = 0; k < len[2 * x]; k++)
                if (S[k] > E[k] || (k + 1 < len[2 * x] && E[k] > S[k + 1])) { inter = 0; break; }
            if (len[2 * x]) live[nlive++] = x;
        }
        /* windows in order and disjoint (wa[i] <= wb[i] <= wa[i+1]): their bounds are answered
         * during the merge, with the running sums of the four masks, not from stored bounds */
        int stream = inter;
        for (Py_ssize_t i = 0; i < m && stream; i++)
            if (wa[i] > wb[i] || (i + 1 < m && wb[i] > wa[i + 1])) stream = 0;
        uint64_t scum[4] = {0, 0, 0, 0}, sup[4] = {0, 0, 0, 0};
        int64_t sv = 0;
        int sfl = 0;
        Py_ssize_t qi = 0;
#define PT_QUERY(i) ((i) & 1 ? wb[(i) >> 1] : wa[(i) >> 1])
/* the time of each mask in (-inf, t): none before the first bound; partial: t lies in the
 * segment after the last bound sv (else at or after the last bound, no segment after it) */
#define PT_ANSWER(i, t, partial) do {                                                          \
        for (int x = 0; x < 4; x++) {                                                           \
            uint64_t u_ = !nu ? 0 : scum[x] + ((partial) && ((sfl >> x) & 1) ? (uint64_t)(t) - (uint64_t)sv : 0); \
            if ((i) & 1) outs[x][(i) >> 1] = (int64_t)(u_ - sup[x]);                            \
            else sup[x] = u_;                                                                   \
        }                                                                                       \
    } while (0)
        if (inter) {
            Py_ssize_t q[4] = {0}, qn[4];
            for (int x = 0; x < 4; x++) qn[x] = 2 * len[2 * x];
#define PT_BOUND(x, i) ((i) & 1 ? run[2 * (x) + 1][(i) >> 1] : run[2 * (x)][(i) >> 1])
            for (;;) {
                int have = 0;
                int64_t v = 0;
                for (int j = 0; j < nlive; j++) {
                    int x = live[j];
                    if (q[x] < qn[x]) {
                        int64_t bx = PT_BOUND(x, q[x]);
                        if (!have || bx < v) { v = bx; have = 1; }
                    }
                }
                if (!have) break;
                int f = 0;
                for (int j = 0; j < nlive; j++) {
                    int x = live[j];
                    while (q[x] < qn[x] && PT_BOUND(x, q[x]) == v) q[x]++;
                    if (q[x] & 1) f |= 1 << x;
                }
#undef PT_BOUND
                int c = f & 1, s_ = f & 2, a = f & 4, h = f & 8;
                uint8_t fl = (uint8_t)(((s_ || (a && !c)) ? 1 : 0) | ((c && !s_) ? 2 : 0) | ((a && c && !s_) ? 4 : 0)
                                       | ((h && !(c || s_ || a)) ? 8 : 0));
                if (stream) {  /* the window bounds before v lie in the segment after the previous bound */
                    while (qi < 2 * m && PT_QUERY(qi) < v) { PT_ANSWER(qi, PT_QUERY(qi), 1); qi++; }
                    if (nu) for (int x = 0; x < 4; x++) if ((sfl >> x) & 1) scum[x] += (uint64_t)v - (uint64_t)sv;
                    sv = v;
                    sfl = fl;
                    nu++;
                } else {
                    pts[nu] = v;
                    flag[nu++] = fl;
                }
            }
            if (stream)  /* at or after the last bound (or with none): no segment after it */
                for (; qi < 2 * m; qi++) PT_ANSWER(qi, PT_QUERY(qi), 0);
        }
        while (ok && !inter) {  /* the distinct bounds in order, each set's membership after each */
            int have = 0;
            int64_t v = 0;
            for (int k = 0; k < 8; k++)
                if (p[k] < len[k] && (!have || run[k][p[k]] < v)) { v = run[k][p[k]]; have = 1; }
            if (!have) break;
            int f = 0;
            for (int k = 0; k < 8; k++) while (p[k] < len[k] && run[k][p[k]] == v) p[k]++;
            for (int x = 0; x < 4; x++) if (p[2 * x] - p[2 * x + 1] > 0) f |= 1 << x;
            int c = f & 1, s_ = f & 2, a = f & 4, h = f & 8;
            pts[nu] = v;
            flag[nu++] = (uint8_t)(((s_ || (a && !c)) ? 1 : 0) | ((c && !s_) ? 2 : 0) | ((a && c && !s_) ? 4 : 0)
                                   | ((h && !(c || s_ || a)) ? 8 : 0));
        }
#undef PT_QUERY
#undef PT_ANSWER
        /* cum[x][u]: time of mask x over the segments [pts[j], pts[j+1]), j < u */
        for (int x = 0; x < 4 && ok && !stream; x++) {
            uint64_t *cx = cum + (size_t)x * ((size_t)total + 1);
            cx[0] = 0;
            for (Py_ssize_t u = 0; u + 1 < nu; u++)
                cx[u + 1] = cx[u] + ((flag[u] >> x) & 1 ? (uint64_t)pts[u + 1] - (uint64_t)pts[u] : 0);
        }
        Py_ssize_t hint[2] = {0, 0};
        for (Py_ssize_t i = 0; i < m && ok && !stream; i++) {
            int64_t t2[2] = {wa[i], wb[i]};
            uint64_t up[2][4];
            for (int e = 0; e < 2; e++) {
                Py_ssize_t u = count_le(pts, nu, t2[e], &hint[e]) - 1;  /* the last bound at or before t */
                for (int x = 0; x < 4; x++) {
                    const uint64_t *cx = cum + (size_t)x * ((size_t)total + 1);
                    if (u < 0) up[e][x] = 0;
                    else if (u + 1 < nu) up[e][x] = cx[u] + ((flag[u] >> x) & 1 ? (uint64_t)t2[e] - (uint64_t)pts[u] : 0);
                    else up[e][x] = cx[nu - 1];
                }
            }
            for (int x = 0; x < 4; x++) outs[x][i] = (int64_t)(up[1][x] - up[0][x]);
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(pts); PyMem_RawFree(flag); PyMem_RawFree(cum);
    for (int k = 0; k < 14; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* pair_by_key(a, t, lut_key, lut_done, si, d) -> int
 * Events a (uint32 attr ids) with times t (int64); per attr id its pair key lut_key (int64,
 * -1: none) and whether it is a done lut_done (uint8). The k-th non-done event of a key
 * takes the k-th done of that key, both counted in time order, among the dones after the
 * key's first start (a done before it awaits a start the capture missed). When every key's starts and
 * every key's dones are already in time order (t non-decreasing along the events), that is
 * event order: the non-done events are written to si (int64, in event order) and per such
 * event the index of its done, or -1, to d (int64); returns how many. Returns -1 (outputs
 * unspecified) when some key's events are out of time order (the caller sorts), an attr id
 * lies outside the tables, or si / d are shorter than the non-done events. */
/* A done at event i of key k awaits a start the capture missed: its key has no start, or the
 * key's first start (event first[k]) comes after it in time, or at its time but later. */
#define PB_ORPHAN(k, i) (first[k] < 0 || t[i] < t[first[k]] || (t[i] == t[first[k]] && (i) < first[k]))

static PyObject *pair_by_key(PyObject *self, PyObject *args) {
    Py_buffer b[6];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, na = b[2].len / 8, cap = b[4].len / 8;
    int ok = b[1].len / 8 == n && b[3].len == na && b[5].len / 8 == cap;
    const uint32_t *a = b[0].buf;
    const int64_t *t = b[1].buf, *key = b[2].buf;
    const uint8_t *done = b[3].buf;
    int64_t *si = b[4].buf, *d = b[5].buf;
    Py_ssize_t count = -1;
    int64_t nk = 0;
    for (Py_ssize_t k = 0; ok && k < na; k++) if (key[k] + 1 > nk) nk = key[k] + 1;
    int64_t *head = NULL, *seen = NULL, *last_s = NULL, *last_d = NULL, *order = NULL, *first = NULL;
    if (ok) {
        head = PyMem_RawCalloc((size_t)nk + 1, sizeof(int64_t));
        seen = PyMem_RawCalloc((size_t)nk + 1, sizeof(int64_t));
        last_s = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        last_d = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        first = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        if (!head || !seen || !last_s || !last_d || !first) goto nomem;
        Py_ssize_t n_done = 0, n_start = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t k = 0; k <= nk; k++) last_s[k] = last_d[k] = INT64_MIN, first[k] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {  /* each key's first start (its earliest, when in order) */
            uint32_t x = a[i];
            if ((Py_ssize_t)x >= na) { ok = 0; break; }
            if (!done[x] && key[x] >= 0 && first[key[x]] < 0) first[key[x]] = i;
        }
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            uint32_t x = a[i];
            int64_t k = key[x];
            if (!done[x]) {
                n_start++;
                if (k >= 0) { if (t[i] < last_s[k]) { ok = 0; break; } last_s[k] = t[i]; }
            } else if (k >= 0) {
                if (t[i] < last_d[k]) { ok = 0; break; }
                last_d[k] = t[i];
                if (PB_ORPHAN(k, i)) continue;  /* before its key's first start: that start was not captured */
                head[k + 1]++;
                n_done++;
            }
        }
        Py_END_ALLOW_THREADS
        if (ok && n_start > cap) ok = 0;
        if (ok) {
            order = PyMem_RawMalloc((size_t)(n_done ? n_done : 1) * sizeof(int64_t));
            if (!order) goto nomem;
            Py_BEGIN_ALLOW_THREADS
            for (int64_t k = 0; k < nk; k++) head[k + 1] += head[k];
            for (Py_ssize_t i = 0; i < n; i++) {  /* each key's dones in event (= time) order */
                int64_t k = key[a[i]];
                if (done[a[i]] && k >= 0 && !PB_ORPHAN(k, i)) order[head[k] + seen[k]++] = i;
            }
            memset(seen, 0, ((size_t)nk + 1) * sizeof(int64_t));
            Py_ssize_t j = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (done[a[i]]) continue;
                int64_t k = key[a[i]];
                si[j] = i;
                d[j] = -1;
                if (k >= 0) {
                    int64_t r = seen[k]++;
                    if (r < head[k + 1] - head[k]) d[j] = order[head[k] + r];
                }
                j++;
            }
            count = j;
            Py_END_ALLOW_THREADS
        }
    }
    PyMem_RawFree(head); PyMem_RawFree(seen); PyMem_RawFree(last_s); PyMem_RawFree(last_d); PyMem_RawFree(order);
    PyMem_RawFree(first);
    for (int k = 0; k < 6; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromSsize_t(count);
nomem:
    PyMem_RawFree(head); PyMem_RawFree(seen); PyMem_RawFree(last_s); PyMem_RawFree(last_d); PyMem_RawFree(order);
    PyMem_RawFree(first);
    for (int k = 0; k < 6; k++) PyBuffer_Release(&b[k]);
    return PyErr_NoMemory();
}

/* pair_spans(si, d, t, dur, selfv, span, valid, dself) -> bool
 * The times of matched async pairs (traceview.analysis.communication.collectives._pair_spans):
 * per start j (si: int64 event index; d: int64 index of its done, -1 when unmatched), over
 * event arrays t, dur and selfv (int64, no nulls): span[j] = t[d] + dur[d] - t[si] (wrapping
 * as numpy's int64 arithmetic), valid[j] = 1 and dself[j] = selfv[d] when matched; 0, 0, 0
 * when not (span, dself int64; valid uint8). Returns False (outputs unspecified) on an index
 * outside the events or sizes that do not match. */
static PyObject *pair_spans(PyObject *self, PyObject *args) {
    Py_buffer b[8];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7]))
        return NULL;
    Py_ssize_t m = b[0].len / 8, n = b[2].len / 8;
    int ok = b[1].len == m * 8 && b[3].len == n * 8 && b[4].len == n * 8 && b[5].len == m * 8 && b[6].len == m
             && b[7].len == m * 8;
    const int64_t *si = b[0].buf, *d = b[1].buf, *t = b[2].buf, *du = b[3].buf, *sv = b[4].buf;
    int64_t *span = b[5].buf, *dself = b[7].buf;
    uint8_t *valid = b[6].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t s = si[j], e = d[j];
            if (s < 0 || s >= n || e >= n) { ok = 0; break; }
            if (e < 0) { span[j] = 0; valid[j] = 0; dself[j] = 0; continue; }
            span[j] = (int64_t)((uint64_t)t[e] + (uint64_t)du[e] - (uint64_t)t[s]);
            valid[j] = 1;
            dself[j] = sv[e];
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 8; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* The sums below add in event order, one double at a time, exactly as numpy's bincount with
 * weights does (the products are not fused into the additions). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* attr_sums(rows, keep, attr, vals, k, out, seen) -> bool
 * Events i (rows: int32 step row, -1 outside every step; attr: uint32 description) with
 * rows[i] >= 0 and, when keep (uint8 per step row) is not empty, keep[rows[i]] != 0: per
 * description a, out[j * na + a] += (double)vals[j * n + i] for j < k (vals: int64, k columns
 * of n events; k = 0: vals empty, each event adds 1.0 to out's one column), seen[a] = 1. out
 * (float64, max(k, 1) x na) and seen (uint8, na) are added to, not cleared. Returns False
 * (outputs partly written) on a description >= na, a row outside keep, or sizes that do not
 * match. */
static PyObject *attr_sums(PyObject *self, PyObject *args) {
    Py_buffer b[6];
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "y*y*y*y*nw*w*", &b[0], &b[1], &b[2], &b[3], &k, &b[4], &b[5]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, m = b[1].len, na = b[5].len;
    int have_vals = k > 0;
    int ok = k >= 0 && b[0].len == n * 4 && b[2].len == n * 4 && b[4].len == (k ? k : 1) * na * 8
             && b[3].len == k * n * 8;
    const int32_t *rows = b[0].buf;
    const uint8_t *keep = b[1].buf;
    const uint32_t *attr = b[2].buf;
    const int64_t *vals = b[3].buf;
    double *out = b[4].buf;
    uint8_t *seen = b[5].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t r = rows[i];
            if (r < 0) continue;
            if (m) {
                if (r >= m) { ok = 0; break; }
                if (!keep[r]) continue;
            }
            uint32_t a = attr[i];
            if ((Py_ssize_t)a >= na) { ok = 0; break; }
            seen[a] = 1;
            if (!have_vals) { out[a] += 1.0; continue; }
            for (Py_ssize_t j = 0; j < k; j++) out[j * na + a] += (double)vals[j * n + i];
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 6; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

/* cell_sums(pop, rows, vals, n_steps, sums, got) -> bool
 * Per (population, step) cell c = pop[i] * n_steps + rows[i]: sums[c] += vals[i] (int64,
 * wrapping as numpy's int64 sums do) and got[c] = 1, over the events with pop[i] >= 0 and
 * rows[i] >= 0 (pop, rows: int32; vals: int64; sums: int64 and got: uint8, one per cell, zeroed
 * by the caller). What two bincounts over the grid give, without a per-event key array or the
 * grid's float copies. False (outputs partly written) on a cell past the grid or sizes that
 * do not match. */
static PyObject *cell_sums(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    long long n_steps_ll;
    if (!PyArg_ParseTuple(args, "y*y*y*Lw*w*", &b[0], &b[1], &b[2], &n_steps_ll, &b[3], &b[4])) return NULL;
    Py_ssize_t n = b[0].len / 4, cells = b[4].len;
    int ok = n_steps_ll >= 0 && b[1].len == n * 4 && b[2].len == n * 8 && b[3].len == cells * 8;
    const int32_t *pop = b[0].buf, *rows = b[1].buf;
    const int64_t *vals = b[2].buf;
    int64_t *sums = b[3].buf;
    uint8_t *got = b[4].buf;
    int64_t n_steps = (int64_t)n_steps_ll;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t p = pop[i], r = rows[i];
            if (p < 0 || r < 0) continue;
            int64_t c = (int64_t)p * n_steps + r;
            if (r >= n_steps || c >= cells) { ok = 0; break; }
            sums[c] = (int64_t)((uint64_t)sums[c] + (uint64_t)vals[i]);
            got[c] = 1;
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 5; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

/* row_sums(rows, attr, counts, w, scale, out) -> bool
 * Per step row r: out[j * m + r] += w[j * na + attr[i]] (times (double)counts[i] when
 * scale[j] and counts is not empty) over the events i with rows[i] == r, in event order
 * (rows: int32, -1 outside every step; attr: uint32; counts: int64 per event or empty; w:
 * float64, k x na; scale: uint8, k; out: float64, k x m, added to). Returns False (out partly
 * written) on a row >= m, a description >= na, or sizes that do not match. */
static PyObject *row_sums(PyObject *self, PyObject *args) {
    Py_buffer b[6];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, k = b[4].len;
    int have_counts = b[2].len > 0;
    Py_ssize_t na = k ? b[3].len / 8 / k : 0, m = k ? b[5].len / 8 / k : 0;
    int ok = k >= 1 && b[1].len == n * 4 && (!have_counts || b[2].len == n * 8) && b[3].len == k * na * 8
             && b[5].len == k * m * 8;
    const int32_t *rows = b[0].buf;
    const uint32_t *attr = b[1].buf;
    const int64_t *counts = b[2].buf;
    const double *w = b[3].buf;
    const uint8_t *scale = b[4].buf;
    double *out = b[5].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t r = rows[i];
            if (r < 0) continue;
            uint32_t a = attr[i];
            if (r >= m || (Py_ssize_t)a >= na) { ok = 0; break; }
            double c = have_counts ? (double)counts[i] : 1.0;
            for (Py_ssize_t j = 0; j < k; j++) {
                double v = w[j * na + a];
                if (have_counts && scale[j]) v = v * c;
                out[j * m + r] += v;
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 6; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* A transfer's interval and its position among the records (the sort's tie-break: stable). */
typedef struct { int64_t lo, hi, pos; } tv_span;

static int tv_span_cmp(const void *x, const void *y) {
    const tv_span *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->pos < b->pos ? -1 : (a->pos > b->pos);
}

/* direction_busy(ra, ix, start, t, ok, dir_of, dev_of, by_attr, busy, moved, first) -> bool
 * Records r (ra: uint32 description; ix: int64 position in start, int64 per event; t: int64
 * time; ok: uint8, time known) with d = dir_of[ra[r]] >= 0 (int64 per description), ok[r] and
 * by_attr[ra[r]] (float64 per description) not NaN count: per direction d (busy, moved, first
 * sized to the directions), moved[d] += by_attr in record order (as numpy's bincount with
 * weights adds), first[d] = the first such record (-1: none), busy[d] += per device g =
 * dev_of[ra[r]] (int64 per description, >= 0) the length swept by the records' [start[ix[r]],
 * start[ix[r]] + t[r]) in stable start order: a record starting after the running end adds its
 * length and moves the end to its own; one starting at or before it adds what it reaches past
 * it (the union's length when no record ends before it starts). busy, moved and first are
 * written, not added to. Returns False (outputs unspecified) on an index or code outside its
 * array, or sizes that do not match. */
static PyObject *direction_busy(PyObject *self, PyObject *args) {
    Py_buffer b[11];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9], &b[10]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, ne = b[2].len / 8, na = b[5].len / 8, nd = b[8].len / 8;
    int ok = b[1].len / 8 == n && b[3].len / 8 == n && b[4].len == n && b[6].len / 8 == na && b[7].len / 8 == na
             && b[9].len / 8 == nd && b[10].len / 8 == nd;
    const uint32_t *ra = b[0].buf;
    const int64_t *ix = b[1].buf, *start = b[2].buf, *t = b[3].buf, *dir_of = b[5].buf, *dev_of = b[6].buf;
    const uint8_t *okr = b[4].buf;
    const double *by = b[7].buf;
    int64_t *busy = b[8].buf, *first = b[10].buf;
    double *moved = b[9].buf;
    int64_t ndev = 0, ng = 0, *head = NULL, *fill = NULL;
    tv_span *sp = NULL;
    Py_ssize_t m = 0;
    for (Py_ssize_t k = 0; ok && k < na; k++) {
        if (dir_of[k] >= nd || dev_of[k] < 0) ok = 0;
        else if (dev_of[k] + 1 > ndev) ndev = dev_of[k] + 1;
    }
    if (ok) {
        ng = nd * (ndev ? ndev : 1);
        head = PyMem_RawCalloc((size_t)ng + 1, sizeof(int64_t));
        fill = PyMem_RawCalloc((size_t)ng + 1, sizeof(int64_t));
        if (!head || !fill) goto nomem;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t d = 0; d < nd; d++) { busy[d] = 0; moved[d] = 0.0; first[d] = -1; }
        for (Py_ssize_t r = 0; r < n; r++) {  /* the counted records: per direction, per group */
            uint32_t a = ra[r];
            if ((Py_ssize_t)a >= na || ix[r] < 0 || ix[r] >= ne) { ok = 0; break; }
            int64_t d = dir_of[a];
            if (d < 0 || !okr[r] || by[a] != by[a]) continue;
            moved[d] += by[a];
            if (first[d] < 0) first[d] = r;
            head[d * ndev + dev_of[a] + 1]++;
            m++;
        }
        Py_END_ALLOW_THREADS
    }
    if (ok) {
        sp = PyMem_RawMalloc((size_t)(m ? m : 1) * sizeof(tv_span));
        if (!sp) goto nomem;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t g = 0; g < ng; g++) head[g + 1] += head[g];
        for (Py_ssize_t r = 0; r < n; r++) {  /* each group's records, in record order */
            uint32_t a = ra[r];
            int64_t d = dir_of[a];
            if (d < 0 || !okr[r] || by[a] != by[a]) continue;
            int64_t g = d * ndev + dev_of[a];
            tv_span *x = &sp[head[g] + fill[g]++];
            x->lo = start[ix[r]];
            x->hi = (int64_t)((uint64_t)x->lo + (uint64_t)t[r]);  /* wraps as numpy adds */
            x->pos = r;
        }
        for (int64_t g = 0; g < ng; g++) {
            tv_span *x = sp + head[g];
            Py_ssize_t k = head[g + 1] - head[g];
            if (!k) continue;
            int sorted = 1;
            for (Py_ssize_t i = 1; i < k && sorted; i++) sorted = x[i].lo >= x[i - 1].lo;
            if (!sorted) qsort(x, (size_t)k, sizeof(tv_span), tv_span_cmp);
            int64_t sum = 0, end = x[0].lo;
            for (Py_ssize_t i = 0; i < k; i++) {
                if (i == 0 || x[i].lo > end) { sum += x[i].hi - x[i].lo; end = x[i].hi; }
                else if (x[i].hi > end) { sum += x[i].hi - end; end = x[i].hi; }
            }
            busy[g / ndev] += sum;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(head); PyMem_RawFree(fill); PyMem_RawFree(sp);
    for (int k = 0; k < 11; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
nomem:
    PyMem_RawFree(head); PyMem_RawFree(fill); PyMem_RawFree(sp);
    for (int k = 0; k < 11; k++) PyBuffer_Release(&b[k]);
    return PyErr_NoMemory();
}


/* chunks_inside(keys, starts, durs, plan, runs, offs, heads) -> bool
 * One device's module runs in start order (keys: uint32 run key; starts, durs: int64) against
 * the chunk heads of chunk_heads: a run whose key's program has plan[key] = p >= 0 is the
 * k-th run of p (counted in row order) and its chunk's first op starts at heads[offs[p] + k];
 * it starts inside the run when 0 <= head - start < dur, or head == start (the offset and
 * the comparison unsigned, as numpy computes them). Returns True when every such run does;
 * False when one does not, a key is outside plan, a program has more runs than runs[p] or
 * sizes do not match (the caller then takes the general path). plan int32; runs, offs int64. */
static PyObject *chunks_inside(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, nk = b[3].len / 4, np_ = b[4].len / 8, nh = b[6].len / 8;
    int res = b[0].len == n * 4 && b[1].len == n * 8 && b[2].len == n * 8 && b[5].len == np_ * 8;
    const uint32_t *keys = b[0].buf;
    const int64_t *st = b[1].buf, *du = b[2].buf, *runs = b[4].buf, *offs = b[5].buf, *heads = b[6].buf;
    const int32_t *plan = b[3].buf;
    int64_t *seen = res ? PyMem_RawCalloc(np_ ? (size_t)np_ : 1, sizeof(int64_t)) : NULL;
    if (res && !seen) { for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]); return PyErr_NoMemory(); }
    if (res) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t p = 0; p < np_; p++)
            if (offs[p] < 0 || runs[p] < 0 || offs[p] + runs[p] > nh) { res = 0; break; }
        for (Py_ssize_t i = 0; i < n && res; i++) {
            if ((Py_ssize_t)keys[i] >= nk) { res = 0; break; }
            int32_t p = plan[keys[i]];
            if (p < 0) continue;
            if (p >= np_ || seen[p] >= runs[p]) { res = 0; break; }
            uint64_t off = (uint64_t)heads[offs[p] + seen[p]++] - (uint64_t)st[i];
            if (!(off == 0 || (du[i] > 0 && off < (uint64_t)du[i]))) res = 0;
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(seen);
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(res);
}

/* perf-v6e */

/* attr_counts(a, out) -> int
 * np.bincount of the attr ids a (uint32) into out (int64, written, not added to): out[k] =
 * how many of a are k. Returns the largest id + 1 (0 when a is empty: the length np.bincount
 * gives), or -1 (out unspecified) when an id lies outside out. No copy of a is made. */
static PyObject *attr_counts(PyObject *self, PyObject *args) {
    Py_buffer b[2];
    if (!PyArg_ParseTuple(args, "y*w*", &b[0], &b[1])) return NULL;
    Py_ssize_t n = b[0].len / 4, size = b[1].len / 8, top = 0;
    const uint32_t *a = b[0].buf;
    int64_t *out = b[1].buf;
    int ok = b[0].len == n * 4 && b[1].len == size * 8;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        memset(out, 0, (size_t)size * sizeof(int64_t));
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t x = a[i];
            if ((Py_ssize_t)x >= size) { ok = 0; break; }
            out[x]++;
            if ((Py_ssize_t)x >= top) top = (Py_ssize_t)x + 1;
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 2; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromSsize_t(ok ? top : -1);
}

/* direction_busy_in_order(ra, ix, start, t, ok, dir_of, dev_of, by_attr, busy, moved, first) -> bool
 * direction_busy's result (same arguments and outputs) when each (direction, device) group's
 * counted records come in non-decreasing start order, as the records of async copies paired
 * in event order do: then its stable sort leaves them in record order, and the sweep runs
 * with a running end per group in one pass, no buffer of the records. Returns False
 * (outputs unspecified) when some group is out of order or on direction_busy's refusals:
 * the caller then calls direction_busy. */
static PyObject *direction_busy_in_order(PyObject *self, PyObject *args) {
    Py_buffer b[11];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9], &b[10]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, ne = b[2].len / 8, na = b[5].len / 8, nd = b[8].len / 8;
    int ok = b[1].len / 8 == n && b[3].len / 8 == n && b[4].len == n && b[6].len / 8 == na && b[7].len / 8 == na
             && b[9].len / 8 == nd && b[10].len / 8 == nd;
    const uint32_t *ra = b[0].buf;
    const int64_t *ix = b[1].buf, *start = b[2].buf, *t = b[3].buf, *dir_of = b[5].buf, *dev_of = b[6].buf;
    const uint8_t *okr = b[4].buf;
    const double *by = b[7].buf;
    int64_t *busy = b[8].buf, *first = b[10].buf;
    double *moved = b[9].buf;
    int64_t ndev = 0, ng = 0;
    int64_t *end = NULL, *last = NULL;
    uint64_t *sum = NULL;
    uint8_t *seen = NULL;
    for (Py_ssize_t k = 0; ok && k < na; k++) {
        if (dir_of[k] >= nd || dev_of[k] < 0) ok = 0;
        else if (dev_of[k] + 1 > ndev) ndev = dev_of[k] + 1;
    }
    if (ok) {
        ng = nd * (ndev ? ndev : 1);
        end = PyMem_RawMalloc(((size_t)ng + 1) * sizeof(int64_t));
        last = PyMem_RawMalloc(((size_t)ng + 1) * sizeof(int64_t));
        sum = PyMem_RawCalloc((size_t)ng + 1, sizeof(uint64_t));
        seen = PyMem_RawCalloc((size_t)ng + 1, 1);
        if (!end || !last || !sum || !seen) {
            PyMem_RawFree(end); PyMem_RawFree(last); PyMem_RawFree(sum); PyMem_RawFree(seen);
            for (int k = 0; k < 11; k++) PyBuffer_Release(&b[k]);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t d = 0; d < nd; d++) { busy[d] = 0; moved[d] = 0.0; first[d] = -1; }
        for (Py_ssize_t r = 0; r < n; r++) {
            uint32_t a = ra[r];
            if ((Py_ssize_t)a >= na || ix[r] < 0 || ix[r] >= ne) { ok = 0; break; }
            int64_t d = dir_of[a];
            if (d < 0 || !okr[r] || by[a] != by[a]) continue;
            moved[d] += by[a];
            if (first[d] < 0) first[d] = r;
            int64_t g = d * ndev + dev_of[a];
            int64_t lo = start[ix[r]];
            int64_t hi = (int64_t)((uint64_t)lo + (uint64_t)t[r]);  /* wraps as numpy adds */
            if (!seen[g]) {  /* the group's first record opens its sweep */
                seen[g] = 1;
                sum[g] += (uint64_t)hi - (uint64_t)lo;
                end[g] = hi;
            } else {
                if (lo < last[g]) { ok = 0; break; }  /* out of start order: the sort decides */
                if (lo > end[g]) { sum[g] += (uint64_t)hi - (uint64_t)lo; end[g] = hi; }
                else if (hi > end[g]) { sum[g] += (uint64_t)hi - (uint64_t)end[g]; end[g] = hi; }
            }
            last[g] = lo;
        }
        for (int64_t g = 0; ok && ndev && g < ng; g++) busy[g / ndev] = (int64_t)((uint64_t)busy[g / ndev] + sum[g]);
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(end); PyMem_RawFree(last); PyMem_RawFree(sum); PyMem_RawFree(seen);
    for (int k = 0; k < 11; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* comm_records_stream(attr, start, dur, dev, start_key, done_key, sync_of, r_attr, r_dev, r_start, r_end, r_wait, r_sync) -> int
 * The records of traceview.analysis.communication.overlap._comm_ops over events in (device, start) order:
 * attr (uint32), start and dur (int64), dev (int32), one per event; per attr id start_key and
 * done_key (int64, -1: not a start / done) and sync_of (uint8). The k-th start of a key
 * (in event order) pairs with the k-th done of that key that comes after the key's first
 * start (a done before it awaits a start the capture missed), kept when the done starts no
 * earlier; synchronous events are records of their own. Records, in (dev, start) order with
 * the synchronous ones first at one (dev, start), each kind in event order, as
 * overlap._records writes them: r_attr (uint32) and r_dev (int32) of the sync event or the
 * start, r_start (its start), r_end (its end; a pair's: the later of the start's end and the
 * done's end), r_wait (a pair's done duration, 0 for a sync event), r_sync (uint8); ends
 * wrap as numpy's int64 additions do. Returns the number of records, or -1 (outputs
 * unspecified) when the events are not in (dev, start) order, an attr id lies outside the
 * tables, or the outputs (all the same length) are shorter than the synchronous events plus
 * the starts.
 * One pass over the events, with no per-event buffer: each synchronous event and each start is
 * written where it comes, a start waiting in its key's queue (oldest first, linked through
 * r_wait) until its key's next done fills its end and wait; a done that comes before the start
 * of its rank waits in a queue of dones instead. Then, only when needed, the starts never
 * matched and the pairs whose done starts earlier are dropped, and within each (dev, start)
 * the synchronous records are put before the pairs. */
static PyObject *comm_records_stream(PyObject *self, PyObject *args) {
    Py_buffer b[13];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6],
                          &b[7], &b[8], &b[9], &b[10], &b[11], &b[12]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, na = b[4].len / 8, cap = b[7].len / 4;
    int ok = b[1].len / 8 == n && b[2].len / 8 == n && b[3].len / 4 == n && b[5].len / 8 == na && b[6].len == na
             && b[8].len / 4 == cap && b[9].len / 8 == cap && b[10].len / 8 == cap && b[11].len / 8 == cap
             && b[12].len == cap;
    const uint32_t *attr = b[0].buf;
    const int64_t *st = b[1].buf, *du = b[2].buf, *skey = b[4].buf, *dkey = b[5].buf;
    const int32_t *dev = b[3].buf;
    const uint8_t *syn = b[6].buf;
    uint32_t *r_attr = b[7].buf;
    int32_t *r_dev = b[8].buf;
    int64_t *r_start = b[9].buf, *r_end = b[10].buf, *r_wait = b[11].buf;
    uint8_t *r_sync = b[12].buf;
    Py_ssize_t count = -1;
    int64_t nk = 0;
    for (Py_ssize_t k = 0; ok && k < na; k++) {
        if (skey[k] + 1 > nk) nk = skey[k] + 1;
        if (dkey[k] + 1 > nk) nk = dkey[k] + 1;
    }
    /* per key: its queue of waiting starts (records) and of waiting dones (slots of dq_ev) */
    int64_t *sq_h = NULL, *sq_t = NULL, *dq_h = NULL, *dq_t = NULL, *dq_ev = NULL, *dq_next = NULL;
    uint8_t *started = NULL;
    int64_t *tmp = NULL;
    Py_ssize_t dq_n = 0, dq_cap = 0;
    if (ok) {
        sq_h = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        sq_t = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        dq_h = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        dq_t = PyMem_RawMalloc(((size_t)nk + 1) * sizeof(int64_t));
        started = PyMem_RawCalloc((size_t)nk + 1, 1);
        if (!sq_h || !sq_t || !dq_h || !dq_t || !started) goto nomem;
    }
    if (ok) {
        Py_ssize_t o = 0, n_sync = 0, n_start = 0, dropped = 0, waiting = 0;
        int ties = 0, nomem = 0;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t k = 0; k <= nk; k++) sq_h[k] = sq_t[k] = dq_h[k] = dq_t[k] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t a = attr[i];
            if ((Py_ssize_t)a >= na || (i && (dev[i] < dev[i - 1] || (dev[i] == dev[i - 1] && st[i] < st[i - 1])))) {
                ok = 0;
                break;
            }
            if (syn[a]) {
                n_sync++;
                if (o >= cap) continue;  /* refused below */
                /* a pair record already at this (dev, start): the merge puts this one before it */
                for (Py_ssize_t j = o - 1; j >= 0 && r_dev[j] == dev[i] && r_start[j] == st[i]; j--)
                    if (r_sync[j] != 1) { ties = 1; break; }
                r_attr[o] = a;
                r_dev[o] = dev[i];
                r_start[o] = st[i];
                r_end[o] = (int64_t)((uint64_t)st[i] + (uint64_t)du[i]);
                r_wait[o] = 0;
                r_sync[o++] = 1;
                continue;
            }
            int64_t k = skey[a];
            if (k >= 0) {  /* a start */
                n_start++;
                started[k] = 1;
                if (o >= cap) continue;
                int64_t end = (int64_t)((uint64_t)st[i] + (uint64_t)du[i]);
                if (dq_h[k] >= 0) {  /* the done of its rank came first: kept when it starts no earlier */
                    int64_t q = dq_h[k], d = dq_ev[q];
                    dq_h[k] = dq_next[q];
                    if (dq_h[k] < 0) dq_t[k] = -1;
                    if (st[d] < st[i]) continue;
                    int64_t end_d = (int64_t)((uint64_t)st[d] + (uint64_t)du[d]);
                    r_attr[o] = a;
                    r_dev[o] = dev[i];
                    r_start[o] = st[i];
                    r_end[o] = end_d > end ? end_d : end;
                    r_wait[o] = du[d];
                    r_sync[o++] = 0;
                    continue;
                }
                r_attr[o] = a;  /* waits for its done: r_end holds its own end, r_wait the next in the queue */
                r_dev[o] = dev[i];
                r_start[o] = st[i];
                r_end[o] = end;
                r_wait[o] = -1;
                r_sync[o] = 3;
                if (sq_t[k] >= 0) r_wait[sq_t[k]] = o; else sq_h[k] = o;
                sq_t[k] = o++;
                waiting++;
                continue;
            }
            k = dkey[a];
            if (k < 0 || !started[k]) continue;  /* not a done, or its start was not captured */
            if (sq_h[k] >= 0) {  /* the oldest waiting start of its key */
                int64_t p = sq_h[k];
                sq_h[k] = r_wait[p];
                if (sq_h[k] < 0) sq_t[k] = -1;
                waiting--;
                if (st[i] < r_start[p]) { r_sync[p] = 2; dropped++; continue; }
                int64_t end_d = (int64_t)((uint64_t)st[i] + (uint64_t)du[i]);
                if (end_d > r_end[p]) r_end[p] = end_d;
                r_wait[p] = du[i];
                r_sync[p] = 0;
            } else {  /* before the start of its rank: it waits */
                if (dq_n >= dq_cap) {
                    Py_ssize_t nc = dq_cap ? 2 * dq_cap : 64;
                    int64_t *ne = PyMem_RawRealloc(dq_ev, (size_t)nc * sizeof(int64_t));
                    if (ne) dq_ev = ne;
                    int64_t *nn = ne ? PyMem_RawRealloc(dq_next, (size_t)nc * sizeof(int64_t)) : NULL;
                    if (nn) dq_next = nn;
                    if (!ne || !nn) { nomem = 1; break; }
                    dq_cap = nc;
                }
                dq_ev[dq_n] = i;
                dq_next[dq_n] = -1;
                if (dq_t[k] >= 0) dq_next[dq_t[k]] = dq_n; else dq_h[k] = dq_n;
                dq_t[k] = dq_n++;
            }
        }
        if (ok && !nomem && n_sync + n_start > cap) ok = 0;
        if (ok && !nomem && (dropped || waiting)) {  /* drop the unmatched starts and late dones' pairs */
            Py_ssize_t w = 0;
            for (Py_ssize_t r = 0; r < o; r++) {
                if (r_sync[r] > 1) continue;
                r_attr[w] = r_attr[r]; r_dev[w] = r_dev[r]; r_start[w] = r_start[r];
                r_end[w] = r_end[r]; r_wait[w] = r_wait[r]; r_sync[w++] = r_sync[r];
            }
            o = w;
        }
        if (ok && !nomem && ties) {  /* within each (dev, start): the synchronous records first, each kind in order */
            Py_ssize_t r = 0;
            while (r < o) {
                Py_ssize_t e = r + 1;
                while (e < o && r_dev[e] == r_dev[r] && r_start[e] == r_start[r]) e++;
                int mixed = 0;
                for (Py_ssize_t j = r + 1; j < e; j++) if (r_sync[j] && !r_sync[j - 1]) { mixed = 1; break; }
                if (mixed) {
                    Py_ssize_t m = e - r, w = 0;
                    int64_t *nt = PyMem_RawRealloc(tmp, (size_t)m * 4 * sizeof(int64_t));
                    if (!nt) { nomem = 1; break; }
                    tmp = nt;
                    for (int pass = 1; pass >= 0; pass--)
                        for (Py_ssize_t j = r; j < e; j++)
                            if (r_sync[j] == pass) {
                                tmp[4 * w] = r_attr[j]; tmp[4 * w + 1] = r_end[j];
                                tmp[4 * w + 2] = r_wait[j]; tmp[4 * w + 3] = pass;
                                w++;
                            }
                    for (Py_ssize_t j = 0; j < m; j++) {  /* dev and start are the run's own */
                        r_attr[r + j] = (uint32_t)tmp[4 * j]; r_end[r + j] = tmp[4 * j + 1];
                        r_wait[r + j] = tmp[4 * j + 2]; r_sync[r + j] = (uint8_t)tmp[4 * j + 3];
                    }
                }
                r = e;
            }
        }
        Py_END_ALLOW_THREADS
        if (nomem) goto nomem;
        if (ok) count = o;
    }
    PyMem_RawFree(sq_h); PyMem_RawFree(sq_t); PyMem_RawFree(dq_h); PyMem_RawFree(dq_t); PyMem_RawFree(started);
    PyMem_RawFree(dq_ev); PyMem_RawFree(dq_next); PyMem_RawFree(tmp);
    for (int k = 0; k < 13; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromSsize_t(count);
nomem:
    PyMem_RawFree(sq_h); PyMem_RawFree(sq_t); PyMem_RawFree(dq_h); PyMem_RawFree(dq_t); PyMem_RawFree(started);
    PyMem_RawFree(dq_ev); PyMem_RawFree(dq_next); PyMem_RawFree(tmp);
    for (int k = 0; k < 13; k++) PyBuffer_Release(&b[k]);
    return PyErr_NoMemory();
}

/* events_placed(attr, start, dev_of, cls_of, dev, cls) -> int
 * Per event (attr: uint32 ids, start: int64) its device dev[i] = dev_of[attr[i]] (int32) and
 * class cls[i] = cls_of[attr[i]] (int8), in one pass (traceview.analysis.communication.overlap._Events),
 * checking the (dev, start) order on the way. Returns 1 when the events are in that order
 * (non-decreasing dev, and start within each dev), 0 when not (outputs filled all the
 * same), -1 (outputs unspecified) when an id lies outside dev_of or cls_of or sizes do not
 * match. */
static PyObject *events_placed(PyObject *self, PyObject *args) {
    Py_buffer b[6];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5])) return NULL;
    Py_ssize_t n = b[0].len / 4, nd = b[2].len / 4, nc = b[3].len;
    int ok = b[0].len == n * 4 && b[1].len == n * 8 && b[2].len == nd * 4 && b[4].len == n * 4 && b[5].len == n;
    const uint32_t *attr = b[0].buf;
    const int64_t *st = b[1].buf;
    const int32_t *dev_of = b[2].buf;
    const int8_t *cls_of = b[3].buf;
    int32_t *dev = b[4].buf;
    int8_t *cls = b[5].buf;
    int ordered = 1;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t a = attr[i];
            if ((Py_ssize_t)a >= nd || (Py_ssize_t)a >= nc) { ok = 0; break; }
            int32_t d = dev_of[a];
            dev[i] = d;
            cls[i] = cls_of[a];
            if (i && (d < dev[i - 1] || (d == dev[i - 1] && st[i] < st[i - 1]))) ordered = 0;
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 6; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromLong(ok ? ordered : -1);
}

/* perf-build5 */
/*
 * hlo_scan(data) -> tuple | None: the fields of an xla.HloProto (bytes that HloProto.FromString
 * has already accepted) that traceview.model.hlo_graph reads, straight from the wire format:
 * (entry_computation_id, [aliased parameter_number], [(computation id, name, instructions)],
 * ids, names, opcodes, [operand ids], parameter_number (None unless a "parameter"),
 * result ShapeProto bytes (b"" when absent), [(called computation id, fusion name)]), the
 * instruction columns over every computation in order. None on anything a plain reading could
 * get wrong (a singular field repeated, so merged or overridden; a known field with another
 * wire type; a group; bad UTF-8): the caller then reads the decoded message.
 */
typedef struct { const uint8_t *p, *e; } hs_rd;

static int hs_varint(hs_rd *r, uint64_t *v) {
    uint64_t x = 0;
    for (int s = 0; s < 70; s += 7) {
        if (r->p >= r->e) return 0;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) { *v = x; return 1; }
    }
    return 0;
}

/* the next field: number, wire type; for wire type 2 its payload in *sub; 0 at the end, -1 on error */
static int hs_field(hs_rd *r, uint32_t *num, int *wt, uint64_t *val, hs_rd *sub) {
    if (r->p >= r->e) return 0;
    uint64_t key;
    if (!hs_varint(r, &key)) return -1;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    if (*num == 0) return -1;
    switch (*wt) {
    case 0: if (!hs_varint(r, val)) return -1; break;
    case 1: if (r->e - r->p < 8) return -1; r->p += 8; break;
    case 5: if (r->e - r->p < 4) return -1; r->p += 4; break;
    case 2: {
        uint64_t n;
        if (!hs_varint(r, &n) || n > (uint64_t)(r->e - r->p)) return -1;
        sub->p = r->p; sub->e = r->p + n; r->p += n; break;
    }
    default: return -1;  /* groups: left to the decoded message */
    }
    return 1;
}

/* append a repeated int64 field (one varint, or a packed run) to list */
static int hs_ints(PyObject *list, int wt, uint64_t val, hs_rd *sub) {
    if (wt == 0) {
        PyObject *o = PyLong_FromLongLong((long long)val);
        if (!o) return -1;
        int rc = PyList_Append(list, o);
        Py_DECREF(o);
        return rc;
    }
    if (wt != 2) return 1;
    while (sub->p < sub->e) {
        uint64_t v;
        if (!hs_varint(sub, &v)) return 1;
        PyObject *o = PyLong_FromLongLong((long long)v);
        if (!o) return -1;
        int rc = PyList_Append(list, o);
        Py_DECREF(o);
        if (rc) return -1;
    }
    return 0;
}

typedef struct {
    PyObject *ids, *names, *opcodes, *operands, *params, *shapes, *fusions;
} hs_cols;

/* one HloInstructionProto: 0 done, 1 unsupported, -1 Python error */
static int hs_instruction(hs_rd r, hs_cols *c) {
    uint32_t num; int wt; uint64_t val = 0; hs_rd sub;
    int64_t id = 0, pnum = 0;
    hs_rd name = {NULL, NULL}, opcode = {NULL, NULL}, shape = {NULL, NULL};
    unsigned seen = 0;
    int f, rc = 1;
    PyObject *ops = PyList_New(0), *called = PyList_New(0), *o = NULL, *nm = NULL;
    if (!ops || !called) { rc = -1; goto done; }
    while ((f = hs_field(&r, &num, &wt, &val, &sub)) > 0) {
        unsigned bit = 0;
        switch (num) {
        case 1: if (wt != 2) goto done; bit = 1; name = sub; break;
        case 2: if (wt != 2) goto done; bit = 2; opcode = sub; break;
        case 3: if (wt != 2) goto done; bit = 4; shape = sub; break;
        case 9: if (wt != 0) goto done; bit = 8; pnum = (int64_t)val; break;
        case 35: if (wt != 0) goto done; bit = 16; id = (int64_t)val; break;
        case 36: if ((f = hs_ints(ops, wt, val, &sub)) != 0) { rc = f; goto done; } break;
        case 38: if ((f = hs_ints(called, wt, val, &sub)) != 0) { rc = f; goto done; } break;
        default: break;
        }
        if (seen & bit) goto done;
        seen |= bit;
    }
    if (f < 0) goto done;
    rc = -1;
    nm = PyUnicode_DecodeUTF8((const char *)name.p, name.e - name.p, NULL);
    if (!nm) { PyErr_Clear(); rc = 1; goto done; }
    o = PyUnicode_DecodeUTF8((const char *)opcode.p, opcode.e - opcode.p, NULL);
    if (!o) { PyErr_Clear(); rc = 1; goto done; }
    if (PyList_Append(c->names, nm) || PyList_Append(c->opcodes, o) || PyList_Append(c->operands, ops)) goto done;
    Py_DECREF(o); o = NULL;
    if (!(o = PyLong_FromLongLong(id)) || PyList_Append(c->ids, o)) goto done;
    Py_DECREF(o); o = NULL;
    int is_param = opcode.e - opcode.p == 9 && memcmp(opcode.p, "parameter", 9) == 0;
    if (is_param) {
        if (!(o = PyLong_FromLongLong(pnum)) || PyList_Append(c->params, o)) goto done;
        Py_DECREF(o); o = NULL;
    } else if (PyList_Append(c->params, Py_None)) goto done;
    if (!(o = PyBytes_FromStringAndSize((const char *)shape.p, shape.e - shape.p)) || PyList_Append(c->shapes, o))
        goto done;
    Py_DECREF(o); o = NULL;
    if (opcode.e - opcode.p == 6 && memcmp(opcode.p, "fusion", 6) == 0) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(called); k++) {
            PyObject *t = PyTuple_Pack(2, PyList_GET_ITEM(called, k), nm);
            if (!t) goto done;
            int e = PyList_Append(c->fusions, t);
            Py_DECREF(t);
            if (e) goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(ops); Py_XDECREF(called); Py_XDECREF(o); Py_XDECREF(nm);
    return rc;
}

static PyObject *hlo_scan(PyObject *self, PyObject *args) {
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
    hs_cols c = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0),
                 PyList_New(0)};
    PyObject *alias = PyList_New(0), *comps = PyList_New(0), *out = NULL;
    uint32_t num; int wt; uint64_t val = 0; hs_rd sub, mod = {NULL, NULL};
    int64_t entry = 0;
    int f, rc = 1;
    unsigned seen = 0;
    if (!c.ids || !c.names || !c.opcodes || !c.operands || !c.params || !c.shapes || !c.fusions || !alias || !comps)
        { rc = -1; goto done; }
    hs_rd r = {(const uint8_t *)b.buf, (const uint8_t *)b.buf + b.len};
    while ((f = hs_field(&r, &num, &wt, &val, &sub)) > 0) {
        if (num == 1) {
            if (wt != 2 || mod.p) goto done;
            mod = sub;
        }
    }
    if (f < 0) goto done;
    r = mod;
    while (r.p && (f = hs_field(&r, &num, &wt, &val, &sub)) > 0) {
        if (num == 6) {
            if (wt != 0 || (seen & 1)) goto done;
            seen |= 1; entry = (int64_t)val;
        } else if (num == 8) {  /* input_output_alias: entries (1), each parameter_number (2) */
            if (wt != 2 || (seen & 2)) goto done;
            seen |= 2;
            hs_rd a = sub, en; uint32_t n2; int w2; uint64_t v2 = 0; int f2;
            while ((f2 = hs_field(&a, &n2, &w2, &v2, &en)) > 0) {
                if (n2 != 1) continue;
                if (w2 != 2) goto done;
                int64_t pn = 0; int got = 0; hs_rd x; uint32_t n3; int w3; uint64_t v3 = 0; int f3;
                while ((f3 = hs_field(&en, &n3, &w3, &v3, &x)) > 0) {
                    if (n3 != 2) continue;
                    if (w3 != 0 || got) goto done;
                    got = 1; pn = (int64_t)v3;
                }
                if (f3 < 0) goto done;
                PyObject *o = PyLong_FromLongLong(pn);
                if (!o || PyList_Append(alias, o)) { Py_XDECREF(o); rc = -1; goto done; }
                Py_DECREF(o);
            }
            if (f2 < 0) goto done;
        } else if (num == 3) {  /* a computation: name (1), instructions (2), id (5) */
            if (wt != 2) goto done;
            hs_rd cr = sub, x, cname = {NULL, NULL}; uint32_t n2; int w2; uint64_t v2 = 0; int f2;
            int64_t cid = 0; unsigned cs = 0;
            Py_ssize_t before = PyList_GET_SIZE(c.names);
            while ((f2 = hs_field(&cr, &n2, &w2, &v2, &x)) > 0) {
                if (n2 == 1) {
                    if (w2 != 2 || (cs & 1)) goto done;
                    cs |= 1; cname = x;
                } else if (n2 == 5) {
                    if (w2 != 0 || (cs & 2)) goto done;
                    cs |= 2; cid = (int64_t)v2;
                } else if (n2 == 2) {
                    if (w2 != 2) goto done;
                    int e = hs_instruction(x, &c);
                    if (e) { rc = e; goto done; }
                }
            }
            if (f2 < 0) goto done;
            PyObject *nm = PyUnicode_DecodeUTF8((const char *)cname.p, cname.e - cname.p, NULL);
            if (!nm) { PyErr_Clear(); goto done; }
            PyObject *t = Py_BuildValue("(LNn)", (long long)cid, nm, PyList_GET_SIZE(c.names) - before);
            if (!t || PyList_Append(comps, t)) { Py_XDECREF(t); rc = -1; goto done; }
            Py_DECREF(t);
        }
    }
    if (r.p && f < 0) goto done;
    out = Py_BuildValue("(LOOOOOOOOO)", (long long)entry, alias, comps, c.ids, c.names, c.opcodes, c.operands,
                        c.params, c.shapes, c.fusions);
    rc = out ? 0 : -1;
done:
    PyBuffer_Release(&b);
    Py_XDECREF(c.ids); Py_XDECREF(c.names); Py_XDECREF(c.opcodes); Py_XDECREF(c.operands);
    Py_XDECREF(c.params); Py_XDECREF(c.shapes); Py_XDECREF(c.fusions); Py_XDECREF(alias); Py_XDECREF(comps);
    if (rc < 0) { Py_XDECREF(out); return NULL; }
    if (rc > 0) Py_RETURN_NONE;
    return out;
}

/* take_lists(keys, values) -> list | None: [[values[k] for k in ks] for ks in keys] (keys a list
 * of lists, values a dict); None when a key is missing or an input is not a list / dict. */
static PyObject *take_lists(PyObject *self, PyObject *args) {
    PyObject *keys, *values;
    if (!PyArg_ParseTuple(args, "OO", &keys, &values)) return NULL;
    if (!PyList_CheckExact(keys) || !PyDict_CheckExact(values)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ks = PyList_GET_ITEM(keys, i);
        if (!PyList_CheckExact(ks)) { Py_DECREF(out); Py_RETURN_NONE; }
        Py_ssize_t m = PyList_GET_SIZE(ks);
        PyObject *row = PyList_New(m);
        if (!row) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, row);
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *v = PyDict_GetItemWithError(values, PyList_GET_ITEM(ks, j));
            if (!v) {
                Py_DECREF(out);
                if (PyErr_Occurred()) return NULL;
                Py_RETURN_NONE;
            }
            Py_INCREF(v);
            PyList_SET_ITEM(row, j, v);
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"step_pass", step_pass, METH_VARARGS,
     "step_pass(idx, starts, durs, selfs, counts, lo, hi, rows, ops, optime, busy[, row_offset]) -> bool"},
    {"window_max", window_max, METH_VARARGS, "window_max(a_start, a_len, is_dur, starts, nxt, end) -> bool"},
    {"chunk_heads", chunk_heads, METH_VARARGS, "chunk_heads(attr, starts, durs, prog, m, offs, heads, ends) -> bool"},
    {"median_by", median_by, METH_VARARGS, "median_by(attr, key_of_attr, values, out, have) -> bool"},
    {"quantiles_by", quantiles_by, METH_VARARGS, "quantiles_by(attr, key_of_attr, values, qs, out, counts, grouped) -> bool"},
    {"row_hashes", row_hashes, METH_VARARGS, "row_hashes(rows, attr, pop, keep, words, counts, distinct, out) -> bool"},
    {"rank_match", rank_match, METH_VARARGS, "rank_match(ks, kd, out) -> bool"},
    {"pair_by_key", pair_by_key, METH_VARARGS, "pair_by_key(a, t, lut_key, lut_done, si, d) -> int"},
    {"covered", covered, METH_VARARGS, "covered(us, ue, a, b, out) -> bool"},
    {"pair_spans", pair_spans, METH_VARARGS, "pair_spans(si, d, t, dur, selfv, span, valid, dself) -> bool"},
    {"union_where", union_where, METH_VARARGS, "union_where(starts, ends, durs, codes, lut, out_s, out_e) -> int"},
    {"record_sums", record_sums, METH_VARARGS,
     "record_sums(attr, sync, start, end, hid, wait, cnt, first, n_sync, s_flight, s_hid, s_wait) -> bool"},
    {"partition", partition, METH_VARARGS,
     "partition(cs, ce, ss, se, as, ae, hs, he, wa, wb, exposed, compute, hidden, host) -> bool"},
    {"attr_sums", attr_sums, METH_VARARGS, "attr_sums(rows, keep, attr, vals, k, out, seen) -> bool"},
    {"cell_sums", cell_sums, METH_VARARGS, "cell_sums(pop, rows, vals, n_steps, sums, got) -> bool"},
    {"row_sums", row_sums, METH_VARARGS, "row_sums(rows, attr, counts, w, scale, out) -> bool"},
    {"direction_busy", direction_busy, METH_VARARGS,
     "direction_busy(ra, ix, start, t, ok, dir_of, dev_of, by_attr, busy, moved, first) -> bool"},
    {"chunks_inside", chunks_inside, METH_VARARGS, "chunks_inside(keys, starts, durs, plan, runs, offs, heads) -> bool"},
    {"attr_counts", attr_counts, METH_VARARGS, "attr_counts(a, out) -> int"},
    {"direction_busy_in_order", direction_busy_in_order, METH_VARARGS,
     "direction_busy_in_order(ra, ix, start, t, ok, dir_of, dev_of, by_attr, busy, moved, first) -> bool"},
    {"comm_records_stream", comm_records_stream, METH_VARARGS,
     "comm_records_stream(attr, start, dur, dev, start_key, done_key, sync_of, r_attr, r_dev, r_start, r_end, r_wait, "
     "r_sync) -> int"},
    {"events_placed", events_placed, METH_VARARGS, "events_placed(attr, start, dev_of, cls_of, dev, cls) -> int"},
    {"hlo_scan", hlo_scan, METH_VARARGS, "hlo_scan(data) -> tuple | None"},
    {"take_lists", take_lists, METH_VARARGS, "take_lists(keys, values) -> list | None"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_passes",
    "Analysis passes for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__passes(void) {
    return PyModule_Create(&module);
}
