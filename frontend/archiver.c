/*
 * torchserve-c-archiver: builds a model archive the way torch-model-archiver does.
 *
 * The artifacts are copied flat into a private staging directory, MAR-INF/MANIFEST.json is
 * written next to them, and archive_create() packs the directory as a zip (.mar), a .tar.gz or a
 * plain directory. Everything is checked before the output is touched, and the output is only
 * replaced with -f, so a failed run never leaves a half-written or clobbered archive.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mgmt/archive.h"
#include "manifest.h"
#include "py_builtins.h"
#include "util.h"
#include "yaml_flat.h"

#define ARCHIVER_VERSION "0.1.0"

static const char *prog = "torchserve-c-archiver";

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: %s --model-name NAME --handler HANDLER [options]\n"
        "\n"
        "Packs a model into an archive that torchserve-c (and TorchServe's layout) loads.\n"
        "\n"
        "  --model-name NAME        model name: a letter, then letters, digits, '_', '-', '.'\n"
        "  --version, -v V          model version (default 1.0)\n"
        "  --serialized-file F      the model weights, e.g. model.pt (copied in)\n"
        "  --model-file F           eager-mode model definition, e.g. model.py (copied in,\n"
        "                           recorded as modelFile)\n"
        "  --handler H              a built-in handler (torchscript, image_classifier, ...),\n"
        "                           libfoo.so[:symbol], or a Python file handler.py[:function]\n"
        "                           (or handler[:function] when handler.py exists); a .so given\n"
        "                           as a path and a .py are copied into the archive\n"
        "  --requirements-file, -r F\n"
        "                           requirements.txt (copied in, recorded as requirementsFile;\n"
        "                           installed into the model's own virtual environment when the\n"
        "                           server runs with install_py_dep_per_model=true)\n"
        "  --extra-files A,B,...    more files to copy in; a directory's contents are copied\n"
        "                           recursively into the archive root, as torch-model-archiver\n"
        "                           does\n"
        "  --config-file, -c F      model-config.yaml (copied in, recorded as configFile)\n"
        "  --runtime R              c or python (python3 is taken as python); default python\n"
        "                           for a .py or TorchServe built-in handler, else c\n"
        "  --export-path DIR        where the archive is written (default .)\n"
        "  --archive-format FMT     default (NAME.mar, zip), zip-store (NAME.mar, zip without\n"
        "                           compression), tgz (NAME.tar.gz) or no-archive (directory\n"
        "                           DIR/NAME/)\n"
        "  -f, --force              overwrite an existing archive\n"
        "  -h, --help               this help\n",
        prog);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static const char *base_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *b = path + n;
    while (b > path && b[-1] != '/')
        b--;
    return b;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static int remove_tree(const char *path)
{
    return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return fail("cannot read '%s': %s", src, strerror(errno));
    struct stat st;
    mode_t mode = fstat(fileno(in), &st) == 0 ? (st.st_mode & 0755) | 0644 : 0644;
    FILE *out = fopen(dst, "wbx");
    if (!out) {
        int e = errno;
        fclose(in);
        return fail("cannot create '%s': %s", dst, strerror(e));
    }
    char chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
        if (fwrite(chunk, 1, n, out) != n) {
            rc = fail("cannot write '%s': %s", dst, strerror(errno));
            break;
        }
    if (!rc && ferror(in))
        rc = fail("cannot read '%s'", src);
    fclose(in);
    if (fclose(out) != 0 && !rc)
        rc = fail("cannot write '%s': %s", dst, strerror(errno));
    if (!rc)
        chmod(dst, mode);
    return rc;
}

/* Copies a file or directory into the staging dir under its base name (or as_name). */
static int stage(const char *staging, const char *src, const char *as_name, const char *what)
{
    struct stat st;
    if (stat(src, &st) != 0)
        return fail("%s '%s' not found: %s", what, src, strerror(errno));
    const char *name = as_name ? as_name : base_name(src);
    if (!*name || !strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "MAR-INF"))
        return fail("%s '%s': cannot be stored under the name '%s'", what, src, name);
    char *dst = xasprintf("%s/%s", staging, name);
    struct stat dst_st;
    int rc = 0;
    if (lstat(dst, &dst_st) == 0) {
        rc = fail("%s '%s': the archive already has a file named '%s'", what, src, name);
    } else if (S_ISDIR(st.st_mode)) {
        char err[512];
        if (archive_create(src, dst, ARCHIVE_FMT_DIR, err, sizeof err) != 0)
            rc = fail("%s '%s': %s", what, src, err);
    } else if (S_ISREG(st.st_mode)) {
        rc = copy_file(src, dst);
    } else {
        rc = fail("%s '%s' is not a regular file or directory", what, src);
    }
    free(dst);
    return rc;
}

