/*
 * traceview.read.xplane._decode: the XSpace wire decoder (optional accelerator of
 * traceview.read.xplane.wire; the protobuf fallbacks there give the same arrays).
 *
 * Wire format (OpenXLA's profiler schema, xplane.proto): XLine.events = field 4 (length-
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
 * line_header(buf, with_count=False) -> (id, display_id, name, display_name, timestamp_ns,
 * duration_ps): the XLine's own fields, skipping its events (name and display_name decoded as
 * strict UTF-8); with_count: (that tuple, the number of events), from the same walk.
 *
 * count_events(buf) -> n: the number of XEvents in a serialized XLine.
 *
 * decode_annotated(buf, ids, slots, nkey, nslot, n=-1) -> per-event columns of a GPU stream / CPU
 * thunk / host XLine (offsets, durations, occurrences, has_stats, the event's combo id and the
 * per-event stat columns) and, once per distinct (metadata_id, key stat values), its combo
 * row; str / bytes stat values interned once per line (see its comment below);
 * decode_annotated_into(piece, ..., n, arrays..., index) the same of a line_layout piece,
 * written into caller-owned arrays from event index on.
 *
 * Reading a memory-mapped XSpace in place (traceview.read.xplane.wire.map_xspace):
 *   scan_message(buf, lo, hi) -> the top-level fields of buf[lo:hi] as byte ranges;
 *   scan_plane(buf, lo, hi, min_entries) -> an XPlane's other fields, its XLines' ranges and,
 *     for a large event_metadata map, its entries' keys and ranges (parsed on demand);
 *   copy_bytes(buf, lo, hi) -> bytes, guarded against a file that shrinks meanwhile;
 *   line_layout(buf, target, with_counts=False) -> (n_events, line_header's tuple, piece bounds[,
 *     the events before each bound]);
 *   decode_tpu(piece, base_ps, stat_off, stat_dur, mids, starts, durs, aligned, flags, i)
 *     -> events of a TPU line piece written into caller-owned arrays from index i.
 *
 * The decoders release the GIL while they walk the bytes (the buffer is held through the
 * buffer protocol), so lines can be decoded in parallel threads.
 * Raise ValueError on malformed input (truncated varint, length past the end, bad UTF-8).
 */
#define _GNU_SOURCE  /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <setjmp.h>

/* ---- reading a file that another program truncates -----------------------------------
 * The readers walk memory-mapped files; if the file shrinks meanwhile, touching a page past
 * its new end raises SIGBUS, which would kill the process (a notebook kernel included).
 * Every walk over caller memory runs under TV_GUARD: a SIGBUS in the guarded thread jumps
 * back and the call fails with ValueError(TV_CHANGED). A SIGBUS anywhere else is handed to
 * the handler that was installed before ours (or the default action). */
#define TV_CHANGED "the file changed while it was read (truncated or rewritten by another program)"
static __thread sigjmp_buf *volatile tv_guard = NULL;  /* volatile: the stores around a guarded memcpy must not be optimized away */
static struct sigaction tv_prev_bus;

static void tv_on_sigbus(int sig, siginfo_t *info, void *uctx) {
    (void)sig; (void)info; (void)uctx;
    if (tv_guard) siglongjmp(*tv_guard, 1);
    sigaction(SIGBUS, &tv_prev_bus, NULL);  /* not ours: the faulting access re-runs into it */
}

static void tv_install_guard(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = tv_on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &tv_prev_bus);
}

#define TV_GUARD(err, ...) do { \
        sigjmp_buf tv_jb_; \
        sigjmp_buf *volatile tv_prev_ = tv_guard; \
        if (sigsetjmp(tv_jb_, 1)) { tv_guard = tv_prev_; (err) = TV_CHANGED; } \
        else { tv_guard = &tv_jb_; __VA_ARGS__; tv_guard = tv_prev_; } \
    } while (0)

#if defined(__GNUC__)
#define TV_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define TV_LIKELY(x) (x)
#endif

/* Read one base-128 varint (at most 10 bytes; bits past 64 are dropped, as protobuf does).
 * With 8 or more bytes left, varints of up to 8 bytes are decoded without a branch per byte:
 * one 8-byte load, the first byte without its continuation bit found by a count of trailing
 * zeros, the 7-bit groups packed by three mask-and-shift steps. Longer ones and the last
 * bytes of the buffer take the checked loop. Returns 0 when truncated or over 10 bytes. */
static inline int read_varint_h(const uint8_t **p, const uint8_t *end, const uint8_t *hard, uint64_t *out) {
    /* hard: the end of readable memory (>= end): the 8-byte load may look past end, never past hard */
    const uint8_t *q = *p;
    if (q < end && !(*q & 0x80)) { *out = *q; *p = q + 1; return 1; }  /* one-byte fast path */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (TV_LIKELY(hard - q >= 8)) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t stop = ~w & 0x8080808080808080ULL;
        if (TV_LIKELY(stop != 0)) {
            int bits = __builtin_ctzll(stop) + 1;  /* 8 * (bytes used) */
            uint64_t x = (bits == 64 ? w : (w & ((1ULL << bits) - 1))) & 0x7F7F7F7F7F7F7F7FULL;
            x = ((x & 0x7F007F007F007F00ULL) >> 1) | (x & 0x007F007F007F007FULL);
            x = ((x & 0x3FFF00003FFF0000ULL) >> 2) | (x & 0x00003FFF00003FFFULL);
            x = ((x & 0x0FFFFFFF00000000ULL) >> 4) | (x & 0x000000000FFFFFFFULL);
            if (TV_LIKELY((bits >> 3) <= end - q)) {
                *out = x;
                *p = q + (bits >> 3);
                return 1;
            }
            return 0;  /* runs past end: truncated */
        }
    }
#endif
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

static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    return read_varint_h(p, end, end, out);
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

#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int stat_int(const uint8_t *q, const uint8_t *qe, const uint8_t *hard, long long want, int64_t *out,
                    long long want2, int64_t *out2) {
    /* parse one XStat; if its metadata_id is want (want2) and it holds an int, store it.
     * hard: end of readable memory (read_varint_h) */
    int64_t id = -1, val = 0; int have = 0;
    while (q < qe) {
        uint64_t k, v;
        if (!read_varint_h(&q, qe, hard, &k)) return 0;
        int f = (int)(k >> 3), w = (int)(k & 7);
        if (w == 0 && (f == 1 || f == 3 || f == 4)) {
            if (!read_varint_h(&q, qe, hard, &v)) return 0;
            if (f == 1) id = (int64_t)v; else { val = (int64_t)v; have = 1; }
        } else if (!skip_field(&q, qe, k)) return 0;
    }
    if (have && want >= 0 && id == want) *out = val;  /* -1 means "not asked" */
    if (have && want2 >= 0 && id == want2) *out2 = val;
    return 1;
}

/* One XEvent's fields (the caller's defaults: 0 and -1 for absent stats). */
typedef struct { int64_t mid, off, dur, occ, sv, sv2; uint8_t has_stats; } tv_event;

