# mcpclient — build, test, lint, sanitizers, conformance, benchmarks.
# `make test` and `make demo` are the two commands a newcomer needs; both install
# what is missing first (Debian packages, the npm peers under spec/peers/).

LUA      ?= lua5.4
BUSTED   ?= busted
PKGS      = lua5.4 libcurl jansson sqlite3 libpq libcrypto libidn2

CC       ?= cc
CWARNS    = -Wall -Wextra -Wpedantic -Wshadow -Wmissing-prototypes -Wstrict-prototypes \
            -Wmissing-declarations -Wpointer-arith -Wcast-qual -Wundef -Wformat=2 \
            -Wwrite-strings -Wredundant-decls -Wnested-externs -Wvla
OPT      ?= -O2
# What every build of csrc/ shares (the module, the ASan tree, the fuzz harnesses).
BASE_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L -Icsrc/include $(CWARNS) $(shell pkg-config --cflags $(PKGS))
CFLAGS   += -fPIC $(OPT) -Werror $(BASE_CFLAGS)
# Three modules, each linking only its own libraries; the lua5.4 interpreter loads them:
# never link any against liblua. mcpclient.core is the protocol client's (jansson: the
# engine, JSON, event streams, schemas, the text rule); mcpclient.net holds what needs
# libcurl, OpenSSL's libcrypto or libidn2 (the HTTP legs, host names, OAuth's crypto),
# loaded on the first HTTP connection; mcpclient.db holds the store's database drivers
# (libsqlite3, libpq). A program that only speaks stdio maps neither of the last two's.
CORE_LDLIBS = $(shell pkg-config --libs jansson)
NET_LDLIBS  = $(shell pkg-config --libs libcurl libcrypto libidn2)
DB_LDLIBS   = $(shell pkg-config --libs sqlite3 libpq)

BUILD    ?= build
# csrc/ holds one folder per module (core/, net/, db/), the files compiled into both core and
# net (shared/: neither module can call into the other) and the headers every module includes
# (include/: the helpers one file offers another, the engine the HTTP leg drives, the clock).
SHARED_SOURCES = $(wildcard csrc/shared/*.c)
CORE_SOURCES = $(wildcard csrc/core/*.c) $(SHARED_SOURCES)
NET_SOURCES  = $(wildcard csrc/net/*.c) $(SHARED_SOURCES)
DB_SOURCES   = $(wildcard csrc/db/*.c)
HEADERS      = $(wildcard csrc/*/*.h)
CORE_OBJECTS = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(CORE_SOURCES))
NET_OBJECTS  = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(NET_SOURCES))
DB_OBJECTS   = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(DB_SOURCES))
MODULE    = $(BUILD)/mcpclient/core.so
NET_MODULE = $(BUILD)/mcpclient/net.so
DB_MODULE = $(BUILD)/mcpclient/db.so

.PHONY: all deps peers test check unit lint format format-check asan demo conformance bench bench-quick bench-listing bench-stdio bench-store bench-resources soak fuzz fuzz-deps \
        fuzz-smoke fuzz-coverage clean docs docs-check rock

all: $(MODULE) $(NET_MODULE) $(DB_MODULE)

