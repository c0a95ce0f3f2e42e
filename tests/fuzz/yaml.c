/*
 * yaml: model-config.yaml, read by the frontend through yaml_flat (common/yaml_flat.c) and
 * model_config_load (common/model_config.c), and by the worker through yaml_flat alone. Every
 * entry must have a path, a value and a line; the typed keys must stay within their bounds or
 * the load must fail with a message.
 */
#include "fuzz.h"
#include "model_config.h"
#include "yaml_flat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct yflat y;
    char err[512] = "";
    if (yflat_parse_string((const char *)data, size, "model-config.yaml", &y, err, sizeof(err)) ==
        0) {
        for (size_t i = 0; i < y.n; i++) {
            FUZZ_CHECK(y.e[i].path && y.e[i].value && y.e[i].line >= 1);
            FUZZ_CHECK(yflat_get(&y, y.e[i].path));
        }
        yflat_free(&y);
    } else {
        FUZZ_CHECK(err[0] && y.n == 0 && !y.e);
    }

    struct model_config mc;
    err[0] = '\0';
    if (model_config_load(fuzz_file(data, size), &mc, NULL, NULL, err, sizeof(err)) != 0) {
        FUZZ_CHECK(err[0]);
        return 0;
    }
    FUZZ_CHECK(mc.min_workers >= -1 && mc.min_workers <= MC_MAX_WORKERS);
    FUZZ_CHECK(mc.max_workers >= -1 && mc.max_workers <= MC_MAX_WORKERS);
    FUZZ_CHECK(mc.batch_size == -1 || (mc.batch_size >= 1 && mc.batch_size <= MC_MAX_BATCH_SIZE));
    FUZZ_CHECK(mc.max_batch_delay_ms >= -1 && mc.max_batch_delay_ms <= MC_MAX_DELAY_MS);
    FUZZ_CHECK(mc.response_timeout_s == -1 || mc.response_timeout_s >= 1);
    FUZZ_CHECK(mc.sequence_batching == 0 || mc.sequence_batching == 1);
    return 0;
}
