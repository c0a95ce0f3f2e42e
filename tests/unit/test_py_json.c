/* test_py_json: the Python handler's JSON fast paths (backend/python/py_json.c) against Python's
 * own json module, in an embedded interpreter: every value the fast path gives must be the one
 * json.loads gives (same types, same repr), every text it writes the one json.dumps writes, and
 * what it leaves to the json module it leaves without an exception. */
#include "python/py_json.c"

#include "tap.h"

#include "../py_embed.h"
#include "python/lsan_python.h"

/* Python code run once: helpers and the generated cases (a fixed seed: the same every run) */
static const char *const setup_py =
    "import json, random, struct\n"
    "rnd = random.Random(11)\n"
    "def same(a, b):\n"
    "    return type(a) is type(b) and repr(a) == repr(b)\n"
    "def f32(x):\n"
    "    return struct.unpack('f', struct.pack('f', x))[0]\n"
    "def token():\n"
    "    k = rnd.randrange(6)\n"
    "    if k == 0: return repr(f32(rnd.uniform(-1, 1)))\n"
    "    if k == 1: return '%.9g' % f32(rnd.uniform(-1e6, 1e6))\n"
    "    if k == 2: return repr(rnd.uniform(-1, 1) * 10 ** rnd.randrange(-30, 30))\n"
    "    if k == 3:\n"
    "        d = ''.join(rnd.choice('0123456789') for _ in range(rnd.randrange(1, 25)))\n"
    "        d = d.lstrip('0') or '0'\n"
    "        f = ''.join(rnd.choice('0123456789') for _ in range(rnd.randrange(1, 25)))\n"
    "        e = rnd.choice(['', 'e%d' % rnd.randrange(-330, 330), 'E+%d' % rnd.randrange(40)])\n"
    "        return rnd.choice(['', '-']) + d + '.' + f + e\n"
    "    if k == 4: return str(rnd.randrange(-10 ** rnd.randrange(1, 25), 10 ** 20))\n"
    "    return '%de%d' % (rnd.randrange(1, 10 ** 15), rnd.randrange(-25, 25))\n"
    "def text():\n"
    "    cps = [rnd.choice([rnd.randrange(32, 127), rnd.randrange(0, 32),\n"
    "                       rnd.randrange(128, 0xd800), rnd.randrange(0xd800, 0xe000),\n"
    "                       rnd.randrange(0xe000, 0x110000), 34, 92])\n"
    "           for _ in range(rnd.randrange(0, 12))]\n"
    "    return ''.join(map(chr, cps))\n"
    "def value(depth=0):\n"
    "    k = rnd.randrange(9 if depth < 4 else 6)\n"
    "    if k == 0: return f32(rnd.gauss(0, 1))\n"
    "    if k == 1: return rnd.uniform(-1e300, 1e300) * rnd.choice([1, 1e-300, 1e-10])\n"
    "    if k == 2: return rnd.choice([None, True, False, float('nan'), float('inf'), -0.0, 0])\n"
    "    if k == 3: return rnd.randrange(-2 ** 70, 2 ** 70) >> rnd.randrange(70)\n"
    "    if k == 4: return text()\n"
    "    if k == 5:\n"
    "        return rnd.choice([0.1, 1e16, 1e-5, 123456789.0, 5e-324, 1.7976931348623157e308])\n"
    "    if k == 6: return [value(depth + 1) for _ in range(rnd.randrange(5))]\n"
    "    if k == 7: return tuple(value(depth + 1) for _ in range(rnd.randrange(3)))\n"
    "    return {text(): value(depth + 1) for _ in range(rnd.randrange(4))}\n"
    "TOKENS = [token() for _ in range(60000)]\n"
    "VALUES = [value() for _ in range(20000)]\n"
    "SAMPLE = open('scripts/models/mlp/sample.json', 'rb').read()\n";

static PyObject *ns;

static PyObject *get(const char *name)
{
    PyObject *v = PyDict_GetItemString(ns, name); /* borrowed */
    if (!v) {
        fprintf(stderr, "  setup: %s missing\n", name);
        _exit(1);
    }
    return v;
}

static PyObject *call(const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    PyObject *r = args ? PyObject_Call(get(fn), args, NULL) : NULL;
    Py_XDECREF(args);
    return r;
}

/* json.loads(text.decode()) and pyj_loads(text) agree: 1 if pyj_loads decided, 0 if it left the
 * text to the json module (which it must do without an exception). */
