/*
 * manifest: MAR-INF/MANIFEST.json of an archive a client registers (common/manifest.c). A
 * manifest that loads must survive manifest_to_json and a second load unchanged, and a refused
 * one must come with a message and an empty manifest.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "manifest.h"

static void write_manifest(const char *dir, const void *data, size_t size)
{
    char *path = xasprintf("%s/MAR-INF/MANIFEST.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
    close(fd);
    free(path);
}

#define SAME(f) FUZZ_CHECK(!strcmp(a.f, b.f))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_dir();
    char *marinf = xasprintf("%s/MAR-INF", dir);
    mkdir(marinf, 0755);
    free(marinf);
    write_manifest(dir, data, size);
    struct manifest a, b;
    char err[512] = "";
    if (manifest_load(dir, &a, err, sizeof(err)) != 0) {
        FUZZ_CHECK(err[0] && a.model_name && !a.model_name[0]);
        manifest_free(&a);
        return 0;
    }
    char *json = manifest_to_json(&a);
    write_manifest(dir, json, strlen(json));
    free(json);
    FUZZ_CHECK(manifest_load(dir, &b, err, sizeof(err)) == 0);
    SAME(runtime);
    SAME(model_name);
    SAME(model_version);
    SAME(serialized_file);
    SAME(handler);
    SAME(config_file);
    SAME(envelope);
    SAME(created_on);
    SAME(archiver_version);
    char why[256];
    (void)ts_check_model_name(a.model_name, why, sizeof(why));
    (void)ts_check_model_version(a.model_version, why, sizeof(why));
    manifest_free(&a);
    manifest_free(&b);
    return 0;
}