/* An extra file is copied under its base name; a directory's entries are copied (recursively)
 * into the archive root, as torch-model-archiver does, so a handler finds them in model_dir. */
static int stage_extra(const char *staging, const char *src)
{
    struct stat st;
    if (stat(src, &st) != 0)
        return fail("extra file '%s' not found: %s", src, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return stage(staging, src, NULL, "extra file");
    DIR *d = opendir(src);
    if (!d)
        return fail("extra file '%s': %s", src, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = xasprintf("%s/%s", src, de->d_name);
        rc = stage(staging, p, NULL, "extra file");
        free(p);
    }
    closedir(d);
    return rc;
}

/* TorchServe's built-in Python handlers: names, not files, served by our ts package. */
static int is_python_builtin(const char *h)
{
    return py_builtin_handler(h, strlen(h));
}

/* A Python handler file: "path/handler.py" or "path/handler.py:function". It must exist; it is
 * copied in and recorded as "handler.py[:function]". */
static int stage_py_handler(const char *staging, const char *handler, const char *py_end,
                            char **record)
{
    char *path = xstrndup(handler, (size_t)(py_end - handler));
    const char *fn = *py_end == ':' ? py_end : "";
    int rc = 0;
    struct stat st;
    if (*fn && !fn[1])
        rc = fail("handler '%s': no function name after ':'", handler);
    else if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        rc = fail("handler file '%s' not found", path);
    else
        rc = stage(staging, path, NULL, "handler file");
    *record = rc ? NULL : xasprintf("%s%s", base_name(path), fn);
    free(path);
    return rc;
}

/* A handler is a built-in name, libfoo.so[:symbol] or handler.py[:function]. A .so that exists
 * as a file (or is given with a '/') is copied in and recorded by its base name; a .py always is.
 * *python is set for a .py or a TorchServe built-in name. *record is malloc'd. */
static int stage_handler(const char *staging, const char *handler, char **record, int *python)
{
    size_t hl = strcspn(handler, ":");
    *python = 0;
    if (hl >= 3 && !strncmp(handler + hl - 3, ".py", 3)) {
        *python = 1;
        return stage_py_handler(staging, handler, handler + hl, record);
    }
    if (is_python_builtin(handler)) {
        *python = 1;
        *record = xstrdup(handler);
        return 0;
    }
    /* torch-model-archiver also takes a module without ".py" ("my_handler[:fn]") and copies
     * my_handler.py; the name is recorded as given, which the worker resolves the same way */
    char *py = xasprintf("%.*s.py", (int)hl, handler);
    struct stat st;
    int is_py = !strstr(handler, ".so") && stat(py, &st) == 0 && S_ISREG(st.st_mode);
    int rc = is_py ? stage(staging, py, NULL, "handler file") : 0;
    free(py);
    if (is_py) {
        *python = 1;
        *record = rc ? NULL : xstrdup(base_name(handler));
        return rc;
    }
    const char *so = strstr(handler, ".so");
    while (so && so[3] && so[3] != ':' && so[3] != '.')
        so = strstr(so + 3, ".so");
    if (!so) {
        *record = xstrdup(handler);
        return 0;
    }
    /* the path ends after ".so" plus any version suffix (".so.1"), before ":symbol" */
    const char *colon = strchr(so, ':');
    char *path = colon ? xstrndup(handler, (size_t)(colon - handler)) : xstrdup(handler);
    if (stat(path, &st) == 0) {
        rc = stage(staging, path, NULL, "handler library");
        *record = xasprintf("%s%s", base_name(path), colon ? colon : "");
    } else if (strchr(path, '/')) {
        rc = fail("handler library '%s' not found", path);
        *record = NULL;
    } else {
        *record = xstrdup(handler); /* resolved by the worker's library search path */
    }
    free(path);
    return rc;
}

static void created_on(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(out, 32, "%d/%m/%Y %H:%M:%S", &tm);
}

int main(int argc, char **argv)
{
    const char *model_name = NULL, *version = "1.0", *serialized = NULL, *handler = NULL;
    const char *extra = NULL, *config_file = NULL, *export_path = ".", *format = "default";
    const char *runtime = NULL, *model_file = NULL, *requirements = NULL;
    int force = 0;
    enum {
        O_NAME = 256,
        O_SERIALIZED,
        O_HANDLER,
        O_EXTRA,
        O_EXPORT,
        O_FORMAT,
        O_RUNTIME,
        O_MODEL_FILE,
    };
    static const struct option opts[] = {
        {"model-name", required_argument, NULL, O_NAME},
        {"version", required_argument, NULL, 'v'},
        {"serialized-file", required_argument, NULL, O_SERIALIZED},
        {"handler", required_argument, NULL, O_HANDLER},
        {"extra-files", required_argument, NULL, O_EXTRA},
        {"config-file", required_argument, NULL, 'c'},
        {"export-path", required_argument, NULL, O_EXPORT},
        {"archive-format", required_argument, NULL, O_FORMAT},
        {"runtime", required_argument, NULL, O_RUNTIME},
        {"model-file", required_argument, NULL, O_MODEL_FILE},
        {"requirements-file", required_argument, NULL, 'r'},
        {"force", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "v:c:r:fh", opts, NULL)) != -1) {
        switch (c) {
        case O_NAME:
            model_name = optarg;
            break;
        case 'v':
            version = optarg;
            break;
        case O_SERIALIZED:
            serialized = optarg;
            break;
        case O_HANDLER:
            handler = optarg;
            break;
        case O_EXTRA:
            extra = optarg;
            break;
        case 'c':
            config_file = optarg;
            break;
        case O_EXPORT:
            export_path = optarg;
            break;
        case O_FORMAT:
            format = optarg;
            break;
        case O_RUNTIME:
            runtime = optarg;
            break;
        case O_MODEL_FILE:
            model_file = optarg;
            break;
        case 'r':
            requirements = optarg;
            break;
        case 'f':
            force = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fail("unexpected argument '%s'", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!model_name || !handler) {
        fail("%s is required", !model_name ? "--model-name" : "--handler");
        usage(stderr);
        return 2;
    }
    char why[256];
    if (ts_check_model_name(model_name, why, sizeof(why)) ||
        ts_check_model_version(version, why, sizeof(why)))
        return fail("%s", why);
    /* the worker serves these two; anything else would be recorded and then not honoured */
    if (runtime && !strcmp(runtime, "python3"))
        runtime = "python";
    if (runtime && strcmp(runtime, "c") && strcmp(runtime, "python"))
        return fail("unsupported --runtime '%s' (expected c or python)", runtime);

    enum archive_format fmt;
    const char *suffix;
    if (!strcmp(format, "default")) {
        fmt = ARCHIVE_FMT_ZIP;
        suffix = ".mar";
    } else if (!strcmp(format, "tgz")) {
        fmt = ARCHIVE_FMT_TGZ;
        suffix = ".tar.gz";
    } else if (!strcmp(format, "zip-store")) {
        fmt = ARCHIVE_FMT_ZIP_STORE;
        suffix = ".mar";
    } else if (!strcmp(format, "no-archive")) {
        fmt = ARCHIVE_FMT_DIR;
        suffix = "";
    } else {
        return fail(
            "unknown --archive-format '%s' (expected default, zip-store, tgz or no-archive)",
            format);
    }

    struct stat st;
    if (stat(export_path, &st) != 0 || !S_ISDIR(st.st_mode))
        return fail("export path '%s' is not a directory", export_path);
    char *out = xasprintf("%s/%s%s", export_path, model_name, suffix);
    int exists = lstat(out, &st) == 0;
    int out_is_dir = exists && S_ISDIR(st.st_mode);
    if (exists && !force) {
        fail("'%s' already exists; use -f/--force to overwrite it", out);
        free(out);
        return 1;
    }

    /* checks of the inputs that need no staging */
    const char *named[][2] = {{"serialized file", serialized},
                              {"model file", model_file},
                              {"requirements file", requirements}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        if (!named[i][1])
            continue;
        int e = stat(named[i][1], &st) != 0 ? errno : 0;
        if (e || !S_ISREG(st.st_mode)) {
            fail("%s '%s' not found: %s", named[i][0], named[i][1],
                 e ? strerror(e) : "not a regular file");
            free(out);
            return 1;
        }
    }
    if (config_file) {
        struct yflat y;
        char err[512];
        int rc = yflat_parse_file(config_file, config_file, &y, err, sizeof err);
        if (rc) {
            fail("config file: %s", err);
            free(out);
            return 1;
        }
        yflat_free(&y);
    }

    const char *tmpdir = getenv("TMPDIR");
    char *staging =
        xasprintf("%s/torchserve-c-archiver.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(staging)) {
        fail("cannot create a staging directory '%s': %s", staging, strerror(errno));
        free(staging);
        free(out);
        return 1;
    }

    int rc = 0;
    char *handler_rec = NULL;
    int python = 0;
    if (serialized)
        rc = stage(staging, serialized, NULL, "serialized file");
    if (!rc && model_file)
        rc = stage(staging, model_file, NULL, "model file");
    if (!rc && requirements)
        rc = stage(staging, requirements, NULL, "requirements file");
    if (!rc)
        rc = stage_handler(staging, handler, &handler_rec, &python);
    if (!rc && !runtime)
        runtime = python ? "python" : "c";
    if (!rc && config_file)
        rc = stage(staging, config_file, NULL, "config file");
    if (!rc && extra) {
        char *list = xstrdup(extra), *save = NULL;
        for (char *f = strtok_r(list, ",", &save); f && !rc; f = strtok_r(NULL, ",", &save)) {
            while (*f == ' ')
                f++;
            if (*f)
                rc = stage_extra(staging, f);
        }
        free(list);
    }
    if (!rc) {
        char *mar_inf = xasprintf("%s/MAR-INF", staging);
        char when[32];
        created_on(when);
        struct manifest m = {0};
        m.created_on = when;
        m.runtime = (char *)runtime;
        m.model_name = (char *)model_name;
        m.model_version = (char *)version;
        m.serialized_file = serialized ? (char *)base_name(serialized) : NULL;
        m.handler = handler_rec;
        m.model_file = model_file ? (char *)base_name(model_file) : NULL;
        m.requirements_file = requirements ? (char *)base_name(requirements) : NULL;
        m.config_file = config_file ? (char *)base_name(config_file) : NULL;
        m.archiver_version = ARCHIVER_VERSION;
        char *json = manifest_to_json(&m);
        char *mpath = xasprintf("%s/MANIFEST.json", mar_inf);
        FILE *f = NULL;
        if (mkdir(mar_inf, 0755) != 0 || !(f = fopen(mpath, "w")) || fputs(json, f) < 0)
            rc = fail("cannot write '%s': %s", mpath, strerror(errno));
        if (f && fclose(f) != 0 && !rc)
            rc = fail("cannot write '%s': %s", mpath, strerror(errno));
        free(json);
        free(mpath);
        free(mar_inf);
    }
    if (!rc && exists && (fmt == ARCHIVE_FMT_DIR || out_is_dir) && remove_tree(out) != 0)
        rc = fail("cannot remove the existing '%s': %s", out, strerror(errno));
    if (!rc) {
        char err[1024];
        int arc = archive_create(staging, out, fmt, err, sizeof err);
        if (arc)
            rc = fail("cannot create '%s': %s", out, err);
    }
    remove_tree(staging);
    free(staging);
    free(handler_rec);
    free(out);
    return rc ? 1 : 0;
}