/* Parse the XEvent in q..qe into ev (offset_ps and num_occurrences exclude each other: the
 * later one wins); the stat values asked for (want, want2; -1: not asked) are read when
 * any_stat. hard: end of readable memory (read_varint_h). Returns NULL or the fault. Shared
 * by fill_line and decode_tpu_body; always inlined into their loops. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline const char *parse_event(const uint8_t *q, const uint8_t *qe, const uint8_t *hard, int any_stat,
                                      long long want, long long want2, tv_event *ev) {
    ev->mid = ev->off = ev->dur = ev->occ = 0;
    ev->sv = ev->sv2 = -1;
    ev->has_stats = 0;
    while (q < qe) {
        uint64_t k2;
        if (!read_varint_h(&q, qe, hard, &k2)) return "truncated event field";
        if (bad_key(k2)) return "bad event field number";
        int f2 = (int)(k2 >> 3), w2 = (int)(k2 & 7);
        uint64_t v;
        if (w2 == 0 && (f2 == 1 || f2 == 2 || f2 == 3 || f2 == 5)) {
            if (!read_varint_h(&q, qe, hard, &v)) return "truncated event varint";
            if (f2 == 1) ev->mid = (int64_t)v;
            else if (f2 == 2) { ev->off = (int64_t)v; ev->occ = 0; }
            else if (f2 == 3) ev->dur = (int64_t)v;
            else { ev->occ = (int64_t)v; ev->off = 0; }
        } else if (f2 == 4 && w2 == 2) {
            uint64_t sl;
            ev->has_stats = 1;
            if (!read_varint_h(&q, qe, hard, &sl) || sl > (uint64_t)(qe - q)) return "stat length past the end";
            if (any_stat && !stat_int(q, q + sl, hard, want, &ev->sv, want2, &ev->sv2)) return "bad stat";
            q += sl;
        } else if (!skip_field(&q, qe, k2)) return "bad event field";
    }
    return NULL;
}

/* Pass 1: count the events and read timestamp_ns; returns NULL or an error message. */
#if defined(__GNUC__)
__attribute__((noinline))  /* called under TV_GUARD: kept out of the sigsetjmp frame */
#endif
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
#if defined(__GNUC__)
__attribute__((noinline))  /* called under TV_GUARD: kept out of the sigsetjmp frame */
#endif
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
            const uint8_t *qe = p + len;
            tv_event ev;
            const char *fault = parse_event(p, qe, end, any_stat, want, want2, &ev);
            if (fault) return fault;
            o->mids[i] = ev.mid; o->offs[i] = ev.off; o->durs[i] = ev.dur; o->occs[i] = ev.occ;
            o->flags[i] = ev.has_stats; o->svals[i] = ev.sv; o->svals2[i] = ev.sv2;
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
    err = NULL;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = scan_line(p, end, &n, &ts));
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
    TV_GUARD(err, err = fill_line(p, end, &o, want, want2));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err) {
        for (int k = 0; k < 7; k++) Py_DECREF(b[k]);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return Py_BuildValue("(LnNNNNNNN)", (long long)ts, n, b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
}

/* One walk over a serialized XLine, shared by line_header and line_layout: the line's own
 * fields (events skipped and counted) and, when target > 0, piece boundaries at field
 * boundaries every >= target bytes. Names are copied out of the (possibly mapped) buffer
 * into w->names (name, then display_name). Run under TV_GUARD by the callers. */
typedef struct {
    int64_t id, display_id, ts, dur;
    Py_ssize_t name_len, dname_len, n, nb, cap;
    Py_ssize_t *bounds;  /* NULL when no pieces are asked for */
    Py_ssize_t *counts;  /* per bound, the events before it (with bounds) */
    char *names;
} line_walk;

#if defined(__GNUC__)
__attribute__((noinline))  /* called under TV_GUARD: kept out of the sigsetjmp frame */
#endif
static const char *walk_line(const uint8_t *base, const uint8_t *end, Py_ssize_t target, line_walk *w) {
    const uint8_t *p = base, *last = base, *name = NULL, *dname = NULL;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return "truncated field key";
        if (bad_key(key)) return "bad field number";
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 4 && wt == 2) {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return "event length past the end";
            p += v; w->n++;
        } else if (wt == 0 && (field == 1 || field == 3 || field == 9 || field == 10)) {
            if (!read_varint(&p, end, &v)) return "truncated varint";
            if (field == 1) w->id = (int64_t)v;
            else if (field == 3) w->ts = (int64_t)v;
            else if (field == 9) w->dur = (int64_t)v;
            else w->display_id = (int64_t)v;
        } else if (wt == 2 && (field == 2 || field == 11)) {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return "string length past the end";
            if (field == 2) { name = p; w->name_len = (Py_ssize_t)v; }
            else { dname = p; w->dname_len = (Py_ssize_t)v; }
            p += v;
        } else if (!skip_field(&p, end, key)) return "bad line field";
        if (w->bounds && p - last >= target && p < end) {
            if (w->nb + 1 >= w->cap) {
                Py_ssize_t *nbuf = (Py_ssize_t *)PyMem_RawRealloc(w->bounds, sizeof(Py_ssize_t) * (size_t)(w->cap * 2));
                if (!nbuf) return "out of memory";
                w->bounds = nbuf;
                nbuf = (Py_ssize_t *)PyMem_RawRealloc(w->counts, sizeof(Py_ssize_t) * (size_t)(w->cap * 2));
                if (!nbuf) return "out of memory";
                w->counts = nbuf; w->cap *= 2;
            }
            w->counts[w->nb] = w->n;
            w->bounds[w->nb++] = p - base;
            last = p;
        }
    }
    w->names = (char *)PyMem_RawMalloc((size_t)(w->name_len + w->dname_len + 1));
    if (!w->names) return "out of memory";
    if (w->name_len) memcpy(w->names, name, (size_t)w->name_len);
    if (w->dname_len) memcpy(w->names + w->name_len, dname, (size_t)w->dname_len);
    return NULL;
}

/* Run walk_line over a buffer under the guard; returns 0 (ValueError set) on failure. */
static int walk_buffer(Py_buffer *view, Py_ssize_t target, line_walk *w) {
    const uint8_t *p = (const uint8_t *)view->buf, *end = p + view->len;
    const char *err = NULL;
    memset(w, 0, sizeof *w);
    if (target > 0) {
        w->cap = 16; w->nb = 1;
        w->bounds = (Py_ssize_t *)PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)w->cap);
        w->counts = (Py_ssize_t *)PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)w->cap);
        if (!w->bounds || !w->counts) {
            PyMem_RawFree(w->bounds); PyMem_RawFree(w->counts);
            w->bounds = w->counts = NULL;
            PyErr_NoMemory(); return 0;
        }
        w->bounds[0] = 0; w->counts[0] = 0;
    }
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = walk_line(p, end, target, w));
    Py_END_ALLOW_THREADS
    if (err) {
        PyMem_RawFree(w->bounds); PyMem_RawFree(w->counts); PyMem_RawFree(w->names);
        w->bounds = w->counts = NULL; w->names = NULL;
        PyErr_SetString(PyExc_ValueError, err);
        return 0;
    }
    return 1;
}

/* (id, display_id, name, display_name, timestamp_ns, duration_ps); names strict UTF-8. */
static PyObject *header_tuple(line_walk *w) {
    PyObject *n1 = PyUnicode_DecodeUTF8(w->names, w->name_len, "strict");
    PyObject *n2 = n1 ? PyUnicode_DecodeUTF8(w->names + w->name_len, w->dname_len, "strict") : NULL;
    if (!n1 || !n2) { Py_XDECREF(n1); return NULL; }
    return Py_BuildValue("(LLNNLL)", (long long)w->id, (long long)w->display_id, n1, n2, (long long)w->ts,
                         (long long)w->dur);
}

static PyObject *line_header(PyObject *self, PyObject *args) {
    Py_buffer view;
    line_walk w;
    int with_count = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &with_count)) return NULL;
    int ok = walk_buffer(&view, 0, &w);
    PyBuffer_Release(&view);
    if (!ok) return NULL;
    PyObject *out = header_tuple(&w);
    PyMem_RawFree(w.names);
    if (out && with_count) {
        PyObject *both = Py_BuildValue("(Nn)", out, w.n);
        return both;
    }
    return out;
}

static PyObject *count_events(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Py_ssize_t n = 0;
    int64_t ts = 0;
    const char *err = NULL;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = scan_line((const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len, &n, &ts));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err) { PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return PyLong_FromSsize_t(n);
}

/* ---- zero-copy reading of a memory-mapped XSpace ------------------------------------ */

/* scan_message(buf, lo, hi) -> [(field, wire_type, tag_start, value_start, value_end), ...]:
 * the top-level fields of the message bytes buf[lo:hi]; for a length-delimited field the
 * value is its payload, for others the encoded value. */
static PyObject *scan_message(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &lo, &hi)) return NULL;
    if (lo < 0 || hi > view.len || lo > hi) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, "range outside the buffer"); return NULL; }
    const uint8_t *base = (const uint8_t *)view.buf, *p = base + lo, *end = base + hi;
    const char *err = NULL;
    /* fields as (field, wire type, tag start, value start, value end), gathered under the guard */
    Py_ssize_t n = 0, cap = 64;
    int64_t *f = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * 5 * (size_t)cap);
    if (!f) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    TV_GUARD(err,
    while (p < end) {
        const uint8_t *tag = p;
        uint64_t key;
        if (!read_varint(&p, end, &key)) { err = "truncated field key"; break; }
        if (bad_key(key)) { err = "bad field number"; break; }
        int wt = (int)(key & 7);
        const uint8_t *vs = p;
        if (wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) { err = "length past the end"; break; }
            vs = p;
            p += len;
        } else if (wt == 4) { err = "unexpected end-group tag"; break; }
        else if (!skip_field(&p, end, key)) { err = "bad field value"; break; }
        if (n == cap) {
            int64_t *g = (int64_t *)PyMem_RawRealloc(f, sizeof(int64_t) * 5 * (size_t)(cap * 2));
            if (!g) { err = "out of memory"; break; }
            f = g; cap *= 2;
        }
        int64_t *r = f + 5 * n++;
        r[0] = (int64_t)(key >> 3); r[1] = wt; r[2] = tag - base; r[3] = vs - base; r[4] = p - base;
    });
    PyBuffer_Release(&view);
    if (err) { PyMem_RawFree(f); PyErr_SetString(PyExc_ValueError, err); return NULL; }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int64_t *r = f + 5 * i;
        PyObject *t = Py_BuildValue("(iinnn)", (int)r[0], (int)r[1], (Py_ssize_t)r[2], (Py_ssize_t)r[3], (Py_ssize_t)r[4]);
        if (!t) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, t);
    }
    PyMem_RawFree(f);
    return out;
}

