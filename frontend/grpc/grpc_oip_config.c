/*
 * grpc_oip_config: see grpc_oip_config.h. Triton's convention for shapes: a model with
 * max_batch_size > 0 lists its tensors' dims without the batch dimension. torchserve-c batches
 * along dim 0, so when every declared tensor starts with a variable dimension (-1), that one is
 * the batch dimension: max_batch_size is the model's batchSize and dims leave it out. Otherwise
 * max_batch_size is 0 and dims are the declared shape.
 */
#include "grpc_oip_config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/model.h"
#include "grpc_server.h"
#include "oip/oip_req.h"
#include "oip_grpc.pb-c.h"

static Inference__DataType data_type(const char *oip)
{
    static const struct {
        const char *name;
        Inference__DataType t;
    } map[] = {
        {"BOOL", INFERENCE__DATA_TYPE__TYPE_BOOL},
        {"UINT8", INFERENCE__DATA_TYPE__TYPE_UINT8},
        {"UINT16", INFERENCE__DATA_TYPE__TYPE_UINT16},
        {"UINT32", INFERENCE__DATA_TYPE__TYPE_UINT32},
        {"UINT64", INFERENCE__DATA_TYPE__TYPE_UINT64},
        {"INT8", INFERENCE__DATA_TYPE__TYPE_INT8},
        {"INT16", INFERENCE__DATA_TYPE__TYPE_INT16},
        {"INT32", INFERENCE__DATA_TYPE__TYPE_INT32},
        {"INT64", INFERENCE__DATA_TYPE__TYPE_INT64},
        {"FP16", INFERENCE__DATA_TYPE__TYPE_FP16},
        {"FP32", INFERENCE__DATA_TYPE__TYPE_FP32},
        {"FP64", INFERENCE__DATA_TYPE__TYPE_FP64},
        {"BF16", INFERENCE__DATA_TYPE__TYPE_BF16},
        {"BYTES", INFERENCE__DATA_TYPE__TYPE_STRING},
    };
    for (size_t i = 0; oip && i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(map[i].name, oip))
            return map[i].t;
    return INFERENCE__DATA_TYPE__TYPE_INVALID;
}

/* 1 when every tensor of both lists (at least one) starts with a variable dimension */
static int batched(json_t *ins, json_t *outs)
{
    json_t *lists[2] = {ins, outs}, *t;
    size_t i, n = 0;
    for (int l = 0; l < 2; l++)
        json_array_foreach(lists[l], i, t)
        {
            json_t *d0 = json_array_get(json_object_get(t, "shape"), 0);
            if (!d0 || json_integer_value(d0) != -1)
                return 0;
            n++;
        }
    return n > 0;
}

struct tensors {
    size_t n;
    const char *name[OIP_MAX_TENSORS];
    Inference__DataType type[OIP_MAX_TENSORS];
    int64_t dims[OIP_MAX_TENSORS][OIP_MAX_DIMS];
    size_t n_dims[OIP_MAX_TENSORS];
};

static void tensors(json_t *arr, int skip_batch, struct tensors *out)
{
    size_t i;
    json_t *t;
    out->n = 0;
    json_array_foreach(arr, i, t)
    {
        if (out->n == OIP_MAX_TENSORS)
            break;
        size_t k = out->n++, d;
        json_t *v;
        out->name[k] = json_string_value(json_object_get(t, "name"));
        out->type[k] = data_type(json_string_value(json_object_get(t, "datatype")));
        out->n_dims[k] = 0;
        json_array_foreach(json_object_get(t, "shape"), d, v)
        {
            if ((skip_batch && d == 0) || out->n_dims[k] == OIP_MAX_DIMS)
                continue;
            out->dims[k][out->n_dims[k]++] = json_integer_value(v);
        }
    }
}

void grpc_oip_config_send(struct gcall *c, struct model *m)
{
    json_t *md = oip_req_metadata(m);
    json_t *ins = json_object_get(md, "inputs"), *outs = json_object_get(md, "outputs");
    int b = batched(ins, outs);
    static struct tensors ti, to; /* loop thread only; packed before they are reused */
    tensors(ins, b, &ti);
    tensors(outs, b, &to);

    Inference__ModelConfig cfg = INFERENCE__MODEL_CONFIG__INIT;
    cfg.name = m->name;
    cfg.platform = (char *)json_string_value(json_object_get(md, "platform"));
    const char *platform = cfg.platform ? cfg.platform : "";
    cfg.backend = !strcmp(platform, "pytorch_torchscript") ? "pytorch"
                  : !strcmp(m->manifest.runtime ? m->manifest.runtime : "", "python")
                      ? "python"
                      : (m->handler ? m->handler : "");
    cfg.max_batch_size = b ? m->pool.batch_size : 0;

    Inference__ModelInput in[OIP_MAX_TENSORS], *inp[OIP_MAX_TENSORS];
    for (size_t i = 0; i < ti.n; i++) {
        Inference__ModelInput init = INFERENCE__MODEL_INPUT__INIT;
        in[i] = init;
        in[i].name = (char *)(ti.name[i] ? ti.name[i] : "");
        in[i].data_type = ti.type[i];
        in[i].dims = ti.dims[i];
        in[i].n_dims = ti.n_dims[i];
        inp[i] = &in[i];
    }
    cfg.input = inp;
    cfg.n_input = ti.n;
    Inference__ModelOutput out[OIP_MAX_TENSORS], *outp[OIP_MAX_TENSORS];
    for (size_t i = 0; i < to.n; i++) {
        Inference__ModelOutput init = INFERENCE__MODEL_OUTPUT__INIT;
        out[i] = init;
        out[i].name = (char *)(to.name[i] ? to.name[i] : "");
        out[i].data_type = to.type[i];
        out[i].dims = to.dims[i];
        out[i].n_dims = to.n_dims[i];
        outp[i] = &out[i];
    }
    cfg.output = outp;
    cfg.n_output = to.n;

    Inference__ModelInstanceGroup g = INFERENCE__MODEL_INSTANCE_GROUP__INIT, *gp = &g;
    char gname[160];
    snprintf(gname, sizeof(gname), "%s_0", m->name);
    g.name = gname;
    g.count = m->pool.n_workers > 0 ? m->pool.n_workers : m->min_workers;
    g.kind = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
    cfg.instance_group = &gp;
    cfg.n_instance_group = 1;

    Inference__ModelSequenceBatching sb = INFERENCE__MODEL_SEQUENCE_BATCHING__INIT;
    Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
    int32_t preferred = m->pool.batch_size;
    if (m->mc.sequence_batching) {
        sb.max_sequence_idle_microseconds =
            m->mc.seq_max_idle_ms > 0 ? (uint64_t)m->mc.seq_max_idle_ms * 1000 : 0;
        cfg.scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING;
        cfg.sequence_batching = &sb;
    } else if (m->pool.batch_size > 1) {
        db.preferred_batch_size = &preferred;
        db.n_preferred_batch_size = 1;
        db.max_queue_delay_microseconds = (uint64_t)m->max_batch_delay_ms * 1000;
        cfg.scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
        cfg.dynamic_batching = &db;
    }

    Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    r.config = &cfg;
    gcall_send(c, &r.base); /* packed now */
    gcall_finish(c, GS_OK, NULL);
    json_decref(md);
}
