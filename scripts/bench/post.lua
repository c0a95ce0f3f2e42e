-- wrk script for the core benchmark: POST the same JSON body on every request.
-- The body file is $BENCH_BODY (default: the mlp example's 64-float sample.json).
local path = os.getenv("BENCH_BODY") or "scripts/models/mlp/sample.json"
local f = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
-- $BENCH_CTYPE overrides the content type (resnet_bench posts a JPEG as image/jpeg)
wrk.headers["Content-Type"] = os.getenv("BENCH_CTYPE") or "application/json"

-- wrk counts answers with status > 399 in errors.status: a fast error must not pass for
-- throughput, so the bench script checks this line is 0
function done(summary, latency, requests)
    io.write(string.format("non200=%d\n", summary.errors.status))
end