/* scan_plane(buf, lo, hi, min_entries) -> (rest, lines, entries, span): one XPlane message in
 * buf[lo:hi] split for map_xspace. ``lines``: the (value start, value end) of each XLine (field
 * 3). ``rest``: every other field's bytes, in file order, to be parsed by protobuf; the
 * event_metadata map entries (field 4) among them unless there are min_entries or more, in
 * which case they are left out and ``entries`` is (keys, starts, ends): bytes of native int64
 * per entry in file order, its key (entry field 1; 0 when absent) and the byte range of its
 * XEventMetadata (entry field 2; empty when absent; the last of repeated fields wins, as
 * protobuf parses). ``entries`` is None otherwise. ``span``: (start, end) of the metadata
 * entries' bytes when they lie side by side (protobuf writes them so), else None. ValueError
 * on a malformed plane or entry. */
static PyObject *scan_plane(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi, min_entries;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &lo, &hi, &min_entries)) return NULL;
    if (lo < 0 || hi > view.len || lo > hi) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, "range outside the buffer"); return NULL; }
    const uint8_t *base = (const uint8_t *)view.buf, *end = base + hi;
    const char *err = NULL;
    /* pass 1: count the metadata entries and lines */
    Py_ssize_t n_md = 0, n_lines = 0;
    TV_GUARD(err,
    const uint8_t *p = base + lo;
    while (p < end) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) { err = "truncated field key"; break; }
        if (bad_key(key)) { err = "bad field number"; break; }
        int wt = (int)(key & 7);
        if (wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) { err = "length past the end"; break; }
            p += len;
            if ((key >> 3) == 3) n_lines++;
            else if ((key >> 3) == 4) n_md++;
        } else if (wt == 4) { err = "unexpected end-group tag"; break; }
        else if (!skip_field(&p, end, key)) { err = "bad field value"; break; }
    });
    if (err) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, err); return NULL; }
    int lazy = n_md >= min_entries;
    PyObject *rest = PyBytes_FromStringAndSize(NULL, hi - lo);
    PyObject *keys = lazy ? PyBytes_FromStringAndSize(NULL, n_md * 8) : NULL;
    PyObject *starts = lazy ? PyBytes_FromStringAndSize(NULL, n_md * 8) : NULL;
    PyObject *ends = lazy ? PyBytes_FromStringAndSize(NULL, n_md * 8) : NULL;
    int64_t *lines = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * 2 * (size_t)(n_lines + 1));
    if (!rest || (lazy && (!keys || !starts || !ends)) || !lines) {
        Py_XDECREF(rest); Py_XDECREF(keys); Py_XDECREF(starts); Py_XDECREF(ends); PyMem_RawFree(lines);
        PyBuffer_Release(&view); return PyErr_NoMemory();
    }
    char *out = PyBytes_AS_STRING(rest);
    int64_t *ks = lazy ? (int64_t *)PyBytes_AS_STRING(keys) : NULL;
    int64_t *ss = lazy ? (int64_t *)PyBytes_AS_STRING(starts) : NULL;
    int64_t *es = lazy ? (int64_t *)PyBytes_AS_STRING(ends) : NULL;
    Py_ssize_t used = 0, il = 0, im = 0;
    Py_ssize_t md_lo = -1, md_hi = -1;  /* the metadata entries' bytes, while they are adjacent */
    int md_adjacent = 1;
    /* pass 2: copy the kept fields, note the lines and the entries */
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err,
    const uint8_t *p = base + lo;
    while (p < end) {
        const uint8_t *tag = p;
        uint64_t key;
        read_varint(&p, end, &key);
        int wt = (int)(key & 7);
        const uint8_t *vs = p;
        if (wt == 2) {
            uint64_t len;
            read_varint(&p, end, &len);
            vs = p;
            p += len;
        } else skip_field(&p, end, key);
        int64_t field = (int64_t)(key >> 3);
        if (wt == 2 && field == 4) {
            if (md_lo < 0) md_lo = tag - base;
            else if (md_hi != tag - base) md_adjacent = 0;
            md_hi = p - base;
        }
        if (wt == 2 && field == 3 && il < n_lines) {
            lines[2 * il] = vs - base; lines[2 * il + 1] = p - base; il++;
            continue;
        }
        if (wt == 2 && field == 4 && lazy && im < n_md) {
            /* the map entry: key (1, varint) and value (2, length-delimited) */
            const uint8_t *q = vs, *qe = p;
            int64_t k = 0, a = vs - base, b = vs - base;
            while (q < qe) {
                uint64_t ek;
                if (!read_varint(&q, qe, &ek) || bad_key(ek)) { err = "bad event metadata entry"; break; }
                int ewt = (int)(ek & 7);
                if ((ek >> 3) == 1 && ewt == 0) {
                    uint64_t v;
                    if (!read_varint(&q, qe, &v)) { err = "bad event metadata entry"; break; }
                    k = (int64_t)v;
                } else if (ewt == 2) {
                    uint64_t len;
                    if (!read_varint(&q, qe, &len) || len > (uint64_t)(qe - q)) { err = "bad event metadata entry"; break; }
                    if ((ek >> 3) == 2) { a = q - base; b = q + len - base; }
                    q += len;
                } else if (ewt == 4 || !skip_field(&q, qe, ek)) { err = "bad event metadata entry"; break; }
            }
            if (err) break;
            ks[im] = k; ss[im] = a; es[im] = b; im++;
            continue;
        }
        memcpy(out + used, tag, (size_t)(p - tag));
        used += p - tag;
    });
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *line_list = err ? NULL : PyList_New(il);
    for (Py_ssize_t i = 0; line_list && i < il; i++) {
        PyObject *t = Py_BuildValue("(nn)", (Py_ssize_t)lines[2 * i], (Py_ssize_t)lines[2 * i + 1]);
        if (!t) { Py_CLEAR(line_list); break; }
        PyList_SET_ITEM(line_list, i, t);
    }
    PyMem_RawFree(lines);
    if (err || !line_list || _PyBytes_Resize(&rest, used) < 0) {
        Py_XDECREF(rest); Py_XDECREF(keys); Py_XDECREF(starts); Py_XDECREF(ends); Py_XDECREF(line_list);
        if (err) PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    PyObject *span = (md_lo >= 0 && md_adjacent) ? Py_BuildValue("(nn)", md_lo, md_hi) : (Py_INCREF(Py_None), Py_None);
    if (!span) { Py_DECREF(rest); Py_XDECREF(keys); Py_XDECREF(starts); Py_XDECREF(ends); Py_DECREF(line_list); return NULL; }
    if (!lazy) return Py_BuildValue("(NNON)", rest, line_list, Py_None, span);
    return Py_BuildValue("(NN(NNN)N)", rest, line_list, keys, starts, ends, span);
}

/* contains_any(buf, lo, hi, needles) -> bool: whether any of the byte strings ``needles``
 * occurs in buf[lo:hi] (memmem, under the truncation guard, the GIL released). */
static PyObject *contains_any(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    PyObject *needles;
    if (!PyArg_ParseTuple(args, "y*nnO!", &view, &lo, &hi, &PyTuple_Type, &needles)) return NULL;
    if (lo < 0 || hi > view.len || lo > hi) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, "range outside the buffer"); return NULL; }
    const char *err = NULL;
    int found = 0;
    for (Py_ssize_t i = 0; !found && !err && i < PyTuple_GET_SIZE(needles); i++) {
        PyObject *nd = PyTuple_GET_ITEM(needles, i);
        if (!PyBytes_Check(nd)) { PyBuffer_Release(&view); PyErr_SetString(PyExc_TypeError, "needles must be bytes"); return NULL; }
        const char *s = PyBytes_AS_STRING(nd);
        size_t ns = (size_t)PyBytes_GET_SIZE(nd);
        const char *hay = (const char *)view.buf + lo;
        size_t nh = (size_t)(hi - lo);
        Py_BEGIN_ALLOW_THREADS
        TV_GUARD(err, found = memmem(hay, nh, s, ns) != NULL);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (err) { PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return PyBool_FromLong(found);
}

/* copy_bytes(buf, lo, hi) -> bytes: buf[lo:hi] copied under the truncation guard (a plain
 * slice of a mapped file would die of SIGBUS if the file shrank). */
static PyObject *copy_bytes(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &lo, &hi)) return NULL;
    if (lo < 0 || hi > view.len || lo > hi) { PyBuffer_Release(&view); PyErr_SetString(PyExc_ValueError, "range outside the buffer"); return NULL; }
    PyObject *out = PyBytes_FromStringAndSize(NULL, hi - lo);
    if (!out) { PyBuffer_Release(&view); return NULL; }
    const char *err = NULL;
    char *dst = PyBytes_AS_STRING(out);
    const char *src = (const char *)view.buf + lo;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, memcpy(dst, src, (size_t)(hi - lo)));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (err) { Py_DECREF(out); PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return out;
}

