/*
** measure.c: the schema normaliser's fast path. One pass over a kept schema
** that both checks it and measures its stored size, instead of a checking
** walk that sorts every table's keys followed by a full encoding whose only
** use is its length.
**
** It answers only the common case exactly: a schema shaped as the decoder
** builds them (objects with string keys, arrays marked and dense), no
** refused keyword at any depth (the caller says which keys are refused),
** nesting within the normaliser's bound, valid UTF-8, only values JSON has
** a form for. Then it returns the length the
** encoder's ASCII form would have. Anything else (a refusal, whose reason
** depends on the order the encoder would write things in, or a table the
** encoder would refuse) returns "not clean" and the normaliser takes its
** exact, slower path. Key order never changes the length, so no keys are
** sorted here.
**
** The lengths mirror json.c's encoder in its ASCII form: strings quoted,
** '"', '\\', '/', \b \f \n \r \t as two bytes, other control characters
** and every code point above 0x7F as \uXXXX (a surrogate pair past U+FFFF),
** integers in decimal, reals as the shortest of %.15g..%.17g that reads
** back (with ".0" added when that has no '.' and no exponent).
*/
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Walk state: the marker's stack index, the keyword test, the visit budget, the depth bound. */
typedef struct Measure {
  lua_State *L;
  int marker;
  mcp_refused_fn refused;
  int max_depth;
  long visits, max_visits;
} Measure;

/* Escaped length of each byte below 0x80 in the ASCII form (1 plain, 2 short escape, 6 \u00XX). */
static unsigned char ascii_len[128];

/*
** Fill ascii_len once; the values never change, so refilling is harmless.
*/
static void init_lengths(void) {
  int c;
  for (c = 0; c < 128; c++) ascii_len[c] = c < 0x20 ? 6 : 1;
  ascii_len['"'] = ascii_len['\\'] = ascii_len['/'] = 2;
  ascii_len['\b'] = ascii_len['\f'] = ascii_len['\n'] = ascii_len['\r'] = ascii_len['\t'] = 2;
}

/*
** The ASCII-form length of the string s (quotes included), or 0 when it is
** not valid UTF-8.
*/
static size_t string_length(const char *str, size_t n) {
  const unsigned char *p = (const unsigned char *)str, *end = p + n;
  size_t len = 2;
  while (p < end) {
    if (*p < 0x80) {
      len += ascii_len[*p++];
    } else {
      int ok;
      uint32_t cp;
      p += mcp_utf8_unit(p, (size_t)(end - p), &ok, &cp);
      if (!ok) return 0;
      len += cp >= 0x10000 ? 12 : 6;
    }
  }
  return len;
}

/*
** The encoder's length for the integer v.
*/
static size_t integer_length(lua_Integer v) {
  lua_Unsigned u = v < 0 ? 0u - (lua_Unsigned)v : (lua_Unsigned)v;
  size_t len = v < 0 ? 2 : 1;
  while (u >= 10) {
    u /= 10;
    len++;
  }
  return len;
}

/*
** The encoder's length for the real d, or 0 when it has no JSON form.
*/
static size_t real_length(lua_Number d) {
  char tmp[48], point;
  int prec, len = 0;
  if (!isfinite(d)) return 0;
  for (prec = 15; prec <= 17; prec++) {
    len = snprintf(tmp, sizeof tmp, "%.*g", prec, (double)d);
    if (prec == 17 || strtod(tmp, NULL) == d) break;
  }
  point = localeconv()->decimal_point[0]; /* the encoder writes it as '.' */
  if (memchr(tmp, 'e', (size_t)len) == NULL && memchr(tmp, '.', (size_t)len) == NULL &&
      memchr(tmp, point, (size_t)len) == NULL)
    len += 2;
  return (size_t)len;
}

static size_t value_length(Measure *m, int idx, int level);

/*
** The length of the marked table at t: keys exactly 1..n, n its raw length
** (a hole would be written as null and is left to the exact path).
*/
static size_t array_length(Measure *m, int t, int level) {
  lua_State *L = m->L;
  lua_Integer count = 0, n = (lua_Integer)lua_rawlen(L, t);
  size_t len = 2, v;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lua_Integer k;
    if (!lua_isinteger(L, -2) || (k = lua_tointeger(L, -2)) < 1 || k > n ||
        (v = value_length(m, lua_gettop(L), level + 1)) == 0) {
      lua_pop(L, 2);
      return 0;
    }
    len += v + (count++ > 0);
    lua_pop(L, 1);
  }
  return count == n ? len : 0;
}

/*
** The length of the unmarked table at t: an object with string keys only
** ({} when empty), none of them refused.
*/
static size_t object_length(Measure *m, int t, int level) {
  lua_State *L = m->L;
  size_t len = 2, count = 0, k, v;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    size_t n;
    const char *s;
    if (lua_type(L, -2) != LUA_TSTRING || (s = lua_tolstring(L, -2, &n), m->refused(s, n) >= 0) ||
        (k = string_length(s, n)) == 0 || (v = value_length(m, lua_gettop(L), level + 1)) == 0) {
      lua_pop(L, 2);
      return 0;
    }
    len += k + 1 + v + (count++ > 0);
    lua_pop(L, 1);
  }
  return len;
}

/*
** The length of the value at idx, a container at nesting level level (the
** schema itself is 1), or 0 when it is not clean.
*/
static size_t value_length(Measure *m, int idx, int level) {
  lua_State *L = m->L;
  size_t n;
  const char *s;
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? 4 : 5;
    case LUA_TNUMBER:
      return lua_isinteger(L, idx) ? integer_length(lua_tointeger(L, idx))
                                   : real_length(lua_tonumber(L, idx));
    case LUA_TSTRING: s = lua_tolstring(L, idx, &n); return string_length(s, n);
    case LUA_TLIGHTUSERDATA: return mcp_json_is_null(L, idx) ? 4 : 0;
    case LUA_TTABLE: {
      int marked = 0;
      if (level > m->max_depth || ++m->visits > m->max_visits) return 0;
      luaL_checkstack(L, 4, "schema measure");
      if (lua_getmetatable(L, idx)) {
        marked = lua_rawequal(L, -1, m->marker);
        lua_pop(L, 1);
        if (!marked) mcp_json_lazy_settle(L, idx); /* a lazy object is read raw below: build it first */
      }
      return marked ? array_length(m, idx, level) : object_length(m, idx, level);
    }
    default: return 0;
  }
}

/*
** The ASCII-form length of the kept schema at t when it is clean, else 0
** (the caller then takes the exact path). max_depth: deepest container
** level allowed (t is 1); max_visits: most containers walked; refused: the
** caller's keyword test (the normaliser keeps the one list of them).
*/
size_t mcp_schema_measure(lua_State *L, int t, int max_depth, long max_visits, mcp_refused_fn refused) {
  Measure m;
  size_t len;
  if (ascii_len['/'] != 2) init_lengths();
  t = lua_absindex(L, t);
  luaL_checkstack(L, 2, "schema measure");
  lua_getfield(L, LUA_REGISTRYINDEX, "mcpclient.json.array");
  m.L = L;
  m.marker = lua_gettop(L);
  m.refused = refused;
  m.max_depth = max_depth;
  m.visits = 0;
  m.max_visits = max_visits;
  len = lua_istable(L, m.marker) ? value_length(&m, t, 1) : 0;
  lua_pop(L, 1);
  return len;
}
