/* TorchServe's device assignment as arithmetic (frontend/core/gpu_assign.c): a model's plan
 * from deviceType, deviceIds and number_of_gpu, the gpu_id of each new worker from the server's
 * one counter or the model's own over its deviceIds, and CUDA_VISIBLE_DEVICES as CUDA reads it.
 * The expected sequences are what TorchServe's WorkLoadManager.addThreads computes. */
#include "../../frontend/core/gpu_assign.c"

#include "tap.h"

static struct gpu_plan plan(int device_type, const int *ids, int n_ids, int ngpu, char *note)
{
    struct gpu_plan p;
    gpu_plan_init(&p, device_type, ids, n_ids, ngpu, note, 512);
    return p;
}

/* accumulateAndGet(n, (prev, n) -> ++prev % n) from 0: the first worker gets GPU 1 of 2 */
TEST(one_counter_across_models)
{
    char note[512];
    int counter = 0;
    struct gpu_plan a = plan(MC_DEVICE_UNSET, NULL, -1, 2, note);
    CHECK_STR(note, "");
    struct gpu_plan b = plan(MC_DEVICE_GPU, NULL, -1, 2, note);
    CHECK_EQ_INT(a.on_gpu, 1);
    CHECK_EQ_INT(a.n_cores, 2);
    CHECK_EQ_INT(gpu_plan_next(&a, &counter), 1);
    CHECK_EQ_INT(gpu_plan_next(&a, &counter), 0);
    CHECK_EQ_INT(gpu_plan_next(&b, &counter), 1); /* b continues where a left the counter */
    CHECK_EQ_INT(gpu_plan_next(&a, &counter), 0);
    CHECK_EQ_INT(gpu_plan_next(&b, &counter), 1);
    /* three GPUs: 1, 2, 0, 1 */
    counter = 0;
    struct gpu_plan c = plan(MC_DEVICE_UNSET, NULL, -1, 3, note);
    int want[] = {1, 2, 0, 1};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(gpu_plan_next(&c, &counter), want[i]);
    /* one GPU: always 0 */
    counter = 0;
    struct gpu_plan d = plan(MC_DEVICE_UNSET, NULL, -1, 1, note);
    CHECK_EQ_INT(gpu_plan_next(&d, &counter), 0);
    CHECK_EQ_INT(gpu_plan_next(&d, &counter), 0);
}

/* deviceIds: the model's own counter walks the list from its first entry (getAndAccumulate
 * returns the old value); the server's counter does not move */
TEST(device_ids_rotate_on_the_models_own_counter)
{
    char note[512];
    int counter = 0;
    int ids[] = {3, 1};
    struct gpu_plan p = plan(MC_DEVICE_GPU, ids, 2, 4, note);
    CHECK_STR(note, "");
    CHECK_EQ_INT(p.n_cores, 2);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), 3);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), 1);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), 3);
    CHECK_EQ_INT(counter, 0);
    int one[] = {2};
    struct gpu_plan q = plan(MC_DEVICE_UNSET, one, 1, 4, note);
    CHECK_EQ_INT(gpu_plan_next(&q, &counter), 2);
    CHECK_EQ_INT(gpu_plan_next(&q, &counter), 2);
}

/* An id outside 0..number_of_gpu-1 drops the whole list ("Invalid deviceId:{}, ignore
 * deviceIds list"): the server's rotation over every GPU applies */
TEST(an_invalid_device_id_drops_the_list)
{
    char note[512];
    int counter = 0;
    int ids[] = {0, 2};
    struct gpu_plan p = plan(MC_DEVICE_GPU, ids, 2, 2, note);
    CHECK_STR(note, "deviceIds: invalid deviceId 2 (this server has 2 GPU(s)): the list is "
                    "ignored, as TorchServe ignores it");
    CHECK_EQ_INT(p.n_ids, 0);
    CHECK_EQ_INT(p.n_cores, 2);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), 1);
}

/* deviceType cpu, number_of_gpu=0, or a host without GPUs: every worker on the CPU; gpu on a
 * host without GPUs is the CPU, as TorchServe decides it, with a note for the log */
TEST(the_cpu)
{
    char note[512];
    int counter = 0;
    struct gpu_plan p = plan(MC_DEVICE_CPU, NULL, -1, 2, note);
    CHECK_STR(note, "");
    CHECK_EQ_INT(p.on_gpu, 0);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), -1);
    CHECK_EQ_INT(counter, 0);
    int ids[] = {0};
    p = plan(MC_DEVICE_CPU, ids, 1, 2, note);
    CHECK_EQ_INT(p.n_ids, 1); /* kept (describe shows it), not used */
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), -1);
    p = plan(MC_DEVICE_UNSET, NULL, -1, 0, note);
    CHECK_STR(note, "");
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), -1);
    p = plan(MC_DEVICE_GPU, NULL, -1, 0, note);
    CHECK_STR(note, "deviceType: gpu, but this server has no GPU (number_of_gpu=0, or none "
                    "visible): its workers run on the CPU, as TorchServe's do");
    CHECK_EQ_INT(p.on_gpu, 0);
    CHECK_EQ_INT(gpu_plan_next(&p, &counter), -1);
    p = plan(MC_DEVICE_GPU, ids, 1, 0, note);
    CHECK(strstr(note, "deviceIds: invalid deviceId 0 (this server has 0 GPU(s))") != NULL);
}

static int parse(const char *env, const char **e)
{
    static char buf[256];
    return gpu_visible_parse(env, buf, sizeof(buf), e, GPU_MAX);
}

/* CUDA's reading: the list ends at the first entry that is not an index or a UUID */
TEST(cuda_visible_devices)
{
    const char *e[GPU_MAX];
    CHECK_EQ_INT(parse(NULL, e), -1);
    CHECK_EQ_INT(parse("", e), 0);
    CHECK_EQ_INT(parse("-1", e), 0);
    CHECK_EQ_INT(parse("1, 0", e), 2);
    CHECK_STR(e[0], "1");
    CHECK_STR(e[1], "0");
    CHECK_EQ_INT(parse("0,abc,1", e), 1);
    CHECK_EQ_INT(parse("0,,1", e), 1);
    CHECK_EQ_INT(parse("GPU-8a2f1c3e-0b7d,2", e), 2);
    CHECK_STR(e[0], "GPU-8a2f1c3e-0b7d");
    CHECK_EQ_INT(parse("MIG-", e), 0);
    CHECK_EQ_INT(parse("0,0", e), 2); /* duplicates are the caller's to drop */
}

int main(void)
{
    RUN(one_counter_across_models);
    RUN(device_ids_rotate_on_the_models_own_counter);
    RUN(an_invalid_device_id_drops_the_list);
    RUN(the_cpu);
    RUN(cuda_visible_devices);
    return tap_done();
}
