/*
** json_decode.c: the decoding half of the JSON codec (DESIGN D4) —
** json.decode and core.rpc_classify.
**
** yajl (Debian's libyajl2) tokenises and checks the grammar; its callbacks
** build the Lua values directly, with no intermediate tree: integers stay
** lua_Integer (strtoll on the number's own text; out of range is refused),
** floats come from strtod on that text so they round-trip, arrays carry the
** marker metatable, JSON null is json.null, and ordered decoding records
** each object's key order in the order table.
**
** What yajl 2.1.0 lets through is refused here: duplicate keys (looked up in
** the Lua table before each set), UTF-8 that is shaped right but not well
** formed (overlong forms, surrogates, beyond U+10FFFF: checked on every
** string), \u escapes of lone surrogates (checked on the raw text, since
** yajl decodes them to "?" or to a wrong code point), \v and \f between
** tokens (JSON whitespace is space, tab, CR and LF only) and nesting deeper
** than 512 levels.
**
** A container's members wait on the Lua stack until it closes (or until
** PENDING of them have gathered), then go into a table created at its final
** size, which spares the rehash at every power of two.
**
** Lua calls in the callbacks can raise (memory, stack), so the parse runs
** under lua_pcall: the yajl handle is freed before any error is re-raised,
** and the only C memory is the handle itself.
*/
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "core.h"

_Static_assert(LUA_MAXINTEGER == LLONG_MAX && LUA_MININTEGER == LLONG_MIN,
               "lua_Integer must be long long, what strtoll reads");

#define DEPTH_MESSAGE "invalid JSON: nesting deeper than 512 levels"
#define PENDING 64          /* members a container gathers on the stack before moving them */
#define ROOM 4              /* stack slots a push needs: the value, then flush's temporaries */
#define ROOM_AHEAD 64       /* reserved beyond that when the stack can give it, to check less often */
#define NUMBER_BUF 64       /* number texts up to this long are copied on the C stack */

/* One open container. Its slot holds nil until its table exists; objects use slot + 1 for the key list. */
typedef struct Frame {
  int slot;
  unsigned char object, made, keyed;
  lua_Integer n;            /* members already moved into the table */
} Frame;

typedef struct Dec {
  lua_State *L;
  yajl_handle h;
  const unsigned char *text;
  size_t len;
  int marker, order;        /* stack indexes of the array marker and the order table (0: unordered) */
  int depth;
  int top;                  /* lua_gettop, kept here: every push and pop during the parse is ours */
  int limit;                /* the stack is known to have room up to this index */
  int final;                /* 1 once yajl_complete_parse runs: offsets then point into its own chunk */
  char point;               /* the locale's decimal point, read at the first float (0: not yet) */
  const char *why;          /* a callback's refusal (static text), and the offset it was at */
  size_t where;
  char msg[160];            /* the message returned for text that is not accepted ("" when it is) */
  Frame frames[MCP_JSON_MAX_DEPTH];
} Dec;

/* ==================================================================== */
/* Building values                                                      */
/* ==================================================================== */

/*
** Make sure ROOM slots are free above the top. Room is asked for in steps
** (ROOM_AHEAD more when the stack can give it), and never more than needed
** when it cannot: a decode near the stack limit must still succeed when a
** handful of slots is all it needs.
*/
static void reserve(Dec *d) {
  lua_State *L = d->L;
  int top = d->top;
  if (top + ROOM <= d->limit) return;
  if (lua_checkstack(L, ROOM + ROOM_AHEAD)) d->limit = top + ROOM + ROOM_AHEAD;
  else if (lua_checkstack(L, ROOM)) d->limit = top + ROOM;
  else luaL_error(L, "JSON decoder: stack overflow");
}

/* Record why the text is refused and where; returns 0, which makes yajl stop. */
static int refuse(Dec *d, const char *why) {
  d->why = why;
  d->where = d->final ? d->len : yajl_get_bytes_consumed(d->h);
  return 0;
}

