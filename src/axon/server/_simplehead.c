/* axon.server._simplehead: reads the simplest request heads in one call, an optional
 * accelerator of the connection's head path (see simplehead.py, which documents the contract,
 * and protocol.py, which uses it).
 *
 * parse(data, start) reads one request at data[start:] and returns (method, url, headers, end,
 * count, field_bytes) when it is a complete, simple one:
 *
 *   GET or HEAD, an origin-form target of visible ASCII, HTTP/1.1, header lines of a token, a
 *   colon and a value of visible characters, spaces, tabs or obs-text, each ended by CRLF, then
 *   an empty line; no Content-Length, Transfer-Encoding, Upgrade, Expect or Proxy-Connection,
 *   and Connection only as "keep-alive", and no name twice. So: no body, kept alive, answered
 *   as HTTP/1.1, and no field to fold into another.
 *
 * headers maps each name, lower-cased, to its value decoded as latin-1, the value as llhttp
 * reports it (leading spaces and tabs dropped, trailing ones kept): what axon.runtime.fold_header
 * makes of fields that all differ in name (a repeated name is left to llhttp, whose path folds
 * it there). end is the offset just past the head; count the fields and field_bytes the bytes
 * of their names and values, for axon.runtime.check_head, which decides the limits: this reads
 * bytes only and knows no limit.
 *
 * Anything else returns None: the bytes go to llhttp, which reads them (or refuses them) as it
 * always does. This reads a strict subset of what llhttp accepts and reads it the same way, so
 * the two can never disagree on where a request ends (tests/server/test_server_simplehead.py compares
 * them on generated heads). It never raises for bad input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <sys/ioctl.h>
#ifndef Py_T_OBJECT_EX /* before 3.12: structmember.h's name */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

static unsigned char TOKEN[256];  /* RFC 9110 tchar, lower-cased; 0 if not one */
static unsigned char TARGET[256]; /* what a target may hold: visible ASCII */
static unsigned char VALUE[256];  /* what a value may hold: visible, SP, HT, obs-text */
static PyObject *GET, *HEAD;      /* the method names, as httptools' get_method returns them */

static void
make_tables(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    for (int c = 0; c < 256; c++) {
        TOKEN[c] = 0;
        TARGET[c] = (c >= 0x21 && c <= 0x7e);
        VALUE[c] = (c >= 0x20 && c != 0x7f) || c == '\t';
    }
    for (int c = '0'; c <= '9'; c++) TOKEN[c] = (unsigned char)c;
    for (int c = 'a'; c <= 'z'; c++) TOKEN[c] = (unsigned char)c;
    for (int c = 'A'; c <= 'Z'; c++) TOKEN[c] = (unsigned char)(c + 32);
    for (const char *e = extra; *e; e++) TOKEN[(unsigned char)*e] = (unsigned char)*e;
}

/* Whether the lower-cased name (length n) is one this does not read: the head goes to llhttp. */
static int
special_name(const unsigned char *name, Py_ssize_t n, const unsigned char *value, Py_ssize_t vn)
{
    switch (n) {
    case 6: return memcmp(name, "expect", 6) == 0;
    case 7: return memcmp(name, "upgrade", 7) == 0;
    case 10:
        if (memcmp(name, "connection", 10) != 0) return 0;
        /* "keep-alive" changes nothing for HTTP/1.1; anything else (close, upgrade) is llhttp's. */
        if (vn != 10) return 1;
        for (Py_ssize_t i = 0; i < 10; i++) {
            unsigned char c = value[i];
            if (c >= 'A' && c <= 'Z') c += 32;
            if (c != (unsigned char)"keep-alive"[i]) return 1;
        }
        return 0;
    case 14: return memcmp(name, "content-length", 14) == 0;
    case 16: return memcmp(name, "proxy-connection", 16) == 0;
    case 17: return memcmp(name, "transfer-encoding", 17) == 0;
    default: return 0;
    }
}

/* A head read by read_head: what parse hands back, the target still as bytes of the read. */
typedef struct {
    PyObject *method;          /* GET or HEAD (borrowed) */
    const unsigned char *url;
    Py_ssize_t url_len;
    PyObject *headers;         /* a new reference */
    Py_ssize_t end, count, counted;
} Head;

