/*
 * properties: config.properties as the server reads it at start: the Java-properties parser
 * (common/properties.c) on the bytes, then config_load (frontend/core/config.c) on the same bytes
 * as a file, which types every known key. Every key read must be a non-empty C string; a refused
 * file must leave a message and a config that config_free releases.
 */
#include "core/config.h"
#include "fuzz.h"
#include "properties.h"

static void ignore_warning(const char *msg, void *arg)
{
    (void)msg;
    (void)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct props ps;
    char err[512] = "";
    if (props_parse_string((const char *)data, size, &ps, err, sizeof(err)) == 0) {
        for (size_t i = 0; i < ps.n; i++) {
            FUZZ_CHECK(ps.p[i].key && ps.p[i].value && ps.p[i].key[0]);
            FUZZ_CHECK(ps.p[i].line >= 1);
            FUZZ_CHECK(props_get(&ps, ps.p[i].key));
        }
        props_free(&ps);
    } else {
        FUZZ_CHECK(err[0] && ps.n == 0 && !ps.p);
    }

    struct config c;
    config_defaults(&c);
    err[0] = '\0';
    if (config_load(fuzz_file(data, size), &c, ignore_warning, NULL, err, sizeof(err)) != 0)
        FUZZ_CHECK(err[0]);
    FUZZ_CHECK(c.inference_address.host && c.management_address.host && c.metrics_address.host);
    FUZZ_CHECK(c.max_request_size > 0 && c.job_queue_size > 0);
    config_free(&c);
    return 0;
}
