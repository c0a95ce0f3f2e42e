/*
 * cli: argument parsing and the start/stop launcher (see cli.h).
 *
 * `--start` without `--foreground` re-executes this binary with `--foreground` in a new
 * session, its output appended to logs/ts_log.log, and waits on a pipe (TS_READY_FD) until the
 * server has bound every listener and its start-up models have loaded or failed. It then
 * prints the warnings and errors the server logged meanwhile (unknown keys with their hints,
 * the models that failed) and "Model server started.", and returns 0; if the server exits
 * first (a model named in --models failed, a bad config) it prints the same and where to look,
 * and returns 1. TorchServe's launcher returns at once, whatever happens next.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config.h"
#include "instance.h"
#include "server.h"
#include "util.h"

extern char **environ;

/* --stop: SIGTERM to the instance of the given config (--ts-config or TS_CONFIG_FILE), or to
 * the only instance running, then wait until it (and so its workers) has exited. */
static int do_stop(const char *ts_config)
{
    const char *env = getenv("TS_CONFIG_FILE");
    const char *path = env && *env ? env : ts_config;
    struct config cfg;
    const struct config *which = NULL;
    config_defaults(&cfg);
    if (path) {
        char err[1024];
        if (config_load(path, &cfg, NULL, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "torchserve-c: %s\n", err);
            config_free(&cfg);
            return 1;
        }
        which = &cfg;
    }
    struct instance_info *in = xcalloc(8, sizeof(*in));
    int n = instance_find(which, in, 8);
    config_free(&cfg);
    if (n == 0) {
        printf("TorchServe is not currently running.\n");
        free(in);
        return 1;
    }
    if (n > 1) {
        fprintf(stderr, "torchserve-c: %d instances are running:\n", n);
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  pid %d, working directory %s (%s)\n", (int)in[i].pid, in[i].cwd,
                    in[i].pidfile);
        fprintf(stderr, "stop one with `torchserve-c --stop --ts-config FILE` (its config file)\n");
        free(in);
        return 1;
    }
    pid_t pid = in[0].pid;
    kill(pid, SIGTERM);
    /* as TorchServe's launcher: the keys of the stopped server are removed, from its own
     * working directory (not the caller's) */
    char *keys = xasprintf("%s/key_file.json", in[0].cwd);
    unlink(keys);
    free(keys);
    free(in);
    for (int i = 0; i < 600; i++) {
        if (kill(pid, 0) != 0) {
            printf("TorchServe has stopped.\n");
            return 0;
        }
        usleep(100000);
    }
    fprintf(stderr, "torchserve-c (pid %d) did not stop within 60 s\n", (int)pid);
    return 1;
}

/* ts_log.log's path: in log_location of the config the server will read (TS_CONFIG_FILE,
 * --ts-config, ./config.properties, as server.c), default logs/; its directories are made. */
static char *log_path(const char *ts_config)
{
    const char *env = getenv("TS_CONFIG_FILE");
    const char *path = env && *env ? env : ts_config;
    if (!path && access("config.properties", R_OK) == 0)
        path = "config.properties";
    struct config cfg;
    config_defaults(&cfg);
    char err[1024];
    if (path && config_load(path, &cfg, NULL, NULL, err, sizeof(err)) != 0) {
        config_free(&cfg);
        config_defaults(&cfg); /* the server reports the error itself */
    }
    const char *dir = cfg.log_location && *cfg.log_location ? cfg.log_location : "logs";
    char *p = xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
    char *file = xasprintf("%s%sts_log.log", p, p[strlen(p) - 1] == '/' ? "" : "/");
    free(p);
    config_free(&cfg);
    return file;
}

/* The warnings and errors the server logged since offset, so that they are on the console and
 * not only in the file: a log line "pid:F time LEVEL [request] message" is printed as
 * "LEVEL message"; the server's own messages to stderr ("torchserve-c: ...") as they are. */
static void print_problems(const char *file, off_t offset)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return;
    char line[4096];
    if (fseeko(f, offset, SEEK_SET) == 0)
        while (fgets(line, sizeof(line), f)) {
            if (!strncmp(line, "torchserve-c:", 13)) {
                fputs(line, stderr);
                continue;
            }
            char *lv = strstr(line, " WARN ");
            if (!lv)
                lv = strstr(line, " ERROR ");
            if (!lv || !strchr(line, ':') || strchr(line, ':') > lv)
                continue;
            char *msg = strchr(lv + 1, ' ') + 1;
            if (!strncmp(msg, "[-] ", 4))
                msg += 4;
            fprintf(stderr, "%.*s %s", (int)(strchr(lv + 1, ' ') - (lv + 1)), lv + 1, msg);
        }
    fclose(f);
}

/* Background launch: re-exec with --foreground and wait for readiness. */
static int do_background(int argc, char **argv, const char *ts_config)
{
    int pfd[2];
    if (pipe(pfd) < 0) {
        perror("pipe");
        return 1;
    }
    char *logfile = log_path(ts_config);
    struct stat lst;
    off_t log_start = stat(logfile, &lst) == 0 ? lst.st_size : 0;
    char **args = xcalloc((size_t)argc + 2, sizeof(char *));
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[n] = '\0';
    args[0] = self;
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    args[argc] = "--foreground";
    char *fdenv = xasprintf("TS_READY_FD=%d", pfd[1]);
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **envp = xcalloc(ne + 2, sizeof(char *));
    memcpy(envp, environ, ne * sizeof(char *));
    envp[ne] = fdenv;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, logfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, &at, args, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(args);
    free(envp);
    free(fdenv);
    close(pfd[1]);
    if (rc != 0) {
        fprintf(stderr, "torchserve-c: cannot start the server: %s\n", strerror(rc));
        free(logfile);
        return 1;
    }
    char c;
    ssize_t r;
    do
        r = read(pfd[0], &c, 1);
    while (r < 0 && errno == EINTR);
    close(pfd[0]);
    if (r == 1) {
        print_problems(logfile, log_start);
        printf("Model server started.\n");
        free(logfile);
        return 0;
    }
    int st;
    waitpid(pid, &st, 0); /* it has exited or is exiting: its log is complete */
    print_problems(logfile, log_start);
    fprintf(stderr, "torchserve-c failed to start; see %s\n", logfile);
    free(logfile);
    return 1;
}

