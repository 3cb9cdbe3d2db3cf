/*
 * traceview.model._passes: single passes over time-ordered op-event arrays that build the op
 * table (optional accelerator; the numpy code beside each call computes the same).
 *
 *   self_times_sorted(starts, durs, out) -> bool: self time in one stack pass
 *     (traceview.model.timeline.self_times);
 *   enclosing_sorted(starts, outer_starts, outer_ends, out) -> bool: enclosing interval by
 *     merge (traceview.model.timeline.enclosing);
 *   tpu_attr(...) -> distinct: TPU op events' description ids (traceview.model.from_xplane);
 *   attr_stats(...) -> bool: per-description sums (traceview.model.optable.OpTable.collapse);
 *   kernel_owners(...) -> n_inv: interpreted Pallas kernel invocation of each event of a device
 *     (traceview.model.interpreted._owners);
 *   kernel_rows(...) -> bool: per invocation its first event, start, sums, scope and lead
 *     (traceview.model.interpreted.collapse_kernels);
 *   program_runs(...) -> runs: program executions derived from the ops of GPU/CPU traces
 *     (traceview.model.from_xplane._derive_module_runs).
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
 * placed and of one occurrence each (count 1); with starts empty, first is the position of the
 * description's first event instead (the host transfers' groups, traceview.analysis.communication.
 * collectives). Returns False when an id is past the outputs. min_dur must start at INT64_MAX,
 * max_dur and first at INT64_MIN / INT64_MAX. */
static PyObject *attr_stats(PyObject *self, PyObject *args) {
    Py_buffer b[10];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9]))
        return NULL;
    Py_ssize_t n = b[0].len / 4, k = b[4].len / 8;
    int by_position = b[1].len == 0;
    int ok = (by_position || b[1].len / 8 == n) && b[2].len / 8 == n && b[3].len / 8 == n;
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
            int64_t at = by_position ? (int64_t)i : st[i];
            if (at < first[a]) first[a] = at;
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 10; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

/* attr_float_sums(attr, a, b, sa, sb) -> bool: per description id, the float64 sums of two
 * int64 event columns, ``sa[attr[i]] += (double)a[i]`` in event order, which is what
 * ``np.bincount(attr, weights=a.astype(float64))`` computes (bit for bit) without its two
 * per-event temporaries. attr: uint32; a, b: int64; sa, sb: float64 zeros, k each. False
 * (outputs partly written) on an id past k or arrays of different lengths. */
static PyObject *attr_float_sums(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4])) return NULL;
    Py_ssize_t n = b[0].len / 4, k = b[3].len / 8;
    int ok = b[1].len / 8 == n && b[2].len / 8 == n && b[4].len / 8 == k;
    const uint32_t *attr = b[0].buf;
    const int64_t *x = b[1].buf, *y = b[2].buf;
    double *sx = b[3].buf, *sy = b[4].buf;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t a = attr[i];
            if ((Py_ssize_t)a >= k) { ok = 0; break; }
            sx[a] += (double)x[i];
            sy[a] += (double)y[i];
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 5; j++) PyBuffer_Release(&b[j]);
    return PyBool_FromLong(ok);
}

/* kernel_owners(s, e, ln, sc, anc, bare, n_lines, n_scopes, n_inv, owner) -> n_inv: the
 * interpreted-kernel invocation of each event of one device, in time order (s ascending), as
 * traceview.model.interpreted._owners computes it (its docstring gives the rule): ``owner``
 * (int64, filled with -1 by the caller) gets each event's invocation id, numbered from
 * ``n_inv``; returns the next free id, or -1 (nothing meaningful written) on input outside
 * the preconditions (unsorted starts, ids out of range, an anchor without a scope). s, e, ln,
 * sc: int64; anc, bare: bool (one byte each). */
