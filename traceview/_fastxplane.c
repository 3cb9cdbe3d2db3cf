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
 *
 * line_header(buf) -> (id, display_id, name, display_name, timestamp_ns, duration_ps): the
 * XLine's own fields, skipping its events (name and display_name decoded as strict UTF-8).
 *
 * count_events(buf) -> n: the number of XEvents in a serialized XLine.
 *
 * All three release the GIL while they walk the bytes (the buffer is held through the
 * buffer protocol), so lines can be decoded in parallel threads.
 * Raise ValueError on malformed input (truncated varint, length past the end, bad UTF-8).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    if (q < end && !(*q & 0x80)) { *out = *q; *p = q + 1; return 1; }  /* one-byte fast path */
    uint64_t v = 0;
    int shift = 0;
    while (q < end && shift < 70) {
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) { *out = v; *p = q; return 1; }
        shift += 7;
    }
    return 0;
}

/* a field number protobuf refuses (0, or past 2^29 - 1): the Python decoder refuses it too */
static inline int bad_key(uint64_t key) {
    uint64_t f = key >> 3;
    return f == 0 || f > 0x1FFFFFFFu;
}

/* Skip the value of the field whose key was just read. Groups (wire types 3/4, as protobuf
 * still accepts them for unknown fields) are skipped to their matching end tag; an end tag
 * without a start, a mismatched one or nesting past 100 levels is malformed, as for protobuf. */
static int skip_group(const uint8_t **p, const uint8_t *end, uint64_t field, int depth);

static int skip_field_d(const uint8_t **p, const uint8_t *end, uint64_t key, int depth) {
    uint64_t tmp;
    switch ((int)(key & 7)) {
    case 0: return read_varint(p, end, &tmp);
    case 1: if (end - *p < 8) return 0; *p += 8; return 1;
    case 5: if (end - *p < 4) return 0; *p += 4; return 1;
    case 2:
        if (!read_varint(p, end, &tmp)) return 0;
        if (tmp > (uint64_t)(end - *p)) return 0;
        *p += tmp; return 1;
    case 3: return skip_group(p, end, key >> 3, depth + 1);
    default: return 0;
    }
}

static int skip_group(const uint8_t **p, const uint8_t *end, uint64_t field, int depth) {
    if (depth > 100) return 0;
    for (;;) {
        uint64_t k;
        if (!read_varint(p, end, &k) || bad_key(k)) return 0;
        if ((k & 7) == 4) return (k >> 3) == field;
        if (!skip_field_d(p, end, k, depth)) return 0;
    }
}

static int skip_field(const uint8_t **p, const uint8_t *end, uint64_t key) {
    return skip_field_d(p, end, key, 0);
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
        } else if (!skip_field(&q, qe, k)) return 0;
    }
    if (have && want >= 0 && id == want) *out = val;  /* -1 means "not asked" */
    if (have && want2 >= 0 && id == want2) *out2 = val;
    return 1;
}

/* Pass 1: count the events and read timestamp_ns; returns NULL or an error message. */
static const char *scan_line(const uint8_t *p, const uint8_t *end, Py_ssize_t *n_out, int64_t *ts_out) {
    Py_ssize_t n = 0;
    int64_t ts = 0;
    while (p < end) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) return "truncated field key";
        if (bad_key(key)) return "bad field number";
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 3 && wt == 0) {
            uint64_t v; if (!read_varint(&p, end, &v)) return "truncated timestamp";
            ts = (int64_t)v;
        } else if (field == 4 && wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return "event length past the end";
            p += len;
            n++;
        } else if (!skip_field(&p, end, key)) return "bad line field";
    }
    *n_out = n;
    *ts_out = ts;
    return NULL;
}

typedef struct { int64_t *mids, *offs, *durs, *occs, *svals, *svals2; uint8_t *flags; } out_arrays;

/* Pass 2: fill the arrays (exactly n events, as counted by scan_line). */
static const char *fill_line(const uint8_t *p, const uint8_t *end, out_arrays *o, long long want, long long want2) {
    Py_ssize_t i = 0;
    int any_stat = (want >= 0 || want2 >= 0);
    while (p < end) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) return "truncated field key";
        if (bad_key(key)) return "bad field number";
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 4 && wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return "event length past the end";
            const uint8_t *q = p, *qe = p + len;
            int64_t mid = 0, off = 0, dur = 0, occ = 0, sv = -1, sv2 = -1;
            uint8_t st = 0;
            while (q < qe) {
                uint64_t k2;
                if (!read_varint(&q, qe, &k2)) return "truncated event field";
                if (bad_key(k2)) return "bad event field number";
                int f2 = (int)(k2 >> 3), w2 = (int)(k2 & 7);
                uint64_t v;
                if (w2 == 0 && (f2 == 1 || f2 == 2 || f2 == 3 || f2 == 5)) {
                    if (!read_varint(&q, qe, &v)) return "truncated event varint";
                    if (f2 == 1) mid = (int64_t)v;
                    else if (f2 == 2) { off = (int64_t)v; occ = 0; }
                    else if (f2 == 3) dur = (int64_t)v;
                    else { occ = (int64_t)v; off = 0; }
                } else if (f2 == 4 && w2 == 2) {
                    uint64_t sl;
                    st = 1;
                    if (!read_varint(&q, qe, &sl) || sl > (uint64_t)(qe - q)) return "stat length past the end";
                    if (any_stat && !stat_int(q, q + sl, want, &sv, want2, &sv2)) return "bad stat";
                    q += sl;
                } else if (!skip_field(&q, qe, k2)) return "bad event field";
            }
            o->mids[i] = mid; o->offs[i] = off; o->durs[i] = dur; o->occs[i] = occ;
            o->flags[i] = st; o->svals[i] = sv; o->svals2[i] = sv2;
            i++;
            p = qe;
        } else if (!skip_field(&p, end, key)) return "bad line field";
    }
    return NULL;
}

