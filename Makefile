# mcpclient — build, test, lint, sanitizers, conformance, benchmarks.
# `make test` and `make demo` are the two commands a newcomer needs; both install
# what is missing first (Debian packages, the npm peers under spec/peers/).

LUA      ?= lua5.4
BUSTED   ?= busted
PKGS      = lua5.4 libcurl jansson sqlite3

CC       ?= cc
CWARNS    = -Wall -Wextra -Wpedantic -Wshadow -Wmissing-prototypes -Wstrict-prototypes \
            -Wmissing-declarations -Wpointer-arith -Wcast-qual -Wundef -Wformat=2 \
            -Wwrite-strings -Wredundant-decls -Wnested-externs -Wvla
OPT      ?= -O2
CFLAGS   += -std=c11 -D_POSIX_C_SOURCE=200809L -fPIC $(OPT) $(CWARNS) -Werror \
            $(shell pkg-config --cflags $(PKGS))
# The module is loaded by the lua5.4 interpreter: never link it against liblua.
LDLIBS    = $(shell pkg-config --libs libcurl jansson sqlite3)

BUILD    ?= build
SOURCES   = $(wildcard csrc/*.c)
OBJECTS   = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(SOURCES))
MODULE    = $(BUILD)/mcpclient/core.so

.PHONY: all deps peers test check unit lint asan demo conformance bench soak fuzz clean

all: $(MODULE)

$(BUILD)/obj/%.o: csrc/%.c csrc/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(MODULE): $(OBJECTS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(CFLAGS) -o $@ $(OBJECTS) $(LDFLAGS) $(LDLIBS)

deps:
	@scripts/install-deps

peers: deps
	@scripts/install-peers

# Everything: lint, the whole suite, the suite under ASan+UBSan, the official conformance suite.
test: peers
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory lint
	@scripts/test

# The busted suite alone (unit, conformance, functional, integration against real servers).
check: peers all
	$(BUSTED)

# The specs that need no network peer.
unit: all
	$(BUSTED) --exclude-tags=integration

lint:
	luacheck --quiet lua bin spec examples bench

# The whole suite again under AddressSanitizer + UBSan, in a separate build tree.
# lua5.4 is not instrumented, so the runtimes are preloaded; the node peers the
# programs the specs start (node peers, curl, openssl) must not inherit that
# preload — some hang under it — hence the shims on PATH.
ASAN_FLAGS = -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="$(ASAN_FLAGS)" all
	@mkdir -p build-asan/bin
	@for tool in node curl openssl; do \
	  printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$$@"\n' "$$(command -v $$tool)" > build-asan/bin/$$tool; \
	  chmod +x build-asan/bin/$$tool; done
	PATH="$(CURDIR)/build-asan/bin:$$PATH" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  $(BUSTED) --cpath="./build-asan/?.so"

demo: peers all
	LUA_PATH="./lua/?.lua;./lua/?/init.lua;;" LUA_CPATH="./build/?.so;;" $(LUA) scripts/demo

conformance: peers all
	$(BUSTED) spec/conformance
	scripts/official-conformance

bench: peers all
	$(LUA) bench/run.lua

clean:
	rm -rf build build-asan csrc/*.o mcpclient
