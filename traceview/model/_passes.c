/*
 * traceview.model._passes: single passes over time-ordered op-event arrays that build the op
 * table (optional accelerator; the numpy code beside each call computes the same).
 *
 *   self_times_sorted(starts, durs, out) -> bool: self time in one stack pass
 *     (traceview.model.timeline.self_times);
 *   enclosing_sorted(starts, outer_starts, outer_ends, out) -> bool: enclosing interval by
 *     merge (traceview.model.timeline.enclosing);
 *   tpu_attr(...) -> distinct: TPU op events' description ids (traceview.model.from_xplane);
 *   attr_stats(...) -> bool: per-description sums (traceview.model.optable.OpTable.collapse).
 *
 * Each releases the GIL and returns False (or -1) on input outside its preconditions; the
 * caller then takes the general path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* self_times_sorted(starts, durs, out) -> bool: self time of each event of one line (as
 * traceview.model.timeline.self_times defines it) in one stack pass, when the events are already
 * in that function's order (start ascending, then end descending); returns False, writing
 * nothing meaningful, when they are not (the caller then sorts). int64 arrays of equal
 * length; ends wrap like numpy int64 addition; sums of children are exact (128-bit). */
static PyObject *self_times_sorted(PyObject *self, PyObject *args) {
    Py_buffer bs, bd, bo;
    if (!PyArg_ParseTuple(args, "y*y*w*", &bs, &bd, &bo)) return NULL;
    Py_ssize_t n = bs.len / 8;
    if (bd.len / 8 != n || bo.len / 8 != n) {
        PyBuffer_Release(&bs); PyBuffer_Release(&bd); PyBuffer_Release(&bo);
        PyErr_SetString(PyExc_ValueError, "arrays differ in length");
        return NULL;
    }
    const int64_t *s = (const int64_t *)bs.buf, *d = (const int64_t *)bd.buf;
    int64_t *out = (int64_t *)bo.buf;
    int ok = 1;
    Py_ssize_t *stack = NULL;
    __int128 *child = NULL;
    if (n > 0) {
        stack = (Py_ssize_t *)PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)n);
        child = (__int128 *)PyMem_RawCalloc((size_t)n, sizeof(__int128));
        if (!stack || !child) {
            PyMem_RawFree(stack); PyMem_RawFree(child);
            PyBuffer_Release(&bs); PyBuffer_Release(&bd); PyBuffer_Release(&bo);
            return PyErr_NoMemory();
        }
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t e = (int64_t)((uint64_t)s[k] + (uint64_t)d[k]);
        if (k > 0) {
            int64_t pe = (int64_t)((uint64_t)s[k - 1] + (uint64_t)d[k - 1]);
            if (s[k] < s[k - 1] || (s[k] == s[k - 1] && e > pe)) { ok = 0; break; }
        }
        while (top > 0) {
            Py_ssize_t t = stack[top - 1];
            int64_t te = (int64_t)((uint64_t)s[t] + (uint64_t)d[t]);
            if (te <= s[k] || e > te) top--; else break;
        }
        if (top > 0) child[stack[top - 1]] += d[k];
        stack[top++] = k;
    }
    if (ok) {
        for (Py_ssize_t k = 0; k < n; k++) {
            if (child[k] != 0) {
                __int128 v = (__int128)d[k] - child[k];
                if (v < 0) v = 0;
                if (v > (__int128)INT64_MAX) v = INT64_MAX;
                out[k] = (int64_t)v;
            } else out[k] = d[k];
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(stack); PyMem_RawFree(child);
    PyBuffer_Release(&bs); PyBuffer_Release(&bd); PyBuffer_Release(&bo);
    return PyBool_FromLong(ok);
}

/* enclosing_sorted(starts, outer_starts, outer_ends, out) -> bool: for each start, the index
 * of the outer interval holding it (traceview.model.timeline.enclosing's rule: the last outer
 * interval starting at or before it, if the start is before its end or equal to its start),
 * else -1, in one merge pass. int64 arrays; returns False, writing nothing meaningful, unless
 * starts and outer_starts are both non-decreasing (the caller then binary-searches). */
static PyObject *enclosing_sorted(PyObject *self, PyObject *args) {
    Py_buffer b[4];
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &b[0], &b[1], &b[2], &b[3])) return NULL;
    Py_ssize_t n = b[0].len / 8, m = b[1].len / 8;
    int ok = b[2].len / 8 == m && b[3].len / 8 == n;
    const int64_t *st = b[0].buf, *os = b[1].buf, *oe = b[2].buf;
    int64_t *out = b[3].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 1; i < n && ok; i++) if (st[i] < st[i - 1]) ok = 0;
        for (Py_ssize_t j = 1; j < m && ok; j++) if (os[j] < os[j - 1]) ok = 0;
        if (ok) {
            Py_ssize_t j = -1;
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t s = st[i];
                while (j + 1 < m && os[j + 1] <= s) j++;
                out[i] = (j >= 0 && (s < oe[j] || s == os[j])) ? (int64_t)j : -1;
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 4; k++) PyBuffer_Release(&b[k]);
    return PyBool_FromLong(ok);
}

