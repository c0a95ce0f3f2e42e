/*
 * builtins.c: what the C handlers of this directory share (builtins.h).
 */
#include <stdlib.h>

#include "builtins.h"
#include "torch/torch_shim.h"
#include "util.h"

struct tsh_model *ts_builtin_load(struct ts_ctx *ctx, const char *file)
{
    char *path = xasprintf("%s/%s", ts_model_dir(ctx), file);
    char *e = NULL;
    struct tsh_model *m = tsh_load(path, ts_gpu_id(ctx), &e);
    free(path);
    if (!m) {
        ts_set_load_error(ctx, "cannot load %s: %s", file, e);
        free(e);
    }
    return m;
}
