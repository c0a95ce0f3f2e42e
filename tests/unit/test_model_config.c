#include "../../common/model_config.c"
#include "tap.h"

static char path[256];

static void write_yaml(const char *text)
{
    char dir[96];
    snprintf(dir, sizeof dir, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model-config.yaml", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
}

TEST(defaults)
{
    struct model_config mc;
    model_config_defaults(&mc);
    CHECK_EQ_INT(mc.min_workers, -1);
    CHECK_EQ_INT(mc.max_workers, -1);
    CHECK_EQ_INT(mc.batch_size, -1);
    CHECK_EQ_INT(mc.max_batch_delay_ms, -1);
    CHECK_EQ_INT(mc.response_timeout_s, -1);
    CHECK_EQ_INT(mc.startup_timeout_s, -1);
    CHECK_EQ_INT(mc.job_queue_size, -1);
    CHECK_EQ_INT(mc.max_retry_timeout_s, 300);
    CHECK_EQ_INT(mc.client_timeout_ms, 0);
    CHECK_EQ_INT(mc.sequence_batching, 0);
    CHECK_EQ_INT(mc.continuous_batching, 0);
    CHECK_EQ_INT(mc.seq_max_idle_ms, 0);
    CHECK_EQ_INT(mc.seq_timeout_ms, 0);
    CHECK_EQ_INT(mc.max_seq_job_queue, 1);
    CHECK_EQ_INT(mc.max_num_sequence, -1);
    CHECK_EQ_INT(mc.cache_capacity, -1);
}

TEST(every_key)
{
    write_yaml("minWorkers: 1\n"
               "maxWorkers: 3\n"
               "batchSize: 8\n"
               "maxBatchDelay: 50\n"
               "responseTimeout: 30\n"
               "startupTimeout: 40\n"
               "jobQueueSize: 12\n"
               "maxRetryTimeoutInSec: 10\n"
               "clientTimeoutInMills: 2000\n"
               "sequenceBatching: true\n"
               "continuousBatching: yes\n"
               "sequenceMaxIdleMSec: 60000\n"
               "sequenceTimeoutMSec: 120000\n"
               "maxSequenceJobQueueSize: 10\n"
               "maxNumSequence: 4\n"
               "deviceType: cpu\n"
               "deviceIds: [0, 1]\n"
               "handler:\n"
               "  cache:\n"
               "    capacity: 16\n"
               "  anything: goes\n");
    struct model_config mc;
    char err[256] = "";
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.min_workers, 1);
    CHECK_EQ_INT(mc.max_workers, 3);
    CHECK_EQ_INT(mc.batch_size, 8);
    CHECK_EQ_INT(mc.max_batch_delay_ms, 50);
    CHECK_EQ_INT(mc.response_timeout_s, 30);
    CHECK_EQ_INT(mc.startup_timeout_s, 40);
    CHECK_EQ_INT(mc.job_queue_size, 12);
    CHECK_EQ_INT(mc.max_retry_timeout_s, 10);
    CHECK_EQ_INT(mc.client_timeout_ms, 2000);
    CHECK_EQ_INT(mc.sequence_batching, 1);
    CHECK_EQ_INT(mc.continuous_batching, 1);
    CHECK_EQ_INT(mc.seq_max_idle_ms, 60000);
    CHECK_EQ_INT(mc.seq_timeout_ms, 120000);
    CHECK_EQ_INT(mc.max_seq_job_queue, 10);
    CHECK_EQ_INT(mc.max_num_sequence, 4);
    CHECK_EQ_INT(mc.cache_capacity, 16);
    CHECK_EQ_INT(mc.device_type, MC_DEVICE_CPU);
    CHECK_EQ_INT(mc.n_device_ids, 2);
    CHECK_EQ_INT(mc.device_ids[0], 0);
    CHECK_EQ_INT(mc.device_ids[1], 1);
}

TEST(partial_and_null_keep_defaults)
{
    write_yaml("batchSize: 2\nmaxBatchDelay:\nresponseTimeout: ~\n");
    struct model_config mc;
    char err[256] = "";
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.batch_size, 2);
    CHECK_EQ_INT(mc.max_batch_delay_ms, -1);
    CHECK_EQ_INT(mc.response_timeout_s, -1);
    CHECK_EQ_INT(mc.max_retry_timeout_s, 300);
}

static void expect_error(const char *yaml, const char *want)
{
    write_yaml(yaml);
    struct model_config mc;
    char err[256] = "";
    int rc = model_config_load(path, &mc, NULL, NULL, err, sizeof err);
    if (rc != TS_E_BAD_CONFIG || strcmp(err, want)) {
        fprintf(stderr, "  rc %d err '%s', expected '%s'\n", rc, err, want);
        CHECK(0);
    }
    CHECK_EQ_INT(mc.batch_size, -1); /* a failed load leaves the defaults */
}

/* deviceType in any case (TorchServe lower-cases it); deviceIds as a block list; what is not a
 * device type or a list of ids refuses the load with the line */