/*
** Move the pending members of the container f into its table (creating it,
** sized for them, the first time), taking them off the top of the stack
** (last first: no copies). Returns 0 when an object key is already in the
** table: JSON null is json.null, never nil, so presence is exactly a
** non-nil value.
*/
static int flush(Dec *d, Frame *f) {
  lua_State *L = d->L;
  int count = d->top - f->slot - f->object, i;
  if (!f->made) {
    if (f->object) {
      lua_createtable(L, 0, count / 2);
    } else {
      lua_createtable(L, count, 0);
      lua_pushvalue(L, d->marker);
      lua_setmetatable(L, -2);
    }
    lua_replace(L, f->slot);
    f->made = 1;
  }
  if (!f->object) {
    for (i = count; i > 0; i--) lua_rawseti(L, f->slot, f->n + i);
    f->n += count;
    d->top = f->slot;
    return 1;
  }
  count /= 2;
  if (d->order != 0 && !f->keyed && count > 0) {
    lua_createtable(L, count, 0);
    lua_replace(L, f->slot + 1);
    f->keyed = 1;
  }
  for (i = count; i > 0; i--) {
    if (f->n > 0 || i < count) {
      lua_pushvalue(L, -2);
      if (lua_rawget(L, f->slot) != LUA_TNIL) return 0;
      lua_pop(L, 1);
    }
    if (f->keyed) {
      lua_pushvalue(L, -2);
      lua_rawseti(L, f->slot + 1, f->n + i);
    }
    lua_rawset(L, f->slot);
  }
  f->n += count;
  d->top = f->slot + 1;
  return 1;
}

/* A value was pushed: let its container move its members once PENDING have gathered. */
static int settled(Dec *d) {
  Frame *f;
  int pending;
  if (d->depth == 0) return 1;
  f = &d->frames[d->depth - 1];
  pending = d->top - f->slot - f->object;
  if (pending < (f->object ? 2 * PENDING : PENDING)) return 1;
  return flush(d, f) || refuse(d, "duplicate object key");
}

/* A container opens: bound the depth and push its slot (and an object's key-list slot). */
static int open_container(Dec *d, int object) {
  lua_State *L = d->L;
  Frame *f;
  if (d->depth >= MCP_JSON_MAX_DEPTH) return refuse(d, DEPTH_MESSAGE);
  reserve(d);
  f = &d->frames[d->depth++];
  f->object = (unsigned char)object;
  f->made = 0;
  f->keyed = 0;
  f->n = 0;
  lua_pushnil(L);
  f->slot = ++d->top;
  if (object) {
    lua_pushnil(L);
    d->top++;
  }
  return 1;
}

/* A container closes: its table replaces the frame on the stack as one value of its parent. */
static int close_container(Dec *d) {
  lua_State *L = d->L;
  Frame *f = &d->frames[d->depth - 1];
  if (!flush(d, f)) return refuse(d, "duplicate object key");
  if (f->keyed) {
    lua_pushvalue(L, f->slot);
    lua_pushvalue(L, f->slot + 1);
    lua_rawset(L, d->order);
  }
  lua_settop(L, f->slot);
  d->top = f->slot;
  d->depth--;
  return settled(d);
}

/* ==================================================================== */
/* Strings                                                              */
/* ==================================================================== */

