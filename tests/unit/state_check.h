/* What test_state.c and test_state_redis.c share: open a store or fail the test, and check the
 * value a key holds. Included after state.c and tap.h. */
#ifndef TSC_TEST_STATE_CHECK_H
#define TSC_TEST_STATE_CHECK_H

static struct state_store *open_or_die(const char *dir, const struct state_opts *o)
{
    struct state_store *st = NULL;
    char err[512];
    int rc = state_open(&st, dir, o, err, sizeof(err));
    if (rc)
        fprintf(stderr, "  %s\n", err);
    CHECK_EQ_INT(rc, 0);
    return st;
}

static void check_val(struct state_store *st, const char *key, const char *want)
{
    const void *v;
    size_t len;
    CHECK_EQ_INT(state_get(st, key, &v, &len), 0);
    CHECK_EQ_INT(len, strlen(want));
    CHECK(!memcmp(v, want, len));
}

#endif