static PyObject *kernel_owners(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    long long n_lines_ll, n_scopes_ll, n_inv_ll;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*LLLw*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &n_lines_ll,
                          &n_scopes_ll, &n_inv_ll, &b[6]))
        return NULL;
    Py_ssize_t n = b[0].len / 8;
    int bad = b[1].len / 8 != n || b[2].len / 8 != n || b[3].len / 8 != n || b[4].len != n || b[5].len != n
              || b[6].len / 8 != n || n_lines_ll < 0 || n_scopes_ll < 0 || n_lines_ll > ((long long)1 << 40)
              || n_scopes_ll > ((long long)1 << 40);
    if (bad) {
        for (int i = 0; i < 7; i++) PyBuffer_Release(&b[i]);
        PyErr_SetString(PyExc_ValueError, "kernel_owners: arrays differ in length");
        return NULL;
    }
    const int64_t *s = (const int64_t *)b[0].buf, *e = (const int64_t *)b[1].buf;
    const int64_t *ln = (const int64_t *)b[2].buf, *sc = (const int64_t *)b[3].buf;
    const uint8_t *anc = (const uint8_t *)b[4].buf, *bare = (const uint8_t *)b[5].buf;
    int64_t *owner = (int64_t *)b[6].buf;
    Py_ssize_t n_lines = (Py_ssize_t)n_lines_ll, n_scopes = (Py_ssize_t)n_scopes_ll;
    int64_t n_inv = (int64_t)n_inv_ll;
    Py_ssize_t *aoff = PyMem_RawCalloc((size_t)n_scopes + 2, sizeof(Py_ssize_t));
    Py_ssize_t *apos = PyMem_RawMalloc(sizeof(Py_ssize_t) * ((size_t)n + 1));
    Py_ssize_t *loff = PyMem_RawCalloc((size_t)n_lines + 2, sizeof(Py_ssize_t));
    Py_ssize_t *lpos = PyMem_RawMalloc(sizeof(Py_ssize_t) * ((size_t)n + 1));
    Py_ssize_t *kept = PyMem_RawMalloc(sizeof(Py_ssize_t) * ((size_t)n + 1));
    int64_t *mark = PyMem_RawMalloc(sizeof(int64_t) * ((size_t)n + 1));
    int64_t *prev = PyMem_RawMalloc(sizeof(int64_t) * ((size_t)n + 1));
    uint8_t *flag = PyMem_RawCalloc((size_t)n_lines + 1, 1);
    Py_ssize_t *fill = PyMem_RawMalloc(sizeof(Py_ssize_t) * ((size_t)(n_scopes > n_lines ? n_scopes : n_lines) + 1));
    if (!aoff || !apos || !loff || !lpos || !kept || !mark || !prev || !flag || !fill) {
        PyMem_RawFree(aoff); PyMem_RawFree(apos); PyMem_RawFree(loff); PyMem_RawFree(lpos);
        PyMem_RawFree(kept); PyMem_RawFree(mark); PyMem_RawFree(prev); PyMem_RawFree(flag); PyMem_RawFree(fill);
        for (int i = 0; i < 7; i++) PyBuffer_Release(&b[i]);
        return PyErr_NoMemory();
    }
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    /* preconditions; anchors and threads bucketed by scope and line (stable) */
    for (Py_ssize_t p = 0; p < n && ok; p++) {
        if ((p > 0 && s[p] < s[p - 1]) || ln[p] < 0 || ln[p] >= n_lines || sc[p] < -1 || sc[p] >= n_scopes
            || (anc[p] && sc[p] < 0))
            ok = 0;
        else {
            if (anc[p]) aoff[sc[p] + 1]++;
            loff[ln[p] + 1]++;
        }
    }
    if (ok) {
        for (Py_ssize_t k = 0; k < n_scopes; k++) aoff[k + 1] += aoff[k];
        for (Py_ssize_t k = 0; k < n_lines; k++) loff[k + 1] += loff[k];
        for (Py_ssize_t k = 0; k < n_scopes; k++) fill[k] = aoff[k];  /* next slot per scope, then per line */
        for (Py_ssize_t p = 0; p < n; p++)
            if (anc[p]) apos[fill[sc[p]]++] = p;
        for (Py_ssize_t k = 0; k < n_lines; k++) fill[k] = loff[k];
        for (Py_ssize_t p = 0; p < n; p++) lpos[fill[ln[p]]++] = p;
        /* 1. per scope (ascending): the outermost grid loops; each event from a loop's start on
         *    belongs to that loop when it carries the scope, or when it is bare, unowned, on the
         *    loop's thread and inside the loop event */
        for (Py_ssize_t k = 0; k < n_scopes; k++) {
            Py_ssize_t na = 0;
            int64_t reach = 0;
            for (Py_ssize_t i = aoff[k]; i < aoff[k + 1]; i++) {
                Py_ssize_t a = apos[i];
                if (i == aoff[k] || s[a] >= reach) kept[na++] = a;
                if (i == aoff[k] || e[a] > reach) reach = e[a];
            }
            if (na == 0) continue;
            Py_ssize_t j = -1;
            for (Py_ssize_t p = 0; p < n; p++) {
                while (j + 1 < na && s[kept[j + 1]] <= s[p]) j++;
                if (j < 0) continue;
                Py_ssize_t a = kept[j];
                if (sc[p] == k)
                    owner[p] = n_inv + j;
                else if (bare[p] && owner[p] < 0 && ln[p] == ln[a] && s[p] >= s[a] && e[p] <= e[a])
                    owner[p] = n_inv + j;
            }
            n_inv += na;
        }
        /* 2. per thread holding an owned event: bare events nested in an owned outermost event,
         *    then bare events between two events of one invocation */
        for (Py_ssize_t p = 0; p < n; p++)
            if (owner[p] >= 0) flag[ln[p]] = 1;
        for (Py_ssize_t t = 0; t < n_lines; t++) {
            if (!flag[t]) continue;
            Py_ssize_t lo = loff[t], hi = loff[t + 1], nt = 0;
            int64_t reach = 0;
            int any = 0;
            for (Py_ssize_t i = lo; i < hi; i++) {  /* outermost owned events, in time order */
                Py_ssize_t q = lpos[i];
                if (owner[q] < 0) continue;
                if (!any || s[q] >= reach) kept[nt++] = q;
                if (!any || e[q] > reach) reach = e[q];
                any = 1;
            }
            Py_ssize_t j = -1;
            for (Py_ssize_t i = lo; i < hi; i++) {
                Py_ssize_t q = lpos[i];
                if (owner[q] >= 0 || !bare[q]) continue;
                while (j + 1 < nt && s[kept[j + 1]] <= s[q]) j++;
                if (j >= 0 && e[q] <= e[kept[j]]) mark[i - lo] = owner[kept[j]];
                else mark[i - lo] = -1;
            }
            for (Py_ssize_t i = lo; i < hi; i++) {
                Py_ssize_t q = lpos[i];
                if (owner[q] < 0 && bare[q]) owner[q] = mark[i - lo];
            }
            for (Py_ssize_t i = lo; i < hi; i++) {
                Py_ssize_t q = lpos[i];
                mark[i - lo] = owner[q] >= 0 ? owner[q] : (bare[q] ? -1 : -2);
            }
            int64_t last = -2;
            for (Py_ssize_t i = lo; i < hi; i++) {
                prev[i - lo] = last;
                if (mark[i - lo] != -1) last = mark[i - lo];
            }
            last = -2;
            for (Py_ssize_t i = hi - 1; i >= lo; i--) {
                int64_t m = mark[i - lo];
                if (m == -1 && prev[i - lo] >= 0 && prev[i - lo] == last) owner[lpos[i]] = last;
                if (m != -1) last = m;
            }
        }
        /* 3. per thread holding an unowned kernel op (a loop XLA removed): each run of
         *    consecutive unowned events of one scope is one invocation */
        memset(flag, 0, (size_t)n_lines + 1);
        for (Py_ssize_t p = 0; p < n; p++)
            if (owner[p] < 0 && sc[p] >= 0) flag[ln[p]] = 1;
        for (Py_ssize_t t = 0; t < n_lines; t++) {
            if (!flag[t]) continue;
            int64_t prev_f = -1, runs = 0;
            for (Py_ssize_t i = loff[t]; i < loff[t + 1]; i++) {
                Py_ssize_t q = lpos[i];
                int64_t f = owner[q] < 0 ? sc[q] : -1;
                if (f >= 0) {
                    if (!(i > loff[t] && prev_f >= 0 && f == prev_f)) runs++;
                    owner[q] = n_inv + runs - 1;
                }
                prev_f = f;
            }
            n_inv += runs;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(aoff); PyMem_RawFree(apos); PyMem_RawFree(loff); PyMem_RawFree(lpos);
    PyMem_RawFree(kept); PyMem_RawFree(mark); PyMem_RawFree(prev); PyMem_RawFree(flag); PyMem_RawFree(fill);
    for (int i = 0; i < 7; i++) PyBuffer_Release(&b[i]);
    return PyLong_FromLongLong(ok ? (long long)n_inv : -1LL);
}

/* kernel_rows(inv, attr, start, dur, selfp, count, scope_of, anchor_of, flops_of, first_pos,
 * inv_start, self_sum, flops_sum, inv_scope, lead, top) -> bool: per interpreted-kernel
 * invocation (ids in ``inv``, -1 for none; events in table order) its first event, earliest
 * start, summed self time and scoped FLOPs (float64, summed in event order as numpy's
 * bincount does), its scope and its lead event (the grid loop, else the longest, ties to the
 * later event), as traceview.model.interpreted.collapse_kernels computes them. Per-event
 * arrays int64; per description: scope_of int64, anchor_of bool, flops_of float64; the outputs
 * come filled (n, INT64_MAX, 0, 0, -1, -1, INT64_MIN). False (outputs unusable) on ids out of
 * range. */
static PyObject *kernel_rows(PyObject *self, PyObject *args) {
    Py_buffer b[16];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13], &b[14], &b[15]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, n_attr = b[6].len / 8, n_inv = b[9].len / 8;
    int bad = 0;
    for (int i = 1; i < 6; i++) bad |= b[i].len / 8 != n;
    bad |= b[7].len != n_attr || b[8].len / 8 != n_attr;
    for (int i = 10; i < 16; i++) bad |= b[i].len / 8 != n_inv;
    if (bad) {
        for (int i = 0; i < 16; i++) PyBuffer_Release(&b[i]);
        PyErr_SetString(PyExc_ValueError, "kernel_rows: arrays differ in length");
        return NULL;
    }
    const int64_t *inv = b[0].buf, *attr = b[1].buf, *start = b[2].buf, *dur = b[3].buf, *selfp = b[4].buf,
                  *count = b[5].buf, *scope_of = b[6].buf;
    const uint8_t *anchor_of = b[7].buf;
    const double *flops_of = b[8].buf;
    int64_t *first_pos = b[9].buf, *inv_start = b[10].buf, *inv_scope = b[13].buf, *lead = b[14].buf,
            *top = b[15].buf;
    double *self_sum = b[11].buf, *flops_sum = b[12].buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t p = 0; p < n; p++) {
        int64_t i = inv[p];
        if (i < 0) continue;
        int64_t a = attr[p];
        if (i >= n_inv || a < 0 || a >= n_attr) { ok = 0; break; }
        if (first_pos[i] > p) first_pos[i] = p;
        if (inv_start[i] > start[p]) inv_start[i] = start[p];
        volatile double w = (double)selfp[p];  /* no contraction: the sums must be numpy's */
        self_sum[i] += w;
        int64_t sc = scope_of[a];
        volatile double fl = flops_of[a] * (double)count[p];
        fl = fl * (sc >= 0 ? 1.0 : 0.0);
        flops_sum[i] += fl;
        int64_t rank = anchor_of[a] ? INT64_MAX : dur[p];
        if (rank > top[i]) { top[i] = rank; lead[i] = p; }
        else if (rank == top[i]) lead[i] = p;
        if (sc >= 0) inv_scope[i] = sc;
    }
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 16; i++) PyBuffer_Release(&b[i]);
    return PyBool_FromLong(ok);
}