/* Read one simple head at buf[start:]: 1 read (head->headers is a new dict), 0 not one to read
 * (nothing held), -1 an error set (nothing held). */
static int
read_head(const unsigned char *buf, Py_ssize_t size, Py_ssize_t start, Head *head)
{
    if (start < 0 || start > size) return 0;
    const unsigned char *p = buf + start, *end = buf + size;

    if (end - p >= 4 && memcmp(p, "GET ", 4) == 0) {
        head->method = GET;
        p += 4;
    } else if (end - p >= 5 && memcmp(p, "HEAD ", 5) == 0) {
        head->method = HEAD;
        p += 5;
    } else {
        return 0;
    }
    const unsigned char *url = p;
    if (p >= end || *p != '/') return 0;
    while (p < end && TARGET[*p]) p++;
    Py_ssize_t url_len = p - url;
    if (end - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0) return 0;
    p += 11;

    PyObject *headers = PyDict_New();
    if (headers == NULL) return -1;
    Py_ssize_t count = 0, counted = 0;
    for (;;) {
        if (end - p < 2) goto not_read;
        if (p[0] == '\r') {
            if (p[1] != '\n') goto not_read;
            p += 2;
            break;
        }
        const unsigned char *name = p;
        while (p < end && TOKEN[*p]) p++;
        Py_ssize_t name_len = p - name;
        if (name_len == 0 || p >= end || *p != ':') goto not_read;
        p++;
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        const unsigned char *value = p;
        while (p < end && VALUE[*p]) p++;
        Py_ssize_t value_len = p - value;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') goto not_read;
        p += 2;
        count += 1;
        counted += name_len + value_len;

        PyObject *key = PyUnicode_New(name_len, 127);
        if (key == NULL) goto failed;
        Py_UCS1 *lower = PyUnicode_1BYTE_DATA(key);
        for (Py_ssize_t i = 0; i < name_len; i++) lower[i] = TOKEN[name[i]];
        if (special_name(lower, name_len, value, value_len)) {
            Py_DECREF(key);
            goto not_read;
        }
        PyObject *text = PyUnicode_DecodeLatin1((const char *)value, value_len, NULL);
        if (text == NULL) {
            Py_DECREF(key);
            goto failed;
        }
        int known = PyDict_Contains(headers, key);
        if (known != 0) { /* a repeated name (or an error): folded by llhttp's path */
            Py_DECREF(key);
            Py_DECREF(text);
            if (known < 0) goto failed;
            goto not_read;
        }
        int failed = PyDict_SetItem(headers, key, text) < 0;
        Py_DECREF(key);
        Py_XDECREF(text);
        if (failed) goto failed;
    }
    head->url = url;
    head->url_len = url_len;
    head->headers = headers;
    head->end = p - buf;
    head->count = count;
    head->counted = counted;
    return 1;

not_read:
    Py_DECREF(headers);
    return 0;
failed:
    Py_DECREF(headers);
    return -1;
}

/* parse's answer for a head read, taking the head's reference to its headers (and to target,
 * when given: the target as bytes already made). */
