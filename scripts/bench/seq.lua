-- wrk script for seq_bench: every connection posts LSTM steps to open sequences.
-- $SEQ_IDS_FILE lists the sequence ids (one a line); wrk thread t serves its own slice of them
-- round robin, so each sequence has about one request in flight, as a real client would.
local ids = {}
for line in io.lines(os.getenv("SEQ_IDS_FILE")) do
    ids[#ids + 1] = line
end
local nthreads = tonumber(os.getenv("SEQ_THREADS") or "2")
local next_tid = 0

function setup(thread)
    thread:set("tid", next_tid)
    next_tid = next_tid + 1
end

local n = 0
function request()
    local per = math.floor(#ids / nthreads)
    local id = ids[tid * per + (n % per) + 1]
    n = n + 1
    return wrk.format("POST", "/predictions/lstm_stateful",
        {["ts_request_sequence_id"] = id, ["Content-Type"] = "application/json"},
        "[0.1, -0.2, 0.3, 0.5]")
end

function done(summary, latency, requests)
    io.write(string.format("non200=%d p50_us=%d p99_us=%d\n", summary.errors.status,
        latency:percentile(50), latency:percentile(99)))
end
