/*
 * traceview._fastxplane: decode the XEvents of one serialized XLine into flat int64 arrays.
 *
 * Wire format (xla/tsl/profiler/protobuf/xplane.proto): XLine.events = field 4 (length-
 * delimited XEvent); XLine.timestamp_ns = field 3 (varint). XEvent: metadata_id = 1,
 * offset_ps = 2, duration_ps = 3, stats = 4 (length-delimited, repeated), num_occurrences = 5.
 * int64 fields are plain varints (two's complement, 10 bytes when negative).
 *
 * decode_line(buf, stat_id=-1, stat_id2=-1) -> (timestamp_ns, n, mids, offsets, durations,
 *                                  occurrences, has_stats, stat_values, stat_values2)
 * where the arrays are bytes objects holding n native int64 (has_stats: n uint8), and
 * stat_values holds, per event, the integer value of the event's XStat whose metadata_id is
 * stat_id (XStat.int64_value = 4 or uint64_value = 3), or -1 when absent (stat_values2 the
 * same for stat_id2). TPU events carry their device-clock offset and duration this way
 * (``device_offset_ps``, ``device_duration_ps``).
 * Raises ValueError on malformed input (truncated varint, length past the end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    while (*p < end && shift < 70) {
        uint8_t b = **p;
        (*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) { *out = v; return 1; }
        shift += 7;
    }
    return 0;
}

static int skip_field(const uint8_t **p, const uint8_t *end, int wt) {
    uint64_t tmp;
    switch (wt) {
    case 0: return read_varint(p, end, &tmp);
    case 1: if (end - *p < 8) return 0; *p += 8; return 1;
    case 5: if (end - *p < 4) return 0; *p += 4; return 1;
    case 2:
        if (!read_varint(p, end, &tmp)) return 0;
        if (tmp > (uint64_t)(end - *p)) return 0;
        *p += tmp; return 1;
    default: return 0;
    }
}

typedef struct { int64_t *data; Py_ssize_t n, cap; } vec64;

static int push64(vec64 *v, int64_t x) {
    if (v->n == v->cap) {
        Py_ssize_t nc = v->cap ? v->cap * 2 : 1024;
        int64_t *d = (int64_t *)PyMem_Realloc(v->data, nc * sizeof(int64_t));
        if (!d) return 0;
        v->data = d; v->cap = nc;
    }
    v->data[v->n++] = x;
    return 1;
}

static int stat_int(const uint8_t *q, const uint8_t *qe, long long want, int64_t *out,
                    long long want2, int64_t *out2) {
    /* parse one XStat; if its metadata_id is want (want2) and it holds an int, store it */
    int64_t id = -1, val = 0; int have = 0;
    while (q < qe) {
        uint64_t k, v;
        if (!read_varint(&q, qe, &k)) return 0;
        int f = (int)(k >> 3), w = (int)(k & 7);
        if (w == 0 && (f == 1 || f == 3 || f == 4)) {
            if (!read_varint(&q, qe, &v)) return 0;
            if (f == 1) id = (int64_t)v; else { val = (int64_t)v; have = 1; }
        } else if (!skip_field(&q, qe, w)) return 0;
    }
    if (have && id == want) *out = val;
    if (have && id == want2) *out2 = val;
    return 1;
}

static PyObject *decode_line(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long want = -1, want2 = -1;
    if (!PyArg_ParseTuple(args, "y*|LL", &view, &want, &want2)) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    vec64 mids = {0}, offs = {0}, durs = {0}, occs = {0}, stats = {0}, svals = {0}, svals2 = {0};
    int64_t ts = 0;
    int ok = 1;
    const char *err = "malformed XLine";
    while (p < end && ok) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) { ok = 0; err = "truncated field key"; break; }
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 3 && wt == 0) {
            uint64_t v; if (!read_varint(&p, end, &v)) { ok = 0; err = "truncated timestamp"; break; }
            ts = (int64_t)v;
        } else if (field == 4 && wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) { ok = 0; err = "event length past the end"; break; }
            const uint8_t *q = p, *qe = p + len;
            int64_t mid = 0, off = 0, dur = 0, occ = 0, st = 0, sv = -1, sv2 = -1;
            while (q < qe) {
                uint64_t k2;
                if (!read_varint(&q, qe, &k2)) { ok = 0; err = "truncated event field"; break; }
                int f2 = (int)(k2 >> 3), w2 = (int)(k2 & 7);
                uint64_t v;
                if (w2 == 0 && (f2 == 1 || f2 == 2 || f2 == 3 || f2 == 5)) {
                    if (!read_varint(&q, qe, &v)) { ok = 0; err = "truncated event varint"; break; }
                    if (f2 == 1) mid = (int64_t)v;
                    else if (f2 == 2) { off = (int64_t)v; occ = 0; }
                    else if (f2 == 3) dur = (int64_t)v;
                    else { occ = (int64_t)v; off = 0; }
                } else if (f2 == 4 && w2 == 2) {
                    uint64_t sl;
                    st = 1;
                    if (!read_varint(&q, qe, &sl) || sl > (uint64_t)(qe - q)) { ok = 0; err = "stat length past the end"; break; }
                    if ((want >= 0 || want2 >= 0) && !stat_int(q, q + sl, want, &sv, want2, &sv2)) { ok = 0; err = "bad stat"; break; }
                    q += sl;
                } else {
                    if (!skip_field(&q, qe, w2)) { ok = 0; err = "bad event field"; break; }
                }
            }
            if (!ok) break;
            if (!push64(&mids, mid) || !push64(&offs, off) || !push64(&durs, dur) ||
                !push64(&occs, occ) || !push64(&stats, st) || !push64(&svals, sv) || !push64(&svals2, sv2)) { ok = 0; err = "out of memory"; break; }
            p = qe;
        } else {
            if (!skip_field(&p, end, wt)) { ok = 0; err = "bad line field"; break; }
        }
    }
    PyBuffer_Release(&view);
    PyObject *res = NULL;
    if (ok) {
        Py_ssize_t n = mids.n;
        PyObject *flags = PyBytes_FromStringAndSize(NULL, n);
        if (flags) {
            char *fb = PyBytes_AS_STRING(flags);
            for (Py_ssize_t i = 0; i < n; i++) fb[i] = (char)(stats.data[i] != 0);
            res = Py_BuildValue("(LnNNNNNNN)", (long long)ts, n,
                PyBytes_FromStringAndSize((const char *)mids.data, n * 8),
                PyBytes_FromStringAndSize((const char *)offs.data, n * 8),
                PyBytes_FromStringAndSize((const char *)durs.data, n * 8),
                PyBytes_FromStringAndSize((const char *)occs.data, n * 8),
                flags,
                PyBytes_FromStringAndSize((const char *)svals.data, n * 8),
                PyBytes_FromStringAndSize((const char *)svals2.data, n * 8));
        }
    } else {
        PyErr_SetString(PyExc_ValueError, err);
    }
    PyMem_Free(mids.data); PyMem_Free(offs.data); PyMem_Free(durs.data);
    PyMem_Free(occs.data); PyMem_Free(stats.data); PyMem_Free(svals.data); PyMem_Free(svals2.data);
    return res;
}

static PyMethodDef methods[] = {
    {"decode_line", decode_line, METH_VARARGS,
     "decode_line(buf, stat_id=-1, stat_id2=-1) -> (timestamp_ns, n, mids, offsets, durations, occurrences, has_stats, stat_values, stat_values2)"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastxplane",
    "Fast XLine event decoder for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__fastxplane(void) { return PyModule_Create(&module); }