static PyObject *
head_tuple(Head *head, PyObject *target)
{
    if (target == NULL) target = PyBytes_FromStringAndSize((const char *)head->url, head->url_len);
    if (target == NULL) {
        Py_DECREF(head->headers);
        return NULL;
    }
    PyObject *result = PyTuple_New(6);
    if (result == NULL) {
        Py_DECREF(target);
        Py_DECREF(head->headers);
        return NULL;
    }
    Py_INCREF(head->method);
    PyTuple_SET_ITEM(result, 0, head->method);
    PyTuple_SET_ITEM(result, 1, target);
    PyTuple_SET_ITEM(result, 2, head->headers);
    PyTuple_SET_ITEM(result, 3, PyLong_FromSsize_t(head->end));
    PyTuple_SET_ITEM(result, 4, PyLong_FromSsize_t(head->count));
    PyTuple_SET_ITEM(result, 5, PyLong_FromSsize_t(head->counted));
    if (PyTuple_GET_ITEM(result, 3) == NULL || PyTuple_GET_ITEM(result, 4) == NULL || PyTuple_GET_ITEM(result, 5) == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *
parse(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse(data: bytes, start)");
        return NULL;
    }
    Py_ssize_t start;
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    Head head;
    int read = read_head((const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), start, &head);
    if (read < 0) return NULL;
    if (read == 0) Py_RETURN_NONE;
    return head_tuple(&head, NULL);
}

/* ---- answer: a whole read answered from the worker's tables (see simplehead.py, answerer) ----
 *
 * answer(data, tables, writer, flow, peer) reads the head data begins with as parse does and,
 * when data is that one request and nothing but it, answers it the way the Python path would
 * answer it from the worker's tables, past every Python frame of that path:
 *
 *   - a fixed answer (the health probe) whose whole bytes were made for this second's Date line,
 *     kept alive, HTTP/1.1 (Prepared.whole, which ResponseWriter.send fills);
 *   - a GET without Range or a precondition whose remembered head names one file, that file
 *     trusted by the open-file cache (FileCache: its entry's `known`, its window open, no news
 *     of changes pending: no take-in owed and the inotify queue empty, one FIONREAD), and the
 *     trusted version's answer made for that head (TrustedFile.answer, which Remembered.recall
 *     fills).
 *
 * It returns True once it answered (the answer handed to writer.hold, the record to the App's
 * record_sent: the same calls the Python path makes), else what parse returns for data: every
 * doubt (a table not filled, a window to reopen, news to take in, a second request in the read)
 * goes to the Python path unchanged, which makes and checks what this only looks up. It decides
 * nothing that path does not decide first: it reads what that path left in its tables. */

enum {
    T_MOST_FIELDS, T_MOST_BYTES, T_HELD_MAX, T_FIXED, T_HEADS, T_VARIANT, T_HEAD_REORDER, T_HEAD_CLOCK,
    T_CACHE, T_FILE_REORDER, T_RECORD_SENT, T_PERF_COUNTER, T_WORKER, T_SIZE
};

static PyObject *CRLF, *ACCEPT;
static PyObject *S_PAUSED, *S_DATE_LINE, *S_WHOLE, *S_PATHS, *S_WATCHER, *S_FD, *S_BEGUN, *S_TAKEN,
    *S_ENTRIES, *S_KNOWN, *S_ANSWER, *S_CLOCK, *S_CHECKED, *S_VALID, *S_LENGTH, *S_FILES, *S_BODY,
    *S_HEAD, *S_MOVED, *S_MOVE_TO_END, *S_USED, *S_MOVE_UP, *S_HOLD, *S_PATH, *S_QUERY;

/* ---- attributes read where the Python path keeps them ----
 *
 * PyObject_GetAttr costs some 190 instructions (the type's lookup, the descriptor's call) where
 * CPython's own bytecode reads a slot (__slots__) in a few, once it has specialised: read that
 * way, this call cost more than the Python it replaces. So each place below that reads an
 * attribute (an AT_* site) keeps what it learnt of the last type it read from: where the type
 * keeps the attribute when it is a plain slot, for as long as the type is unchanged (its version
 * tag, which CPython changes when a type changes). Anything else (an attribute of an instance
 * dict, a type with its own __getattribute__, a slot that is empty) is read by PyObject_GetAttr. */
enum {
    AT_WATCHER, AT_FD, AT_BEGUN, AT_TAKEN, AT_WHOLE, AT_PATHS, AT_KNOWN, AT_RECORD_PATH, AT_RECORD_QUERY,
    AT_RECORD_LENGTH, AT_ENTRIES, AT_ANSWER, AT_CLOCK, AT_CHECKED, AT_VALID, AT_LENGTH, AT_FILES, AT_BODY, AT_HEAD,
    AT_MOVED, AT_USED, AT_PAUSED, AT_DATE_LINE, AT_READ, AT_SIZE
};

typedef struct {
    PyTypeObject *type; /* the type last read from (a reference), or NULL */
    unsigned int tag;   /* its version tag then; 0: none, learn again */
    Py_ssize_t offset;  /* where its instances keep the attribute, or -1: PyObject_GetAttr */
} Site;

static Site SITES[AT_SIZE];

/* Where `type`'s instances keep `name` as a plain slot, or -1; learnt into `site`. The member
 * must belong to `type` or a base of it (generic getattr checks the same: a descriptor of
 * another class is refused there, and its offset means nothing here). The site is updated before
 * the type it held is let go, which may run Python code that reads this site again. */
static Py_ssize_t
learn(Site *site, PyTypeObject *type, PyObject *name)
{
    Py_ssize_t offset = -1;
    if (type->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *descr = _PyType_Lookup(type, name); /* borrowed; gives the type a version tag */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(descr))) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == Py_T_OBJECT_EX && member->flags == 0) offset = member->offset;
        }
    }
    PyTypeObject *old = site->type;
    Py_INCREF(type);
    site->type = type;
    site->tag = type->tp_version_tag;
    site->offset = offset;
    Py_XDECREF(old);
    return offset;
}

