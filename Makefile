# torchserve-c build. `make run` and `make test` are the two commands a new user needs.
#   make                   build the three binaries into build/bin/
#   make TORCH_DIR=DIR PYTHON=PATH
#                          the worker against another libtorch (a libtorch tree or a pip torch's
#                          package directory; CUDA when it has libtorch_cuda.so) and the Python
#                          plugin against another Python (a venv's or conda env's python too)
#   make worker plugin     only the worker and the Python plugin (what a GPU host builds:
#                          scripts/gpu/check.sh)
#   make models            build the example models into model-store/ (python3-torch + our archiver)
#   make run               install deps, then (a second make) build, build models, serve them in
#                          the foreground (`make serve`: the same without the install step)
#   make test              install deps, then build and run the layer check, the unit, integration
#                          and fault tests, every one of them even when an earlier one fails
#   make SANITIZE=address,undefined test-unit test-smoke    the same under ASan/UBSan
#   make bench             run scripts/bench/ (figures for the issues' benchmarks)
#   make openai-client     npm ci the official openai client into tests/openai/ (the tests need it)
#   make fuzz FUZZ_S=N     build the libFuzzer targets of tests/fuzz/ (clang, build-fuzz/) and run
#                          each for N seconds on a copy of its corpus

# the Python the plugin embeds (its headers, libpython, its sys.executable); the tests and tools
# run on Debian's python3 whatever it is
PYTHON   := /usr/bin/python3
TEST_PYTHON := /usr/bin/python3
CC       := gcc
CXX      := g++
SANITIZE ?=
BUILD    ?= build$(if $(SANITIZE),-san)
OPT      ?= -O2
# FUZZ=1 (set by `make fuzz` for its sub-make): the same objects built by clang with libFuzzer's
# coverage instrumentation, ASan and UBSan, in their own tree
ifneq ($(FUZZ),)
CC       := clang
BUILD    := build-fuzz
OPT      := -O1
SANITIZE := address,undefined
endif

DEPS_PREFIX  ?=
ifneq ($(DEPS_PREFIX),)
DEPS_CFLAGS  := -I$(abspath $(DEPS_PREFIX))/include
DEPS_LDFLAGS := -L$(abspath $(DEPS_PREFIX))/lib -Wl,-rpath,$(abspath $(DEPS_PREFIX))/lib
endif
CFLAGS   := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -pthread \
            -Icommon -Ibackend -Ifrontend -I$(BUILD)/gen $(DEPS_CFLAGS)
# e.g. EXTRA_CFLAGS=-DTS_METRICS_OFF BUILD=build-nometrics: the metrics' A/B baseline
CFLAGS   += $(EXTRA_CFLAGS)
# libtorch: Debian's by default (headers in /usr/include, libraries in the multiarch dir), or
# TORCH_DIR's include/ and lib/ (a libtorch tree or a pip torch), found at run time by an rpath.
# Its headers are system headers (-isystem): -Werror is for our code, not for libtorch's.
# The torch libraries are linked with --no-as-needed: nothing calls libtorch_cuda directly, but
# loading it is what registers CUDA (dropped, the worker would see no GPU). DEPS_PREFIX: a
# private prefix with the worker's other libraries (LMDB, libyaml, jansson, libuuid; include/ and
# lib/), for a host without them (scripts/gpu/).
TORCH_DIR   ?=
ifeq ($(TORCH_DIR),)
TORCH_INCDIR := /usr/include
TORCH_INC    := -isystem $(TORCH_INCDIR)/torch/csrc/api/include
TORCH_LIBDIR := /usr/lib/$(shell $(CC) -print-multiarch)
TORCH_CMAKE  := $(TORCH_LIBDIR)/cmake/Torch/TorchConfig.cmake
TORCH_RPATH  :=
else
TORCH_INCDIR := $(abspath $(TORCH_DIR))/include
TORCH_INC    := -isystem $(TORCH_INCDIR) -isystem $(TORCH_INCDIR)/torch/csrc/api/include
TORCH_LIBDIR := $(abspath $(TORCH_DIR))/lib
TORCH_CMAKE  := $(abspath $(TORCH_DIR))/share/cmake/Torch/TorchConfig.cmake
TORCH_RPATH  := -Wl,-rpath,$(TORCH_LIBDIR)
endif
TORCH_CUDA   := $(wildcard $(TORCH_LIBDIR)/libtorch_cuda.so)
# the C++ ABI libtorch was built with (std::string crosses the shim's calls into it)
TORCH_ABI    := $(shell sed -n 's/.*_GLIBCXX_USE_CXX11_ABI=\([01]\).*/\1/p' \
                  $(wildcard $(TORCH_CMAKE)) /dev/null | head -n 1)