/* program_runs(kid, starts, durs, anchor, nk, run_key, run_start, run_end) -> runs
 * The executions of _derive_module_runs from events in time order (starts non-decreasing):
 * kid (int64, per event its program key, 0 <= kid < nk), durs (int64), anchor (uint8: the
 * event is of its program's anchor op). Per program, its events with one start are a group;
 * a group holding an anchor event begins an execution at that start, which takes every later
 * event of its program up to the next such group and ends at their latest end (start + dur,
 * wrapping like numpy int64 addition); events before a program's first such group belong to
 * none. With run_key / run_start / run_end empty, only counts the executions; else writes
 * them (run_key: uint32, run_start / run_end: int64, as many as counted) ordered by start,
 * then key: the groups of one start are closed together once the next start is reached.
 * at_most (optional, default False): the outputs may be longer than the executions (e.g.
 * one slot per anchor event, at least as many): they are written from the start and their
 * number returned (-1 when they do not fit), with no counting pass first.
 * Returns the number of executions, or -1 (outputs unspecified) when the events are not in
 * time order, a key is out of range or the sizes do not match (the caller then sorts with
 * numpy). */
static PyObject *program_runs(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    Py_ssize_t nk;
    int at_most = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*nw*w*w*|p", &b[0], &b[1], &b[2], &b[3], &nk, &b[4], &b[5], &b[6], &at_most))
        return NULL;
    Py_ssize_t n = b[1].len / 8;
    Py_ssize_t n_out = b[5].len / 8;
    int fill = n_out > 0;
    Py_ssize_t total = 0;
    int ok = nk >= 0 && b[0].len == n * 8 && b[1].len == n * 8 && b[2].len == n * 8 && b[3].len == n
             && b[4].len == n_out * 4 && b[6].len == n_out * 8;
    const int64_t *kid = b[0].buf, *st = b[1].buf, *du = b[2].buf;
    const uint8_t *anc = b[3].buf;
    uint32_t *rk = b[4].buf;
    int64_t *rs = b[5].buf, *re = b[6].buf;
    /* per program: in the current start's groups, its group has an anchor, has an open
     * execution; its group's end, the open execution's slot; the programs of the current start */
    uint8_t *flags = NULL;
    int64_t *st3 = NULL;
    if (ok && nk > 0) {
        flags = PyMem_RawCalloc((size_t)nk, 3);
        st3 = PyMem_RawMalloc((size_t)nk * 3 * sizeof(int64_t));
        if (flags == NULL || st3 == NULL) {
            PyMem_RawFree(flags); PyMem_RawFree(st3);
            for (int j = 0; j < 7; j++) PyBuffer_Release(&b[j]);
            return PyErr_NoMemory();
        }
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        uint8_t *cur = flags, *ganc = flags + nk, *open = flags + 2 * nk;
        int64_t *gend = st3, *slot = st3 + nk, *pend = st3 + 2 * nk;
        Py_ssize_t np_ = 0;  /* programs with a group at the current start, in pend */
        int64_t now = INT64_MIN;
        /* close the groups of start `now`, programs in key order (a few: insertion sort) */
#define CLOSE_GROUPS() do { \
            for (Py_ssize_t x = 1; x < np_; x++) { \
                int64_t v = pend[x]; Py_ssize_t y = x; \
                while (y > 0 && pend[y - 1] > v) { pend[y] = pend[y - 1]; y--; } \
                pend[y] = v; } \
            for (Py_ssize_t x = 0; x < np_; x++) { \
                int64_t k = pend[x]; cur[k] = 0; \
                if (ganc[k]) { \
                    if (fill) { \
                        if (total >= n_out) { ok = 0; break; } \
                        rk[total] = (uint32_t)k; rs[total] = now; re[total] = gend[k]; slot[k] = total; } \
                    open[k] = 1; total++; \
                } else if (open[k] && fill && gend[k] > re[slot[k]]) re[slot[k]] = gend[k]; } \
            np_ = 0; } while (0)
        for (Py_ssize_t i = 0; i < n && ok; i++) {
            int64_t k = kid[i], s = st[i];
            if (k < 0 || k >= nk || s < now) { ok = 0; break; }
            if (s != now) { CLOSE_GROUPS(); now = s; }
            int64_t e = (int64_t)((uint64_t)s + (uint64_t)du[i]);
            if (!cur[k]) { cur[k] = 1; pend[np_++] = k; gend[k] = e; ganc[k] = anc[i] != 0; }
            else {
                if (e > gend[k]) gend[k] = e;
                if (anc[i]) ganc[k] = 1;
            }
        }
        if (ok) CLOSE_GROUPS();
        if (ok && fill && !at_most && total != n_out) ok = 0;  /* exactly as many as counted */
#undef CLOSE_GROUPS
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(flags);
    PyMem_RawFree(st3);
    for (int j = 0; j < 7; j++) PyBuffer_Release(&b[j]);
    return PyLong_FromSsize_t(ok ? total : -1);
}