/* obj.name, a new reference (NULL with an error set), read as the site `at` learnt to. */
static PyObject *
get(PyObject *obj, PyObject *name, int at)
{
    Site *site = &SITES[at];
    PyTypeObject *type = Py_TYPE(obj);
    Py_ssize_t offset = site->offset;
    if (type != site->type || site->tag == 0 || type->tp_version_tag != site->tag) offset = learn(site, type, name);
    if (offset >= 0) {
        PyObject *value = *(PyObject **)((char *)obj + offset);
        if (value != NULL) {
            Py_INCREF(value);
            return value;
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name as a double (a float or an int), or -1 with an error set. */
static int
attr_double(PyObject *obj, PyObject *name, int at, double *out)
{
    PyObject *value = get(obj, name, at);
    if (value == NULL) return -1;
    *out = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Whether the inotify queue of the file cache's watcher is empty and no take-in is owed (the
 * Python path's sync + take-in would then change nothing): 1 yes, 0 no or no watcher, -1 error. */
static int
no_news(PyObject *cache)
{
    PyObject *watcher = get(cache, S_WATCHER, AT_WATCHER);
    if (watcher == NULL) return -1;
    if (watcher == Py_None) {
        Py_DECREF(watcher);
        return 0;
    }
    PyObject *fd_obj = get(watcher, S_FD, AT_FD);
    Py_DECREF(watcher);
    if (fd_obj == NULL) return -1;
    long fd = PyLong_AsLong(fd_obj);
    Py_DECREF(fd_obj);
    if (fd == -1 && PyErr_Occurred()) return -1;
    PyObject *begun = get(cache, S_BEGUN, AT_BEGUN);
    if (begun == NULL) return -1;
    PyObject *taken = get(cache, S_TAKEN, AT_TAKEN);
    if (taken == NULL) {
        Py_DECREF(begun);
        return -1;
    }
    int owed = PyObject_RichCompareBool(begun, taken, Py_NE);
    Py_DECREF(begun);
    Py_DECREF(taken);
    if (owed != 0) return owed < 0 ? -1 : 0;
    int queued = 0;
    if (ioctl((int)fd, FIONREAD, &queued) != 0) return 0; /* the Python path asks again and says why */
    return queued == 0;
}

/* Hand `buffers` (size bytes) to the writer, as ResponseWriter.send does. 0, or -1 with an error. */
static int
hold(PyObject *writer, PyObject *buffers, Py_ssize_t size)
{
    PyObject *nbytes = PyLong_FromSsize_t(size);
    if (nbytes == NULL) return -1;
    PyObject *call[3] = {writer, buffers, nbytes};
    PyObject *done = PyObject_VectorcallMethod(S_HOLD, call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(nbytes);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* A fixed answer whose whole bytes are made for this Date line: 1 held, 0 not, -1 error. */
static int
answer_fixed(PyObject *fixed, Head *head, PyObject *date, PyObject *writer)
{
    if (!PyTuple_Check(fixed) || PyTuple_GET_SIZE(fixed) != 2) return 0;
    PyObject *whole = get(PyTuple_GET_ITEM(fixed, head->method == GET ? 0 : 1), S_WHOLE, AT_WHOLE);
    if (whole == NULL) return -1;
    int done = 0;
    if (PyTuple_Check(whole) && PyTuple_GET_SIZE(whole) == 4 && PyTuple_GET_ITEM(whole, 0) == date
        && PyTuple_GET_ITEM(whole, 1) == Py_True && PyTuple_GET_ITEM(whole, 2) == Py_True
        && PyBytes_Check(PyTuple_GET_ITEM(whole, 3))) {
        PyObject *data = PyTuple_GET_ITEM(whole, 3);
        PyObject *buffers = PyList_New(1);
        if (buffers == NULL) {
            done = -1;
        } else {
            Py_INCREF(data);
            PyList_SET_ITEM(buffers, 0, data);
            done = hold(writer, buffers, PyBytes_GET_SIZE(data)) < 0 ? -1 : 1;
            Py_DECREF(buffers);
        }
    }
    Py_DECREF(whole);
    return done;
}

/* Whether any field's name is one of `variant` (Range, the preconditions): 1, 0, -1 error. */
static int
varies(PyObject *headers, PyObject *variant)
{
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(headers, &pos, &name, &value)) {
        int found = PySet_Contains(variant, name);
        if (found != 0) return found;
    }
    return 0;
}

/* dict[key] (a new reference in *item) and its attribute `name` (a new reference in *value):
 * 1, 0 when the key is missing, -1 with an error set. */
static int
item_attr(PyObject *dict, PyObject *key, PyObject *name, int at, PyObject **item, PyObject **value)
{
    PyObject *found = PyDict_GetItemWithError(dict, key);
    if (found == NULL) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(found);
    *item = found;
    *value = get(found, name, at);
    return *value == NULL ? -1 : 1;
}

/* The clock's time now, or -1 with an error set. */
static double
now_of(PyObject *clock)
{
    PyObject *value = PyObject_CallNoArgs(clock);
    if (value == NULL) return -1.0;
    double now = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return now;
}

/* Call obj.name(arg, now): 0, or -1 with an error set (the LRU moves of a hit). */
static int
call_with_time(PyObject *obj, PyObject *name, PyObject *arg, double now)
{
    PyObject *time = PyFloat_FromDouble(now);
    if (time == NULL) return -1;
    PyObject *call[3] = {obj, arg, time};
    PyObject *result = PyObject_VectorcallMethod(name, call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(time);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* The record of a remembered head sent (App.record_sent, as HTTPProtocol._complete calls it). */
static int
record(PyObject *record_sent, PyObject *remembered, PyObject *started, PyObject *headers, PyObject *peer)
{
    int done = -1;
    PyObject *path = get(remembered, S_PATH, AT_RECORD_PATH);
    PyObject *query = path == NULL ? NULL : get(remembered, S_QUERY, AT_RECORD_QUERY);
    PyObject *length = query == NULL ? NULL : get(remembered, S_LENGTH, AT_RECORD_LENGTH);
    PyObject *one = length == NULL ? NULL : PyLong_FromLong(1);
    if (one != NULL) {
        PyObject *call[7] = {path, query, length, one, started, headers, peer};
        PyObject *result = PyObject_Vectorcall(record_sent, call, 7, NULL);
        done = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    }
    Py_XDECREF(path);
    Py_XDECREF(query);
    Py_XDECREF(length);
    Py_XDECREF(one);
    return done;
}

/* Leave answer_remembered: -1 (an error is set), 0 (the Python path answers). */
#define FAIL_IF(cond) do { if (cond) { done = -1; goto out; } } while (0)
#define DECLINE_IF(cond) do { if (cond) { done = 0; goto out; } } while (0)

/* A GET of a remembered head of one trusted file: 1 answered, 0 not, -1 error. */
static int
answer_remembered(Head *head, PyObject *target, PyObject *tables, PyObject *date, PyObject *writer, PyObject *peer)
{
    PyObject *heads = PyTuple_GET_ITEM(tables, T_HEADS), *cache = PyTuple_GET_ITEM(tables, T_CACHE);
    if (head->method != GET || cache == Py_None || !PyDict_Check(heads) || PyDict_GET_SIZE(heads) == 0) return 0;
    int done = varies(head->headers, PyTuple_GET_ITEM(tables, T_VARIANT));
    if (done != 0) return done < 0 ? -1 : 0;
    PyObject *accept = PyDict_GetItemWithError(head->headers, ACCEPT);
    if (accept == NULL && PyErr_Occurred()) return -1;
    PyObject *key = NULL, *remembered = NULL, *paths = NULL, *path = NULL, *entries = NULL, *entry = NULL,
             *known = NULL, *made = NULL, *prepared = NULL, *length = NULL, *files = NULL, *body = NULL,
             *framed = NULL, *buffers = NULL, *started = NULL, *clock = NULL;
    double now, checked, valid, used, moved, head_now;
    int found;

    /* The head remembered for (target, Accept): Remembered.recall's lookup. */
    FAIL_IF((key = PyTuple_Pack(2, target, accept == NULL ? Py_None : accept)) == NULL);
    FAIL_IF((found = item_attr(heads, key, S_PATHS, AT_PATHS, &remembered, &paths)) < 0);
    DECLINE_IF(found == 0 || !PyTuple_Check(paths) || PyTuple_GET_SIZE(paths) != 1);
    path = PyTuple_GET_ITEM(paths, 0);
    Py_INCREF(path);

    /* Its file as FileCache.peek_all finds it, with no news to take in first. */
    FAIL_IF((found = no_news(cache)) < 0);
    DECLINE_IF(found == 0);
    FAIL_IF((entries = get(cache, S_ENTRIES, AT_ENTRIES)) == NULL);
    FAIL_IF((found = item_attr(entries, path, S_KNOWN, AT_KNOWN, &entry, &known)) < 0);
    DECLINE_IF(found == 0 || known == Py_None);
    FAIL_IF((made = get(known, S_ANSWER, AT_ANSWER)) == NULL);
    DECLINE_IF(!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 2 || PyTuple_GET_ITEM(made, 0) != remembered);
    prepared = PyTuple_GET_ITEM(made, 1);
    Py_INCREF(prepared);
    FAIL_IF((clock = get(cache, S_CLOCK, AT_CLOCK)) == NULL);
    FAIL_IF((now = now_of(clock)) == -1.0 && PyErr_Occurred());
    FAIL_IF(attr_double(entry, S_CHECKED, AT_CHECKED, &checked) < 0 || attr_double(cache, S_VALID, AT_VALID, &valid) < 0);
    DECLINE_IF(now - checked >= valid);

    /* What ResponseWriter.send writes at once: bytes only (no file to read), held_at_once's. */
    FAIL_IF((length = get(prepared, S_LENGTH, AT_LENGTH)) == NULL || (files = get(prepared, S_FILES, AT_FILES)) == NULL
            || (body = get(prepared, S_BODY, AT_BODY)) == NULL || (framed = get(prepared, S_HEAD, AT_HEAD)) == NULL);
    Py_ssize_t nbytes = PyLong_AsSsize_t(length), held_max = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, T_HELD_MAX));
    FAIL_IF(PyErr_Occurred() || (found = PyObject_IsTrue(files)) < 0);
    DECLINE_IF(found || nbytes > held_max || !PyList_Check(body) || !PyBytes_Check(framed));

    /* Answered from here: the record's start, the LRU moves of Remembered.recall and
     * FileCache.peek_all, the answer held (ResponseWriter.send), the record. */
    FAIL_IF((started = PyObject_CallNoArgs(PyTuple_GET_ITEM(tables, T_PERF_COUNTER))) == NULL);
    PyObject *head_clock = PyTuple_GET_ITEM(tables, T_HEAD_CLOCK);
    head_now = now;
    if (head_clock != clock) FAIL_IF((head_now = now_of(head_clock)) == -1.0 && PyErr_Occurred());
    double head_reorder = PyFloat_AsDouble(PyTuple_GET_ITEM(tables, T_HEAD_REORDER));
    double file_reorder = PyFloat_AsDouble(PyTuple_GET_ITEM(tables, T_FILE_REORDER));
    FAIL_IF(PyErr_Occurred() || attr_double(remembered, S_MOVED, AT_MOVED, &moved) < 0 || attr_double(entry, S_USED, AT_USED, &used) < 0);
    if (head_now - moved >= head_reorder) {
        PyObject *result = PyObject_CallMethodOneArg(heads, S_MOVE_TO_END, key);
        Py_XDECREF(result);
        PyObject *moved_now = result == NULL ? NULL : PyFloat_FromDouble(head_now);
        int failed = moved_now == NULL || PyObject_SetAttr(remembered, S_MOVED, moved_now) < 0;
        Py_XDECREF(moved_now);
        FAIL_IF(failed);
    }
    if (now - used >= file_reorder) {
        PyObject *pair = PyTuple_Pack(2, path, entry);
        PyObject *moves = pair == NULL ? NULL : PyTuple_Pack(1, pair);
        int failed = moves == NULL || call_with_time(cache, S_MOVE_UP, moves, now) < 0;
        Py_XDECREF(pair);
        Py_XDECREF(moves);
        FAIL_IF(failed);
    }
    Py_ssize_t parts = PyList_GET_SIZE(body);
    FAIL_IF((buffers = PyList_New(3 + parts)) == NULL);
    Py_INCREF(framed);
    PyList_SET_ITEM(buffers, 0, framed);
    Py_INCREF(date);
    PyList_SET_ITEM(buffers, 1, date);
    Py_INCREF(CRLF);
    PyList_SET_ITEM(buffers, 2, CRLF);
    for (Py_ssize_t i = 0; i < parts; i++) {
        PyObject *part = PyList_GET_ITEM(body, i);
        Py_INCREF(part);
        PyList_SET_ITEM(buffers, 3 + i, part);
    }
    FAIL_IF(hold(writer, buffers, PyBytes_GET_SIZE(framed) + PyBytes_GET_SIZE(date) + 2 + nbytes) < 0);
    FAIL_IF(record(PyTuple_GET_ITEM(tables, T_RECORD_SENT), remembered, started, head->headers, peer) < 0);
    done = 1;

out:
    Py_XDECREF(key);
    Py_XDECREF(remembered);
    Py_XDECREF(paths);
    Py_XDECREF(path);
    Py_XDECREF(entries);
    Py_XDECREF(entry);
    Py_XDECREF(known);
    Py_XDECREF(made);
    Py_XDECREF(prepared);
    Py_XDECREF(clock);
    Py_XDECREF(length);
    Py_XDECREF(files);
    Py_XDECREF(body);
    Py_XDECREF(framed);
    Py_XDECREF(buffers);
    Py_XDECREF(started);
    return done;
}

/* The head read whole in `data` (size bytes) answered from the tables: 1, 0 not, -1 error. */
static int
answer_head(Head *head, PyObject *target, Py_ssize_t size, PyObject *tables, PyObject *writer, PyObject *flow,
            PyObject *peer)
{
    if (head->end != size) return 0; /* another request follows in this read: the Python path's */
    Py_ssize_t most_fields = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, T_MOST_FIELDS));
    Py_ssize_t most_bytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(tables, T_MOST_BYTES));
    if (PyErr_Occurred()) return -1;
    if (head->count > most_fields || head->end > most_bytes) return 0; /* check_head decides: Python's */
    PyObject *paused = get(flow, S_PAUSED, AT_PAUSED);
    if (paused == NULL) return -1;
    int busy = PyObject_IsTrue(paused);
    Py_DECREF(paused);
    if (busy != 0) return busy < 0 ? -1 : 0;
    PyObject *date = get(PyTuple_GET_ITEM(tables, T_WORKER), S_DATE_LINE, AT_DATE_LINE);
    if (date == NULL) return -1;
    int done;
    PyObject *fixed = PyDict_GetItemWithError(PyTuple_GET_ITEM(tables, T_FIXED), target);
    if (fixed != NULL) {
        Py_INCREF(fixed);
        done = answer_fixed(fixed, head, date, writer);
        Py_DECREF(fixed);
    } else if (PyErr_Occurred()) {
        done = -1;
    } else {
        done = PyBytes_Check(date) ? answer_remembered(head, target, tables, date, writer, peer) : 0;
    }
    Py_DECREF(date);
    return done;
}

static PyObject *
answer(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != T_SIZE
        || !PyDict_Check(PyTuple_GET_ITEM(args[1], T_FIXED)) || !PyAnySet_Check(PyTuple_GET_ITEM(args[1], T_VARIANT))) {
        PyErr_SetString(PyExc_TypeError, "answer(data: bytes, tables, writer, flow, peer)");
        return NULL;
    }
    Head head;
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    int read = read_head((const unsigned char *)PyBytes_AS_STRING(args[0]), size, 0, &head);
    if (read < 0) return NULL;
    if (read == 0) Py_RETURN_NONE;
    PyObject *target = PyBytes_FromStringAndSize((const char *)head.url, head.url_len);
    if (target == NULL) {
        Py_DECREF(head.headers);
        return NULL;
    }
    int done = answer_head(&head, target, size, args[1], args[2], args[3], args[4]);
    if (done != 0) {
        Py_DECREF(target);
        Py_DECREF(head.headers);
        if (done < 0) return NULL;
        Py_RETURN_TRUE;
    }
    return head_tuple(&head, target);
}

/* read(obj, name): obj.name read as the compiled answer reads attributes (get, at a site of its
 * own), for the tests that hold it to Python's own lookup. */
static PyObject *
read_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read(obj, name: str)");
        return NULL;
    }
    /* A site serves one name: another name is learnt afresh. */
    static PyObject *last_name = NULL;
    if (last_name == NULL || PyUnicode_Compare(last_name, args[1]) != 0) {
        if (PyErr_Occurred()) return NULL;
        Py_INCREF(args[1]);
        Py_XSETREF(last_name, args[1]);
        SITES[AT_READ].tag = 0;
    }
    return get(args[0], args[1], AT_READ);
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL,
     "parse(data, start) -> (method, url, headers, end, count, field_bytes) or None"},
    {"answer", (PyCFunction)(void (*)(void))answer, METH_FASTCALL,
     "answer(data, tables, writer, flow, peer) -> True once answered, else what parse(data, 0) returns"},
    {"read", (PyCFunction)(void (*)(void))read_py, METH_FASTCALL,
     "read(obj, name): obj.name as the compiled answer reads attributes (for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_simplehead", "Reads the simplest HTTP/1.1 request heads in one call.", -1, methods,
};

