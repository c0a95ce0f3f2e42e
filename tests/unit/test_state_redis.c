/* state.c over its Redis backend (state_redis.c), against a redis-server this test starts on a
 * free loopback port: what a step writes is read back before the commit and never evicted
 * before it, a value another instance wrote since is what a get returns (no stale cache),
 * removals and expiry reach Redis, and a bad URL or a dead server is an error with a message. */
#include "../../backend/worker/state.c"
#include "tap.h"
#include "state_check.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

static char url[64];
static int redis_port;

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) || getsockname(s, (void *)&a, &n))
        abort();
    close(s);
    return ntohs(a.sin_port);
}

static struct state_store *open_redis(size_t cap, long ttl_ms)
{
    struct state_opts o = {
        .capacity = cap, .redis_url = url, .redis_prefix = "m@1.0", .redis_ttl_ms = ttl_ms};
    return open_or_die(NULL, &o);
}

TEST(staged_writes_read_back_and_never_evicted_before_the_commit)
{
    struct state_store *st = open_redis(1, 0);
    CHECK_EQ_INT(state_put(st, "a", "1", 1), 0);
    CHECK_EQ_INT(state_put(st, "b", "2", 1), 0);
    CHECK_EQ_INT(state_put(st, "c", "3", 1), 0);
    CHECK(state_dirty(st));
    check_val(st, "a", "1"); /* capacity 1, yet all three are still here: not committed */
    check_val(st, "c", "3");
    CHECK_EQ_INT(state_commit(st), 0);
    CHECK(!state_dirty(st));
    CHECK(state_lru_size(st) <= 1);
    check_val(st, "b", "2"); /* from Redis */
    state_close(st);
}

TEST(a_value_written_elsewhere_is_read_not_a_stale_copy)
{
    struct state_store *a = open_redis(16, 0), *b = open_redis(16, 0);
    CHECK_EQ_INT(state_put(a, "seq", "10", 2), 0);
    CHECK_EQ_INT(state_commit(a), 0);
    check_val(b, "seq", "10");
    CHECK_EQ_INT(state_put(b, "seq", "25", 2), 0); /* the sequence moved to instance b */
    CHECK_EQ_INT(state_commit(b), 0);
    check_val(a, "seq", "25"); /* and came back */
    CHECK_EQ_INT(state_del(a, "seq"), 0);
    CHECK_EQ_INT(state_commit(a), 0);
    const void *v;
    size_t len;
    CHECK_EQ_INT(state_get(b, "seq", &v, &len), -ENOENT);
    state_close(a);
    state_close(b);
}

TEST(values_expire_after_the_ttl)
{
    struct state_store *st = open_redis(16, 200);
    CHECK_EQ_INT(state_put(st, "short", "x", 1), 0);
    CHECK_EQ_INT(state_commit(st), 0);
    check_val(st, "short", "x");
    const void *v;
    size_t len;
    int rc = 0;
    for (int i = 0; i < 200 && rc != -ENOENT; i++) { /* gone within 20 s, not never */
        usleep(100000);
        rc = state_get(st, "short", &v, &len);
    }
    CHECK_EQ_INT(rc, -ENOENT);
    state_close(st);
}

TEST(bad_url_and_dead_server_are_errors_with_a_message)
{
    struct state_opts o = {.redis_url = "redis:/nowhere", .redis_prefix = "m"};
    struct state_store *st = NULL;
    char err[512] = "";
    CHECK_EQ_INT(state_open(&st, NULL, &o, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "expected redis://HOST:PORT") != NULL);
    char dead[64];
    snprintf(dead, sizeof(dead), "redis://127.0.0.1:%d", free_port());
    o.redis_url = dead;
    CHECK(state_open(&st, NULL, &o, err, sizeof(err)) < 0);
    CHECK(strstr(err, "cannot connect to Redis at 127.0.0.1") != NULL);
    CHECK(st == NULL);
}

int main(void)
{
    redis_port = free_port();
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", redis_port);
    char port[16];
    snprintf(port, sizeof(port), "%d", redis_port);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", (char *)NULL);
        _exit(127);
    }
    /* until it accepts connections */
    int up = 0;
    for (int i = 0; i < 300 && !up; i++) {
        struct state_redis *r;
        char err[256];
        if (state_redis_open(&r, url, "probe", 0, err, sizeof(err)) == 0) {
            state_redis_close(r);
            up = 1;
        } else {
            usleep(20000);
        }
    }
    if (!up) {
        printf("not ok - redis-server did not start (scripts/install-deps.sh installs it)\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    RUN(staged_writes_read_back_and_never_evicted_before_the_commit);
    RUN(a_value_written_elsewhere_is_read_not_a_stale_copy);
    RUN(values_expire_after_the_ttl);
    RUN(bad_url_and_dead_server_are_errors_with_a_message);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return tap_done();
}