/* tpu_attr(mids, enc, mid_row, fixed, exec_u, width, attr, lut) -> distinct or -1
 * The description id of each TPU op event (traceview.model.from_xplane._tpu_op_table's integer keys):
 * row = mid_row[mids[i]] (the event's XEventMetadata row; a mid past the table is the
 * "unknown" row, the last entry of fixed), u = width - 1 when fixed[row] (its own program
 * names the module) or enc[i] < 0, else exec_u[enc[i]] (the enclosing execution's module),
 * key = row * width + u. lut (int32, zeroed, one entry per possible key) marks the keys
 * used, then holds each used key's rank; attr[i] (uint32) = rank of its key, so ids follow
 * key order. Returns the number of distinct keys, or -1 (nothing meaningful written) when
 * an index falls outside its table. mids uint32; enc, mid_row, exec_u int64; fixed uint8. */
static PyObject *tpu_attr(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    long long width;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*Lw*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &width, &b[5], &b[6]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, top = b[2].len / 8, nrows = b[3].len, nexec = b[4].len / 8, span = b[6].len / 4;
    long long distinct = -1;
    int ok = b[1].len / 8 == n && b[5].len / 4 == n && width >= 1 && nrows >= 1 && span == (Py_ssize_t)nrows * width;
    const uint32_t *mids = b[0].buf;
    const int64_t *enc = b[1].buf, *mid_row = b[2].buf, *exec_u = b[4].buf;
    const uint8_t *fixed = b[3].buf;
    uint32_t *attr = b[5].buf;
    int32_t *lut = b[6].buf;
    if (ok && span < 0x7FFFFFFF) {
        Py_BEGIN_ALLOW_THREADS
        const int64_t unknown = nrows - 1;
        for (Py_ssize_t i = 0; i < n && ok; i++) {
            int64_t r = mids[i] < (uint64_t)top ? mid_row[mids[i]] : unknown;
            if (r < 0 || r >= nrows) { ok = 0; break; }
            int64_t e = enc[i], u = width - 1;
            if (!fixed[r] && e >= 0) {
                if (e >= nexec) { ok = 0; break; }
                u = exec_u[e];
                if (u < 0 || u >= width) { ok = 0; break; }
            }
            int64_t key = r * width + u;
            lut[key] = 1;
            attr[i] = (uint32_t)key;
        }
        if (ok) {
            int32_t rank = 0;
            for (Py_ssize_t k = 0; k < span; k++) lut[k] = lut[k] ? rank++ : -1;
            for (Py_ssize_t i = 0; i < n; i++) attr[i] = (uint32_t)lut[attr[i]];
            distinct = rank;
        }
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return PyLong_FromLongLong(ok ? distinct : -1);
}

/* attr_stats(attr, starts, durs, selfs, rows, dur_sum, self_sum, min_dur, max_dur, first) -> bool
 * Per description id (the output arrays' index, int64, caller-zeroed except min/max/first):
 * events, sums of duration and self time (int64, wrapping like polars' sums), shortest and
 * longest duration and earliest start: OpTable.collapse's aggregates for events that are all
 * placed and of one occurrence each (count 1). Returns False when an id is past the outputs.
 * min_dur must start at INT64_MAX, max_dur and first at INT64_MIN / INT64_MAX. */
static PyObject *attr_stats(PyObject *self, PyObject *args) {
    Py_buffer b[10];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, k = b[4].len / 8;
    int ok = b[1].len / 8 == n && b[2].len / 8 == n && b[3].len / 8 == n;
    for (int j = 5; j < 10; j++) ok = ok && b[j].len / 8 == k;
    const uint32_t *attr = b[0].buf;
    const int64_t *st = b[1].buf, *du = b[2].buf, *sf = b[3].buf;
    int64_t *rows = b[4].buf, *ds = b[5].buf, *ss = b[6].buf, *mn = b[7].buf, *mx = b[8].buf, *first = b[9].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t a = attr[i];
            if ((Py_ssize_t)a >= k) { ok = 0; break; }
            rows[a]++;
            ds[a] = (int64_t)((uint64_t)ds[a] + (uint64_t)du[i]);
            ss[a] = (int64_t)((uint64_t)ss[a] + (uint64_t)sf[i]);
            if (du[i] < mn[a]) mn[a] = du[i];
            if (du[i] > mx[a]) mx[a] = du[i];
            if (st[i] < first[a]) first[a] = st[i];
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 10; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"self_times_sorted", self_times_sorted, METH_VARARGS, "self_times_sorted(starts, durs, out) -> bool"},
    {"enclosing_sorted", enclosing_sorted, METH_VARARGS,
     "enclosing_sorted(starts, outer_starts, outer_ends, out) -> bool"},
    {"tpu_attr", tpu_attr, METH_VARARGS, "tpu_attr(mids, enc, mid_row, fixed, exec_u, width, attr, lut) -> distinct"},
    {"attr_stats", attr_stats, METH_VARARGS,
     "attr_stats(attr, starts, durs, selfs, rows, dur_sum, self_sum, min_dur, max_dur, first) -> bool"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_passes",
    "Op-table passes for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__passes(void) {
    return PyModule_Create(&module);
}
