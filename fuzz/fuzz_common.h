/*
** fuzz_common.h: what every mcpclient libFuzzer harness shares.
**
** Each harness embeds a Lua 5.4 state (liblua5.4 is linked into the harness
** binaries only, never into the module), opens mcpclient.core from the C
** sources compiled into the harness, loads its checker from fuzz/lua/ and
** hands it every input. The checker drives the real C functions through the
** Lua API, exactly as the client does, and raises on any broken property;
** any error escaping it aborts, so libFuzzer records the input as a crash.
**
** The state is kept across inputs (opening it per input would cost more than
** most inputs) and collected after each one. The allocator caps the Lua heap
** at FZ_HEAP_CAP so a runaway input is a Lua memory error, not a killed
** process, and with FUZZ_OOM=1 it fails one allocation per input (chosen
** from the input's hash) to drive the out-of-memory paths the C core says
** leave nothing unowned: the checker then only has to survive, and
** LeakSanitizer reports anything that leaked.
*/
#ifndef MCPCLIENT_FUZZ_COMMON_H
#define MCPCLIENT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../csrc/include/core.h"

#ifndef FUZZ_DIR
#error "compile with -DFUZZ_DIR=\"/path/to/fuzz\""
#endif

#define FZ_HEAP_CAP ((size_t)512 * 1024 * 1024)

int luaopen_mcpclient_core(lua_State *L);
int luaopen_mcpclient_net(lua_State *L);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t fz_heap;          /* bytes the Lua state holds */
static long fz_fail_at = -1;    /* allocation number to fail (OOM mode), -1: none */
static long fz_allocs;          /* allocations since the current input began */
static int fz_oom_mode;
static lua_State *fz_L;

/* The Lua allocator: heap cap always, one injected failure in OOM mode. */
static void *fz_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  size_t old = ptr ? osize : 0;
  void *p;
  (void)ud;
  if (nsize == 0) {
    free(ptr);
    fz_heap -= old;
    return NULL;
  }
  if (nsize > old && nsize - old > FZ_HEAP_CAP - fz_heap) return NULL;
  /* the failed allocation and Lua's one retry after its emergency collection */
  if (fz_fail_at >= 0 && (fz_allocs == fz_fail_at || fz_allocs == fz_fail_at + 1)) {
    fz_allocs++;
    return NULL;
  }
  fz_allocs++;
  p = realloc(ptr, nsize);
  if (p != NULL) fz_heap = fz_heap - old + nsize;
  return p;
}

/* An invariant broke, or something raised that must not: report and crash. */
static void fz_die(const char *what, const char *detail) {
  fprintf(stderr, "\n==mcpclient-fuzz== %s: %s\n", what, detail ? detail : "(no message)");
  fflush(stderr);
  abort();
}

/* Message handler: the error with a traceback, so a crash report says where. */
static int fz_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : luaL_typename(L, 1), 1);
  return 1;
}

/* FNV-1a over the input: picks the failing allocation in OOM mode, reproducibly. */
static uint64_t fz_hash(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ULL;
  size_t i;
  for (i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ULL;
  return h;
}

/*
** Open the state: standard libraries, mcpclient.core and mcpclient.net loaded
** under their real names (so Lua modules that require them get the
** instrumented ones; core reaches net's names through require), the
** project's Lua paths, then fuzz/lua/<checker>.lua, whose returned function
** is kept in the registry as "fz.check". extra, if given, registers more C
** functions into the core table before the checker loads.
*/
static void fz_open(const char *checker, void (*extra)(lua_State *L)) {
  lua_State *L = lua_newstate(fz_alloc, NULL);
  char path[4096];
  if (L == NULL) fz_die("setup", "lua_newstate failed");
  fz_oom_mode = getenv("FUZZ_OOM") != NULL && getenv("FUZZ_OOM")[0] == '1';
  luaL_openlibs(L);
  luaL_requiref(L, "mcpclient.core", luaopen_mcpclient_core, 0);
  luaL_requiref(L, "mcpclient.net", luaopen_mcpclient_net, 0);
  lua_pop(L, 1);
  if (extra != NULL) extra(L);
  lua_pop(L, 1);
  snprintf(path, sizeof path,
           "%s/lua/?.lua;%s/../lua/?.lua;%s/../lua/?/init.lua", FUZZ_DIR, FUZZ_DIR, FUZZ_DIR);
  lua_getglobal(L, "package");
  lua_pushstring(L, path);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  lua_pushcfunction(L, fz_traceback);
  lua_getglobal(L, "require");
  lua_pushstring(L, checker);
  if (lua_pcall(L, 1, 1, 1) != LUA_OK) fz_die("loading the checker", lua_tostring(L, -1));
  if (!lua_isfunction(L, -1)) fz_die("loading the checker", "it did not return a function");
  lua_setfield(L, LUA_REGISTRYINDEX, "fz.check");
  lua_settop(L, 0);
  fz_L = L;
}

/*
** Run the checker on one input. In OOM mode a memory error is an accepted
** outcome (and only that: any other error is still a finding, because a
** failed allocation must surface as a memory error, not as a wrong answer).
** One exception, Lua's own: a stack that cannot grow because its allocation
** failed is reported as "stack overflow" (lua_checkstack cannot tell the two
** apart), so that raise is accepted too, when the injected failure fired.
*/
static void fz_run(const uint8_t *data, size_t size) {
  lua_State *L = fz_L;
  int status, failed;
  long pick = (long)(fz_hash(data, size) % 4096);
  fz_allocs = 0;
  lua_pushcfunction(L, fz_traceback);
  lua_getfield(L, LUA_REGISTRYINDEX, "fz.check");
  lua_pushlstring(L, (const char *)data, size);
  lua_pushboolean(L, fz_oom_mode);
  fz_fail_at = fz_oom_mode ? pick + fz_allocs : -1; /* count from the call, not the setup */
  status = lua_pcall(L, 2, 0, 1);
  failed = fz_fail_at >= 0 && fz_allocs > fz_fail_at;
  fz_fail_at = -1;
  if (status != LUA_OK && !(failed && status == LUA_ERRMEM)) {
    const char *msg = lua_tostring(L, -1);
    /* a memory error re-raised by Lua code arrives as a string: accept those too */
    if (!(failed && msg != NULL &&
          (strstr(msg, "not enough memory") != NULL || strstr(msg, "stack overflow") != NULL)))
      fz_die("the checker raised", msg);
  }
  lua_settop(L, 0);
  lua_gc(L, LUA_GCCOLLECT);
}

/* fuzz_ascii_encode(v) -> text | nil, reason: the C API's ASCII encoding, the normaliser's size measure. */
static inline int fz_ascii_encode(lua_State *L) {
  const char *r;
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  r = mcp_json_encode(L, 1, MCP_JSON_ASCII);
  if (r != NULL) {
    lua_pushnil(L);
    lua_pushstring(L, r);
    return 2;
  }
  return 1;
}

/* An fz_open extra: the global fuzz_ascii_encode. */
static inline void fz_with_ascii_encode(lua_State *L) {
  lua_register(L, "fuzz_ascii_encode", fz_ascii_encode);
}

#endif