/* decode_tpu(buf, base_ps, stat_off, stat_dur, mids, starts, durs, aligned, flags, index) -> n
 * Decode the XEvents of (a field-aligned piece of) a TPU XLine into caller-owned arrays from
 * position index on: mids (uint32), starts / durs / aligned (int64), flags (uint8).
 * aligned = base_ps + offset_ps (the host-aligned start, int64 wrapping); where the event
 * carries both integer stats stat_off (device_offset_ps) and stat_dur (device_duration_ps)
 * start/dur are those and flags bit 0 is set, else start = aligned and dur = duration_ps.
 * flags bit 1: the event is pre-aggregated (num_occurrences > 0; its occurrence count is not
 * returned here). Raises ValueError on malformed bytes or when the arrays are too short. */
typedef struct {
    uint32_t *mids; int64_t *starts, *durs, *aligned; uint8_t *flags;
    Py_ssize_t cap; long long base_ps, want, want2;
} tpu_out;

/* The loop of decode_tpu, in a frame of its own: no sigsetjmp here, so the compiler keeps
 * the cursor and the fields in registers. Writes from *index on; returns NULL or the fault. */
#if defined(__GNUC__)
__attribute__((noinline))  /* its own frame: no sigsetjmp, the cursor stays in registers */
#endif
static const char *decode_tpu_body(const uint8_t *p, const uint8_t *end, const tpu_out *o, Py_ssize_t *index) {
    Py_ssize_t i = *index;
    const long long want = o->want, want2 = o->want2;
    const int any_stat = (want >= 0 || want2 >= 0);
    const char *err = NULL;
    while (p < end) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) { err = "truncated field key"; break; }
        if (bad_key(key)) { err = "bad field number"; break; }
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (field == 4 && wt == 2) {
            uint64_t len;
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) { err = "event length past the end"; break; }
            if (i >= o->cap || i < 0) { err = "output arrays too short"; break; }
            const uint8_t *qe = p + len;
            tv_event ev;
            err = parse_event(p, qe, end, any_stat, want, want2, &ev);
            if (err) break;
            int64_t al = (int64_t)((uint64_t)o->base_ps + (uint64_t)ev.off);
            uint8_t fl = 0;
            o->mids[i] = (uint32_t)ev.mid;
            o->aligned[i] = al;
            if (ev.sv >= 0 && ev.sv2 >= 0) { o->starts[i] = ev.sv; o->durs[i] = ev.sv2; fl |= 1; }
            else { o->starts[i] = al; o->durs[i] = ev.dur; }
            if (ev.occ > 0) fl |= 2;
            if ((uint64_t)ev.mid > 0xFFFFFFFFu) fl |= 4;  /* id does not fit the uint32 column */
            o->flags[i] = fl;
            i++;
            p = qe;
        } else if (!skip_field(&p, end, key)) { err = "bad line field"; break; }
    }
    *index = i;
    return err;
}

static PyObject *decode_tpu(PyObject *self, PyObject *args) {
    Py_buffer view, bm, bs, bd, ba, bf;
    long long base_ps, want, want2;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "y*LLLw*w*w*w*w*n", &view, &base_ps, &want, &want2, &bm, &bs, &bd, &ba, &bf, &index))
        return NULL;
    Py_ssize_t cap = bm.len / 4;
    if (bs.len / 8 < cap) cap = bs.len / 8;
    if (bd.len / 8 < cap) cap = bd.len / 8;
    if (ba.len / 8 < cap) cap = ba.len / 8;
    if (bf.len < cap) cap = bf.len;
    tpu_out o = {(uint32_t *)bm.buf, (int64_t *)bs.buf, (int64_t *)bd.buf, (int64_t *)ba.buf, (uint8_t *)bf.buf,
                 cap, base_ps, want, want2};
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    const char *err = NULL;
    Py_ssize_t i = index;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = decode_tpu_body(p, end, &o, &i));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view); PyBuffer_Release(&bm); PyBuffer_Release(&bs); PyBuffer_Release(&bd);
    PyBuffer_Release(&ba); PyBuffer_Release(&bf);
    if (err) { PyErr_SetString(PyExc_ValueError, err); return NULL; }
    return PyLong_FromSsize_t(i - index);
}

/* line_layout(buf, target, with_counts=False) -> (n_events, header, bounds[, counts]): one
 * pass over a serialized XLine: its event count, its header as line_header gives it, and
 * piece boundaries at field boundaries every >= target bytes (each piece is itself a valid
 * serialization of a subset of the line's fields); with_counts, per bound the events before it
 * (the last: n_events). */
static PyObject *line_layout(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t target;
    int with_counts = 0;
    line_walk w;
    if (!PyArg_ParseTuple(args, "y*n|p", &view, &target, &with_counts)) return NULL;
    if (target < 1) target = 1;
    Py_ssize_t len = view.len;
    int ok = walk_buffer(&view, target, &w);
    PyBuffer_Release(&view);
    if (!ok) return NULL;
    PyObject *head = header_tuple(&w);
    PyMem_RawFree(w.names);
    PyObject *lst = head ? PyList_New(w.nb + 1) : NULL;
    PyObject *cnt = lst && with_counts ? PyList_New(w.nb + 1) : NULL;
    if (!lst || (with_counts && !cnt)) {
        Py_XDECREF(head); Py_XDECREF(lst); PyMem_RawFree(w.bounds); PyMem_RawFree(w.counts);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < w.nb; i++) {
        PyList_SET_ITEM(lst, i, PyLong_FromSsize_t(w.bounds[i]));
        if (cnt) PyList_SET_ITEM(cnt, i, PyLong_FromSsize_t(w.counts[i]));
    }
    PyList_SET_ITEM(lst, w.nb, PyLong_FromSsize_t(len));
    if (cnt) PyList_SET_ITEM(cnt, w.nb, PyLong_FromSsize_t(w.n));
    PyMem_RawFree(w.bounds); PyMem_RawFree(w.counts);
    if (cnt) return Py_BuildValue("(nNNN)", w.n, head, lst, cnt);
    return Py_BuildValue("(nNN)", w.n, head, lst);
}

/* ---- annotated lines (GPU streams, CPU thunk threads, host threads) -----------------------
 * decode_annotated(buf, ids, slots, nkey, nslot, n=-1) -> (timestamp_ns, n, offsets, durations,
 *     occurrences, has_stats, combo, extra_kinds, extra_values, combo_mids, combo_kinds,
 *     combo_values, strings)
 * n: the line's event count when the caller has it (line_header's with_count): the counting
 * pass is skipped and timestamp_ns comes back as 0 (take line_header's); a line that holds
 * another count fails with TV_CHANGED (the bytes changed between the two walks).
 * ids / slots: int64 buffers of equal length: an XStat whose metadata_id is ids[i] goes to
 * slot slots[i] (several ids may share a slot; per event the later stat wins). Slots
 * 0..nkey-1 are key slots: each event's (metadata_id, key slot values) is interned, in order of
 * first appearance, into the line's combos (combo: n uint32 ids; combo_mids: m int64;
 * combo_kinds / combo_values: m x nkey). Slots nkey..nslot-1 are per-event columns
 * (extra_kinds / extra_values: n x (nslot - nkey)). A value is (kind, int64): kind 0 absent,
 * 1 double (its bits), 2 uint64, 3 int64, 4 str (index into strings, a str), 5 bytes (index
 * into strings, a bytes), 6 ref_value, 7 a stat without a value. The arrays are bytes objects
 * (int64 native, has_stats / kinds uint8, combo uint32). str values are decoded as strict
 * UTF-8 (UnicodeDecodeError, a ValueError, otherwise). */
typedef struct { int kind; int64_t val; const uint8_t *s; uint64_t slen; } stat_val;

/* one XStat: its metadata_id and its value (the last oneof field wins). hard: read_varint_h */
static inline int stat_full(const uint8_t *q, const uint8_t *qe, const uint8_t *hard, int64_t *id, stat_val *sv) {
    *id = -1; sv->kind = 7; sv->val = 0; sv->s = NULL; sv->slen = 0;
    while (q < qe) {
        uint64_t k, v;
        if (!read_varint_h(&q, qe, hard, &k)) return 0;
        int f = (int)(k >> 3), w = (int)(k & 7);
        if (w == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if (!read_varint_h(&q, qe, hard, &v)) return 0;
            if (f == 1) *id = (int64_t)v;
            else { sv->kind = f == 3 ? 2 : f == 4 ? 3 : 6; sv->val = (int64_t)v; }
        } else if (w == 1 && f == 2) {
            if (qe - q < 8) return 0;
            memcpy(&sv->val, q, 8); q += 8; sv->kind = 1;
        } else if (w == 2 && (f == 5 || f == 6)) {
            if (!read_varint_h(&q, qe, hard, &v) || v > (uint64_t)(qe - q)) return 0;
            sv->kind = f == 5 ? 4 : 5; sv->s = q; sv->slen = v; q += v;
        } else if (!skip_field(&q, qe, k)) return 0;
    }
    return 1;
}

