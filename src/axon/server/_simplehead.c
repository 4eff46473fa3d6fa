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

static PyObject *
parse(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse(data: bytes, start)");
        return NULL;
    }
    Py_ssize_t start;
    if ((start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (start < 0 || start > size) Py_RETURN_NONE;
    const unsigned char *p = buf + start, *end = buf + size;

    PyObject *method;
    if (end - p >= 4 && memcmp(p, "GET ", 4) == 0) {
        method = GET;
        p += 4;
    } else if (end - p >= 5 && memcmp(p, "HEAD ", 5) == 0) {
        method = HEAD;
        p += 5;
    } else {
        Py_RETURN_NONE;
    }
    const unsigned char *url = p;
    if (p >= end || *p != '/') Py_RETURN_NONE;
    while (p < end && TARGET[*p]) p++;
    Py_ssize_t url_len = p - url;
    if (end - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0) Py_RETURN_NONE;
    p += 11;

    PyObject *headers = PyDict_New();
    if (headers == NULL) return NULL;
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
    PyObject *target = PyBytes_FromStringAndSize((const char *)url, url_len);
    if (target == NULL) goto failed;
    PyObject *result = PyTuple_New(6);
    if (result == NULL) {
        Py_DECREF(target);
        goto failed;
    }
    Py_INCREF(method);
    PyTuple_SET_ITEM(result, 0, method);
    PyTuple_SET_ITEM(result, 1, target);
    PyTuple_SET_ITEM(result, 2, headers);
    PyTuple_SET_ITEM(result, 3, PyLong_FromSsize_t(p - buf));
    PyTuple_SET_ITEM(result, 4, PyLong_FromSsize_t(count));
    PyTuple_SET_ITEM(result, 5, PyLong_FromSsize_t(counted));
    if (PyTuple_GET_ITEM(result, 3) == NULL || PyTuple_GET_ITEM(result, 4) == NULL || PyTuple_GET_ITEM(result, 5) == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    return result;

not_read:
    Py_DECREF(headers);
    Py_RETURN_NONE;
failed:
    Py_DECREF(headers);
    return NULL;
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL,
     "parse(data, start) -> (method, url, headers, end, count, field_bytes) or None"},
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
    return PyModule_Create(&module);
}