PyMODINIT_FUNC
PyInit__simplehead(void)
{
    make_tables();
    if (GET == NULL && (GET = PyBytes_FromString("GET")) == NULL) return NULL;
    if (HEAD == NULL && (HEAD = PyBytes_FromString("HEAD")) == NULL) return NULL;
    if (CRLF == NULL && (CRLF = PyBytes_FromString("\r\n")) == NULL) return NULL;
    if (ACCEPT == NULL && (ACCEPT = PyUnicode_InternFromString("accept")) == NULL) return NULL;
    struct { PyObject **name; const char *text; } names[] = {
        {&S_PAUSED, "paused"}, {&S_DATE_LINE, "date_line"}, {&S_WHOLE, "whole"}, {&S_PATHS, "paths"},
        {&S_WATCHER, "watcher"}, {&S_FD, "fd"}, {&S_BEGUN, "begun"}, {&S_TAKEN, "taken"},
        {&S_ENTRIES, "entries"}, {&S_KNOWN, "known"}, {&S_ANSWER, "answer"}, {&S_CLOCK, "clock"},
        {&S_CHECKED, "checked"}, {&S_VALID, "valid"}, {&S_LENGTH, "length"}, {&S_FILES, "files"},
        {&S_BODY, "body"}, {&S_HEAD, "head"}, {&S_MOVED, "moved"}, {&S_MOVE_TO_END, "move_to_end"},
        {&S_USED, "used"}, {&S_MOVE_UP, "move_up"}, {&S_HOLD, "hold"}, {&S_PATH, "path"},
        {&S_QUERY, "query"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].name == NULL && (*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