/* stat_full for the common shape of an XStat, "metadata_id (one byte), then one varint
 * value" (field 3, 4 or 7): 1 when q..qe is exactly that (read as stat_full would), else 0
 * (the caller then runs stat_full) */
static inline int stat_simple(const uint8_t *q, const uint8_t *qe, const uint8_t *hard, int64_t *id, stat_val *sv) {
    if (qe - q < 4 || q[0] != 0x08 || (q[1] & 0x80)) return 0;
    uint8_t k = q[2];
    if (k != 0x38 && k != 0x20 && k != 0x18) return 0;
    const uint8_t *r = q + 3;
    uint64_t v;
    if (!read_varint_h(&r, qe, hard, &v) || r != qe) return 0;
    *id = q[1];
    sv->kind = k == 0x18 ? 2 : k == 0x20 ? 3 : 6; sv->val = (int64_t)v; sv->s = NULL; sv->slen = 0;
    return 1;
}

typedef struct {
    /* strings: arena + (offset, len, kind) per distinct, open-addressing table of indices */
    char *arena; size_t alen, acap;
    int64_t *soff; int64_t *slen; uint8_t *skind; Py_ssize_t ns, scap;
    int64_t *stab; Py_ssize_t stcap;
    /* combos: mid + nkey (kind, value); table of indices */
    int nkey;
    int64_t *cmid; uint8_t *ckind; int64_t *cval; Py_ssize_t nc, ccap;
    int64_t *ctab; Py_ssize_t ctcap;
    /* per event metadata id below ANNOT_LAST: 1 + the combos of its latest events
     * (ANNOT_WAYS, the latest first; 0: none), checked before the table is looked up */
    uint32_t *last; int64_t lcap;
} annot_state;

#define ANNOT_LAST 65536
#define ANNOT_WAYS 4

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL; h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const uint8_t *s, uint64_t n, int kind) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)kind;
    for (uint64_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ULL; }
    return mix64(h);
}

/* index of the string (s, n, kind), interned; -1 when out of memory */
/* *p grown to hold `bytes` bytes (its contents kept); 0, or -1 when out of memory (*p untouched) */
static int grow_to(void **p, size_t bytes) {
    void *q = PyMem_RawRealloc(*p, bytes);
    if (!q) return -1;
    *p = q;
    return 0;
}

static int64_t intern_str(annot_state *a, const uint8_t *s, uint64_t n, int kind) {
    if (2 * (a->ns + 1) > a->stcap) {
        Py_ssize_t cap = a->stcap ? a->stcap * 2 : 64;
        int64_t *t = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (size_t)cap);
        if (!t) return -1;
        for (Py_ssize_t i = 0; i < cap; i++) t[i] = -1;
        for (Py_ssize_t j = 0; j < a->ns; j++) {
            uint64_t h = hash_bytes((const uint8_t *)a->arena + a->soff[j], (uint64_t)a->slen[j], a->skind[j]);
            Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(cap - 1));
            while (t[i] >= 0) i = (i + 1) & (cap - 1);
            t[i] = j;
        }
        PyMem_RawFree(a->stab); a->stab = t; a->stcap = cap;
    }
    uint64_t h = hash_bytes(s, n, kind);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(a->stcap - 1));
    while (a->stab[i] >= 0) {
        int64_t j = a->stab[i];
        if (a->skind[j] == kind && (uint64_t)a->slen[j] == n && memcmp(a->arena + a->soff[j], s, (size_t)n) == 0) return j;
        i = (i + 1) & (a->stcap - 1);
    }
    if (a->ns == a->scap) {
        Py_ssize_t cap = a->scap ? a->scap * 2 : 64;
        if (grow_to((void **)&a->soff, sizeof(int64_t) * (size_t)cap) || grow_to((void **)&a->slen, sizeof(int64_t) * (size_t)cap)
            || grow_to((void **)&a->skind, (size_t)cap)) return -1;
        a->scap = cap;
    }
    if (a->alen + n + 1 > a->acap) {
        size_t cap = a->acap ? a->acap : 4096;
        while (cap < a->alen + n + 1) cap *= 2;
        if (grow_to((void **)&a->arena, cap)) return -1;
        a->acap = cap;
    }
    memcpy(a->arena + a->alen, s, (size_t)n);
    int64_t j = a->ns++;
    a->soff[j] = (int64_t)a->alen; a->slen[j] = (int64_t)n; a->skind[j] = (uint8_t)kind;
    a->alen += n;
    a->stab[i] = j;
    return j;
}

/* hash of a combo: one multiply per key slot, mixed once at the end (only the table's probe
 * order depends on it, not the combo ids) */
static inline uint64_t combo_hash(int64_t mid, const uint8_t *kinds, const int64_t *vals, int nk) {
    uint64_t h = (uint64_t)mid * 0x9E3779B97F4A7C15ULL;
    for (int s = 0; s < nk; s++) {
        h = (h << 27) | (h >> 37);
        h = (h ^ ((uint64_t)kinds[s] << 56) ^ (uint64_t)vals[s]) * 0xff51afd7ed558ccdULL;
    }
    return mix64(h);
}

/* a->last grown to hold metadata id mid (< ANNOT_LAST); 0, or -1 when out of memory */
static int grow_last(annot_state *a, int64_t mid) {
    int64_t cap = a->lcap ? a->lcap : 64;
    while (cap <= mid) cap *= 2;
    if (cap > ANNOT_LAST) cap = ANNOT_LAST;
    if (grow_to((void **)&a->last, sizeof(uint32_t) * ANNOT_WAYS * (size_t)cap)) return -1;
    memset(a->last + a->lcap * ANNOT_WAYS, 0, sizeof(uint32_t) * ANNOT_WAYS * (size_t)(cap - a->lcap));
    a->lcap = cap;
    return 0;
}

/* whether combo j is (mid, kinds, vals) */
static inline int same_combo(const annot_state *a, int64_t j, int64_t mid, const uint8_t *kinds, const int64_t *vals) {
    int nk = a->nkey;
    if (a->cmid[j] != mid) return 0;
    const uint8_t *ck = a->ckind + j * nk;
    const int64_t *cv = a->cval + j * nk;
    for (int s = 0; s < nk; s++)
        if (ck[s] != kinds[s] || cv[s] != vals[s]) return 0;
    return 1;
}

/* combo id of (mid, kinds, vals); -1 when out of memory */
static int64_t intern_combo(annot_state *a, int64_t mid, const uint8_t *kinds, const int64_t *vals) {
    int nk = a->nkey;
    if (2 * (a->nc + 1) > a->ctcap) {
        Py_ssize_t cap = a->ctcap ? a->ctcap * 2 : 256;
        int64_t *t = (int64_t *)PyMem_RawMalloc(sizeof(int64_t) * (size_t)cap);
        if (!t) return -1;
        for (Py_ssize_t i = 0; i < cap; i++) t[i] = -1;
        for (Py_ssize_t j = 0; j < a->nc; j++) {
            uint64_t h = combo_hash(a->cmid[j], a->ckind + j * nk, a->cval + j * nk, nk);
            Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(cap - 1));
            while (t[i] >= 0) i = (i + 1) & (cap - 1);
            t[i] = j;
        }
        PyMem_RawFree(a->ctab); a->ctab = t; a->ctcap = cap;
    }
    uint64_t h = combo_hash(mid, kinds, vals, nk);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)(a->ctcap - 1));
    while (a->ctab[i] >= 0) {
        int64_t j = a->ctab[i];
        if (same_combo(a, j, mid, kinds, vals)) return j;
        i = (i + 1) & (a->ctcap - 1);
    }
    if (a->nc == a->ccap) {
        Py_ssize_t cap = a->ccap ? a->ccap * 2 : 256, w = nk ? nk : 1;
        if (grow_to((void **)&a->cmid, sizeof(int64_t) * (size_t)cap) || grow_to((void **)&a->ckind, (size_t)(cap * w))
            || grow_to((void **)&a->cval, sizeof(int64_t) * (size_t)(cap * w))) return -1;
        a->ccap = cap;
    }
    int64_t j = a->nc++;
    a->cmid[j] = mid;
    if (nk) { memcpy(a->ckind + j * nk, kinds, (size_t)nk); memcpy(a->cval + j * nk, vals, sizeof(int64_t) * (size_t)nk); }
    a->ctab[i] = j;
    return j;
}