$(BUILD)/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(MODULE): $(CORE_OBJECTS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(CFLAGS) -o $@ $(CORE_OBJECTS) $(LDFLAGS) $(CORE_LDLIBS)

$(NET_MODULE): $(NET_OBJECTS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(CFLAGS) -o $@ $(NET_OBJECTS) $(LDFLAGS) $(NET_LDLIBS)

$(DB_MODULE): $(DB_OBJECTS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(CFLAGS) -o $@ $(DB_OBJECTS) $(LDFLAGS) $(DB_LDLIBS)

deps:
	@scripts/install-deps

peers: deps
	@scripts/install-peers

# Everything: lint, the whole suite, the suite under ASan+UBSan, the official conformance suite.
test: peers
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory format-check
	@$(MAKE) --no-print-directory docs-check
	@scripts/test

# The busted suite alone (unit, conformance, functional, integration against real servers).
check: peers all
	$(BUSTED)

# The specs that need no network peer.
unit: all
	$(BUSTED) --exclude-tags=integration

# Colour only for a person at a terminal: logs and CI get plain text.
lint:
	luacheck --quiet $$([ -t 1 ] || echo --no-color) lua bin spec examples bench fuzz scripts/*.lua scripts/demo

# The C style of .clang-format, held: any file that clang-format would change fails
# the check, named with the first lines that differ. `make format` rewrites them.
C_STYLED = csrc/*/*.c csrc/*/*.h bench/*.c fuzz/*.c
format-check:
	@bad=0; for f in $(C_STYLED); do \
	  if ! clang-format "$$f" | diff -u "$$f" - > /tmp/format-check.$$$$ 2>&1; then \
	    echo "format-check: $$f differs from .clang-format (make format):"; head -n 12 /tmp/format-check.$$$$; bad=1; fi; \
	done; rm -f /tmp/format-check.$$$$; exit $$bad

format:
	clang-format -i $(C_STYLED)

# The whole suite again under AddressSanitizer + UBSan, in a separate build tree.
# lua5.4 is not instrumented, so the runtimes are preloaded; the node peers the
# programs the specs start (node peers, curl, openssl) must not inherit that
# preload — some hang under it (ps too, which the stdio specs run) — hence the shims on PATH.
ASAN_FLAGS = -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="$(ASAN_FLAGS)" all
	@mkdir -p build-asan/bin
	@for tool in node curl openssl ps; do \
	  printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$$@"\n' "$$(command -v $$tool)" > build-asan/bin/$$tool; \
	  chmod +x build-asan/bin/$$tool; done
	PATH="$(CURDIR)/build-asan/bin:$$PATH" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  $(BUSTED) --exclude-tags=postgres --cpath="./build-asan/?.so"

demo: peers all
	LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./build/?.so;;" $(LUA) scripts/demo

conformance: peers all
	$(BUSTED) spec/conformance
	scripts/official-conformance

# The report goes to build/bench/ (untracked); `make bench BENCH_OUT=bench/RESULTS.md`
# replaces the published one.
BENCH_OUT ?= build/bench/RESULTS.md
bench: peers all
	@mkdir -p $(dir $(BENCH_OUT))
	BENCH_OUT=$(BENCH_OUT) $(LUA) bench/run.lua

# The listing comparison alone, in a few minutes: every listing form of mcpclient and both SDK
# clients, interleaved against the 4 900-tool catalogue; the report to build/bench/LISTING.md
# (`make bench-listing LISTING_OUT=bench/LISTING.md` replaces the published one).
LISTING_OUT ?= build/bench/LISTING.md
bench-listing: peers all
	@mkdir -p $(dir $(LISTING_OUT))
	BENCH_ONLY=listing BENCH_OUT=$(LISTING_OUT) $(LUA) bench/run.lua

# Every warm-path target as a ratio to its floor (a bare libcurl loop, a bare pipe) and to the SDK
# v1 client, with its verdict, in about two minutes (bench/quick.lua; the report also goes to
# build/bench/QUICK.md). Run it before a change to the call path lands: a 20 % loss shows here.
bench-quick: peers all
	$(LUA) bench/quick.lua

# Warm tools/call over stdio: mcpclient, the SDK v1 and v2 clients' stdio transports and the C
# floor, against the same server in one run (bench/stdio.lua; its section of bench/RESULTS.md).
bench-stdio: peers all
	@$(MAKE) --no-print-directory -C bench stdio_floor
	$(LUA) bench/stdio.lua $(STDIO_CALLS) $(STDIO_ROUNDS)

# Listing 10 000 resources in pages of 250: mcpclient held whole and page by page beside the SDK
# client, taking turns against one plain node:http server (bench/resources.lua; the report to
# bench/RESOURCES.md, BENCH_OUT for another file).
bench-resources: peers all
	$(LUA) bench/resources.lua

# What the store costs an audited call on SQLite and on PostgreSQL, and the audited calls/s
# of 1, 4 and 8 worker processes sharing one PostgreSQL store (a throwaway pg_virtualenv cluster,
# made durable like the SQLite file it is compared with: pg_virtualenv turns fsync off by default).
bench-store: deps all
	pg_virtualenv -v 15 -o fsync=on env MCPCLIENT_TEST_PG=1 $(LUA) bench/store.lua

# 100 000 warm calls (SOAK_CALLS) watching RSS and descriptors, then 1 000 under valgrind
# memcheck (scripts/soak); a minute or two. `make test` runs a short one, the stdio soak included.
soak: all
	@scripts/soak

# Fuzzing: a libFuzzer harness per parser of far-side bytes (fuzz/*_fuzz.c), built
# with clang under ASan+UBSan into $(FUZZ_BUILD)/, each run for FUZZ_SECONDS from the seed corpus
# fuzz/corpus/<name>/ (new inputs go to $(FUZZ_CORPUS)/<name>/, $(FUZZ_BUILD)/corpus/<name>/ by
# default, crashes to $(FUZZ_BUILD)/artifacts/). The response harness includes csrc/net/http_headers.c itself, the stdio
# harness csrc/core/process.c. One harness:
# `make fuzz-json`; the long runs of fuzz/README.md: `make -j2 -O fuzz FUZZ_SECONDS=1800`.
# `make fuzz-coverage` rebuilds the harnesses with source-based coverage instead of the
# sanitizers and reports which lines of the parsers the corpora reach.
FUZZ_CC        ?= clang
FUZZ_BUILD     ?= build-fuzz
FUZZ_SECONDS   ?= 30
FUZZ_HARNESSES ?= sse json schema text response decode listing stdio validate uri_template
# A harness that includes a C file itself (to reach its static functions) links every other object.
FUZZ_INCLUDES_response = net/http_headers
FUZZ_INCLUDES_stdio    = core/process
FUZZ_CORPUS    ?= $(FUZZ_BUILD)/corpus
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_INSTRUMENT ?= -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS     = -g -O1 -fno-omit-frame-pointer $(FUZZ_INSTRUMENT) $(BASE_CFLAGS)
FUZZ_LIBS       = $(shell pkg-config --libs lua5.4) $(CORE_LDLIBS) $(NET_LDLIBS) -lm
# A harness is one program: core and net linked together (each shared file once).
FUZZ_OBJECTS    = $(patsubst csrc/%.c,$(FUZZ_BUILD)/obj/%.o,$(sort $(CORE_SOURCES) $(NET_SOURCES)))
FUZZ_ENV        = ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.SECONDARY: $(FUZZ_OBJECTS) $(patsubst %,$(FUZZ_BUILD)/%_fuzz,$(FUZZ_HARNESSES))

fuzz-deps:
	@scripts/install-deps fuzz

$(FUZZ_BUILD)/obj/%.o: csrc/%.c $(HEADERS) | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_BUILD)/%_fuzz: fuzz/%_fuzz.c fuzz/fuzz_common.h $(FUZZ_OBJECTS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_DIR='"$(CURDIR)/fuzz"' -o $@ $< \
	  $(filter-out $(patsubst %,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_INCLUDES_$*)),$(FUZZ_OBJECTS)) $(FUZZ_LIBS)

fuzz: $(patsubst %,fuzz-%,$(FUZZ_HARNESSES))

# The smoke run of `make test` (scripts/test): every harness built, then run FUZZ_SMOKE_SECONDS
# from its committed seeds (what it finds goes to a scratch corpus, emptied first), so a harness
# that no longer loads or runs is seen. Ends with "N passed, N failed", one count per harness.
fuzz-smoke: fuzz-deps
	@log=$$(mktemp); p=0; f=0; \
	if ! $(MAKE) --no-print-directory -j2 $(patsubst %,$(FUZZ_BUILD)/%_fuzz,$(FUZZ_HARNESSES)) >$$log 2>&1; then \
	  echo "fuzz-smoke: the harnesses did not build:"; tail -n 30 $$log; fi; \
	rm -rf $(FUZZ_BUILD)/smoke-corpus; \
	for h in $(FUZZ_HARNESSES); do \
	  if $(MAKE) --no-print-directory fuzz-$$h FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) \
	       FUZZ_CORPUS=$(FUZZ_BUILD)/smoke-corpus >$$log 2>&1; then \
	    p=$$((p + 1)); echo "ok $$h: $$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' $$log)"; \
	  else f=$$((f + 1)); echo "FAILED $$h:"; grep -v '^#' $$log | tail -n 40; fi; \
	done; rm -f $$log; echo "$$p passed, $$f failed"; [ $$f -eq 0 ]

fuzz-%: $(FUZZ_BUILD)/%_fuzz
	@mkdir -p $(FUZZ_CORPUS)/$* $(FUZZ_BUILD)/artifacts
	@echo "== fuzz $*: $(FUZZ_SECONDS) s"
	$(FUZZ_ENV) $< -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	  $(if $(wildcard fuzz/$*.dict),-dict=fuzz/$*.dict) -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*- \
	  $(FUZZ_CORPUS)/$* fuzz/corpus/$*

fuzz-coverage:
	@$(MAKE) --no-print-directory FUZZ_BUILD=$(FUZZ_BUILD)/coverage \
	  FUZZ_INSTRUMENT="-fprofile-instr-generate -fcoverage-mapping" \
	  $(patsubst %,$(FUZZ_BUILD)/coverage/%_fuzz,$(FUZZ_HARNESSES))
	@scripts/fuzz-coverage $(FUZZ_BUILD)/coverage $(FUZZ_BUILD)/corpus $(FUZZ_HARNESSES)

# The API reference (LDoc, from the doc comments of lua/; config.ld) in docs/api/.
# docs-check (part of `make test`) fails on a broken reference: an @see or @{name} that
# LDoc cannot resolve.
LDOC ?= ldoc
# The generation time is dropped so a rebuild of unchanged code changes no file.
docs:
	$(LDOC) .
	@find docs/api -name '*.html' -exec sed -i '/Last updated/d' {} +

docs-check:
	@out=$$($(LDOC) --dir build/api-check . 2>&1) || { printf '%s\n' "$$out"; exit 1; }; \
	  broken=$$(printf '%s\n' "$$out" | grep -E 'not found: ' | grep -v 'markdown not found'); \
	  if [ -n "$$broken" ]; then printf '%s\n' "$$broken"; echo "docs-check: broken references"; exit 1; fi; \
	  echo "docs-check: no broken references"

# A source rock from this checkout (the rockspec's own source names where it is published).
rock:
	@mkdir -p build/rock
	sed 's|^source = .*|source = { url = "git+file://$(CURDIR)" }|' mcpclient-scm-1.rockspec > build/rock/mcpclient-scm-1.rockspec
	cd build/rock && luarocks pack mcpclient-scm-1.rockspec

clean:
	rm -rf build build-asan csrc/*/*.o mcpclient