TORCH_LIBS   := -L$(TORCH_LIBDIR) $(TORCH_RPATH) -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 \
                $(if $(TORCH_CUDA),-ltorch_cuda -lc10_cuda) -Wl,--as-needed
# CUDA graphs (backend/torch/torch_graph.cpp) need the CUDA runtime's headers besides libtorch's:
# the toolkit's (CUDA_HOME) or the ones pip's nvidia packages put next to torch. Without them,
# or with a CPU libtorch, torch_graph_none.cpp says so when a model asks for graphs.
CUDA_HOME    ?= /usr/local/cuda
CUDA_RUNTIME_H := $(firstword $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h \
                    $(if $(TORCH_DIR),$(abspath $(TORCH_DIR))/../nvidia/*/include/cuda_runtime_api.h)))
CUDA_GRAPHS  ?= $(if $(and $(TORCH_CUDA),$(CUDA_RUNTIME_H)),1,0)
TORCH_GRAPH  := backend/torch/torch_graph$(if $(filter 1,$(CUDA_GRAPHS)),,_none).cpp
CXXFLAGS := -std=gnu++17 $(OPT) -g -Wall -Wextra -Werror -fPIC -Ibackend/torch \
            $(TORCH_INC) -Wno-unused-parameter \
            $(if $(TORCH_ABI),-D_GLIBCXX_USE_CXX11_ABI=$(TORCH_ABI)) $(EXTRA_CXXFLAGS)
LDFLAGS  := -pthread -rdynamic $(DEPS_LDFLAGS)
ifneq ($(SANITIZE),)
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
CFLAGS   += $(SANFLAGS)
LDFLAGS  += $(SANFLAGS)
endif
ifneq ($(FUZZ),)
CFLAGS   += -fsanitize=fuzzer-no-link
endif

COMMON_SRCS   := $(wildcard common/*.c)
# proto/ holds our protos plus the vendored google/rpc/status.proto (Debian ships none); the
# well-known types they import (empty, any) are generated from libprotobuf-dev's copies.
PROTOS        := $(wildcard proto/*.proto proto/google/rpc/*.proto)
PROTO_WKT     := empty any
PROTO_C       := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_C       += $(if $(PROTOS),$(patsubst %,$(BUILD)/gen/google/protobuf/%.pb-c.c,$(PROTO_WKT)))
FRONTEND_DIRS := frontend frontend/core frontend/mgmt frontend/oip frontend/http frontend/grpc
FRONTEND_SRCS := $(filter-out frontend/archiver.c,$(foreach d,$(FRONTEND_DIRS),$(wildcard $(d)/*.c)))
# C++ only where a library has no C interface (frontend/grpc/grpc_absl.cpp)
FRONTEND_CXX  := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard frontend/grpc/*.cpp))
ARCHIVER_SRCS := frontend/archiver.c frontend/mgmt/archive.c
# the worker: its main (wiring), the loop and the handler ABI (worker/), the built-in handlers;
# torch/ is the C++ shim, below both, and python/ a plugin of its own
BACKEND_SRCS  := $(wildcard backend/*.c backend/worker/*.c backend/handlers/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

FRONTEND_LIBS := -levent -levent_openssl -lssl -lcrypto -lgrpc -lgpr -labsl_synchronization -lprotobuf-c -llmdb -lyaml -ljansson \
                 -larchive -luuid
WORKER_LIBS   := $(TORCH_LIBS) -lstdc++ -llmdb -lhiredis -lyaml -ljansson -luuid -ldl -lm
ARCHIVER_LIBS := -larchive -ljansson -lyaml -luuid

BINS := $(BUILD)/bin/torchserve-c $(BUILD)/bin/torchserve-c-worker $(BUILD)/bin/torchserve-c-archiver

# The Python handler: a plugin the worker dlopens only for a Python model (backend/python/), and
# our `ts` package next to it in $(BUILD)/lib/python/. Built against PYTHON (default Debian's
# /usr/bin/python3): its headers, its shared libpython and its sys.executable, all from its
# sysconfig (scripts/python_embed.py), so that any Python 3 works, a venv's or conda env's
# included. $(BUILD)/lib/libts_python.info tells the frontend which interpreter that is.
# Recursive, so PYTHON runs only when one of them is built.
PY_EMBED         = $(or $(shell $(PYTHON) scripts/python_embed.py $(1)),\
                        $(error PYTHON=$(PYTHON): scripts/python_embed.py $(1) failed))
PY_INCLUDES      = $(call PY_EMBED,cflags)
PY_EMBED_LDFLAGS = $(call PY_EMBED,ldflags)
PY_EXECUTABLE    = $(call PY_EMBED,executable)
PY_SRCS       := $(wildcard backend/python/*.c)
PY_PLUGIN     := $(BUILD)/lib/libts_python.so
PY_PKG        := $(patsubst backend/python/%,$(BUILD)/lib/python/%,\
                   $(shell find backend/python/ts backend/python/mlserver backend/python/tsc_runtimes -name '*.py' 2>/dev/null))
PY_INFO       := $(BUILD)/lib/libts_python.info

.PHONY: all deps models run serve test test-all test-unit test-integration test-smoke bench clean \
        format format-check pystubs check-layers fuzz fuzz-build fuzz-run openai-client worker plugin
all: $(BINS) plugin pystubs
worker: $(BUILD)/bin/torchserve-c-worker
plugin: $(PY_PLUGIN) $(PY_PKG) $(PY_INFO)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# generated protobuf-c code is compiled without -Werror's unused-parameter noise
$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-unused-parameter -c $< -o $@

# protoc-c 1.4 refuses proto3 `optional`; on the wire an optional scalar is the same field, so the
# C code is generated from a copy without the keyword (only the presence of "" is lost).
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/gen/c-proto/$(dir $*)
	sed -E 's/^([[:space:]]*)optional /\1/' $< > $(BUILD)/gen/c-proto/$*.proto
	protoc-c --c_out=$(BUILD)/gen -I$(BUILD)/gen/c-proto -Iproto -I/usr/include \
	    $(BUILD)/gen/c-proto/$*.proto

$(BUILD)/gen/google/protobuf/%.pb-c.c $(BUILD)/gen/google/protobuf/%.pb-c.h: /usr/include/google/protobuf/%.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen -I/usr/include $<

PROTO_OBJS := $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_C))
# every frontend object may include generated headers
$(call obj,$(FRONTEND_SRCS)): | $(PROTO_C)

$(BUILD)/obj/frontend/grpc/%.o: frontend/grpc/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=gnu++17 $(OPT) -g -Wall -Wextra -Werror -fno-exceptions -fno-rtti -c $< -o $@

$(BUILD)/bin/torchserve-c: $(call obj,$(FRONTEND_SRCS) $(COMMON_SRCS)) $(FRONTEND_CXX) $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(FRONTEND_LIBS)

# the shim's objects are rebuilt, and the worker relinked, when another libtorch is named (the
# flag file holds what was built with); torch_graph.o is either source (TORCH_GRAPH)
TORCH_HDRS  := $(wildcard backend/torch/*.h)
TORCH_OBJS  := $(patsubst %.cpp,$(BUILD)/obj/%.o,backend/torch/torch_shim.cpp \
                 backend/torch/torch_freeze.cpp \
                 backend/torch/torch_device.cpp) $(BUILD)/obj/backend/torch/torch_graph.o
TORCH_FLAGS := $(TORCH_INCDIR) $(TORCH_LIBDIR) $(TORCH_ABI) $(TORCH_GRAPH) $(CUDA_RUNTIME_H)
$(BUILD)/obj/backend/torch/%.o: backend/torch/%.cpp $(TORCH_HDRS) $(BUILD)/torch.flags
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(BUILD)/obj/backend/torch/torch_graph.o: $(TORCH_GRAPH) $(TORCH_HDRS) $(BUILD)/torch.flags
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(if $(filter 1,$(CUDA_GRAPHS)),-isystem $(dir $(CUDA_RUNTIME_H))) -c $< -o $@
$(BUILD)/torch.flags: FORCE
	@mkdir -p $(dir $@)
	@echo "$(TORCH_FLAGS)" | cmp -s - $@ || echo "$(TORCH_FLAGS)" > $@
.PHONY: FORCE

WORKER_OBJS := $(call obj,$(BACKEND_SRCS) $(COMMON_SRCS)) $(TORCH_OBJS)
$(BUILD)/bin/torchserve-c-worker: $(WORKER_OBJS) $(BUILD)/torch.flags
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(WORKER_OBJS) $(WORKER_LIBS)

$(BUILD)/bin/torchserve-c-archiver: $(call obj,$(ARCHIVER_SRCS) $(COMMON_SRCS))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(ARCHIVER_LIBS)

# the objects and the info file are rebuilt when PYTHON names another interpreter
$(BUILD)/obj/backend/python/%.o: backend/python/%.c $(BUILD)/python.flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC $(PY_INCLUDES) -DTS_PY_EXECUTABLE='"$(PY_EXECUTABLE)"' -MMD -MP \
	    -c $< -o $@
$(BUILD)/python.flags: FORCE
	@mkdir -p $(dir $@)
	@echo "$(PYTHON)" | cmp -s - $@ || echo "$(PYTHON)" > $@

$(PY_PLUGIN): $(call obj,$(PY_SRCS))
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(PY_EMBED_LDFLAGS)

$(PY_INFO): $(BUILD)/python.flags scripts/python_embed.py
	@mkdir -p $(dir $@)
	$(PYTHON) scripts/python_embed.py info > $@.tmp && mv $@.tmp $@

$(BUILD)/lib/python/%.py: backend/python/%.py
	@mkdir -p $(dir $@)
	cp $< $@

# Python gRPC stubs for the tests and scripts/ clients
PYSTUBS := $(patsubst proto/%.proto,$(BUILD)/py/%_pb2.py,$(PROTOS))
pystubs: $(PYSTUBS)
$(BUILD)/py/%_pb2.py: proto/%.proto
	@mkdir -p $(BUILD)/py
	protoc --python_out=$(BUILD)/py --grpc_python_out=$(BUILD)/py \
	    --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin -Iproto -I/usr/include $<

# ---- example models ----
MODELS := $(notdir $(patsubst %/archive.conf,%,$(wildcard scripts/models/*/archive.conf)))
MARS   := $(patsubst %,model-store/%.mar,$(MODELS))
models: $(MARS)
model-store/%.mar: scripts/models/%/* scripts/models/build_model.sh $(BUILD)/bin/torchserve-c-archiver
	@scripts/models/build_model.sh $* $(BUILD)

# `run` and `test` install packages first and then build in a second make process: make reads the
# file system once (the pattern rule for google/protobuf/*.proto looked at /usr/include before
# libprotobuf-dev was there, and kept that answer), so a make that installs must not also build.
run: deps
	@$(MAKE) --no-print-directory serve

serve: all models
	$(BUILD)/bin/torchserve-c --start --foreground --model-store model-store --models all \
	    --ts-config config.properties

# ---- tests ----
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
# A unit test #includes the .c under test; the rest comes from libcore.a (frontend/core) and
# libcommon.a, whose members are only pulled in for symbols the test does not define itself. The
# core's tests drive it through its headers, with fake workers (tests/unit/core_fake.h).
CORE_SRCS := $(wildcard frontend/core/*.c)
$(BUILD)/libcommon.a: $(call obj,$(COMMON_SRCS))
	ar rcs $@ $^
$(BUILD)/libcore.a: $(call obj,$(CORE_SRCS))
	ar rcs $@ $^
$(BUILD)/tests/%: tests/unit/%.c tests/unit/tap.h tests/unit/core_fake.h $(BUILD)/libcore.a \
                  $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libcore.a $(BUILD)/libcommon.a $(LDFLAGS) \
	    -levent -lyaml -ljansson -larchive -luuid -llmdb -lprotobuf-c

# the state store's tests #include state.c, whose Redis backend is state_redis.c (hiredis);
# test_state_redis starts a redis-server of its own
STATE_TESTS := $(BUILD)/tests/test_state $(BUILD)/tests/test_state_redis
$(STATE_TESTS): $(BUILD)/tests/%: tests/unit/%.c tests/unit/tap.h backend/worker/state.c \
                backend/worker/state.h backend/worker/state_redis.c backend/worker/state_redis.h \
                $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< backend/worker/state_redis.c $(BUILD)/libcommon.a \
	    $(LDFLAGS) -llmdb -lhiredis -luuid

# test_py_json embeds CPython: the Python handler's JSON fast paths against the json module
$(BUILD)/tests/test_py_json: tests/unit/test_py_json.c tests/unit/tap.h tests/py_embed.h \
                             backend/python/py_json.c backend/python/py_json.h \
                             backend/python/py_handler.h backend/python/lsan_python.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PY_INCLUDES) -DTS_PY_EXECUTABLE='"$(PY_EXECUTABLE)"' -Itests/unit -o $@ $< \
	    $(LDFLAGS) \
	    $(PY_EMBED_LDFLAGS)

# Under ASan the runner must let LeakSanitizer see every test: lsan_selfcheck leaks on purpose
# and must fail (its report goes to stderr, not to CI's sanitizer log).
LSAN_SELFCHECK := $(if $(findstring address,$(SANITIZE)),$(BUILD)/tests/lsan_selfcheck)
test-unit: $(UNIT_TESTS) $(LSAN_SELFCHECK)
	@fail=0; for t in $(UNIT_TESTS); do $$t || fail=1; done; \
	if [ -n "$(LSAN_SELFCHECK)" ]; then \
	    if ASAN_OPTIONS=detect_leaks=1 $(LSAN_SELFCHECK) >/dev/null 2>&1; then \
	        echo "not ok - lsan_selfcheck: a deliberate 1000-byte leak went unseen"; fail=1; \
	    else echo "ok - lsan_selfcheck: a deliberate 1000-byte leak fails its test"; fi; \
	fi; exit $$fail

# the gRPC files run a second time on the portable drive (a completion-queue thread), which
# other gRPC builds or poll engines get (frontend/grpc/grpc_drive.h)
GRPC_TESTS := tests/integration/test_grpc.py tests/integration/test_streaming_grpc.py \
              tests/integration/test_sequences_grpc.py
# the official openai npm client, pinned by tests/openai/package-lock.json: the OpenAI API's
# acceptance client (tests/integration/test_openai.py)
OPENAI_CLIENT := tests/openai/node_modules/.package-lock.json
openai-client: $(OPENAI_CLIENT)
$(OPENAI_CLIENT): tests/openai/package.json tests/openai/package-lock.json
	cd tests/openai && npm ci --no-audit --no-fund

# every suite runs whatever an earlier one found; the exit status is non-zero if any failed
test-integration: all models $(OPENAI_CLIENT)
	fail=0; \
	TS_BUILD=$(BUILD) $(TEST_PYTHON) -m pytest -q -p no:cacheprovider tests/integration || fail=1; \
	TS_BUILD=$(BUILD) $(TEST_PYTHON) -m pytest -q -p no:cacheprovider tests/fault || fail=1; \
	TS_BUILD=$(BUILD) $(TEST_PYTHON) -m pytest -q -p no:cacheprovider tests/gpu || fail=1; \
	TS_BUILD=$(BUILD) TS_GRPC_DRIVE=thread $(TEST_PYTHON) -m pytest -q -p no:cacheprovider \
	    $(GRPC_TESTS) || fail=1; \
	exit $$fail

test-smoke: all models
	TS_BUILD=$(BUILD) $(TEST_PYTHON) -m pytest -q -p no:cacheprovider -m smoke tests/integration

# dependencies point one way (DESIGN.md): includes and the link map, plus the check's self-test
check-layers: all
	$(TEST_PYTHON) scripts/check_layers.py --self-test
	$(TEST_PYTHON) scripts/check_layers.py $(BUILD)

# -k: the layer check, the unit tests and the integration tests all run even when one fails
test: deps
	@$(MAKE) --no-print-directory -k test-all
test-all: check-layers test-unit test-integration

bench: all models
	scripts/bench/run_all.sh $(BUILD)

# ---- fuzzing ----
# One libFuzzer target per parser that reads bytes from a client or a worker: tests/fuzz/<name>.c,
# seeds in tests/fuzz/corpus/<name>/ (tests/fuzz/README.md). `make fuzz` re-runs make with FUZZ=1,
# which builds every project object with clang into build-fuzz/; each target links them from one
# archive (a target that #includes the .c it tests gets its statics, the rest from the archive).
# Each run works on a copy of the corpus and fails on any crash, leak, timeout or UBSan report.
FUZZ_S       ?= 60
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/*.c))
FUZZ_BINS    := $(patsubst %,$(BUILD)/fuzz/%,$(FUZZ_TARGETS))
FUZZ_OBJS    := $(call obj,$(COMMON_SRCS) $(filter-out frontend/main.c,$(FRONTEND_SRCS))) \
                $(FRONTEND_CXX) $(PROTO_OBJS)
fuzz: # -k: every target runs, whatever an earlier one found
	$(MAKE) -k FUZZ=1 fuzz-run
fuzz-build:
	$(MAKE) FUZZ=1 fuzz-bins
FUZZ_RUNS    := $(patsubst %,fuzz-run-%,$(FUZZ_TARGETS))
ifneq ($(FUZZ),)
.PHONY: fuzz-bins $(FUZZ_RUNS)
fuzz-bins: $(FUZZ_BINS)
$(BUILD)/libfuzz.a: $(FUZZ_OBJS)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz.h tests/fuzz/fuzz_check.h tests/fuzz/fuzz_oip.h $(BUILD)/libfuzz.a | $(PROTO_C)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Itests/fuzz -o $@ $< $(BUILD)/libfuzz.a $(LDFLAGS) \
	    $(FRONTEND_LIBS) -lz
# py_json embeds CPython (PYTHON's headers and libpython) and needs nothing from the archive
$(BUILD)/fuzz/py_json: tests/fuzz/py_json.c tests/fuzz/fuzz_check.h tests/py_embed.h \
                       backend/python/py_json.c backend/python/py_json.h backend/python/lsan_python.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer $(PY_INCLUDES) -DTS_PY_EXECUTABLE='"$(PY_EXECUTABLE)"' \
	    -o $@ $< $(LDFLAGS) \
	    $(PY_EMBED_LDFLAGS)
fuzz-run: $(FUZZ_RUNS)
$(FUZZ_RUNS): fuzz-run-%: $(BUILD)/fuzz/%
	@tests/fuzz/run.sh $* $(FUZZ_S) $(BUILD)
endif

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cpp')
format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cpp')

clean:
	rm -rf build build-san build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