static int loads_agrees(const char *text, size_t n)
{
    PyObject *got = pyj_loads(text, n);
    if (!got) {
        if (PyErr_Occurred()) {
            PyErr_Print();
            fprintf(stderr, "  pyj_loads raised for %.*s\n", (int)n, text);
            _exit(1);
        }
        return 0;
    }
    PyObject *json = PyImport_ImportModule("json");
    PyObject *want = json ? PyObject_CallMethod(json, "loads", "s#", text, (Py_ssize_t)n) : NULL;
    if (!want) {
        PyErr_Print();
        fprintf(stderr, "  fast path decoded what json.loads refuses: %.*s\n", (int)n, text);
        _exit(1);
    }
    PyObject *same = call("same", "(OO)", got, want);
    if (same != Py_True) {
        PyObject *r1 = PyObject_Repr(got), *r2 = PyObject_Repr(want);
        fprintf(stderr, "  %.*s: fast path %s, json.loads %s\n", (int)n, text,
                r1 ? PyUnicode_AsUTF8(r1) : "?", r2 ? PyUnicode_AsUTF8(r2) : "?");
        _exit(1);
    }
    Py_DECREF(same);
    Py_DECREF(got);
    Py_DECREF(want);
    Py_DECREF(json);
    return 1;
}

static int loads_agrees_str(const char *text)
{
    return loads_agrees(text, strlen(text));
}

TEST(loads_documents)
{
    /* on the fast path */
    static const char *const fast[] = {
        "[1, 2.5, -0.0, -0, 0, true, false, null]",
        " {\"data\": [0.1, -0.3523, 1e10, 1.5E-3, 0.000123, -7.25e+2]}\r\n\t",
        "{\"a\": 1, \"b\": {\"c\": [[], {}, \"x\"]}, \"a\": 2}",
        "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
        "123456789012345678",
        "[9007199254740993.0, 1e-400, 1e400, -1e400, 0e999999, 2.2250738585072011e-308]",
        "{\"input\": \"\x7f\"}",
    };
    for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); i++)
        CHECK(loads_agrees_str(fast[i]));
    /* left to json.loads: it parses some of them differently or refuses them */
    static const char *const slow[] = {
        "",
        "   ",
        "[1,]",
        "[1 2]",
        "{\"a\" 1}",
        "{\"a\": 1,}",
        "{1: 2}",
        "[01]",
        "[-]",
        "[1.]",
        "[.5]",
        "[1e]",
        "[1e+]",
        "NaN",
        "[Infinity]",
        "-Infinity",
        "\"a\\nb\"",
        "\"tab\there\"",
        "\"\xff\"",
        "\"\xed\xa0\x80\"",
        "\xef\xbb\xbf[1]",
        "[1] x",
        "[1]]",
        "tru",
        "nul",
        "1234567890123456789",
        "[\"unterminated]",
        "{\"a\": [1, 2}",
        /* deeper than PYJ_MAX_DEPTH (64) */
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1"
        "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++)
        CHECK_EQ_INT(loads_agrees_str(slow[i]), 0);
    /* the benchmark's request body */
    PyObject *s = get("SAMPLE");
    CHECK(loads_agrees(PyBytes_AS_STRING(s), (size_t)PyBytes_GET_SIZE(s)));
}

TEST(loads_numbers)
{
    PyObject *toks = get("TOKENS");
    Py_ssize_t n = PyList_GET_SIZE(toks), fast = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *t = PyUnicode_AsUTF8(PyList_GET_ITEM(toks, i));
        fast += loads_agrees_str(t);
    }
    /* the fast path decides most of them (the rest: over 18 integer digits) */
    CHECK(fast > n * 3 / 4);
}

TEST(loads_generated_documents)
{
    PyObject *vals = get("VALUES");
    Py_ssize_t n = PyList_GET_SIZE(vals), fast = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = call("dumps", "(O)", PyList_GET_ITEM(vals, i));
        CHECK(text);
        Py_ssize_t len;
        const char *t = PyUnicode_AsUTF8AndSize(text, &len);
        fast += loads_agrees(t, (size_t)len);
        Py_DECREF(text);
    }
    CHECK(fast > n / 4);
}

/* pyj_dumps(v) is json.dumps(v).encode(), or leaves v to json.dumps; 1 if it decided */
static int dumps_agrees(PyObject *v)
{
    struct pyj_buf b = {0};
    CHECK(buf_put(&b, "x", 1) == 0); /* what was there before stays */
    int rc = pyj_dumps(v, &b);
    if (rc < 0) {
        PyErr_Print();
        _exit(1);
    }
    CHECK(!PyErr_Occurred());
    if (rc) {
        CHECK_EQ_INT(b.len, 1);
        pyj_buf_free(&b);
        return 0;
    }
    PyObject *want = call("dumps", "(O)", v);
    if (!want) {
        PyErr_Print();
        fprintf(stderr, "  fast path encoded what json.dumps refuses\n");
        _exit(1);
    }
    Py_ssize_t len;
    const char *w = PyUnicode_AsUTF8AndSize(want, &len);
    if ((size_t)len + 1 != b.len || memcmp(b.data + 1, w, (size_t)len)) {
        fprintf(stderr, "  fast path %.*s\n  json.dumps %s\n", (int)b.len - 1, b.data + 1, w);
        _exit(1);
    }
    Py_DECREF(want);
    pyj_buf_free(&b);
    return 1;
}

