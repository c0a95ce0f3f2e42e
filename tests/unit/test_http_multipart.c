/* Unit tests for the multipart/form-data parser (frontend/http/http_multipart.c). */
#include "../../frontend/http/http_multipart.c"

#include "tap.h"

static struct http_part parts[HTTP_MULTIPART_MAX_PARTS];
static char why[256];

static int parse(const char *ctype, const char *body)
{
    why[0] = '\0';
    return http_multipart_parse(ctype, body, strlen(body), parts, HTTP_MULTIPART_MAX_PARTS, why,
                                sizeof(why));
}

TEST(is_form)
{
    CHECK(http_multipart_is_form("multipart/form-data; boundary=x"));
    CHECK(http_multipart_is_form("  Multipart/Form-Data"));
    CHECK(!http_multipart_is_form("multipart/form-datax"));
    CHECK(!http_multipart_is_form("multipart/mixed; boundary=x"));
    CHECK(!http_multipart_is_form(NULL));
}

TEST(curl_upload_and_field)
{
    int n =
        parse("multipart/form-data; boundary=----b",
              "------b\r\nContent-Disposition: form-data; name=\"data\"; "
              "filename=\"kitten.jpg\"\r\nContent-Type: image/jpeg\r\n\r\nJPEG\r\nBYTES\r\n"
              "------b\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\nv\r\n------b--\r\n");
    CHECK_EQ_INT(n, 2);
    CHECK_STR(parts[0].name, "data");
    CHECK_STR(parts[0].ctype, "image/jpeg");
    CHECK(parts[0].is_file && parts[0].len == 11 && !memcmp(parts[0].data, "JPEG\r\nBYTES", 11));
    CHECK_STR(parts[1].name, "k");
    CHECK_STR(parts[1].ctype, "");
    CHECK(!parts[1].is_file && parts[1].len == 1 && parts[1].data[0] == 'v');
}

TEST(file_without_type_is_octet_stream_and_quotes_unescape)
{
    int n = parse("multipart/form-data; boundary=\"x y\"",
                  "--x y\r\nContent-Disposition: form-data; filename=\"a;name=evil\"; "
                  "name=\"q\\\"n\"\r\n\r\nz\r\n--x y--");
    CHECK_EQ_INT(n, 1);
    CHECK_STR(parts[0].name, "q\"n");
    CHECK_STR(parts[0].ctype, "application/octet-stream");
}

TEST(refusals_name_the_problem)
{
    CHECK_EQ_INT(parse("multipart/form-data", "--x\r\n"), -1);
    CHECK(strstr(why, "no boundary"));
    CHECK_EQ_INT(parse("multipart/form-data; boundary=x",
                       "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nv"),
                 -1);
    CHECK(strstr(why, "part 1: the body ends before its closing boundary"));
    CHECK_EQ_INT(parse("multipart/form-data; boundary=x",
                       "--x\r\nContent-Disposition: form-data; name=\"a\x01\"\r\n\r\nv\r\n--x--"),
                 -1);
    CHECK(strstr(why, "control character"));
    CHECK_EQ_INT(parse("multipart/form-data; boundary=x", "--xy\r\n"), -1);
    CHECK(strstr(why, "does not end with CRLF"));
}

TEST(delimiter_only_at_a_line_start)
{
    int n = parse("multipart/form-data; boundary=x",
                  "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nab--x--cd\r\n--x--");
    CHECK_EQ_INT(n, 1);
    CHECK(parts[0].len == 9 && !memcmp(parts[0].data, "ab--x--cd", 9));
}

int main(void)
{
    RUN(is_form);
    RUN(curl_upload_and_field);
    RUN(file_without_type_is_octet_stream_and_quotes_unescape);
    RUN(refusals_name_the_problem);
    RUN(delimiter_only_at_a_line_start);
    return tap_done();
}