/* The value of four hex digits (the lexer has already checked them). */
static unsigned hex4(const unsigned char *p) {
  unsigned v = 0;
  int i;
  for (i = 0; i < 4; i++) {
    unsigned c = p[i];
    v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

/*
** The opening quote of the string token whose closing quote is at close:
** the nearest '"' before it that is not escaped (preceded by an even run of
** backslashes). Each backslash run is counted once, so this is linear.
*/
static const unsigned char *opening_quote(const unsigned char *text, const unsigned char *close) {
  const unsigned char *p = close;
  while (p > text) {
    const unsigned char *q;
    p--;
    if (*p != '"') continue;
    q = p;
    while (q > text && q[-1] == '\\') q--;
    if (((p - q) & 1) == 0) return p;
  }
  return text;
}

/*
** Whether every \u escape of a UTF-16 surrogate in the raw string ending at
** close is half of a high-low pair. yajl decodes a lone high surrogate to
** "?" and pairs a high one with any following \u escape, so only the raw
** text can tell.
*/
static int surrogates_paired(const unsigned char *text, const unsigned char *close) {
  const unsigned char *p = opening_quote(text, close) + 1;
  while (p < close) {
    unsigned cp;
    p = (const unsigned char *)memchr(p, '\\', (size_t)(close - p));
    if (p == NULL) break;
    if (p[1] != 'u') {
      p += 2;
      continue;
    }
    cp = hex4(p + 2);
    p += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      unsigned lo;
      if (close - p < 6 || p[0] != '\\' || p[1] != 'u') return 0;
      lo = hex4(p + 2);
      if (lo < 0xDC00 || lo > 0xDFFF) return 0;
      p += 6;
    }
  }
  return 1;
}

/*
** Check a string or key yajl delivers. It points into the text when the
** token had no escapes; otherwise it is yajl's decoded copy and the raw
** token (ending just before the consumed offset) is checked for lone
** surrogates. A key may not hold \u0000 (values may), as before: keys
** name things, and the codec has never let NUL into a name.
*/
static int string_ok(Dec *d, const unsigned char *s, size_t len, int key) {
  size_t at;
  if (d->final) return refuse(d, "a string out of place");  /* a string never ends in yajl's final " " */
  at = yajl_get_bytes_consumed(d->h);
  if (at < len + 2 || at > d->len || d->text[at - 1] != '"') return refuse(d, "a string out of place");
  if ((uintptr_t)s != (uintptr_t)(d->text + at - 1 - len)) {
    if (!surrogates_paired(d->text, d->text + at - 1))
      return refuse(d, "lone UTF-16 surrogate in a \\u escape");
    if (key && memchr(s, '\0', len) != NULL) return refuse(d, "NUL byte in object key not supported");
  }
  if (!mcp_json_utf8_valid((const char *)s, len)) return refuse(d, "invalid bytes in UTF8 string");
  return 1;
}

/* ==================================================================== */
/* yajl callbacks                                                       */
/* ==================================================================== */

/* null -> json.null. */
static int on_null(void *ctx) {
  Dec *d = (Dec *)ctx;
  reserve(d);
  mcp_json_push_null(d->L);
  d->top++;
  return settled(d);
}

/* true / false. */
static int on_boolean(void *ctx, int b) {
  Dec *d = (Dec *)ctx;
  reserve(d);
  lua_pushboolean(d->L, b);
  d->top++;
  return settled(d);
}

/*
** A number, from its own text (yajl has checked the grammar): without '.',
** 'e' or 'E' an exact integer, refused when out of range; otherwise a float
** read in the C convention whatever LC_NUMERIC says, refused on overflow.
*/
static int on_number(void *ctx, const char *s, size_t len) {
  Dec *d = (Dec *)ctx;
  lua_State *L = d->L;
  char buf[NUMBER_BUF], *z = buf;
  size_t i;
  int is_float = 0;
  reserve(d);  /* a long float's copy is a temporary slot, freed before the value is pushed */
  for (i = 0; i < len; i++) {
    if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') {
      is_float = 1;
      break;
    }
  }
  if (!is_float) {
    long long v;
    if (len >= sizeof buf) return refuse(d, "too big integer");
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return refuse(d, "too big integer");
    lua_pushinteger(L, (lua_Integer)v);
  } else {
    double x;
    if (len >= sizeof buf) z = (char *)lua_newuserdatauv(L, len + 1, 0);  /* popped below */
    memcpy(z, s, len);
    z[len] = '\0';
    if (d->point == 0) d->point = localeconv()->decimal_point[0];
    if (d->point != '.') {
      char *dot = memchr(z, '.', len);
      if (dot != NULL) *dot = d->point;
    }
    errno = 0;
    x = strtod(z, NULL);
    if (z != buf) lua_pop(L, 1);
    if (errno == ERANGE && isinf(x)) return refuse(d, "real number overflow");
    lua_pushnumber(L, (lua_Number)x);
  }
  d->top++;
  return settled(d);
}

/* A string value. */
static int on_string(void *ctx, const unsigned char *s, size_t len) {
  Dec *d = (Dec *)ctx;
  if (!string_ok(d, s, len, 0)) return 0;
  reserve(d);
  lua_pushlstring(d->L, (const char *)s, len);
  d->top++;
  return settled(d);
}

/* An object key: it waits on the stack for its value. */
static int on_key(void *ctx, const unsigned char *s, size_t len) {
  Dec *d = (Dec *)ctx;
  if (!string_ok(d, s, len, 1)) return 0;
  reserve(d);
  lua_pushlstring(d->L, (const char *)s, len);
  d->top++;
  return 1;
}

/* '{'. */
static int on_start_map(void *ctx) {
  return open_container((Dec *)ctx, 1);
}

/* '['. */
static int on_start_array(void *ctx) {
  return open_container((Dec *)ctx, 0);
}

/* '}' or ']'. */
static int on_end(void *ctx) {
  return close_container((Dec *)ctx);
}

static const yajl_callbacks callbacks = {
  on_null, on_boolean, NULL, NULL, on_number, on_string,
  on_start_map, on_key, on_end, on_start_array, on_end,
};

/* ==================================================================== */
/* Running a parse                                                      */
/* ==================================================================== */

