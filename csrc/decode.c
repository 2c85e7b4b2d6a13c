/*
** decode.c: a single-pass JSON decoder that writes Lua values directly, for
** the hot paths (every response body, every catalogue page). jansson builds
** a tree of its own (a hashtable per object, a copy of every string) that
** json.c then copies into Lua; this decoder reads the text once and creates
** only the Lua values, several times faster on a catalogue page.
**
** It must be jansson's equal: the same accept/refuse verdict and the same
** value on every input (fuzz/decode_fuzz.c checks exactly that). So it
** follows jansson's rules with the codec's flags: any value at the top,
** only blanks (space, tab, LF, CR) around it, strict UTF-8 everywhere, no raw
** control characters in strings, \u0000 allowed in strings but not in
** object keys, surrogate escapes only in valid pairs, duplicate keys
** refused, integers exact in 64 bits (overflow refuses, it is not rounded),
** reals through strtod (overflow to infinity refuses, underflow does not),
** containers nested at most MCP_JSON_MAX_DEPTH deep, and one quirk of
** jansson's reader kept (see skip_lost_nul).
**
** It only decides and builds; it never explains. On any refusal the entry
** points hand the same text to the jansson path, whose message (line,
** column, reason) is the one the caller sees. A refusal is rare and cheap to
** repeat; an accepted body costs one pass.
**
** Raises only when Lua runs out of memory or stack: scratch space is a
** userdata on the Lua stack, so such a raise leaks nothing.
*/
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define SMALL_NUMBER 64 /* bytes of a real's text converted from the C stack */
/*
** Sizes a non-empty container starts with. The member count is not known
** until the container ends; starting small but not at 1 saves the first
** rehashes, which dominate on the small objects a catalogue is made of.
*/
#define OBJECT_HINT 4
#define ARRAY_HINT 4

/* Decoding state; marker, order, scratch are stack indexes (order 0: keys unrecorded). */
typedef struct Fast {
  lua_State *L;
  const unsigned char *p, *end;
  int marker, order, scratch;
  size_t containers, max_containers; /* objects and arrays opened so far, and the cap (0: none) */
  size_t scratch_len;
  unsigned char *buf; /* the scratch userdata's bytes */
} Fast;

/* Bytes a string may hold unescaped and unchecked: printable ASCII but '"' and '\\'. */
static unsigned char plain[256];