static PyObject *decode_line(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long want = -1, want2 = -1;
    if (!PyArg_ParseTuple(args, "y*|LL", &view, &want, &want2)) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    Py_ssize_t n = 0;
    int64_t ts = 0;
    const char *err;
    Py_BEGIN_ALLOW_THREADS
    err = scan_line(p, end, &n, &ts);
    Py_END_ALLOW_THREADS
    if (err) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, err); return NULL; }
    PyObject *b[7] = {NULL};
    for (int k = 0; k < 7; k++) {
        b[k] = PyBytes_FromStringAndSize(NULL, k == 4 ? n : n * 8);
        if (!b[k]) { for (int j = 0; j < k; j++) Py_DECREF(b[j]); PyBuffer_Release(&view); return NULL; }
    }
    out_arrays o = {(int64_t *)PyBytes_AS_STRING(b[0]), (int64_t *)PyBytes_AS_STRING(b[1]),
                    (int64_t *)PyBytes_AS_STRING(b[2]), (int64_t *)PyBytes_AS_STRING(b[3]),
                    (int64_t *)PyBytes_AS_STRING(b[5]), (int64_t *)PyBytes_AS_STRING(b[6]),
                    (uint8_t *)PyBytes_AS_STRING(b[4])};
    Py_BEGIN_ALLOW_THREADS
    err = fill_line(p, end, &o, want, want2);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err) {
        for (int k = 0; k < 7; k++) Py_DECREF(b[k]);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return Py_BuildValue("(LnNNNNNNN)", (long long)ts, n, b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
}

static PyObject *line_header(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    int64_t id = 0, display_id = 0, ts = 0, dur = 0;
    const uint8_t *name = NULL, *dname = NULL;
    Py_ssize_t name_len = 0, dname_len = 0;
    const char *err = NULL;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) { err = "truncated field key"; break; }
        if (bad_key(key)) { err = "bad field number"; break; }
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (wt == 0 && (field == 1 || field == 3 || field == 9 || field == 10)) {
            if (!read_varint(&p, end, &v)) { err = "truncated varint"; break; }
            if (field == 1) id = (int64_t)v;
            else if (field == 3) ts = (int64_t)v;
            else if (field == 9) dur = (int64_t)v;
            else display_id = (int64_t)v;
        } else if (wt == 2 && (field == 2 || field == 11)) {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) { err = "string length past the end"; break; }
            if (field == 2) { name = p; name_len = (Py_ssize_t)v; }
            else { dname = p; dname_len = (Py_ssize_t)v; }
            p += v;
        } else if (!skip_field(&p, end, key)) { err = "bad line field"; break; }
    }
    Py_END_ALLOW_THREADS
    if (err) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, err); return NULL; }
    PyObject *n1 = PyUnicode_DecodeUTF8(name ? (const char *)name : "", name_len, "strict");
    PyObject *n2 = n1 ? PyUnicode_DecodeUTF8(dname ? (const char *)dname : "", dname_len, "strict") : NULL;
    PyBuffer_Release(&view);
    if (!n1 || !n2) { Py_XDECREF(n1); return NULL; }
    return Py_BuildValue("(LLNNLL)", (long long)id, (long long)display_id, n1, n2, (long long)ts, (long long)dur);
}

static PyObject *count_events(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Py_ssize_t n = 0;
    int64_t ts = 0;
    const char *err;
    Py_BEGIN_ALLOW_THREADS
    err = scan_line((const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len, &n, &ts);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err) { PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"decode_line", decode_line, METH_VARARGS,
     "decode_line(buf, stat_id=-1, stat_id2=-1) -> (timestamp_ns, n, mids, offsets, durations, occurrences, has_stats, stat_values, stat_values2)"},
    {"line_header", line_header, METH_VARARGS,
     "line_header(buf) -> (id, display_id, name, display_name, timestamp_ns, duration_ps)"},
    {"count_events", count_events, METH_VARARGS, "count_events(buf) -> number of XEvents in the XLine"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastxplane",
    "Fast XLine event decoder for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__fastxplane(void) { return PyModule_Create(&module); }