static PyMethodDef methods[] = {
    {"kernel_rows", kernel_rows, METH_VARARGS,
     "kernel_rows(inv, attr, start, dur, selfp, count, scope_of, anchor_of, flops_of, first_pos, inv_start, "
     "self_sum, flops_sum, inv_scope, lead, top) -> bool"},
    {"kernel_owners", kernel_owners, METH_VARARGS,
     "kernel_owners(s, e, ln, sc, anc, bare, n_lines, n_scopes, n_inv, owner) -> n_inv"},
    {"self_times_sorted", self_times_sorted, METH_VARARGS, "self_times_sorted(starts, durs, out) -> bool"},
    {"enclosing_sorted", enclosing_sorted, METH_VARARGS,
     "enclosing_sorted(starts, outer_starts, outer_ends, out) -> bool"},
    {"tpu_attr", tpu_attr, METH_VARARGS, "tpu_attr(mids, enc, mid_row, fixed, exec_u, width, attr, lut) -> distinct"},
    {"attr_float_sums", attr_float_sums, METH_VARARGS, "attr_float_sums(attr, a, b, sa, sb) -> bool"},
    {"attr_stats", attr_stats, METH_VARARGS,
     "attr_stats(attr, starts, durs, selfs, rows, dur_sum, self_sum, min_dur, max_dur, first) -> bool"},
    {"program_runs", program_runs, METH_VARARGS,
     "program_runs(kid, starts, durs, anchor, nk, run_key, run_start, run_end, at_most=False) -> runs"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_passes",
    "Op-table passes for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__passes(void) {
    return PyModule_Create(&module);
}
