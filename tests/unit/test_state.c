#include "../../backend/worker/state.c"
#include "tap.h"
#include "state_check.h"

#include <sys/wait.h>

static char tmpdir[256];

static const char *fresh_dir(const char *name)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s/model-1.0", tmpdir, name);
    return path;
}

static struct state_store *open_lmdb(const char *dir, size_t cap, size_t map)
{
    struct state_opts o = {.capacity = cap, .map_size = map};
    return open_or_die(dir, &o);
}

TEST(lru_evicts_but_lmdb_keeps)
{
    struct state_store *st = open_lmdb(fresh_dir("evict"), 2, 0);
    CHECK_EQ_INT(state_put(st, "a", "1", 1), 0);
    CHECK_EQ_INT(state_put(st, "b", "2", 1), 0);
    CHECK_EQ_INT(state_put(st, "c", "3", 1), 0);
    CHECK_EQ_INT(state_lru_size(st), 2);
    /* "a" was evicted before any commit: read back through the staged transaction */
    check_val(st, "a", "1");
    CHECK_EQ_INT(state_commit(st), 0);
    check_val(st, "b", "2");
    check_val(st, "c", "3");
    struct state_stats s;
    state_get_stats(st, &s);
    CHECK(s.misses >= 2);
    CHECK_EQ_INT(s.commits, 1);
    CHECK_EQ_INT(state_lru_size(st), 2);
    state_close(st);
}

TEST(reopen_resumes_committed_only)
{
    const char *dir = fresh_dir("reopen");
    struct state_store *st = open_lmdb(dir, 8, 0);
    CHECK_EQ_INT(state_put(st, "seq", "acked", 5), 0);
    CHECK_EQ_INT(state_commit(st), 0);
    CHECK_EQ_INT(state_put(st, "seq", "staged", 6), 0);
    CHECK_EQ_INT(state_put(st, "other", "x", 1), 0);
    state_close(st); /* a crash before the commit */
    st = open_lmdb(dir, 8, 0);
    check_val(st, "seq", "acked");
    const void *v;
    size_t len;
    CHECK_EQ_INT(state_get(st, "other", &v, &len), -ENOENT);
    state_close(st);
}

TEST(del_drops_from_lru_and_disk)
{
    const char *dir = fresh_dir("del");
    struct state_store *st = open_lmdb(dir, 8, 0);
    CHECK_EQ_INT(state_put(st, "k", "v", 1), 0);
    CHECK_EQ_INT(state_commit(st), 0);
    CHECK_EQ_INT(state_del(st, "k"), 0);
    CHECK_EQ_INT(state_del(st, "never-there"), 0);
    CHECK_EQ_INT(state_commit(st), 0);
    const void *v;
    size_t len;
    CHECK_EQ_INT(state_get(st, "k", &v, &len), -ENOENT);
    state_close(st);
    st = open_lmdb(dir, 8, 0);
    CHECK_EQ_INT(state_get(st, "k", &v, &len), -ENOENT);
    CHECK_EQ_INT(state_commit(st), 0); /* nothing staged */
    state_close(st);
}

/* Two processes with their own environments on one directory, as two workers of a model. */
TEST(two_processes_share_the_env)
{
    const char *dir = fresh_dir("multi");
    struct state_store *st = open_lmdb(dir, 8, 0);
    CHECK_EQ_INT(state_put(st, "parent", "p", 1), 0);
    CHECK_EQ_INT(state_commit(st), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* never the inherited env: open our own, as an exec'd worker does */
        struct state_store *c = open_lmdb(dir, 8, 0);
        check_val(c, "parent", "p");
        CHECK_EQ_INT(state_put(c, "child", "c", 1), 0);
        CHECK_EQ_INT(state_commit(c), 0);
        state_close(c);
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    check_val(st, "child", "c");
    state_close(st);
}

TEST(data_fd_is_cloexec)
{
    struct state_store *st = open_lmdb(fresh_dir("cloexec"), 8, 0);
    int fd = -1;
    CHECK_EQ_INT(mdb_env_get_fd(st->env, &fd), 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    state_close(st);
}

TEST(memory_only_never_evicts)
{
    struct state_store *st = NULL;
    struct state_opts o = {.capacity = 2};
    char err[128];
    CHECK_EQ_INT(state_open(&st, NULL, &o, err, sizeof(err)), 0);
    char k[16];
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ_INT(state_put(st, k, k, strlen(k)), 0);
    }
    CHECK_EQ_INT(state_commit(st), 0);
    CHECK_EQ_INT(state_lru_size(st), 100);
    check_val(st, "k0", "k0");
    check_val(st, "k99", "k99");
    state_close(st);
}

TEST(many_keys_and_rehash)
{
    struct state_store *st = open_lmdb(fresh_dir("many"), 64, 0);
    char k[32], v[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(k, sizeof(k), "ts-seq-%d", i);
        snprintf(v, sizeof(v), "%d", i * 7);
        CHECK_EQ_INT(state_put(st, k, v, strlen(v)), 0);
        if (i % 100 == 99)
            CHECK_EQ_INT(state_commit(st), 0);
    }
    CHECK_EQ_INT(state_commit(st), 0);
    CHECK_EQ_INT(state_lru_size(st), 64);
    for (int i = 0; i < 2000; i += 37) {
        snprintf(k, sizeof(k), "ts-seq-%d", i);
        snprintf(v, sizeof(v), "%d", i * 7);
        check_val(st, k, v);
    }
    state_close(st);
}

TEST(bad_keys_and_full_map)
{
    struct state_store *st = open_lmdb(fresh_dir("full"), 8, 1u << 16);
    char longkey[600];
    memset(longkey, 'x', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    CHECK_EQ_INT(state_put(st, longkey, "v", 1), -ENAMETOOLONG);
    CHECK_EQ_INT(state_put(st, "", "v", 1), -EINVAL);
    size_t big = 1u << 20;
    char *v = calloc(1, big);
    int rc = state_put(st, "big", v, big);
    int crc = state_commit(st);
    CHECK(rc != 0 || crc != 0); /* a 1 MiB value cannot fit a 64 KiB map */
    CHECK(strlen(state_strerror(rc ? rc : crc)) > 0);
    free(v);
    state_close(st);
}

int main(void)
{
    /* made here, not in a test: each test runs in its own forked child */
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_state.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        abort();
    RUN(lru_evicts_but_lmdb_keeps);
    RUN(reopen_resumes_committed_only);
    RUN(del_drops_from_lru_and_disk);
    RUN(two_processes_share_the_env);
    RUN(data_fd_is_cloexec);
    RUN(memory_only_never_evicts);
    RUN(many_keys_and_rehash);
    RUN(bad_keys_and_full_map);
    int rc = tap_done();
    ts_rmtree(tmpdir);
    return rc;
}