TEST(dumps_values)
{
    PyObject *vals = get("VALUES");
    Py_ssize_t n = PyList_GET_SIZE(vals), fast = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        fast += dumps_agrees(PyList_GET_ITEM(vals, i));
    CHECK(fast > n / 2);
    /* left to json.dumps: subclasses, non-str keys, big ints, circular and deep values */
    static const char *const slow[] = {
        "{1: 2}",
        "[2 ** 64]",
        "__import__('collections').OrderedDict(a=1)",
        "[__import__('enum').IntEnum('E', 'A').A]",
        "(lambda l: (l.append(l), l)[1])([])",
        "eval('[' * 70 + ']' * 70)",
        "{'a': set()}",
        "b'bytes'",
    };
    for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
        PyObject *v = PyRun_String(slow[i], Py_eval_input, ns, ns);
        CHECK(v);
        CHECK_EQ_INT(dumps_agrees(v), 0);
        Py_DECREF(v);
    }
}

static uint64_t rng = 88172645463325252ULL;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* short_repr(x) is float.__repr__(x) whenever it answers; 1 if it did */
static int repr_agrees(double x)
{
    char got[48];
    size_t n = short_repr(x, got);
    if (!n)
        return 0;
    char *want = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    CHECK(want);
    if (strlen(want) != n || memcmp(got, want, n)) {
        fprintf(stderr, "  %a: short_repr %.*s, repr %s\n", x, (int)n, got, want);
        _exit(1);
    }
    PyMem_Free(want);
    return 1;
}

TEST(float_repr)
{
    /* float32 values as doubles (what tolist() gives), over the whole fast range */
    long fast = 0, n = 300000;
    for (long i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)next_rand();
        bits = (bits & 0x807fffffu) | ((uint32_t)(127 - 31 + (int)(next_rand() % 82)) << 23);
        float f;
        memcpy(&f, &bits, sizeof(f));
        fast += repr_agrees((double)f);
    }
    CHECK(fast > n * 9 / 10);
    /* any doubles, and short decimals (few digits: the scan's other end) */
    for (long i = 0; i < n; i++) {
        uint64_t bits = next_rand();
        bits = (bits & 0x800fffffffffffffULL) |
               ((uint64_t)(1023 - 31 + (int)(next_rand() % 82)) << 52);
        double d;
        memcpy(&d, &bits, sizeof(d));
        repr_agrees(d);
        repr_agrees((double)(int64_t)(next_rand() % 2000001 - 1000000) /
                    exact_pow10[next_rand() % 12]);
    }
    static const double edge[] = {0.1,
                                  0.3,
                                  1e-5,
                                  1.5e-5,
                                  9.5367431640625e-7,
                                  123.0,
                                  1e15,
                                  9.999999999999999e14,
                                  0.001,
                                  0.0001,
                                  1e-4,
                                  12345678.9,
                                  5e-10,
                                  1e-9,
                                  0.30000000000000004};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        repr_agrees(edge[i]);
        repr_agrees(-edge[i]);
    }
    CHECK(repr_agrees(0.1) && repr_agrees(-0.07237190008163452));
}

int main(void)
{
    if (py_embed_start() != 0) {
        fprintf(stderr, "cannot start Python\n");
        return 1;
    }
    PyObject *main_mod = PyImport_AddModule("__main__");
    ns = main_mod ? PyModule_GetDict(main_mod) : NULL;
    PyObject *r = ns ? PyRun_String(setup_py, Py_file_input, ns, ns) : NULL;
    if (!r) {
        PyErr_Print();
        return 1;
    }
    Py_DECREF(r);
    PyObject *json = PyImport_ImportModule("json");
    PyObject *dumps = json ? PyObject_GetAttrString(json, "dumps") : NULL;
    if (!dumps || PyDict_SetItemString(ns, "dumps", dumps) < 0)
        return 1;
    Py_DECREF(dumps);
    Py_DECREF(json);
    RUN(loads_documents);
    RUN(loads_numbers);
    RUN(loads_generated_documents);
    RUN(dumps_values);
    RUN(float_repr);
    return tap_done();
}
