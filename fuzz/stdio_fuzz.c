/*
** stdio_fuzz.c: libFuzzer harness for the stdio channel's line reader: a
** child's stdout read into lines under the 2 MiB read cap (csrc/core/process.c).
**
** The reader is not callable apart from a child's handle, so process.c is
** included here (its static functions become reachable; the harness links
** every other csrc object) and fuzz_reader(fd) makes a handle with no child
** whose stdout is the read end of a pipe the checker holds: the engine owns
** that end from the start, exactly as core.spawn leaves a child's stdout, so
** the bytes go through the same engine turns (proc_ready, drain_out) and the
** same read_line (take_line, the cap, the last line at end of file) as a
** server's output. The checker (fuzz/lua/stdio_check.lua) feeds the write end
** in pseudo-random chunks and requires the lines out to equal a Lua model of
** the splitting rule.
*/
#define _GNU_SOURCE /* as process.c asks, before any system header fixes the feature set */
#include "fuzz_common.h"

#include "../csrc/core/process.c"

/*
** fuzz_reader(fd) -> handle: a child's handle without a child, reading fd
** (which it owns from now on: its close closes fd) as the child's stdout.
*/
static int fz_reader(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  Proc *p = lua_newuserdatauv(L, sizeof(Proc), 0);
  memset(p, 0, sizeof *p);
  p->in = p->err = p->pidfd = -1; /* no child: no stdin, stderr or pidfd */
  p->out = (int)fd;
  p->state = NEVER;
  p->owner = getpid();
  p->generation = fork_generation;
  luaL_setmetatable(L, PROC_MT);
  p->engine = mcp_engine_of(L);
  if (mcp_engine_own(p->engine, p->out, EPOLLIN, proc_ready, p) != 0) {
    p->engine = NULL;
    return luaL_error(L, "fuzz_reader: the engine cannot watch descriptor %d", p->out);
  }
  p->out_owned = 1;
  return 1;
}

static void extra(lua_State *L) {
  lua_register(L, "fuzz_reader", fz_reader);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("stdio_check", extra);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}
