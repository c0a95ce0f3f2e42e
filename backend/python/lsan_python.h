/*
 * lsan_python: LeakSanitizer's settings for an executable that embeds CPython (the worker, and
 * test_py_json). Included by exactly one file of each such executable: it defines the two
 * functions LSan looks up.
 *
 * CPython is never finalised (py_handler.c), so the interpreter's own objects are still
 * allocated at exit, referenced in ways LSan cannot follow. Allocations made inside libpython
 * are not reported; the executable's own still are. So are none of the extension modules'
 * whose objects live as long as the interpreter and whose stacks LSan cannot unwind back into
 * libpython (no frame pointers): numpy's core (the MLServer and Inferless runtimes' tensors)
 * and libcrypto, which only Python's _ssl / _hashlib (imported by asyncio) load into a worker. The
 * "Suppressions used" summary would be a report file of its own for CI (.ci/run), so it is not
 * printed.
 */
#ifndef TS_LSAN_PYTHON_H
#define TS_LSAN_PYTHON_H

/* gcc says ASan with __SANITIZE_ADDRESS__, clang (the fuzz targets) with __has_feature */
#if defined(__SANITIZE_ADDRESS__)
#define TS_LSAN_PYTHON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_LSAN_PYTHON 1
#endif
#endif

#ifdef TS_LSAN_PYTHON
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    /* libpython3.X.so.1.0, whichever the plugin was built against */
    return "leak:libpython3\nleak:_multiarray_umath\nleak:libcrypto.so\n";
}
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}
#endif

#endif
