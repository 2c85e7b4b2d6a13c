/*
** response_fuzz.c: libFuzzer harness for the response classification of
** the HTTP channel (lua/mcpclient/channel/http.lua) under the session
** (lua/mcpclient/session.lua): status + content type + body -> result or
** failure, which drives the event-stream decoder and rpc_classify.
**
** Input: one or more response segments (the first answers the POST, later
** ones answer resumption GETs or a renewed session's initialize and
** request), each a status byte, a flags byte, header
** lines up to a blank line, and the body; see fuzz/lua/response_check.lua.
** The header lines go through the real libcurl header callback and header
** table of csrc/net/http_headers.c (included here, so its static functions are
** reachable; the harness links every other csrc object), so the media-type decision the
** C leg makes and the header table Lua reads are the production ones. A fake
** leg then hands the body over as the C leg would (streamed in chunks when
** the C side saw text/event-stream, kept otherwise) and the checker requires
** a result or a failure triple of a known kind, never an escaping error.
*/
#include "fuzz_common.h"

#include "../csrc/net/http_headers.c"

#define FZ_LEG_MT "mcpclient.fuzz.header_leg"

/* __gc of the boxed Leg: the header buffer is malloc'd by http_buffer.c's mcp_http_buf_append. */
static int fz_leg_gc(lua_State *L) {
  Leg *leg = (Leg *)lua_touserdata(L, 1);
  if (leg != NULL) mcp_http_buf_free(&leg->head);
  return 0;
}

/* Hand one header line (terminator included) to the libcurl header callback. */
static int fz_line(Leg *leg, const char *s, size_t n) {
  char copy[512];
  char *p = n <= sizeof copy ? copy : malloc(n);
  int ok;
  if (p == NULL) return 0;
  memcpy(p, s, n);
  ok = mcp_http_on_header(p, 1, n, leg) == n;
  if (p != copy) free(p);
  return ok;
}

/*
** fuzz_headers(block) -> headers, event_stream, ok, media_type. The block's lines (each
** given its terminator if it lacks one) follow a status line and precede the
** blank line, exactly as libcurl delivers a head; ok is false when the
** callback refused a line (the leg would fail the transfer).
*/
static int fz_headers(lua_State *L) {
  size_t n, at = 0;
  const char *s = luaL_checklstring(L, 1, &n);
  static const char status[] = "HTTP/1.1 200 OK\r\n", blank[] = "\r\n";
  Leg *leg = (Leg *)lua_newuserdatauv(L, sizeof(Leg), 0);
  int ok = 1;
  memset(leg, 0, sizeof *leg);
  if (luaL_newmetatable(L, FZ_LEG_MT)) {
    lua_pushcfunction(L, fz_leg_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  ok = fz_line(leg, status, sizeof status - 1);
  while (ok && at < n) {
    const char *eol = memchr(s + at, '\n', n - at);
    size_t len = eol ? (size_t)(eol - (s + at)) + 1 : n - at;
    if (eol != NULL) {
      ok = fz_line(leg, s + at, len);
    } else {
      char *line = malloc(len + 2);
      if (line == NULL) fz_die("fuzz_headers", "out of memory");
      memcpy(line, s + at, len);
      memcpy(line + len, "\r\n", 2);
      ok = fz_line(leg, line, len + 2);
      free(line);
    }
    at += len;
  }
  if (ok) ok = fz_line(leg, blank, sizeof blank - 1);
  mcp_http_push_headers(L, leg->head.p, leg->head.len);
  lua_pushboolean(L, leg->event_stream);
  lua_pushboolean(L, ok);
  lua_pushstring(L, leg->media);
  return 4;
}

#define FZ_LUA_COUNTERS 16384

__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t fz_lua_counters[FZ_LUA_COUNTERS];
static uintptr_t fz_prev_line;

/* Line hook: count Lua line-to-line edges in the project's own modules. */
static void fz_line_hook(lua_State *L, lua_Debug *ar) {
  static const char *last_source;
  static int last_ours;
  uintptr_t here;
  if (!lua_getinfo(L, "S", ar)) return;
  if (ar->source != last_source) {
    last_source = ar->source;
    last_ours = strstr(ar->source, "/lua/mcpclient/") != NULL;
  }
  if (!last_ours) return;
  here = (uintptr_t)ar->source * 2654435761u + (uintptr_t)ar->currentline;
  fz_lua_counters[(here ^ (fz_prev_line >> 1)) % FZ_LUA_COUNTERS]++;
  fz_prev_line = here;
}

static void extra(lua_State *L) {
  lua_register(L, "fuzz_headers", fz_headers);
  lua_sethook(L, fz_line_hook, LUA_MASKLINE, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("response_check", extra);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_prev_line = 0;
  fz_run(data, size);
  return 0;
}