TEST(devices)
{
    write_yaml("deviceType: GPU\ndeviceIds:\n  - 3\n  - 1\n");
    struct model_config mc;
    char err[256] = "";
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.device_type, MC_DEVICE_GPU);
    CHECK_EQ_INT(mc.n_device_ids, 2);
    CHECK_EQ_INT(mc.device_ids[0], 3);
    CHECK_EQ_INT(mc.device_ids[1], 1);
    write_yaml("batchSize: 1\n");
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.device_type, MC_DEVICE_UNSET);
    CHECK_EQ_INT(mc.n_device_ids, -1);
    expect_error("batchSize: 2\ndeviceType: tpu\n",
                 "model-config.yaml:2: deviceType: expected cpu or gpu, got 'tpu'");
    expect_error("deviceIds: 0\n", "model-config.yaml:1: deviceIds: expected a list of GPU ids, "
                                   "got '0'");
    expect_error("deviceIds: [0, x]\n",
                 "model-config.yaml:1: deviceIds: expected a GPU id (0, 1, ...), got 'x'");
    expect_error("deviceIds: [-1]\n",
                 "model-config.yaml:1: deviceIds: expected a GPU id (0, 1, ...), got '-1'");
}

TEST(bad_values)
{
    expect_error("minWorkers: 1\nbatchSize: abc\n",
                 "model-config.yaml:2: batchSize: expected an integer, got 'abc'");
    expect_error("batchSize: 1.5\n",
                 "model-config.yaml:1: batchSize: expected an integer, got '1.5'");
    expect_error("batchSize: 0\n", "model-config.yaml:1: batchSize: must be at least 1, got '0'");
    expect_error("maxBatchDelay: -5\n",
                 "model-config.yaml:1: maxBatchDelay: must not be negative, got '-5'");
    expect_error("minWorkers: 99999999999\n",
                 "model-config.yaml:1: minWorkers: integer out of range, got '99999999999'");
    expect_error("sequenceBatching: maybe\n",
                 "model-config.yaml:1: sequenceBatching: expected true or false, got 'maybe'");
    expect_error("handler:\n  cache:\n    capacity: -1\n",
                 "model-config.yaml:3: handler.cache.capacity: must not be negative, got '-1'");
    expect_error("jobQueueSize: \" \"\n",
                 "model-config.yaml:1: jobQueueSize: expected an integer, got ' '");
    expect_error("batchSize: [1\n", "model-config.yaml:2: did not find expected ',' or ']' while "
                                    "parsing a flow sequence");
}

TEST(missing_file)
{
    struct model_config mc;
    char err[256] = "";
    CHECK_EQ_INT(
        model_config_load("/nonexistent/model-config.yaml", &mc, NULL, NULL, err, sizeof err),
        -ENOENT);
    CHECK(strstr(err, "model-config.yaml: cannot open"));
}

static char warned[1024];

static void collect(const char *msg, void *arg)
{
    (void)arg;
    strncat(warned, msg, sizeof warned - strlen(warned) - 2);
    strcat(warned, "\n");
}

/* TorchServe keys we do not act on warn by name, mistyped keys warn with the closest one, and a
 * GPU device refuses the load */
TEST(unknown_and_unsupported_keys)
{
    write_yaml("minWorker: 2\n"
               "batchsize: 4\n"
               "parallelType: tp\n"
               "handler:\n"
               "  whatever: 1\n");
    struct model_config mc;
    char err[256] = "";
    warned[0] = '\0';
    CHECK_EQ_INT(model_config_load(path, &mc, collect, NULL, err, sizeof err), 0);
    CHECK_STR(warned, "model-config.yaml:1: unknown key 'minWorker' (ignored; did you mean "
                      "'minWorkers'?)\n"
                      "model-config.yaml:2: unknown key 'batchsize' (ignored; did you mean "
                      "'batchSize'?)\n"
                      "model-config.yaml:3: parallelType has no effect in torchserve-c: a worker "
                      "is one process on one device\n");
    CHECK_EQ_INT(mc.min_workers, -1);
}

/* the openai section: a text generator on the OpenAI-compatible API, its tensor names */
TEST(openai_section)
{
    struct model_config mc;
    char err[256] = "";
    write_yaml("batchSize: 2\n");
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.openai_enabled, 0);
    CHECK_STR(mc.openai_prompt_input, "prompt");
    CHECK_STR(mc.openai_text_output, "");
    write_yaml("openai:\n"
               "  enabled: true\n"
               "  promptInput: text_input\n"
               "  textOutput: generated_text\n"
               "  enable: yes\n");
    warned[0] = '\0';
    CHECK_EQ_INT(model_config_load(path, &mc, collect, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(mc.openai_enabled, 1);
    CHECK_STR(mc.openai_prompt_input, "text_input");
    CHECK_STR(mc.openai_text_output, "generated_text");
    CHECK_STR(warned, "model-config.yaml:5: unknown key 'openai.enable' (ignored; did you mean "
                      "'openai.enabled'?)\n");
    write_yaml("openai:\n  enabled: maybe\n");
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:2: openai.enabled: expected true or false, got 'maybe'");
    write_yaml("openai:\n  promptInput: two words\n");
    CHECK_EQ_INT(model_config_load(path, &mc, NULL, NULL, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:2: openai.promptInput: expected a tensor name (1 to 63 "
                   "printable bytes, no spaces), got 'two words'");
}

int main(void)
{
    tbase_make("test_model_config");
    RUN(openai_section);
    RUN(defaults);
    RUN(every_key);
    RUN(devices);
    RUN(partial_and_null_keep_defaults);
    RUN(bad_values);
    RUN(unknown_and_unsupported_keys);
    RUN(missing_file);
    tbase_remove();
    return tap_done();
}