/*
** The refusal message: "invalid JSON: <reason> at line L column C", with
** the byte position at offset (one past the byte at fault). The reason is
** yajl's text or ours; the input itself is never quoted.
*/
static void set_message(Dec *d, const char *why, size_t offset) {
  const unsigned char *p = d->text, *line_start = d->text, *at;
  unsigned long line = 1;
  if (offset > d->len) offset = d->len;
  at = d->text + (offset > 0 ? offset - 1 : 0);
  while (p < at) {
    const unsigned char *nl = (const unsigned char *)memchr(p, '\n', (size_t)(at - p));
    if (nl == NULL) break;
    line++;
    p = line_start = nl + 1;
  }
  snprintf(d->msg, sizeof d->msg, "invalid JSON: %s at line %lu column %lu", why, line,
           (unsigned long)(at - line_start) + 1);
}

/*
** yajl's own error, stripped to its reason ("parse error: " and the final
** ".\n" go); "trailing garbage" keeps the codec's earlier wording, "end of file
** expected".
*/
static void set_yajl_message(Dec *d, size_t offset) {
  char why[112];
  unsigned char *e = yajl_get_error(d->h, 0, d->text, d->len);
  size_t n;
  if (e == NULL) {
    set_message(d, "syntax error", offset);
    return;
  }
  {
    const char *r = strstr((const char *)e, ": ");
    snprintf(why, sizeof why, "%s", r != NULL ? r + 2 : (const char *)e);
  }
  yajl_free_error(d->h, e);
  n = strlen(why);
  while (n > 0 && (why[n - 1] == '\n' || why[n - 1] == '.')) why[--n] = '\0';
  set_message(d, strcmp(why, "trailing garbage") == 0 ? "end of file expected" : why, offset);
}

/* Length of the text before its first \v or \f, which yajl takes for whitespace and JSON does not. */
static size_t clean_prefix(const unsigned char *s, size_t len) {
  const unsigned char *v = (const unsigned char *)memchr(s, '\v', len);
  const unsigned char *f = (const unsigned char *)memchr(s, '\f', v != NULL ? (size_t)(v - s) : len);
  if (f != NULL) return (size_t)(f - s);
  return v != NULL ? (size_t)(v - s) : len;
}

/*
** The protected part (lua_pcall): arguments Dec*, marker, order table or
** nil. Returns the value, or nothing with d->msg set.
*/
static int decode_run(lua_State *L) {
  Dec *d = (Dec *)lua_touserdata(L, 1);
  size_t clean = clean_prefix(d->text, d->len);
  yajl_status st;
  d->L = L;
  d->marker = 2;
  d->order = lua_isnil(L, 3) ? 0 : 3;
  d->top = lua_gettop(L);
  d->limit = 0;
  st = yajl_parse(d->h, d->text, clean);
  if (st == yajl_status_ok && clean < d->len) {
    set_message(d, "invalid char in json text", clean + 1);
    return 0;
  }
  if (st == yajl_status_ok) {
    d->final = 1;
    st = yajl_complete_parse(d->h);
  }
  if (st == yajl_status_ok) return 1;
  if (st == yajl_status_client_canceled && d->why != NULL) {
    if (strcmp(d->why, DEPTH_MESSAGE) == 0) snprintf(d->msg, sizeof d->msg, "%s", DEPTH_MESSAGE);
    else set_message(d, d->why, d->where);
  } else {
    set_yajl_message(d, d->final ? d->len : yajl_get_bytes_consumed(d->h));
  }
  return 0;
}

/*
** Decode s and push the value (returning 1), or push nil and the message
** (returning 0). Upvalues 1 and 2 of the running closure are the array
** marker and the order table. Raises only when memory or the stack runs
** out, after freeing the parser.
*/
static int decode_text(lua_State *L, const char *s, size_t len, int ordered) {
  Dec d;
  int status;
  d.h = yajl_alloc(&callbacks, NULL, &d);
  if (d.h == NULL) return luaL_error(L, "not enough memory");
  yajl_config(d.h, yajl_allow_comments, 0);
  yajl_config(d.h, yajl_dont_validate_strings, 0);
  yajl_config(d.h, yajl_allow_trailing_garbage, 0);
  yajl_config(d.h, yajl_allow_multiple_values, 0);
  yajl_config(d.h, yajl_allow_partial_values, 0);
  d.L = L;
  d.text = (const unsigned char *)s;
  d.len = len;
  d.depth = 0;
  d.final = 0;
  d.point = 0;
  d.why = NULL;
  d.where = 0;
  d.msg[0] = '\0';
  lua_pushcfunction(L, decode_run);
  lua_pushlightuserdata(L, &d);
  lua_pushvalue(L, lua_upvalueindex(1));
  if (ordered) lua_pushvalue(L, lua_upvalueindex(2));
  else lua_pushnil(L);
  status = lua_pcall(L, 3, 1, 0);
  yajl_free(d.h);
  if (status != LUA_OK) return lua_error(L);
  if (d.msg[0] == '\0') return 1;
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_pushstring(L, d.msg);
  return 0;
}