static void annot_free(annot_state *a) {
    PyMem_RawFree(a->arena); PyMem_RawFree(a->soff); PyMem_RawFree(a->slen); PyMem_RawFree(a->skind);
    PyMem_RawFree(a->stab); PyMem_RawFree(a->cmid); PyMem_RawFree(a->ckind); PyMem_RawFree(a->cval);
    PyMem_RawFree(a->ctab); PyMem_RawFree(a->last);
}



#define ANNOT_MAX_SLOTS 32
#define ANNOT_DIRECT 256  /* stat metadata ids below this find their slot in annot_out.slot_of */
typedef struct {
    int64_t *offs, *durs, *occs, *xval; uint8_t *flags, *xkind; uint32_t *combo;
    const int64_t *ids, *slots; Py_ssize_t nids; int nkey, nslot;
    Py_ssize_t n;  /* the events the arrays hold */
    /* per id below ANNOT_DIRECT: its one slot, -1 when not in ids, -2 when in ids more than
     * once (those, and larger ids, scan ids) */
    int8_t slot_of[ANNOT_DIRECT];
} annot_out;

/* the stat value sv into slot s (str and bytes interned); -1 when out of memory */
static inline int put_slot(annot_state *a, const stat_val *sv, int s, uint8_t *kinds, int64_t *vals) {
    int64_t val = sv->val;
    if (sv->kind == 4 || sv->kind == 5) {
        val = intern_str(a, sv->s, sv->slen, sv->kind);
        if (val < 0) return -1;
    }
    kinds[s] = (uint8_t)sv->kind; vals[s] = val;
    return 0;
}

#if defined(__GNUC__)
__attribute__((noinline))  /* called under TV_GUARD: kept out of the sigsetjmp frame */
#endif
static const char *fill_annotated(const uint8_t *p, const uint8_t *end, const annot_out *o, annot_state *a) {
    Py_ssize_t i = 0;
    const int nkey = o->nkey, nx = o->nslot - o->nkey;
    while (p < end) {
        uint64_t key;
        if (!read_varint(&p, end, &key)) return "truncated field key";
        if (bad_key(key)) return "bad field number";
        int field = (int)(key >> 3), wt = (int)(key & 7);
        if (!(field == 4 && wt == 2)) {
            if (!skip_field(&p, end, key)) return "bad line field";
            continue;
        }
        uint64_t len;
        if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return "event length past the end";
        const uint8_t *q = p, *qe = p + len;
        int64_t mid = 0, off = 0, dur = 0, occ = 0;
        uint8_t has = 0, kinds[ANNOT_MAX_SLOTS];
        int64_t vals[ANNOT_MAX_SLOTS];
        memset(kinds, 0, (size_t)o->nslot);
        memset(vals, 0, sizeof(int64_t) * (size_t)o->nslot);
        while (q < qe) {
            uint64_t k2, v;
            if (!read_varint_h(&q, qe, end, &k2)) return "truncated event field";
            if (bad_key(k2)) return "bad event field number";
            int f2 = (int)(k2 >> 3), w2 = (int)(k2 & 7);
            if (w2 == 0 && (f2 == 1 || f2 == 2 || f2 == 3 || f2 == 5)) {
                if (!read_varint_h(&q, qe, end, &v)) return "truncated event varint";
                if (f2 == 1) mid = (int64_t)v;
                else if (f2 == 2) { off = (int64_t)v; occ = 0; }
                else if (f2 == 3) dur = (int64_t)v;
                else { occ = (int64_t)v; off = 0; }
            } else if (f2 == 4 && w2 == 2) {
                uint64_t sl;
                has = 1;
                if (!read_varint_h(&q, qe, end, &sl) || sl > (uint64_t)(qe - q)) return "stat length past the end";
                int64_t sid;
                stat_val sv;
                if (!stat_simple(q, q + sl, end, &sid, &sv) && !stat_full(q, q + sl, end, &sid, &sv)) return "bad stat";
                q += sl;
                int direct = sid >= 0 && sid < ANNOT_DIRECT ? o->slot_of[sid] : -2;
                if (direct >= 0) {
                    if (put_slot(a, &sv, direct, kinds, vals)) return "out of memory";
                } else if (direct == -2) {
                    for (Py_ssize_t t = 0; t < o->nids; t++)
                        if (o->ids[t] == sid && put_slot(a, &sv, (int)o->slots[t], kinds, vals)) return "out of memory";
                }
            } else if (!skip_field(&q, qe, k2)) return "bad event field";
        }
        if (i >= o->n) return TV_CHANGED;  /* more events than counted */
        int64_t c = -1;
        uint32_t *last = NULL;
        if (mid >= 0 && mid < ANNOT_LAST) {
            if (mid >= a->lcap && grow_last(a, mid)) return "out of memory";
            last = a->last + mid * ANNOT_WAYS;
            for (int w = 0; w < ANNOT_WAYS && last[w]; w++)
                if (same_combo(a, (int64_t)last[w] - 1, mid, kinds, vals)) { c = (int64_t)last[w] - 1; break; }
        }
        if (c < 0) {
            c = intern_combo(a, mid, kinds, vals);
            if (last && c >= 0 && c < 0xFFFFFFFFLL) {
                memmove(last + 1, last, sizeof(uint32_t) * (ANNOT_WAYS - 1));
                last[0] = (uint32_t)(c + 1);
            }
        }
        if (c < 0 || c > 0xFFFFFFFFLL) return "out of memory";
        o->offs[i] = off; o->durs[i] = dur; o->occs[i] = occ; o->flags[i] = has;
        o->combo[i] = (uint32_t)c;
        for (int s = 0; s < nx; s++) { o->xkind[i * nx + s] = kinds[nkey + s]; o->xval[i * nx + s] = vals[nkey + s]; }
        i++;
        p = qe;
    }
    return i == o->n ? NULL : TV_CHANGED;
}

/* ids / slots checked (slots within nslot, nslot <= ANNOT_MAX_SLOTS); NULL or the fault */
static const char *annot_check(const Py_buffer *bi, const Py_buffer *bsl, int nkey, int nslot) {
    Py_ssize_t nids = bi->len / 8;
    if (bsl->len / 8 != nids || nkey < 0 || nslot < nkey || nslot > ANNOT_MAX_SLOTS) return "bad stat slots";
    for (Py_ssize_t t = 0; t < nids; t++) {
        int64_t s = ((const int64_t *)bsl->buf)[t];
        if (s < 0 || s >= nslot) return "bad stat slots";
    }
    return NULL;
}

/* o's stat slot lookup (slot_of) from its ids and slots */
static void annot_slot_of(annot_out *o) {
    memset(o->slot_of, -1, sizeof o->slot_of);
    for (Py_ssize_t t = 0; t < o->nids; t++) {
        int64_t id = o->ids[t];
        if (id >= 0 && id < ANNOT_DIRECT) o->slot_of[id] = o->slot_of[id] == -1 ? (int8_t)o->slots[t] : -2;
    }
}

/* (combo_mids, combo_kinds, combo_values, strings) of a filled annot_state (NULL, an error
 * set, on failure); frees a */