static const char usage_text[] =
    "usage: torchserve-c --start [--foreground] --model-store DIR [--models NAME=FILE ... | all]\n"
    "                    [--ts-config FILE] [--ncs] [--disable-token-auth] [--enable-model-api]\n"
    "                    [--continue-on-model-error]\n"
    "       torchserve-c --stop [--ts-config FILE]\n"
    "       torchserve-c --help | --version\n";

static const char help_text[] =
    "\n"
    "torchserve-c serves PyTorch models with TorchServe's APIs, config.properties and .mar\n"
    "archives (https://pytorch.org/serve/ documents them).\n"
    "\n"
    "  --start                 start a server. It returns once the server listens and its\n"
    "                          start-up models have loaded or failed: the warnings and errors\n"
    "                          of the start (unknown keys with the closest known one, models\n"
    "                          that failed to load) are printed, then \"Model server started.\".\n"
    "                          The server runs in the background; its log is\n"
    "                          logs/ts_log.log (log_location in config.properties).\n"
    "  --foreground            with --start: run in this terminal, logging to stderr, until\n"
    "                          SIGINT or SIGTERM\n"
    "  --model-store DIR       where archives are found (or model_store in config.properties)\n"
    "  --models NAME=FILE ...  models to load at start: NAME=FILE (a .mar, .tar.gz or\n"
    "          | NAME | all    directory in the model store), NAME (NAME.mar), or all (every\n"
    "                          archive in the store). --model is the same.\n"
    "  --continue-on-model-error\n"
    "                          a model named in --models that cannot be loaded is printed, and\n"
    "                          the server serves the others. Without it the server stops and\n"
    "                          --start exits 1. (With `all` a failed model never stops it.)\n"
    "  --ts-config FILE        config.properties to read. Default: $TS_CONFIG_FILE, else the\n"
    "                          newest snapshot in logs/config/ (unless --ncs), else\n"
    "                          ./config.properties\n"
    "  --ncs, --no-config-snapshots\n"
    "                          neither write snapshots nor start from one\n"
    "  --disable-token-auth, --dt\n"
    "                          no token authorization (else the keys are in key_file.json)\n"
    "  --enable-model-api      allow registering and unregistering models through the\n"
    "                          management API\n"
    "  --stop                  stop the server of --ts-config (or $TS_CONFIG_FILE), or the only\n"
    "                          one running; it waits until the server and its workers exited\n"
    "  -v, --version           print the version\n"
    "  -h, --help              print this help\n"
    "\n"
    "Exit status: 0 when started (or stopped); 1 when the server could not start, or a model\n"
    "named in --models failed to load; 2 for a bad command line.\n"
    "See README.md, docs/management.md, docs/grpc.md, docs/oip.md and docs/deploy.md.\n";

static void usage(FILE *f)
{
    fputs(usage_text, f);
}

int cli_main(int argc, char **argv)
{
    struct server_opts o = {.ready_fd = -1};
    int start = 0, stop = 0, fg = 0;
    const char **models = xcalloc((size_t)argc + 1, sizeof(char *));
    o.models = models;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--start"))
            start = 1;
        else if (!strcmp(a, "--stop"))
            stop = 1;
        else if (!strcmp(a, "--foreground"))
            fg = 1;
        else if (!strcmp(a, "--ncs") || !strcmp(a, "--no-config-snapshots"))
            o.ncs = 1;
        else if (!strcmp(a, "--disable-token-auth") || !strcmp(a, "--dt"))
            o.disable_token_auth = 1;
        else if (!strcmp(a, "--enable-model-api"))
            o.enable_model_api = 1;
        else if (!strcmp(a, "--continue-on-model-error"))
            o.continue_on_model_error = 1;
        else if ((!strcmp(a, "--model-store") || !strcmp(a, "--ts-config")) && val) {
            if (a[2] == 'm')
                o.model_store = val;
            else
                o.ts_config = val;
            i++;
        } else if (!strcmp(a, "--models") || !strcmp(a, "--model")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                models[o.n_models++] = argv[++i];
        } else if (!strcmp(a, "-v") || !strcmp(a, "--version")) {
            printf("torchserve-c 0.1.0\n");
            free(models);
            return 0;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            fputs(help_text, stdout);
            free(models);
            return 0;
        } else {
            fprintf(stderr, "torchserve-c: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            free(models);
            return 2;
        }
    }
    int rc;
    if (stop)
        rc = do_stop(o.ts_config);
    else if (!start) {
        usage(stderr);
        rc = 2;
    } else if (!fg)
        rc = do_background(argc, argv, o.ts_config);
    else {
        const char *fd = getenv("TS_READY_FD");
        if (fd) {
            o.ready_fd = atoi(fd);
            unsetenv("TS_READY_FD");
            /* only this process writes it: workers and other children must not hold the
             * launcher's pipe open */
            if (o.ready_fd >= 0)
                fcntl(o.ready_fd, F_SETFD, FD_CLOEXEC);
        }
        rc = server_main(&o);
    }
    free(models);
    return rc;
}