/*
** Fill plain[] once; every Lua state shares it and the values never change,
** so a second filling (busted reopens the module) is harmless.
*/
static void init_plain(void) {
  int c;
  for (c = 0; c < 256; c++) plain[c] = (unsigned char)(c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
}

/*
** Skip JSON blanks: exactly space, tab, LF and CR, as jansson does.
*/
static void skip_blanks(Fast *f) {
  while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\r' || *f->p == '\t')) f->p++;
}

/*
** A scratch buffer of at least n bytes, anchored at the scratch slot. Grows
** by replacing the userdata, so nothing is ever freed by hand.
*/
static unsigned char *scratch(Fast *f, size_t n) {
  if (n > f->scratch_len) {
    size_t cap = f->scratch_len * 2 > n ? f->scratch_len * 2 : n;
    f->buf = (unsigned char *)lua_newuserdatauv(f->L, cap, 0);
    lua_replace(f->L, f->scratch);
    f->scratch_len = cap;
  }
  return f->buf;
}

/*
** The value of four hex digits at s, or -1.
*/
static long hex4(const unsigned char *s) {
  long v = 0;
  int i;
  for (i = 0; i < 4; i++) {
    int c = s[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

/*
** Write code point cp as UTF-8 at o; returns the bytes written.
*/
static size_t put_utf8(unsigned char *o, unsigned long cp) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/*
** One \u escape at s (pointing after "\u"), with its pair when it is a high
** surrogate. Sets *cp and returns the bytes consumed after "\u", or 0 when
** the escape is refused: bad hex, a lone or reversed surrogate.
*/
static size_t unicode_escape(const unsigned char *s, const unsigned char *end, unsigned long *cp) {
  long v, w;
  if (end - s < 4 || (v = hex4(s)) < 0) return 0;
  if (v >= 0xDC00 && v <= 0xDFFF) return 0;
  if (v < 0xD800 || v > 0xDBFF) {
    *cp = (unsigned long)v;
    return 4;
  }
  if (end - s < 10 || s[4] != '\\' || s[5] != 'u' || (w = hex4(s + 6)) < 0) return 0;
  if (w < 0xDC00 || w > 0xDFFF) return 0;
  *cp = 0x10000 + (((unsigned long)v - 0xD800) << 10) + ((unsigned long)w - 0xDC00);
  return 10;
}

/*
** Decode the escapes of the string body [s, e) into the scratch buffer and
** push it. *nul is set when the result holds a NUL byte. Returns 0 when an
** escape is refused. The output never outgrows the input (an escape of k
** bytes yields at most k bytes of UTF-8), so the buffer is sized once.
*/
static int push_escaped(Fast *f, const unsigned char *s, const unsigned char *e, int *nul) {
  unsigned char *o = scratch(f, (size_t)(e - s)), *w = o;
  while (s < e) {
    unsigned long cp;
    size_t used;
    if (*s != '\\') {
      *w++ = *s++;
      continue;
    }
    switch (s[1]) {
      case '"': *w++ = '"'; break;
      case '\\': *w++ = '\\'; break;
      case '/': *w++ = '/'; break;
      case 'b': *w++ = '\b'; break;
      case 'f': *w++ = '\f'; break;
      case 'n': *w++ = '\n'; break;
      case 'r': *w++ = '\r'; break;
      case 't': *w++ = '\t'; break;
      case 'u':
        used = unicode_escape(s + 2, e, &cp);
        if (used == 0) return 0;
        if (cp == 0) *nul = 1;
        w += put_utf8(w, cp);
        s += used;
        break;
      default: return 0;
    }
    s += 2;
  }
  lua_pushlstring(f->L, (const char *)o, (size_t)(w - o));
  return 1;
}

/*
** Push the string starting at the opening quote f->p; the value escapes
** decoded. Sets *nul when it holds a NUL byte (object keys may not).
** Returns 0 on a refusal: no closing quote, a raw control character,
** invalid UTF-8, a bad escape.
*/
static int push_string(Fast *f, int *nul) {
  const unsigned char *s = ++f->p, *p = s, *end = f->end;
  int escaped = 0;
  for (;;) {
    while (p < end && plain[*p]) p++;
    if (p >= end) return 0;
    if (*p == '"') break;
    if (*p == '\\') {
      escaped = 1;
      if (p + 1 >= end) return 0;
      p += 2; /* the escaped byte is judged when decoding; a '"' here never closes */
    } else if (*p < 0x20) {
      return 0;
    } else {
      int ok;
      uint32_t cp;
      p += mcp_utf8_unit(p, (size_t)(end - p), &ok, &cp);
      if (!ok) return 0;
    }
  }
  f->p = p + 1;
  *nul = 0;
  if (!escaped) {
    lua_pushlstring(f->L, (const char *)s, (size_t)(p - s));
    return 1;
  }
  return push_escaped(f, s, p, nul);
}

/*
** Push the integer written in digits [s, e) (an optional '-' first), exactly
** as strtoll reads it: out of the 64-bit range refuses (returns 0).
*/
static int push_integer(Fast *f, const unsigned char *s, const unsigned char *e) {
  int neg = *s == '-';
  uint64_t v = 0, limit;
  if (neg) s++;
  limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; s < e; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (limit - d) / 10) return 0;
    v = v * 10 + d;
  }
  if (neg) lua_pushinteger(f->L, v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(lua_Integer)v);
  else lua_pushinteger(f->L, (lua_Integer)v);
  return 1;
}

/*
** Push the real written in [s, e) through strtod, as jansson reads it: the
** C library's rounding, '.' swapped for the locale's decimal point, an
** overflow to infinity refused, an underflow kept (0 or subnormal).
*/
static int push_real(Fast *f, const unsigned char *s, const unsigned char *e) {
  char small[SMALL_NUMBER], *text, *dot, *stop;
  size_t n = (size_t)(e - s);
  const char *point = localeconv()->decimal_point;
  double d;
  text = n < sizeof small ? small : (char *)scratch(f, n + 1);
  memcpy(text, s, n);
  text[n] = '\0';
  if (point[0] != '.' && point[0] != '\0' && (dot = strchr(text, '.')) != NULL) *dot = point[0];
  errno = 0;
  d = strtod(text, &stop);
  if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE) return 0;
  lua_pushnumber(f->L, d);
  return 1;
}

/*
** After a number or a literal, jansson has read one byte too far and puts
** it back; a NUL byte put back is lost (its reader takes NUL as "buffer
** empty" and reads on), so one NUL right after such a token vanishes:
** "1\0" and "[true\0]" are accepted, "1\0\0" is not. Mirrored here,
** because the verdict must be jansson's.
*/
static void skip_lost_nul(Fast *f) {
  if (f->p < f->end && *f->p == '\0') f->p++;
}

/*
** Push the number at f->p: JSON's grammar exactly (no leading zeros, no
** bare '.', digits after '.' and after the exponent mark). An integer when
** it has neither fraction nor exponent, else a real.
*/
static int push_number(Fast *f) {
  const unsigned char *s = f->p, *p = s, *end = f->end;
  int real = 0;
  if (p < end && *p == '-') p++;
  if (p >= end) return 0;
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
  else return 0;
  if (p < end && *p == '.') {
    real = 1;
    if (++p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    real = 1;
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  f->p = p;
  skip_lost_nul(f);
  return real ? push_real(f, s, p) : push_integer(f, s, p);
}

/*
** Match the literal word w at f->p. jansson reads a whole run of letters as
** one token, so "truex" is one bad token: a letter right after the word
** refuses too.
*/
static int literal(Fast *f, const char *w, size_t n) {
  const unsigned char *p = f->p;
  if ((size_t)(f->end - p) < n || memcmp(p, w, n) != 0) return 0;
  p += n;
  if (p < f->end && ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')) return 0;
  f->p = p;
  skip_lost_nul(f);
  return 1;
}

static int push_value(Fast *f, int depth);

/*
** Push the object at f->p ('{'), at container level depth. Keys in text
** order go to a list recorded in the order table when keys are recorded
** (only for a non-empty object, like json.c). Returns 0 on a refusal.
*/
static int push_object(Fast *f, int depth) {
  lua_State *L = f->L;
  int obj, keys = 0, nul;
  lua_Integer n = 0;
  f->p++;
  luaL_checkstack(L, 6, "JSON decoder");
  skip_blanks(f);
  if (f->p < f->end && *f->p == '}') {
    f->p++;
    lua_createtable(L, 0, 0);
    return 1;
  }
  lua_createtable(L, 0, OBJECT_HINT);
  obj = lua_gettop(L);
  if (f->order != 0) {
    lua_createtable(L, 4, 0);
    keys = obj + 1;
  }
  for (;;) {
    if (f->p >= f->end || *f->p != '"' || !push_string(f, &nul) || nul) return 0;
    lua_pushvalue(L, -1);
    if (lua_rawget(L, obj) != LUA_TNIL) return 0; /* a duplicate key */
    lua_pop(L, 1);
    if (keys != 0) {
      lua_pushvalue(L, -1);
      lua_rawseti(L, keys, ++n);
    }
    skip_blanks(f);
    if (f->p >= f->end || *f->p != ':') return 0;
    f->p++;
    skip_blanks(f);
    if (!push_value(f, depth + 1)) return 0;
    lua_rawset(L, obj);
    skip_blanks(f);
    if (f->p < f->end && *f->p == ',') {
      f->p++;
      skip_blanks(f);
      continue;
    }
    if (f->p < f->end && *f->p == '}') break;
    return 0;
  }
  f->p++;
  if (keys != 0) {
    lua_pushvalue(L, obj);
    lua_insert(L, keys);
    lua_rawset(L, f->order);
  }
  return 1;
}

/*
** Push the array at f->p ('['), carrying the array marker. Returns 0 on a refusal.
*/
static int push_array(Fast *f, int depth) {
  lua_State *L = f->L;
  int arr, empty;
  lua_Integer n = 0;
  f->p++;
  luaL_checkstack(L, 4, "JSON decoder");
  skip_blanks(f);
  empty = f->p < f->end && *f->p == ']';
  lua_createtable(L, empty ? 0 : ARRAY_HINT, 0);
  arr = lua_gettop(L);
  lua_pushvalue(L, f->marker);
  lua_setmetatable(L, arr);
  if (empty) {
    f->p++;
    return 1;
  }
  for (;;) {
    if (!push_value(f, depth + 1)) return 0;
    lua_rawseti(L, arr, ++n);
    skip_blanks(f);
    if (f->p < f->end && *f->p == ',') {
      f->p++;
      skip_blanks(f);
      continue;
    }
    if (f->p < f->end && *f->p == ']') break;
    return 0;
  }
  f->p++;
  return 1;
}

/*
** Count one more object or array; 0 once past the cap, so a body of
** hundreds of thousands of "{}" is given up before it is all built.
*/
static int open_container(Fast *f) {
  return ++f->containers <= f->max_containers || f->max_containers == 0;
}

/*
** Push the value at f->p, found at container level depth (the top is 1).
** Returns 0 on a refusal, leaving whatever it pushed for the caller to drop.
*/
static int push_value(Fast *f, int depth) {
  int nul;
  if (f->p >= f->end) return 0;
  switch (*f->p) {
    case '{': return depth <= MCP_JSON_MAX_DEPTH && open_container(f) && push_object(f, depth);
    case '[': return depth <= MCP_JSON_MAX_DEPTH && open_container(f) && push_array(f, depth);
    case '"': return push_string(f, &nul);
    case 't':
      if (!literal(f, "true", 4)) return 0;
      lua_pushboolean(f->L, 1);
      return 1;
    case 'f':
      if (!literal(f, "false", 5)) return 0;
      lua_pushboolean(f->L, 0);
      return 1;
    case 'n':
      if (!literal(f, "null", 4)) return 0;
      mcp_json_push_null(f->L);
      return 1;
    default: return push_number(f);
  }
}

/*
** Decode len bytes at s into one pushed value (returns 1), or push nothing
** and return 0 when jansson would refuse the text or it opens more than
** max_containers objects and arrays (0: no cap). marker and order are stack
** indexes of the array marker and the order table (order 0: no key order
** recorded). *containers (if not NULL) gets the count of those opened.
*/
static int fast_decode(lua_State *L, const char *s, size_t len, int marker, int order, size_t max_containers,
                       size_t *containers) {
  int base = lua_gettop(L);
  Fast f;
  f.L = L;
  f.p = (const unsigned char *)s;
  f.end = f.p + len;
  f.marker = marker;
  f.order = order;
  f.scratch_len = 0;
  f.buf = NULL;
  f.containers = 0;
  f.max_containers = max_containers;
  luaL_checkstack(L, 4, "JSON decoder");
  lua_pushnil(L); /* the scratch slot */
  f.scratch = lua_gettop(L);
  skip_blanks(&f);
  if (!push_value(&f, 1)) {
    lua_settop(L, base);
    return 0;
  }
  skip_blanks(&f);
  if (f.p != f.end) {
    lua_settop(L, base);
    return 0;
  }
  lua_replace(L, f.scratch);
  if (containers != NULL) *containers = f.containers;
  return 1;
}

/* ==================================================================== */
/* Entry points                                                         */
/* ==================================================================== */

/* json.c's registry entries: the array marker metatable and the weak key-order table. */
#define ARRAY_KEY "mcpclient.json.array"
#define ORDER_KEY "mcpclient.json.order"

/*
** The C API: decode with the codec's state fetched from the registry. Pushes
** the value and returns 1, or pushes nothing and returns 0 when jansson
** would refuse the text (the caller asks mcp_json_decode for the message).
*/
int mcp_fast_decode(lua_State *L, const char *s, size_t len, int ordered) {
  int base = lua_gettop(L), ok;
  luaL_checkstack(L, 4, "JSON decoder");
  lua_getfield(L, LUA_REGISTRYINDEX, ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, ORDER_KEY);
  if (!lua_istable(L, base + 1)) return luaL_error(L, "the JSON codec is not loaded");
  ok = fast_decode(L, s, len, base + 1, ordered && lua_istable(L, base + 2) ? base + 2 : 0, 0, NULL);
  if (ok) lua_replace(L, base + 1);
  lua_settop(L, base + ok);
  return ok;
}

/*
** The first argument as a string; numbers are not text, so no coercion.
*/
static const char *text_arg(lua_State *L, int arg, size_t *len) {
  if (lua_type(L, arg) != LUA_TSTRING) luaL_typeerror(L, arg, "string");
  return lua_tolstring(L, arg, len);
}

/*
** Hand the call as it stands to the jansson-based function in upvalue u:
** the refusal's wording (and anything rare) is its.
*/
static int delegate(lua_State *L, int u, int nargs) {
  lua_settop(L, nargs);
  lua_pushvalue(L, lua_upvalueindex(u));
  lua_insert(L, 1);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L);
}

/*
** json.decode(text [, ordered]) -> value | nil, message: the fast path.
** Upvalues: array marker, order table, the jansson json.decode.
*/
static int l_fast_decode(lua_State *L) {
  size_t len;
  const char *s = text_arg(L, 1, &len);
  int ordered = lua_toboolean(L, 2);
  lua_settop(L, 2);
  if (fast_decode(L, s, len, lua_upvalueindex(1), ordered ? lua_upvalueindex(2) : 0, 0, NULL)) return 1;
  return delegate(L, 3, 2);
}

/*
** Whether the value at idx is a decoded JSON object: a table without the array marker.
*/
static int is_object(lua_State *L, int idx, int marker) {
  int r;
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  if (!lua_getmetatable(L, idx)) return 1;
  r = !lua_rawequal(L, -1, marker);
  lua_pop(L, 1);
  return r;
}

/*
** Push root[k] (raw) and return its type.
*/
static int member(lua_State *L, int root, const char *k) {
  lua_pushstring(L, k);
  return lua_rawget(L, root);
}

/*
** The JSON-RPC error at e: "error", code (0 unless an integer), message
** ("no message" unless a string).
*/
static int push_rpc_error(lua_State *L, int e) {
  lua_pushliteral(L, "error");
  if (member(L, e, "code") != LUA_TNUMBER || !lua_isinteger(L, -1)) {
    lua_pop(L, 1);
    lua_pushinteger(L, 0);
  }
  if (member(L, e, "message") != LUA_TSTRING) {
    lua_pop(L, 1);
    lua_pushliteral(L, "no message");
  }
  return 3;
}

/*
** Classify the decoded response at root exactly as json.c's rpc_classify
** does on jansson's tree, with the same kinds, details and precedence.
*/
static int classify(lua_State *L, int root, lua_Integer expected, int marker) {
  int id_matches, id_null, e, r;
  if (!is_object(L, root, marker)) {
    lua_pushliteral(L, "malformed");
    lua_pushliteral(L, "the body is not a JSON object");
    return 2;
  }
  if (member(L, root, "method") != LUA_TNIL) {
    lua_pushliteral(L, "other");
    lua_pushliteral(L, "a server request or notification");
    return 2;
  }
  member(L, root, "id");
  id_matches = lua_isinteger(L, -1) && lua_tointeger(L, -1) == expected;
  id_null = mcp_json_is_null(L, -1);
  member(L, root, "error");
  e = lua_gettop(L);
  member(L, root, "result");
  r = lua_gettop(L);
  if (is_object(L, e, marker)) {
    if (!id_matches && !id_null) {
      lua_pushliteral(L, "other");
      lua_pushliteral(L, "a response to another request");
      return 2;
    }
    return push_rpc_error(L, e);
  }
  if (is_object(L, r, marker)) {
    lua_pushstring(L, id_matches ? "result" : "other");
    if (id_matches) lua_pushvalue(L, r);
    else lua_pushliteral(L, "a response to another request");
    return 2;
  }
  lua_pushliteral(L, "malformed");
  lua_pushliteral(L, "the response carries neither a result nor an error");
  return 2;
}

/*
** core.rpc_classify(text, expected_id [, ordered [, max_containers]]): the
** fast path of json.c's classifier (same arguments, kinds, details and
** extra count). A body it cannot decode, a blank one, or one opening more
** than max_containers objects and arrays goes to the jansson classifier,
** which words the refusal. Upvalues: array marker, order table, the jansson
** rpc_classify.
*/
static int l_fast_classify(lua_State *L) {
  size_t len, containers = 0;
  const char *s = text_arg(L, 1, &len);
  lua_Integer expected, max_containers = luaL_optinteger(L, 4, 0);
  int ordered = lua_toboolean(L, 3), n;
  if (!lua_isinteger(L, 2)) luaL_typeerror(L, 2, "integer"); /* ids are integers: no "1" or 1.0 */
  expected = lua_tointeger(L, 2);
  lua_settop(L, 4);
  if (!fast_decode(L, s, len, lua_upvalueindex(1), ordered ? lua_upvalueindex(2) : 0,
                   max_containers > 0 ? (size_t)max_containers : 0, &containers))
    return delegate(L, 3, 4);
  n = classify(L, 5, expected, lua_upvalueindex(1));
  if (max_containers <= 0 || !lua_isstring(L, -n) || strcmp(lua_tostring(L, -n), "result") != 0) return n;
  lua_pushinteger(L, (lua_Integer)containers); /* as json.c returns it: for a bound across responses */
  return n + 1;
}

/*
** Wrap field name of the table at t: the jansson function there becomes
** the third upvalue of f, after the marker and order table it was built on
** (its first two upvalues).
*/
static void wrap(lua_State *L, int t, const char *name, lua_CFunction f) {
  lua_getfield(L, t, name);
  if (lua_getupvalue(L, -1, 1) == NULL || lua_getupvalue(L, -2, 2) == NULL)
    luaL_error(L, "mcpclient.core: %s has no codec state", name);
  lua_rotate(L, -3, 2); /* marker, order, jansson function */
  lua_pushcclosure(L, f, 3);
  lua_setfield(L, t, name);
}

/*
** Replace json.decode and rpc_classify with their single-pass forms, each
** keeping the jansson one for refusals. Runs after mcp_register_json.
*/
void mcp_register_decode(lua_State *L) {
  int module = lua_gettop(L);
  init_plain();
  luaL_checkstack(L, 6, "mcpclient.core");
  wrap(L, module, "rpc_classify", l_fast_classify);
  lua_getfield(L, module, "json");
  wrap(L, lua_gettop(L), "decode", l_fast_decode);
  lua_settop(L, module);
}