static PyObject *annot_combos(annot_state *a, int nkey) {
    PyObject *cm = PyBytes_FromStringAndSize((const char *)a->cmid, a->nc * 8);
    PyObject *ck = PyBytes_FromStringAndSize((const char *)a->ckind, a->nc * nkey);
    PyObject *cv = PyBytes_FromStringAndSize((const char *)a->cval, a->nc * nkey * 8);
    PyObject *strs = PyList_New(a->ns);
    for (Py_ssize_t j = 0; strs && j < a->ns; j++) {
        const char *s = a->arena + a->soff[j];
        PyObject *x = a->skind[j] == 4 ? PyUnicode_DecodeUTF8(s, a->slen[j], "strict")
                                       : PyBytes_FromStringAndSize(s, a->slen[j]);
        if (!x) { Py_CLEAR(strs); break; }
        PyList_SET_ITEM(strs, j, x);
    }
    annot_free(a);
    if (!cm || !ck || !cv || !strs) {
        Py_XDECREF(cm); Py_XDECREF(ck); Py_XDECREF(cv); Py_XDECREF(strs);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", cm, ck, cv, strs);
}

static PyObject *decode_annotated(PyObject *self, PyObject *args) {
    Py_buffer view, bi, bsl;
    int nkey, nslot;
    Py_ssize_t counted = -1;
    if (!PyArg_ParseTuple(args, "y*y*y*ii|n", &view, &bi, &bsl, &nkey, &nslot, &counted)) return NULL;
    Py_ssize_t nids = bi.len / 8;
    const char *err = annot_check(&bi, &bsl, nkey, nslot);
    if (err) {
        PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
        PyErr_SetString(PyExc_ValueError, err); return NULL;
    }
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    Py_ssize_t n = counted;
    int64_t ts = 0;
    if (counted < 0) {
        Py_BEGIN_ALLOW_THREADS
        TV_GUARD(err, err = scan_line(p, end, &n, &ts));
        Py_END_ALLOW_THREADS
    }
    if (err) {
        PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
        PyErr_SetString(PyExc_ValueError, err); return NULL;
    }
    int nx = nslot - nkey;
    /* offsets, durations, occurrences, has_stats, combo, extra_kinds, extra_values */
    Py_ssize_t sizes[7] = {n * 8, n * 8, n * 8, n, n * 4, n * nx, n * nx * 8};
    PyObject *b[7] = {NULL};
    for (int k = 0; k < 7; k++) {
        b[k] = PyBytes_FromStringAndSize(NULL, sizes[k]);
        if (!b[k]) {
            for (int j = 0; j < k; j++) Py_DECREF(b[j]);
            PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
            return NULL;
        }
    }
    annot_out o = {(int64_t *)PyBytes_AS_STRING(b[0]), (int64_t *)PyBytes_AS_STRING(b[1]),
                   (int64_t *)PyBytes_AS_STRING(b[2]), (int64_t *)PyBytes_AS_STRING(b[6]),
                   (uint8_t *)PyBytes_AS_STRING(b[3]), (uint8_t *)PyBytes_AS_STRING(b[5]),
                   (uint32_t *)PyBytes_AS_STRING(b[4]), (const int64_t *)bi.buf, (const int64_t *)bsl.buf,
                   nids, nkey, nslot, n, {0}};
    annot_slot_of(&o);
    annot_state a;
    memset(&a, 0, sizeof a);
    a.nkey = nkey;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = fill_annotated(p, end, &o, &a));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
    PyObject *combos = NULL;
    if (err) annot_free(&a);
    else combos = annot_combos(&a, nkey);
    if (!combos) {
        for (int k = 0; k < 7; k++) Py_DECREF(b[k]);
        if (err) PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    PyObject *out = Py_BuildValue("(LnNNNNNNNOOOO)", (long long)ts, n, b[0], b[1], b[2], b[3], b[4], b[5], b[6],
                                  PyTuple_GET_ITEM(combos, 0), PyTuple_GET_ITEM(combos, 1),
                                  PyTuple_GET_ITEM(combos, 2), PyTuple_GET_ITEM(combos, 3));
    Py_DECREF(combos);
    return out;
}

/* decode_annotated_into(buf, ids, slots, nkey, nslot, n, offsets, durations, occurrences,
 *     has_stats, combo, extra_kinds, extra_values, index) -> (combo_mids, combo_kinds,
 *     combo_values, strings): decode_annotated of the n events of buf (a field-aligned piece of
 * an XLine, line_layout's) written into caller-owned arrays from event index on (the arrays
 * as decode_annotated's: int64, int64, int64, uint8, uint32, uint8 x (nslot - nkey), int64 x
 * (nslot - nkey)); combos and strings are the piece's own (numbered from 0 in order of first
 * appearance in the piece). ValueError on malformed bytes, another event count than n, or
 * arrays too short. */
static PyObject *decode_annotated_into(PyObject *self, PyObject *args) {
    Py_buffer view, bi, bsl, bb[7];
    int nkey, nslot;
    Py_ssize_t n, index;
    if (!PyArg_ParseTuple(args, "y*y*y*iinw*w*w*w*w*w*w*n", &view, &bi, &bsl, &nkey, &nslot, &n, &bb[0], &bb[1],
                          &bb[2], &bb[3], &bb[4], &bb[5], &bb[6], &index))
        return NULL;
    const char *err = annot_check(&bi, &bsl, nkey, nslot);
    int nx = nslot - nkey;
    if (!err) {
        /* offsets, durations, occurrences, has_stats, combo, extra_kinds, extra_values */
        Py_ssize_t width[7] = {8, 8, 8, 1, 4, nx, 8 * nx};
        if (n < 0 || index < 0) err = "bad event range";
        for (int k = 0; !err && k < 7; k++)
            if (bb[k].len / (width[k] ? width[k] : 1) < index + n && width[k]) err = "output arrays too short";
    }
    if (err) {
        PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
        for (int k = 0; k < 7; k++) PyBuffer_Release(&bb[k]);
        PyErr_SetString(PyExc_ValueError, err); return NULL;
    }
    annot_out o = {(int64_t *)bb[0].buf + index, (int64_t *)bb[1].buf + index, (int64_t *)bb[2].buf + index,
                   (int64_t *)bb[6].buf + index * nx, (uint8_t *)bb[3].buf + index, (uint8_t *)bb[5].buf + index * nx,
                   (uint32_t *)bb[4].buf + index, (const int64_t *)bi.buf, (const int64_t *)bsl.buf,
                   bi.len / 8, nkey, nslot, n, {0}};
    annot_slot_of(&o);
    annot_state a;
    memset(&a, 0, sizeof a);
    a.nkey = nkey;
    const uint8_t *p = (const uint8_t *)view.buf, *end = p + view.len;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = fill_annotated(p, end, &o, &a));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
    for (int k = 0; k < 7; k++) PyBuffer_Release(&bb[k]);
    if (err) {
        annot_free(&a);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return annot_combos(&a, nkey);
}

/* ---- event metadata of a plane ------------------------------------------------------------
 * decode_metadata(buf, lo, hi, ids, slots, nslot) -> (mids, names, display_names, kinds,
 *     values, strings): the XEventMetadata map entries (XPlane field 4) of the XPlane message
 * buf[lo:hi], in file order (a later entry of the same id replaces an earlier one, as
 * protobuf's map does; the caller keeps the last). Per entry: its map key (mids, int64), its
 * name and display_name (str, strict UTF-8) and, per slot, the value of its XStat whose
 * metadata_id is ids[i] with slots[i] == slot (the later stat wins; kinds and values as in
 * decode_annotated, n x nslot). A value message given twice in one entry is merged as
 * protobuf merges it (scalars: the later; stats: appended). */
typedef struct {
    int64_t *mid; int64_t *noff, *nlen, *doff, *dlen; uint8_t *kind; int64_t *val;
    Py_ssize_t n, cap;
    char *text; size_t tlen, tcap;
} meta_cols;

static int meta_text(meta_cols *m, const uint8_t *s, uint64_t n, int64_t *off) {
    if (m->tlen + n + 1 > m->tcap) {
        size_t cap = m->tcap ? m->tcap : 1 << 16;
        while (cap < m->tlen + n + 1) cap *= 2;
        char *t = (char *)PyMem_RawRealloc(m->text, cap);
        if (!t) return 0;
        m->text = t; m->tcap = cap;
    }
    memcpy(m->text + m->tlen, s, (size_t)n);
    *off = (int64_t)m->tlen;
    m->tlen += n;
    return 1;
}

#if defined(__GNUC__)
__attribute__((noinline))  /* called under TV_GUARD: kept out of the sigsetjmp frame */
#endif
static const char *walk_metadata(const uint8_t *p, const uint8_t *end, const int64_t *ids, const int64_t *slots,
                                 Py_ssize_t nids, int nslot, meta_cols *m, annot_state *a) {
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key)) return "truncated field key";
        if (bad_key(key)) return "bad field number";
        if (!((key >> 3) == 4 && (key & 7) == 2)) {
            if (!skip_field(&p, end, key)) return "bad plane field";
            continue;
        }
        if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return "entry length past the end";
        const uint8_t *q = p, *qe = p + len;
        p = qe;
        if (m->n == m->cap) {
            Py_ssize_t cap = m->cap ? m->cap * 2 : 1024;
            int64_t *x;
#define META_GROW(f, T, k) x = (int64_t *)PyMem_RawRealloc(m->f, sizeof(T) * (size_t)(cap * (k))); if (!x) return "out of memory"; m->f = (T *)x;
            META_GROW(mid, int64_t, 1) META_GROW(noff, int64_t, 1) META_GROW(nlen, int64_t, 1)
            META_GROW(doff, int64_t, 1) META_GROW(dlen, int64_t, 1) META_GROW(val, int64_t, nslot ? nslot : 1)
            META_GROW(kind, uint8_t, nslot ? nslot : 1)
#undef META_GROW
            m->cap = cap;
        }
        Py_ssize_t r = m->n++;
        int64_t mid = 0;
        const uint8_t *nm = NULL, *dn = NULL; uint64_t nml = 0, dnl = 0;
        uint8_t *kinds = m->kind + r * nslot; int64_t *vals = m->val + r * nslot;
        memset(kinds, 0, (size_t)nslot);
        memset(vals, 0, sizeof(int64_t) * (size_t)nslot);
        while (q < qe) {  /* the map entry: key = 1, value = 2 */
            uint64_t k2, v;
            if (!read_varint(&q, qe, &k2)) return "truncated entry";
            if (bad_key(k2)) return "bad entry field";
            if ((k2 >> 3) == 1 && (k2 & 7) == 0) {
                if (!read_varint(&q, qe, &v)) return "truncated key";
                mid = (int64_t)v;
            } else if ((k2 >> 3) == 2 && (k2 & 7) == 2) {
                uint64_t vl;
                if (!read_varint(&q, qe, &vl) || vl > (uint64_t)(qe - q)) return "value past the end";
                const uint8_t *e = q, *ee = q + vl;
                q = ee;
                while (e < ee) {  /* XEventMetadata: name = 2, display_name = 4, stats = 5 */
                    uint64_t k3, sl;
                    if (!read_varint(&e, ee, &k3)) return "truncated metadata";
                    if (bad_key(k3)) return "bad metadata field";
                    int f3 = (int)(k3 >> 3), w3 = (int)(k3 & 7);
                    if (w3 == 2 && (f3 == 2 || f3 == 4 || f3 == 5)) {
                        if (!read_varint(&e, ee, &sl) || sl > (uint64_t)(ee - e)) return "metadata field past the end";
                        if (f3 == 2) { nm = e; nml = sl; }
                        else if (f3 == 4) { dn = e; dnl = sl; }
                        else {
                            int64_t sid; stat_val sv;
                            if (!stat_full(e, e + sl, ee, &sid, &sv)) return "bad stat";
                            for (Py_ssize_t t = 0; t < nids; t++) {
                                if (ids[t] != sid) continue;
                                int s = (int)slots[t];
                                int64_t val = sv.val;
                                if (sv.kind == 4 || sv.kind == 5) {
                                    val = intern_str(a, sv.s, sv.slen, sv.kind);
                                    if (val < 0) return "out of memory";
                                }
                                kinds[s] = (uint8_t)sv.kind; vals[s] = val;
                            }
                        }
                        e += sl;
                    } else if (!skip_field(&e, ee, k3)) return "bad metadata field";
                }
            } else if (!skip_field(&q, qe, k2)) return "bad entry field";
        }
        m->mid[r] = mid;
        if (!meta_text(m, nm ? nm : (const uint8_t *)"", nml, &m->noff[r])) return "out of memory";
        m->nlen[r] = (int64_t)nml;
        if (!meta_text(m, dn ? dn : (const uint8_t *)"", dnl, &m->doff[r])) return "out of memory";
        m->dlen[r] = (int64_t)dnl;
    }
    return NULL;
}

