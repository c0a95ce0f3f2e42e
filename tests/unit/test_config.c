#include "../../frontend/core/config.c"
#include "tap.h"

static char path[256];
static char warnings[2048];

static void warn_cb(const char *msg, void *arg)
{
    (void)arg;
    strncat(warnings, msg, sizeof warnings - strlen(warnings) - 2);
    strcat(warnings, "\n");
}

static void write_cfg(const char *text)
{
    char dir[96];
    snprintf(dir, sizeof dir, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.properties", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
}

/* Loads text; returns rc, the error text in err (with the temp dir replaced by "DIR"). */
static int load(const char *text, struct config *c, char *err, size_t errlen)
{
    write_cfg(text);
    warnings[0] = '\0';
    char raw[512] = "";
    config_defaults(c);
    int rc = config_load(path, c, warn_cb, NULL, raw, sizeof raw);
    const char *slash = strrchr(path, '/');
    size_t dl = (size_t)(slash - path);
    if (!strncmp(raw, path, dl))
        snprintf(err, errlen, "DIR%s", raw + dl);
    else
        snprintf(err, errlen, "%s", raw);
    return rc;
}

TEST(defaults)
{
    struct config c;
    config_defaults(&c);
    CHECK(c.path == NULL);
    CHECK_STR(c.inference_address.scheme, "http");
    CHECK_STR(c.inference_address.host, "127.0.0.1");
    CHECK_EQ_INT(c.inference_address.port, 8080);
    CHECK_EQ_INT(c.management_address.port, 8081);
    CHECK_EQ_INT(c.metrics_address.port, 8082);
    CHECK_STR(c.grpc_inference_address, "127.0.0.1");
    CHECK_EQ_INT(c.grpc_inference_port, 7070);
    CHECK_STR(c.grpc_management_address, "127.0.0.1");
    CHECK_EQ_INT(c.grpc_management_port, 7071);
    CHECK_EQ_INT(c.enable_grpc, 1);
    CHECK(c.model_store == NULL);
    CHECK(c.load_models == NULL);
    CHECK_EQ_INT(c.default_workers_per_model, 0);
    CHECK_EQ_INT(c.job_queue_size, 100);
    CHECK_EQ_INT(c.max_request_size, 6553500);
    CHECK_EQ_INT(c.max_response_size, 6553500);
    CHECK_EQ_INT(c.default_response_timeout, 120);
    CHECK_EQ_INT(c.default_startup_timeout, 120);
    CHECK_EQ_INT(c.unregister_model_timeout, 120);
    CHECK_EQ_INT(c.enable_model_api, 0);
    CHECK_EQ_INT(c.disable_token_authorization, 0);
    CHECK_EQ_INT(c.token_expiration_min, 60);
    CHECK_STR(c.allowed_urls, "file://.*|http(s)?://.*");
    CHECK_EQ_INT(c.enable_metrics_api, 1);
    CHECK_STR(c.metrics_mode, "prometheus");
    CHECK_EQ_INT(c.metric_time_interval, -1);
    CHECK(c.log_max_size == 100L << 20);
    CHECK_EQ_INT(c.log_max_files, 5);
    CHECK_EQ_INT(c.enable_access_log, 1);
    CHECK_EQ_INT(c.initial_worker_port, 9000);
    CHECK_EQ_INT(c.worker_threads, 1);
    CHECK_STR(c.ts_header_key_sequence_id, "ts_request_sequence_id");
    CHECK_STR(c.ts_header_key_sequence_start, "ts_request_sequence_start");
    CHECK_STR(c.ts_header_key_sequence_end, "ts_request_sequence_end");
    CHECK(c.models_json == NULL);
    CHECK(c.state_dir == NULL); /* <run dir>/state, decided by server.c */
    CHECK_STR(c.log_location, "logs/");
    config_free(&c);
}

TEST(addresses)
{
    struct listen_addr a;
    CHECK_EQ_INT(config_parse_address("http://0.0.0.0:9080", &a), 0);
    CHECK_STR(a.scheme, "http");
    CHECK_STR(a.host, "0.0.0.0");
    CHECK_EQ_INT(a.port, 9080);
    free(a.scheme);
    free(a.host);
    CHECK_EQ_INT(config_parse_address("https://example.com", &a), 0);
    CHECK_STR(a.scheme, "https");
    CHECK_STR(a.host, "example.com");
    CHECK_EQ_INT(a.port, 443);
    free(a.scheme);
    free(a.host);
    CHECK_EQ_INT(config_parse_address("HTTP://localhost/", &a), 0);
    CHECK_STR(a.scheme, "http");
    CHECK_EQ_INT(a.port, 80);
    free(a.scheme);
    free(a.host);
    CHECK_EQ_INT(config_parse_address("http://[::1]:8443", &a), 0);
    CHECK_STR(a.host, "::1");
    CHECK_EQ_INT(a.port, 8443);
    free(a.scheme);
    free(a.host);
    CHECK_EQ_INT(config_parse_address("http://h:8080/", &a), 0);
    CHECK_EQ_INT(a.port, 8080);
    free(a.scheme);
    free(a.host);
    const char *bad[] = {"0.0.0.0:8080",  "ftp://h:1",    "http://",        "http://:8080",
                         "http://h:",     "http://h:abc", "http://h:65536", "http://h:80x",
                         "http://h:80/x", "http://[::1",  "unix:/tmp/s",    ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (config_parse_address(bad[i], &a) != -EINVAL) {
            fprintf(stderr, "  accepted '%s'\n", bad[i]);
            CHECK(0);
        }
    }
}

TEST(load_every_key)
{
    setenv("TS_TEST_STORE", "/srv/models", 1);
    const char *t = "inference_address=http://0.0.0.0:18080\n"
                    "management_address=https://0.0.0.0\n"
                    "metrics_address=http://127.0.0.2:18082\n"
                    "grpc_inference_address=0.0.0.0\n"
                    "grpc_inference_port=17070\n"
                    "grpc_management_address=::1\n"
                    "grpc_management_port=17071\n"
                    "enable_grpc=false\n"
                    "model_store=$$TS_TEST_STORE$$\n"
                    "load_models=a.mar,b=b.mar\n"
                    "default_workers_per_model=3\n"
                    "job_queue_size=7\n"
                    "max_request_size=1000\n"
                    "max_response_size=2000\n"
                    "default_response_timeout=5\n"
                    "default_startup_timeout=6\n"
                    "unregister_model_timeout=7\n"
                    "enable_model_api=TRUE\n"
                    "disable_token_authorization=true\n"
                    "token_expiration_min=30\n"
                    "allowed_urls=file://.*\n"
                    "enable_metrics_api=false\n"
                    "metrics_mode=prometheus\n"
                    "initial_worker_port=9500\n"
                    "worker_threads=4\n"
                    "ts_header_key_sequence_id=x-seq\n"
                    "ts_header_key_sequence_start=x-start\n"
                    "ts_header_key_sequence_end=x-end\n"
                    "state_dir=/var/lib/tsc\n"
                    "log_location=/var/log/tsc\n"
                    "private_key_file=/k.pem\n"
                    "certificate_file=/c.pem\n"
                    "enable_grpc_ssl=true\n"
                    "max_connections=500\n"
                    "install_py_dep_per_model=false\n"
                    "grpc_inference_max_connection_age_ms=100\n"
                    "grpc_management_max_connection_age_grace_ms=50\n";
    struct config c;
    char err[512];
    CHECK_EQ_INT(load(t, &c, err, sizeof err), 0);
    CHECK_STR(warnings, "");
    CHECK_STR(c.path, path);
    CHECK_STR(c.inference_address.host, "0.0.0.0");
    CHECK_EQ_INT(c.inference_address.port, 18080);
    CHECK_STR(c.management_address.scheme, "https");
    CHECK_EQ_INT(c.management_address.port, 443);
    CHECK_STR(c.metrics_address.host, "127.0.0.2");
    CHECK_EQ_INT(c.metrics_address.port, 18082);
    CHECK_STR(c.grpc_inference_address, "0.0.0.0");
    CHECK_EQ_INT(c.grpc_inference_port, 17070);
    CHECK_STR(c.grpc_management_address, "::1");
    CHECK_EQ_INT(c.grpc_management_port, 17071);
    CHECK_EQ_INT(c.enable_grpc, 0);
    CHECK_STR(c.model_store, "/srv/models");
    CHECK_STR(c.load_models, "a.mar,b=b.mar");
    CHECK_EQ_INT(c.default_workers_per_model, 3);
    CHECK_EQ_INT(c.job_queue_size, 7);
    CHECK_EQ_INT(c.max_request_size, 1000);
    CHECK_EQ_INT(c.max_response_size, 2000);
    CHECK_EQ_INT(c.default_response_timeout, 5);
    CHECK_EQ_INT(c.default_startup_timeout, 6);
    CHECK_EQ_INT(c.unregister_model_timeout, 7);
    CHECK_EQ_INT(c.enable_model_api, 1);
    CHECK_EQ_INT(c.disable_token_authorization, 1);
    CHECK_EQ_INT(c.token_expiration_min, 30);
    CHECK_STR(c.allowed_urls, "file://.*");
    CHECK_EQ_INT(c.enable_metrics_api, 0);
    CHECK_STR(c.metrics_mode, "prometheus");
    CHECK_EQ_INT(c.initial_worker_port, 9500);
    CHECK_EQ_INT(c.worker_threads, 4);
    CHECK_STR(c.ts_header_key_sequence_id, "x-seq");
    CHECK_STR(c.ts_header_key_sequence_start, "x-start");
    CHECK_STR(c.ts_header_key_sequence_end, "x-end");
    CHECK_STR(c.private_key_file, "/k.pem");
    CHECK_STR(c.certificate_file, "/c.pem");
    CHECK_EQ_INT(c.enable_grpc_ssl, 1);
    CHECK_EQ_INT(c.max_connections, 500);
    CHECK_EQ_INT(c.grpc_max_connection_age_ms[0], 100);
    CHECK_EQ_INT(c.grpc_max_connection_age_grace_ms[1], 50);
    CHECK_STR(c.state_dir, "/var/lib/tsc");
    CHECK_STR(c.log_location, "/var/log/tsc");
    config_free(&c);
}

TEST(unknown_key_warns)
{
    struct config c;
    char err[512];
    CHECK_EQ_INT(load("job_queue_size=5\n\nfoo=bar\ninference_adress=x\n", &c, err, sizeof err), 0);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:3: unknown key 'foo' (ignored)\n%s:4: unknown key 'inference_adress' (ignored; "
             "did you mean 'inference_address'?)\n",
             path, path);
    CHECK_STR(warnings, want);
    CHECK_EQ_INT(c.job_queue_size, 5);
    config_free(&c);
    /* a NULL warn_fn is allowed */
    config_defaults(&c);
    CHECK_EQ_INT(config_load(path, &c, NULL, NULL, err, sizeof err), 0);
    config_free(&c);
}

static void expect_error(const char *text, const char *want)
{
    struct config c;
    char err[512];
    int rc = load(text, &c, err, sizeof err);
    if (rc != TS_E_BAD_CONFIG || strcmp(err, want)) {
        fprintf(stderr, "  rc %d err '%s', expected '%s'\n", rc, err, want);
        CHECK(0);
    }
    config_free(&c);
}

TEST(bad_values)
{
    expect_error("# c\ngrpc_inference_port=abc\n",
                 "DIR/config.properties:2: grpc_inference_port: expected an integer, got 'abc'");
    expect_error("grpc_management_port=70000\n",
                 "DIR/config.properties:1: grpc_management_port: must be between 0 and 65535, "
                 "got '70000'");
    expect_error("max_request_size=-5\n",
                 "DIR/config.properties:1: max_request_size: must be a positive integer, got "
                 "'-5'");
    /* the worker cannot take more (32-bit frame lengths): refused at start, not at spawn */
    expect_error("max_request_size=2147483648\n",
                 "DIR/config.properties:1: max_request_size: must be between 1 and 2147483647, "
                 "got '2147483648'");
    expect_error("default_response_timeout=-1\n",
                 "DIR/config.properties:1: default_response_timeout: must not be negative, got "
                 "'-1'");
    expect_error("job_queue_size=99999999999999999999\n",
                 "DIR/config.properties:1: job_queue_size: integer out of range, got "
                 "'99999999999999999999'");
    expect_error("inference_address=0.0.0.0:8080\n",
                 "DIR/config.properties:1: inference_address: expected http(s)://host[:port], got "
                 "'0.0.0.0:8080'");
    expect_error("metrics_address=http://h:port\n",
                 "DIR/config.properties:1: metrics_address: port must be an integer between 0 "
                 "and 65535, got 'http://h:port'");
    expect_error("enable_model_api=yes\n",
                 "DIR/config.properties:1: enable_model_api: expected true or false, got 'yes'");
    expect_error("metrics_mode=json\n",
                 "DIR/config.properties:1: metrics_mode: expected prometheus or log (legacy is "
                 "TorchServe's, not supported), got 'json'");
    expect_error("log_max_size=10XB\n",
                 "DIR/config.properties:1: log_max_size: expected a size in bytes, e.g. 10MB, "
                 "512KB or 4096, got '10XB'");
    expect_error("log_max_files=0\n",
                 "DIR/config.properties:1: log_max_files: must be between 1 and 1000, got '0'");
    expect_error("ts_header_key_sequence_id=\n",
                 "DIR/config.properties:1: ts_header_key_sequence_id: must not be empty, got ''");
    expect_error("models=[1]\n",
                 "DIR/config.properties:1: models: expected a JSON object, got '[1]'");
    struct config c;
    char err[512];
    CHECK_EQ_INT(load("models={\"a\":\n", &c, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK(strstr(err, "DIR/config.properties:1: models: invalid JSON") == err);
    config_free(&c);
}

/* TorchServe's keys that we do not act on: refused when they ask for something users rely on,
 * warned about by name otherwise; nothing is silently ignored */
TEST(unsupported_keys)
{
    expect_error("keystore=k.p12\n",
                 "DIR/config.properties:1: keystore is not supported by torchserve-c: Java "
                 "keystores are not read: use certificate_file and private_key_file (PEM)");
    expect_error("service_envelope=kserve\n",
                 "DIR/config.properties:1: service_envelope is not supported by torchserve-c: "
                 "requests use TorchServe's default format only");
    expect_error("metrics_mode=legacy\n",
                 "DIR/config.properties:1: metrics_mode: not supported by torchserve-c: metrics "
                 "are served in Prometheus format on the metrics API (metrics_mode=prometheus) "
                 "or written to ts_metrics.log (metrics_mode=log), got 'legacy'");
    struct config c;
    char err[512];
    CHECK_EQ_INT(load("workflow_store=wf\nvmargs=-Xmx1g\ninstall_py_dep_per_model=false\n"
                      "number_of_gpu=2\n",
                      &c, err, sizeof err),
                 0);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:1: workflow_store has no effect in torchserve-c: workflows are not supported\n"
             "%s:2: vmargs has no effect in torchserve-c: a JVM setting\n",
             path, path);
    CHECK_STR(warnings, want);
    CHECK_EQ_INT(c.number_of_gpu, 2); /* taken, not warned about: gpu_assign.h */
    config_free(&c);
}

TEST(missing_file)
{
    struct config c;
    char err[512];
    config_defaults(&c);
    CHECK_EQ_INT(config_load("/nonexistent/config.properties", &c, NULL, NULL, err, sizeof err),
                 -ENOENT);
    CHECK(strstr(err, "/nonexistent/config.properties") == err);
    CHECK_EQ_INT(c.inference_address.port, 8080); /* defaults still valid */
    config_free(&c);
}

/* enable_envvars_config=true: TorchServe's TS_<KEY> variables over the file, with TorchServe's
 * spellings of the few that differ; never read without the switch */
TEST(envvars)
{
    setenv("TS_JOB_QUEUE_SIZE", "7", 1);
    setenv("TS_TOKEN_EXPIRATION_TIME_MIN", "5", 1);
    setenv("TS_HEADER_KEY_SEQUENCE_ID", "x-seq", 1);
    setenv("TS_ALLOWED_URLS", "https://x/.*", 1);
    setenv("TS_NUMBER_OF_GPU", "2", 1);
    setenv("TS_IPEX_ENABLE", "true", 1);
    struct config c;
    char err[512];
    CHECK_EQ_INT(load("job_queue_size=3\n", &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.job_queue_size, 3);
    CHECK(!config_from_env(&c, "job_queue_size"));
    config_free(&c);

    CHECK_EQ_INT(load("enable_envvars_config=true\njob_queue_size=3\n", &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.job_queue_size, 7);
    CHECK(config_from_env(&c, "job_queue_size"));
    CHECK(!config_from_env(&c, "allowed_urls"));
    CHECK(c.token_expiration_min == 5);
    CHECK_STR(c.ts_header_key_sequence_id, "x-seq");
    CHECK_STR(c.allowed_urls, "file://.*|http(s)?://.*"); /* needs use_env_allowed_urls */
    CHECK_EQ_INT(c.number_of_gpu, 2);                     /* a key like any other (gpu_assign.h) */
    CHECK(!strstr(warnings, "number_of_gpu"));
    CHECK(strstr(warnings, "environment TS_IPEX_ENABLE: ipex_enable has no effect"));
    config_free(&c);

    CHECK_EQ_INT(
        load("enable_envvars_config=true\nuse_env_allowed_urls=true\n", &c, err, sizeof err), 0);
    CHECK_STR(c.allowed_urls, "https://x/.*");
    config_free(&c);

    setenv("TS_JOB_QUEUE_SIZE", "0", 1);
    CHECK_EQ_INT(load("enable_envvars_config=true\n", &c, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "environment TS_JOB_QUEUE_SIZE: job_queue_size: must be a positive integer, "
                   "got '0'");
    config_free(&c);
}

int main(void)
{
    tbase_make("test_config");
    RUN(defaults);
    RUN(addresses);
    RUN(load_every_key);
    RUN(unknown_key_warns);
    RUN(bad_values);
    RUN(unsupported_keys);
    RUN(missing_file);
    RUN(envvars);
    tbase_remove();
    return tap_done();
}