/* The first argument as a string; numbers are not text, so no coercion. */
static const char *check_text(lua_State *L, int arg, size_t *len) {
  if (lua_type(L, arg) != LUA_TSTRING) luaL_typeerror(L, arg, "string");
  return lua_tolstring(L, arg, len);
}

/*
** json.decode(text [, ordered]) -> value | nil, message.
** Upvalues: array marker, order table.
*/
int mcp_json_l_decode(lua_State *L) {
  size_t len;
  const char *s = check_text(L, 1, &len);
  int ordered = lua_toboolean(L, 2);
  lua_settop(L, 2);
  return decode_text(L, s, len, ordered) ? 1 : 2;
}

/* ==================================================================== */
/* JSON-RPC classification                                              */
/* ==================================================================== */

/* Whether the text is empty once PHP's trim() set (" \t\n\r\0\x0B") is removed. */
static int is_blank(const char *s, size_t len) {
  size_t i;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\0' && c != '\v') return 0;
  }
  return 1;
}

/* Whether the value at idx is a decoded object: a table without the array marker (upvalue 1). */
static int is_object(lua_State *L, int idx) {
  int marked;
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  if (!lua_getmetatable(L, idx)) return 1;
  marked = lua_rawequal(L, -1, lua_upvalueindex(1));
  lua_pop(L, 1);
  return !marked;
}

/* Return kind and detail (both static text). */
static int classified(lua_State *L, const char *kind, const char *detail) {
  lua_pushstring(L, kind);
  lua_pushstring(L, detail);
  return 2;
}

/*
** core.rpc_classify(text, expected_id [, ordered]) — one JSON-RPC response:
**   "result", table | "error", code, message | "other", why | "malformed", why.
** The whole body is decoded (key order recorded throughout when ordered),
** then classified on the Lua tables. Upvalues: array marker, order table.
*/
int mcp_json_l_rpc_classify(lua_State *L) {
  size_t len;
  const char *s = check_text(L, 1, &len);
  lua_Integer expected;
  int ordered = lua_toboolean(L, 3), id_matches, body;
  if (!lua_isinteger(L, 2)) luaL_typeerror(L, 2, "integer");  /* ids are integers: no "1" or 1.0 */
  expected = lua_tointeger(L, 2);
  lua_settop(L, 3);
  if (is_blank(s, len)) return classified(L, "malformed", "empty body");
  if (!decode_text(L, s, len, ordered)) {
    lua_pushliteral(L, "malformed");
    lua_replace(L, -3);
    return 2;
  }
  body = lua_gettop(L);
  if (!is_object(L, body)) return classified(L, "malformed", "the body is not a JSON object");
  if (lua_getfield(L, body, "method") != LUA_TNIL)
    return classified(L, "other", "a server request or notification");
  lua_getfield(L, body, "id");       /* body + 2 */
  id_matches = lua_isinteger(L, body + 2) && lua_tointeger(L, body + 2) == expected;
  lua_getfield(L, body, "error");    /* body + 3 */
  if (is_object(L, body + 3)) {
    if (!id_matches && !mcp_json_is_null(L, body + 2))
      return classified(L, "other", "a response to another request");
    lua_pushliteral(L, "error");
    lua_getfield(L, body + 3, "code");
    if (!lua_isinteger(L, -1)) {
      lua_pop(L, 1);
      lua_pushinteger(L, 0);
    }
    lua_getfield(L, body + 3, "message");
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      lua_pushliteral(L, "no message");
    }
    return 3;
  }
  lua_getfield(L, body, "result");   /* body + 4 */
  if (is_object(L, body + 4)) {
    if (!id_matches) return classified(L, "other", "a response to another request");
    lua_pushliteral(L, "result");
    lua_insert(L, -2);
    return 2;
  }
  return classified(L, "malformed", "the response carries neither a result nor an error");
}