static PyObject *decode_metadata(PyObject *self, PyObject *args) {
    Py_buffer view, bi, bsl;
    Py_ssize_t lo, hi;
    int nslot;
    if (!PyArg_ParseTuple(args, "y*nny*y*i", &view, &lo, &hi, &bi, &bsl, &nslot)) return NULL;
    const char *err = NULL;
    Py_ssize_t nids = bi.len / 8;
    if (lo < 0 || hi > view.len || lo > hi) err = "range outside the buffer";
    if (!err && (bsl.len / 8 != nids || nslot < 0 || nslot > ANNOT_MAX_SLOTS)) err = "bad stat slots";
    for (Py_ssize_t t = 0; !err && t < nids; t++) {
        int64_t s = ((const int64_t *)bsl.buf)[t];
        if (s < 0 || s >= nslot) err = "bad stat slots";
    }
    if (err) {
        PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
        PyErr_SetString(PyExc_ValueError, err); return NULL;
    }
    meta_cols m;
    memset(&m, 0, sizeof m);
    annot_state a;
    memset(&a, 0, sizeof a);
    const uint8_t *p = (const uint8_t *)view.buf + lo, *end = (const uint8_t *)view.buf + hi;
    const int64_t *ids = (const int64_t *)bi.buf, *slots = (const int64_t *)bsl.buf;
    Py_BEGIN_ALLOW_THREADS
    TV_GUARD(err, err = walk_metadata(p, end, ids, slots, nids, nslot, &m, &a));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view); PyBuffer_Release(&bi); PyBuffer_Release(&bsl);
    PyObject *mids = NULL, *names = NULL, *dnames = NULL, *kinds = NULL, *vals = NULL, *strs = NULL;
    if (!err) {
        mids = PyBytes_FromStringAndSize((const char *)m.mid, m.n * 8);
        kinds = PyBytes_FromStringAndSize((const char *)m.kind, m.n * nslot);
        vals = PyBytes_FromStringAndSize((const char *)m.val, m.n * nslot * 8);
        names = PyList_New(m.n);
        dnames = PyList_New(m.n);
        for (Py_ssize_t i = 0; names && dnames && i < m.n; i++) {
            PyObject *x = PyUnicode_DecodeUTF8(m.text + m.noff[i], m.nlen[i], "strict");
            if (!x) { Py_CLEAR(names); break; }
            PyList_SET_ITEM(names, i, x);
            x = PyUnicode_DecodeUTF8(m.text + m.doff[i], m.dlen[i], "strict");
            if (!x) { Py_CLEAR(dnames); break; }
            PyList_SET_ITEM(dnames, i, x);
        }
        strs = PyList_New(a.ns);
        for (Py_ssize_t j = 0; strs && j < a.ns; j++) {
            const char *s = a.arena + a.soff[j];
            PyObject *x = a.skind[j] == 4 ? PyUnicode_DecodeUTF8(s, a.slen[j], "strict")
                                          : PyBytes_FromStringAndSize(s, a.slen[j]);
            if (!x) { Py_CLEAR(strs); break; }
            PyList_SET_ITEM(strs, j, x);
        }
    }
    PyMem_RawFree(m.mid); PyMem_RawFree(m.noff); PyMem_RawFree(m.nlen); PyMem_RawFree(m.doff);
    PyMem_RawFree(m.dlen); PyMem_RawFree(m.kind); PyMem_RawFree(m.val); PyMem_RawFree(m.text);
    annot_free(&a);
    if (err || !mids || !names || !dnames || !kinds || !vals || !strs) {
        Py_XDECREF(mids); Py_XDECREF(names); Py_XDECREF(dnames); Py_XDECREF(kinds); Py_XDECREF(vals); Py_XDECREF(strs);
        if (err) PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return Py_BuildValue("(NNNNNN)", mids, names, dnames, kinds, vals, strs);
}



static PyMethodDef methods[] = {
    {"scan_message", scan_message, METH_VARARGS,
     "scan_message(buf, lo, hi) -> [(field, wire_type, tag_start, value_start, value_end), ...]"},
    {"scan_plane", scan_plane, METH_VARARGS,
     "scan_plane(buf, lo, hi, min_entries) -> (rest, [(line start, line end)], (keys, starts, ends) or None, span or None)"},
    {"contains_any", contains_any, METH_VARARGS, "contains_any(buf, lo, hi, needles) -> whether any needle occurs"},
    {"copy_bytes", copy_bytes, METH_VARARGS, "copy_bytes(buf, lo, hi) -> bytes (guarded against a shrinking file)"},
    {"line_layout", line_layout, METH_VARARGS,
     "line_layout(buf, target, with_counts=False) -> (n_events, header, piece bounds[, events before each bound])"},
    {"decode_tpu", decode_tpu, METH_VARARGS,
     "decode_tpu(buf, base_ps, stat_off, stat_dur, mids, starts, durs, aligned, flags, index) -> n"},
    {"decode_line", decode_line, METH_VARARGS,
     "decode_line(buf, stat_id=-1, stat_id2=-1) -> (timestamp_ns, n, mids, offsets, durations, occurrences, has_stats, stat_values, stat_values2)"},
    {"line_header", line_header, METH_VARARGS,
     "line_header(buf, with_count=False) -> (id, display_id, name, display_name, timestamp_ns, duration_ps), "
     "with_count: (that, n_events)"},
    {"decode_annotated", decode_annotated, METH_VARARGS,
     "decode_annotated(buf, ids, slots, nkey, nslot, n=-1) -> (timestamp_ns, n, offsets, durations, occurrences, has_stats, "
     "combo, extra_kinds, extra_values, combo_mids, combo_kinds, combo_values, strings)"},
    {"decode_annotated_into", decode_annotated_into, METH_VARARGS,
     "decode_annotated_into(buf, ids, slots, nkey, nslot, n, offsets, durations, occurrences, has_stats, combo, "
     "extra_kinds, extra_values, index) -> (combo_mids, combo_kinds, combo_values, strings)"},
    {"decode_metadata", decode_metadata, METH_VARARGS,
     "decode_metadata(buf, lo, hi, ids, slots, nslot) -> (mids, names, display_names, kinds, values, strings)"},
    {"count_events", count_events, METH_VARARGS, "count_events(buf) -> number of XEvents in the XLine"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode",
    "XSpace wire decoder for traceview (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__decode(void) {
    tv_install_guard();
    return PyModule_Create(&module);
}
