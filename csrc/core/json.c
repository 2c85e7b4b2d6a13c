/*
** json.c: the JSON codec's encoder and what the codec shares, used for the
** wire, the store and the Lua API. The codec is exact: integers stay
** 64-bit integers, floats round-trip, [] stays an array and {} an object,
** duplicate keys and invalid UTF-8 are refused, nesting is bounded. Other C
** files use it through core.h (mcp_json_*), never through the Lua table
** core.json.
**
** What the codec shares lives here: arrays carry a marker metatable so []
** and {} survive a round trip, JSON null is a unique light userdata, and a
** weak table records an object's key order; all three are made once per
** Lua state in the registry, where the decoder (decode.c) and the
** classifier (rpc.c) find them.
**
** Encoding is hand-written over a byte buffer that starts on the C stack and
** spills into userdata owned by the Lua state, so a raise leaks nothing and
** a small encode allocates only its result string. Object keys come out in
** the recorded order when the table has one, else sorted bytewise, so the
** output is deterministic.
*/
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

_Static_assert(sizeof(lua_Number) == sizeof(double), "lua_Number must be double");

/* json.null is the address of this byte: unique, and never a valid table or string. */
static char null_sentinel;
#define NULL_PTR ((void *)&null_sentinel)

/* ==================================================================== */
/* Encoder                                                              */
/* ==================================================================== */

/* Reasons returned by mcp_json_encode (static, so returning them costs nothing). */
#define E_UTF8     "a string is not valid UTF-8"
#define E_NUMBER   "NaN and infinity cannot be encoded"
#define E_DEPTH    "nesting is deeper than 512 levels (or the value has a cycle)"
#define E_MIXED    "a table mixes string and integer keys"
#define E_KEY      "a table has a key that is neither a string nor a positive integer"
#define E_SPARSE   "a table's integer keys are not 1..n (a sparse array)"
#define E_ARRAYKEY "an array-marked table has a key that is not a positive integer"

#define INIT_BUF       1024 /* bytes of output held on the C stack before spilling */
#define INIT_KEYS      32   /* object keys held on the C stack before spilling */
#define STACK_VALUES   256  /* per object, values kept on the Lua stack (rawget beyond) */
#define SORT_INSERTION 12   /* below this many keys, insertion sort beats qsort */

/* One string key of the object being written; vidx is its value's stack slot or 0. */
typedef struct KeyRef {
  const char *s;
  size_t len;
  int vidx;
  int used;
} KeyRef;

typedef struct Enc {
  lua_State *L;
  char *b; /* output so far: n bytes of cap */
  size_t n, cap;
  KeyRef *k; /* a stack of keys shared by the nested objects being written */
  size_t nk, kcap;
  int bslot, kslot;  /* stack slots anchoring the spilled buffers (nil until spilled) */
  int marker, order; /* stack indexes of the array metatable and the order table (0: none) */
  int ascii;         /* MCP_JSON_ASCII */
  int depth;
} Enc;

/*
** Character classes for string escaping: plain bytes are copied in runs.
** C_LEAD starts a multi-byte sequence that must be validated; C_BAD can never
** appear in UTF-8 (continuation bytes out of place, overlong leads, > U+10FFFF).
*/
enum { C_PLAIN, C_ESCAPE, C_SLASH, C_LEAD, C_BAD };
#define CP C_PLAIN
#define CE C_ESCAPE
#define CS C_SLASH
#define CL C_LEAD
#define CB C_BAD
static const unsigned char char_class[256] = {
  CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE, CE,
  CE, CE, CE, CE, CE, CE, CP, CP, CE, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CS, CP, CP, CP, CP,
  CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP,
  CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CE, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP,
  CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CP, CB, CB,
  CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB,
  CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB,
  CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL,
  CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL,
  CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CL, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB, CB,
};
#undef CP
#undef CE
#undef CS
#undef CL
#undef CB

/*
** Make room for m more output bytes. The new buffer is a userdata parked in
** bslot, so it belongs to the Lua state from the moment it exists.
*/
static void enc_grow(Enc *e, size_t m) {
  size_t cap = e->cap;
  char *nb;
  if (m > (size_t)-1 / 4 - e->n) luaL_error(e->L, "JSON text too large");
  while (cap - e->n < m) cap *= 2;
  nb = (char *)lua_newuserdatauv(e->L, cap, 0);
  memcpy(nb, e->b, e->n);
  lua_replace(e->L, e->bslot);
  e->b = nb;
  e->cap = cap;
}

#define RESERVE(e, m) ((void)((e)->cap - (e)->n >= (m) || (enc_grow((e), (m)), 0)))

/* Append bytes that are known not to need escaping. */
static void put_raw(Enc *e, const char *s, size_t len) {
  RESERVE(e, len);
  memcpy(e->b + e->n, s, len);
  e->n += len;
}

#define PUT_LITERAL(e, lit) put_raw((e), "" lit, sizeof(lit) - 1)

/* Append one byte. */
static void put_char(Enc *e, char c) {
  RESERVE(e, 1);
  e->b[e->n++] = c;
}

/* Integers exactly, as "%lld" would, without the cost of printf. */
static void put_integer(Enc *e, lua_Integer v) {
  char tmp[24];
  char *q = tmp + sizeof tmp;
  lua_Unsigned u = v < 0 ? 0u - (lua_Unsigned)v : (lua_Unsigned)v;
  do {
    *--q = (char)('0' + (int)(u % 10));
    u /= 10;
  } while (u != 0);
  if (v < 0) *--q = '-';
  put_raw(e, q, (size_t)(tmp + sizeof tmp - q));
}

/*
** Floats as the shortest of %.15g/%.16g/%.17g that strtod reads back to the
** same double, and always in a form a decoder reads as a float: "1.0", not
** "1". The C locale's '.' is restored if the host changed LC_NUMERIC.
** Writes into out (MCP_JSON_REAL_MAX bytes) and returns the length, or 0
** when d has no JSON form (infinity, NaN). The single-pass decoder writes
** a schema's reals as text with this too, so both forms agree.
*/
size_t mcp_json_format_real(lua_Number d, char *out) {
  int prec, len = 0;
  char point;
  if (!isfinite(d)) return 0;
  for (prec = 15; prec <= 17; prec++) {
    len = snprintf(out, MCP_JSON_REAL_MAX, "%.*g", prec, (double)d);
    if (prec == 17 || strtod(out, NULL) == d) break;
  }
  point = localeconv()->decimal_point[0];
  if (point != '.') {
    char *p = memchr(out, point, (size_t)len);
    if (p != NULL) *p = '.';
  }
  if (memchr(out, '.', (size_t)len) == NULL && memchr(out, 'e', (size_t)len) == NULL) {
    out[len++] = '.';
    out[len++] = '0';
  }
  return (size_t)len;
}

/* A float in the form mcp_json_format_real gives. */
static const char *put_float(Enc *e, lua_Number d) {
  char tmp[MCP_JSON_REAL_MAX];
  size_t len = mcp_json_format_real(d, tmp);
  if (len == 0) return E_NUMBER;
  put_raw(e, tmp, len);
  return NULL;
}

static const char hex_digits[] = "0123456789abcdef";

/*
** Write \uXXXX for u at o (lowercase hex, the form the stored-size measure
** assumes); returns the end. The single-pass decoder's text builder writes
** its escapes with this too.
*/
char *mcp_json_put_u(char *o, unsigned long u) {
  o[0] = '\\';
  o[1] = 'u';
  o[2] = hex_digits[(u >> 12) & 0xF];
  o[3] = hex_digits[(u >> 8) & 0xF];
  o[4] = hex_digits[(u >> 4) & 0xF];
  o[5] = hex_digits[u & 0xF];
  return o + 6;
}

/* Append \uXXXX; space was reserved by the caller. */
static void put_u_escape(Enc *e, unsigned long u) {
  e->n = (size_t)(mcp_json_put_u(e->b + e->n, u) - e->b);
}

/*
** Append s as a JSON string, validating UTF-8 as it goes. Runs of bytes that
** need no escaping are copied with one memcpy; in ASCII mode '/' becomes \/
** and every non-ASCII code point \uXXXX (a surrogate pair above U+FFFF).
** C1 controls and the bidi/invisible formatting characters are \uXXXX in
** both modes: the value stays the same, the bytes stay inert on a terminal.
*/
static const char *put_string(Enc *e, const char *str, size_t len) {
  const unsigned char *p = (const unsigned char *)str, *end = p + len, *run = p;
  RESERVE(e, len + 2);
  e->b[e->n++] = '"';
  while (p < end) {
    unsigned c = *p;
    unsigned long cp = 0;
    size_t m = 1;
    switch (char_class[c]) {
      case C_PLAIN: p++; continue;
      case C_SLASH:
        if (!e->ascii) {
          p++;
          continue;
        }
        break;
      case C_LEAD: {
        int ok;
        uint32_t u;
        m = mcp_utf8_unit(p, (size_t)(end - p), &ok, &u);
        if (!ok) return E_UTF8;
        cp = u;
      }
        /* hidden code points are escaped even in UTF-8 mode: a terminal showing --json obeys them raw */
        if (!e->ascii && !mcp_utf8_hidden((uint32_t)cp)) {
          p += m;
          continue;
        }
        break;
      case C_BAD: return E_UTF8;
      default: break;
    }
    if (p > run) put_raw(e, (const char *)run, (size_t)(p - run));
    RESERVE(e, 12);
    if (char_class[c] == C_LEAD) {
      if (cp >= 0x10000) {
        cp -= 0x10000;
        put_u_escape(e, 0xD800 + (cp >> 10));
        put_u_escape(e, 0xDC00 + (cp & 0x3FF));
      } else {
        put_u_escape(e, cp);
      }
    } else {
      char short_form = 0;
      switch (c) {
        case '"': short_form = '"'; break;
        case '\\': short_form = '\\'; break;
        case '/': short_form = '/'; break;
        case '\b': short_form = 'b'; break;
        case '\f': short_form = 'f'; break;
        case '\n': short_form = 'n'; break;
        case '\r': short_form = 'r'; break;
        case '\t': short_form = 't'; break;
        default: break;
      }
      if (short_form) {
        e->b[e->n++] = '\\';
        e->b[e->n++] = short_form;
      } else {
        put_u_escape(e, c);
      }
    }
    p += m;
    run = p;
  }
  if (p > run) put_raw(e, (const char *)run, (size_t)(p - run));
  put_char(e, '"');
  return NULL;
}

static const char *enc_value(Enc *e, int idx);

/*
** Bytewise order of two keys (a shorter prefix first), the default object order.
*/
static int key_compare(const KeyRef *a, const KeyRef *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int r = memcmp(a->s, b->s, n);
  if (r != 0) return r;
  return a->len < b->len ? -1 : a->len > b->len;
}

/*
** qsort adapter for key_compare.
*/
static int key_compare_q(const void *a, const void *b) {
  return key_compare((const KeyRef *)a, (const KeyRef *)b);
}

/*
** Sort n keys; small objects (the common case) avoid qsort's call overhead.
*/
static void sort_keys(KeyRef *k, size_t n) {
  size_t i, j;
  if (n > SORT_INSERTION) {
    qsort(k, n, sizeof *k, key_compare_q);
    return;
  }
  for (i = 1; i < n; i++) {
    KeyRef x = k[i];
    for (j = i; j > 0 && key_compare(&k[j - 1], &x) > 0; j--) k[j] = k[j - 1];
    k[j] = x;
  }
}

/*
** The slot for one more key; the key stack spills into a userdata parked in kslot.
*/
static KeyRef *push_key(Enc *e) {
  if (e->nk == e->kcap) {
    size_t cap = e->kcap * 2;
    KeyRef *nk;
    if (cap > (size_t)-1 / sizeof(KeyRef)) luaL_error(e->L, "JSON object too large");
    nk = (KeyRef *)lua_newuserdatauv(e->L, cap * sizeof(KeyRef), 0);
    memcpy(nk, e->k, e->nk * sizeof(KeyRef));
    lua_replace(e->L, e->kslot);
    e->k = nk;
    e->kcap = cap;
  }
  return &e->k[e->nk++];
}

/*
** Index of the key equal to (s, len) among the n sorted keys from base, or -1.
*/
static long find_key(Enc *e, size_t base, size_t n, const char *s, size_t len) {
  KeyRef probe;
  size_t lo = 0, hi = n;
  probe.s = s;
  probe.len = len;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = key_compare(&e->k[base + mid], &probe);
    if (r == 0) return (long)(base + mid);
    if (r < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

/*
** Write one "key":value member of the object at t (key i of the key stack).
*/
static const char *put_member(Enc *e, int t, size_t i, int first) {
  lua_State *L = e->L;
  const char *r;
  KeyRef key = e->k[i];
  if (!first) put_char(e, ',');
  r = put_string(e, key.s, key.len);
  if (r != NULL) return r;
  put_char(e, ':');
  if (key.vidx != 0) return enc_value(e, key.vidx);
  lua_pushlstring(L, key.s, key.len);
  lua_rawget(L, t);
  r = enc_value(e, lua_gettop(L));
  lua_pop(L, 1);
  return r;
}

/*
** An object: lua_next has just produced its first (string) key. Collect all
** keys (values stay on the Lua stack for rawget-free writing), sort them, then
** write the recorded order first and any unrecorded keys after it, sorted.
*/
static const char *enc_object(Enc *e, int t) {
  lua_State *L = e->L;
  size_t base = e->nk, n = 0, i;
  int first = 1;
  const char *r = NULL;
  do {
    KeyRef *key;
    if (lua_type(L, -2) != LUA_TSTRING)
      return lua_isinteger(L, -2) && lua_tointeger(L, -2) > 0 ? E_MIXED : E_KEY;
    key = push_key(e);
    key->s = lua_tolstring(L, -2, &key->len);
    key->used = 0;
    if (n++ < STACK_VALUES) {
      luaL_checkstack(L, 4, "JSON encoder");
      lua_insert(L, -2); /* keep the value below the key lua_next needs */
      key->vidx = lua_gettop(L) - 1;
    } else {
      lua_pop(L, 1);
      key->vidx = 0;
    }
  } while (lua_next(L, t));
  sort_keys(e->k + base, n);
  put_char(e, '{');
  if (e->order != 0) {
    lua_pushvalue(L, t);
    lua_rawget(L, e->order);
  } else {
    lua_pushnil(L);
  }
  if (lua_type(L, -1) == LUA_TTABLE) {
    int rec = lua_gettop(L);
    lua_Integer j, len = (lua_Integer)lua_rawlen(L, rec);
    for (j = 1; j <= len && r == NULL; j++) {
      if (lua_rawgeti(L, rec, j) == LUA_TSTRING) {
        size_t kl;
        const char *ks = lua_tolstring(L, -1, &kl);
        long at = find_key(e, base, n, ks, kl);
        if (at >= 0 && !e->k[at].used) {
          e->k[at].used = 1;
          r = put_member(e, t, (size_t)at, first);
          first = 0;
        }
      }
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  for (i = 0; i < n && r == NULL; i++) {
    if (e->k[base + i].used) continue;
    r = put_member(e, t, base + i, first);
    first = 0;
  }
  e->nk = base;
  if (r == NULL) put_char(e, '}');
  return r;
}

/*
** Write t[1..n] as a JSON array.
*/
static const char *put_elements(Enc *e, int t, lua_Integer n) {
  lua_State *L = e->L;
  lua_Integer i;
  put_char(e, '[');
  for (i = 1; i <= n; i++) {
    const char *r;
    if (i > 1) put_char(e, ',');
    lua_rawgeti(L, t, i);
    r = enc_value(e, lua_gettop(L));
    lua_pop(L, 1);
    if (r != NULL) return r;
  }
  put_char(e, ']');
  return NULL;
}

/*
** An unmarked table whose first key (from lua_next) is a positive integer: it
** is an array only if its keys are exactly 1..n.
*/
static const char *enc_sequence(Enc *e, int t) {
  lua_State *L = e->L;
  lua_Integer max = 0, count = 0;
  do {
    lua_Integer i;
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1)) return lua_type(L, -1) == LUA_TSTRING ? E_MIXED : E_KEY;
    i = lua_tointeger(L, -1);
    if (i <= 0) return E_KEY;
    if (i > max) max = i;
    count++;
  } while (lua_next(L, t));
  if (max != count) return E_SPARSE;
  return put_elements(e, t, max);
}

/*
** A table with the array marker: t[1..#t], with nil holes written as null.
*/
static const char *enc_marked(Enc *e, int t) {
  lua_State *L = e->L;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0) return E_ARRAYKEY;
  }
  return put_elements(e, t, (lua_Integer)lua_rawlen(L, t));
}

/*
** Dispatch a table by marker and key kinds; the depth bound also stops cycles.
*/
static const char *enc_table(Enc *e, int t) {
  lua_State *L = e->L;
  int top = lua_gettop(L), marked = 0;
  const char *r;
  if (++e->depth > MCP_JSON_MAX_DEPTH) return E_DEPTH;
  luaL_checkstack(L, 8, "JSON encoder");
  if (lua_getmetatable(L, t)) {
    marked = lua_rawequal(L, -1, e->marker);
    lua_pop(L, 1);
    /* a lazy object not read yet: its text is what this encoder writes for it, unless escaping for ASCII */
    if (!marked && !e->ascii && mcp_json_lazy_text(L, t)) {
      size_t len;
      const char *s = lua_tolstring(L, -1, &len);
      put_raw(e, s, len);
      lua_settop(L, top);
      e->depth--;
      return NULL;
    }
    if (!marked) mcp_json_lazy_settle(L, t);
  }
  if (marked) {
    r = enc_marked(e, t);
  } else {
    lua_pushnil(L);
    if (!lua_next(L, t)) {
      PUT_LITERAL(e, "{}");
      r = NULL;
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      r = enc_object(e, t);
    } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) > 0) {
      r = enc_sequence(e, t);
    } else {
      r = E_KEY;
    }
  }
  lua_settop(L, top);
  e->depth--;
  return r;
}

/*
** Append the value at stack index idx (absolute).
*/
static const char *enc_value(Enc *e, int idx) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: PUT_LITERAL(e, "null"); return NULL;
    case LUA_TBOOLEAN:
      if (lua_toboolean(L, idx)) PUT_LITERAL(e, "true");
      else PUT_LITERAL(e, "false");
      return NULL;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        put_integer(e, lua_tointeger(L, idx));
        return NULL;
      }
      return put_float(e, lua_tonumber(L, idx));
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, idx, &len);
      return put_string(e, s, len);
    }
    case LUA_TTABLE: return enc_table(e, idx);
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL_PTR) {
        PUT_LITERAL(e, "null");
        return NULL;
      }
      return "a light userdata cannot be encoded";
    case LUA_TFUNCTION: return "a function cannot be encoded";
    case LUA_TTHREAD: return "a thread cannot be encoded";
    default: return "a userdata cannot be encoded";
  }
}

/*
** A JSON-RPC request around the encoded params: its id and its method. A
** request is the text every call makes, so it is written in one buffer
** rather than joined from pieces in Lua (two more strings, and the id
** formatted by printf).
*/
typedef struct Frame {
  lua_Integer id;
  const char *method;
  size_t method_len;
} Frame;

/*
** Write the value at idx, framed as a request's params when frame is not NULL.
*/
static const char *enc_framed(Enc *e, int idx, const Frame *frame) {
  const char *r;
  if (frame == NULL) return enc_value(e, idx);
  PUT_LITERAL(e, "{\"jsonrpc\":\"2.0\",\"id\":");
  put_integer(e, frame->id);
  PUT_LITERAL(e, ",\"method\":");
  if ((r = put_string(e, frame->method, frame->method_len)) != NULL) return r;
  PUT_LITERAL(e, ",\"params\":");
  if ((r = enc_value(e, idx)) != NULL) return r;
  put_char(e, '}');
  return NULL;
}

/*
** Encode the value at idx (framed as a request's params when frame is not
** NULL), with the array marker and order table at the given stack indexes
** (order 0: none). Pushes the text and returns NULL, or returns the reason
** with the stack as it was.
*/
static const char *encode_with(lua_State *L, int idx, int flags, int marker, int order, const Frame *frame) {
  char first_buf[INIT_BUF];
  KeyRef first_keys[INIT_KEYS];
  Enc e;
  int base = lua_gettop(L);
  const char *r;
  luaL_checkstack(L, 8, "JSON encoder");
  lua_pushnil(L);
  lua_pushnil(L);
  e.L = L;
  e.b = first_buf;
  e.n = 0;
  e.cap = sizeof first_buf;
  e.k = first_keys;
  e.nk = 0;
  e.kcap = INIT_KEYS;
  e.bslot = base + 1;
  e.kslot = base + 2;
  e.marker = marker;
  e.order = order;
  e.ascii = (flags & MCP_JSON_ASCII) != 0;
  e.depth = 0;
  r = enc_framed(&e, idx, frame);
  if (r != NULL) {
    lua_settop(L, base);
    return r;
  }
  lua_pushlstring(L, e.b, e.n);
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return NULL;
}

/*
** The C API: like encode_with, fetching the marker and order table from the registry.
*/
const char *mcp_json_encode(lua_State *L, int idx, int flags) {
  int top, order;
  const char *r;
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 4, "JSON encoder");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  top = lua_gettop(L);
  order = lua_istable(L, top) ? top : 0;
  r = encode_with(L, idx, flags, top - 1, order, NULL);
  if (r != NULL) {
    lua_pop(L, 2);
    return r;
  }
  lua_replace(L, top - 1);
  lua_pop(L, 1);
  return NULL;
}

/*
** json.encode(value) -> text; raises on unencodable input.
*/
static int l_encode(lua_State *L) {
  const char *r;
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  r = encode_with(L, 1, 0, lua_upvalueindex(1), lua_upvalueindex(2), NULL);
  if (r != NULL) return luaL_error(L, "cannot encode JSON: %s", r);
  return 1;
}

/* try_encode's and rpc_request's results: the text encode_with pushed, or nil and its reason. */
static int encoded_or_reason(lua_State *L, const char *reason) {
  if (reason == NULL) return 1;
  lua_pushnil(L);
  lua_pushstring(L, reason);
  return 2;
}

/*
** json.try_encode(value) -> text | nil, reason.
*/
static int l_try_encode(lua_State *L) {
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  return encoded_or_reason(L, encode_with(L, 1, 0, lua_upvalueindex(1), lua_upvalueindex(2), NULL));
}

/*
** core.rpc_request(id, method, params) -> the text of the JSON-RPC request
** {"jsonrpc":"2.0","id":id,"method":method,"params":params} | nil, reason
** when params (or method) cannot be encoded. id is an integer.
*/
static int l_rpc_request(lua_State *L) {
  Frame frame;
  if (!lua_isinteger(L, 1)) luaL_typeerror(L, 1, "integer");
  frame.id = lua_tointeger(L, 1);
  frame.method = luaL_checklstring(L, 2, &frame.method_len);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  return encoded_or_reason(L, encode_with(L, 3, 0, lua_upvalueindex(1), lua_upvalueindex(2), &frame));
}

/* ==================================================================== */
/* Markers, key order, null                                             */
/* ==================================================================== */

/*
** json.array([t]) -> t, marked as an array (a new empty table if none given).
*/
static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, 1);
  return 1;
}

/*
** Whether the value at idx is a table carrying the marker at marker_idx.
*/
static int has_marker(lua_State *L, int idx, int marker_idx) {
  int r;
  if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return 0;
  r = lua_rawequal(L, -1, marker_idx);
  lua_pop(L, 1);
  return r;
}

/*
** json.is_array(v) -> boolean.
*/
static int l_is_array(lua_State *L) {
  lua_pushboolean(L, has_marker(L, 1, lua_upvalueindex(1)));
  return 1;
}

/*
** json.is_object(v) -> boolean: a table the encoder writes as a JSON object
** (not array-marked, every key a string; {} is the empty object).
*/
static int l_is_object(lua_State *L) {
  int ok = lua_type(L, 1) == LUA_TTABLE && !has_marker(L, 1, lua_upvalueindex(1));
  if (ok && !mcp_json_lazy_text(L, 1)) { /* a lazy table holds an object's text */
    lua_settop(L, 1);
    lua_pushnil(L);
    while (ok && lua_next(L, 1) != 0) {
      ok = lua_type(L, -2) == LUA_TSTRING;
      lua_pop(L, 1);
    }
  }
  lua_pushboolean(L, ok);
  return 1;
}

/*
** json.key_order(t) -> the recorded key list, or nil.
*/
static int l_key_order(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  mcp_json_lazy_settle(L, 1); /* a lazy object records its order when it is built */
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

/*
** json.set_key_order(t, keys|nil) -> t; keys must be a list of strings (nil forgets the record).
*/
static int l_set_key_order(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  mcp_json_lazy_settle(L, 1); /* built now, so building it later cannot replace this record */
  if (!lua_isnil(L, 2)) {
    lua_Integer i, n;
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (lua_Integer)lua_rawlen(L, 2);
    for (i = 1; i <= n; i++) {
      if (lua_rawgeti(L, 2, i) != LUA_TSTRING)
        luaL_argerror(L, 2, lua_pushfstring(L, "key %I is not a string", (LUAI_UACINT)i));
      lua_pop(L, 1);
    }
  }
  lua_settop(L, 2);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_rawset(L, lua_upvalueindex(1));
  lua_settop(L, 1);
  return 1;
}

/*
** C API of json.key_order: push the key list recorded for the table at t, or nil; returns its type.
*/
int mcp_json_push_key_order(lua_State *L, int t) {
  t = lua_absindex(L, t);
  luaL_checkstack(L, 2, "JSON key order");
  if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_pushnil(L);
    return LUA_TNIL;
  }
  lua_pushvalue(L, t);
  lua_rawget(L, -2);
  lua_remove(L, -2);
  return lua_type(L, -1);
}

/*
** C API of json.set_key_order (no validation: C callers pass a list of strings).
*/
void mcp_json_set_key_order(lua_State *L, int t, int k) {
  t = lua_absindex(L, t);
  k = lua_absindex(L, k);
  luaL_checkstack(L, 3, "JSON key order");
  if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY) != LUA_TTABLE) {
    lua_pop(L, 1); /* the module was never opened in this state: nothing to record into */
    return;
  }
  lua_pushvalue(L, t);
  lua_pushvalue(L, k);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/*
** Push json.null, the sentinel JSON null decodes to.
*/
void mcp_json_push_null(lua_State *L) {
  lua_pushlightuserdata(L, NULL_PTR);
}

/*
** Whether the value at idx is json.null.
*/
int mcp_json_is_null(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TLIGHTUSERDATA && lua_touserdata(L, idx) == NULL_PTR;
}

/*
** Whether the value at idx is a table carrying the array marker (C API of json.is_array).
*/
int mcp_json_is_array(lua_State *L, int idx) {
  int r;
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 2, "JSON array marker");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  r = has_marker(L, idx, lua_gettop(L));
  lua_pop(L, 1);
  return r;
}

/*
** Give the table at idx the array marker (C API of json.array).
*/
void mcp_json_mark_array(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 1, "JSON array marker");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_setmetatable(L, idx);
}

/* ==================================================================== */
/* Objects kept as text                                                 */
/* ==================================================================== */

/*
** An object may stand for its JSON text until it is first read (lazy.c
** makes them: a listing's schemas): an empty table with the metatable
** registered under MCP_JSON_LAZY_META, its text in the weak table under
** MCP_JSON_LAZY_PENDING. Raw access cannot see its members, so the codec's
** readers (and the normaliser's) take its text, or have it built first:
** the metatable's `settle` field is the function that builds it in place
** (lazy.c's). So the codec knows such an object without decoding one.
*/

/*
** 1 when the value at idx is an object kept as text, not read yet.
*/
static int is_lazy(lua_State *L, int idx) {
  int r;
  if (lua_type(L, idx) != LUA_TTABLE || !lua_getmetatable(L, idx)) return 0;
  luaL_getmetatable(L, MCP_JSON_LAZY_META);
  r = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return r;
}

/*
** C API: when the value at idx is an object kept as text, push its JSON
** text and return 1; else push nothing and return 0.
*/
int mcp_json_lazy_text(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (!is_lazy(L, idx)) return 0;
  luaL_checkstack(L, 3, "lazy JSON");
  mcp_push_weak_registry_table(L, MCP_JSON_LAZY_PENDING);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) != LUA_TSTRING) {
    lua_pop(L, 2);
    return 0;
  }
  lua_remove(L, -2);
  return 1;
}

/*
** C API: build the object kept as text at idx now, if it is one (through
** its metatable's `settle`); 1 when it did. Raises only when memory runs
** out.
*/
int mcp_json_lazy_settle(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (!mcp_json_lazy_text(L, idx)) return 0;
  lua_pop(L, 1);
  if (luaL_getmetafield(L, idx, "settle") != LUA_TFUNCTION)
    return luaL_error(L, "an object kept as JSON text has no builder");
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
  return 1;
}

/*
** C API: replace the JSON text at idx (an object's text, as json.encode
** writes it) with an object kept as that text.
*/
void mcp_json_lazy_wrap(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 4, "lazy JSON");
  lua_createtable(L, 0, 0);
  luaL_getmetatable(L, MCP_JSON_LAZY_META);
  lua_setmetatable(L, -2);
  mcp_push_weak_registry_table(L, MCP_JSON_LAZY_PENDING);
  lua_pushvalue(L, -2);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  lua_replace(L, idx);
}

/* ==================================================================== */
/* Registration                                                         */
/* ==================================================================== */

/*
** Push a closure of f over the values at the given stack indexes.
*/
static void push_closure(lua_State *L, lua_CFunction f, int a, int b) {
  int n = 0;
  if (a != 0) lua_pushvalue(L, a), n++;
  if (b != 0) lua_pushvalue(L, b), n++;
  lua_pushcclosure(L, f, n);
}

/*
** Push the table kept in the registry under key, weak in its keys (a side
** table about values others own: key orders, pending lazy texts), making it
** on first use. Reused when busted opens the module again.
*/
void mcp_push_weak_registry_table(lua_State *L, const char *key) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, key);
}

/*
** Registry state is created once per Lua state and reused when busted reopens
** the module, so tables decoded under one opening stay arrays under the next.
*/
void mcp_register_json(lua_State *L) {
  int module = lua_gettop(L), marker, order;
  luaL_checkstack(L, 8, "mcpclient.core");
  luaL_newmetatable(L, MCP_JSON_ARRAY_KEY); /* an existing marker is reused: 0 is fine */
  marker = lua_gettop(L);
  mcp_push_weak_registry_table(L, MCP_JSON_ORDER_KEY);
  order = lua_gettop(L);

  lua_createtable(L, 0, 8);
  push_closure(L, l_encode, marker, order);
  lua_setfield(L, -2, "encode");
  push_closure(L, l_try_encode, marker, order);
  lua_setfield(L, -2, "try_encode");
  lua_pushlightuserdata(L, NULL_PTR);
  lua_setfield(L, -2, "null");
  lua_pushlightuserdata(L, NULL_PTR);
  lua_setfield(L, LUA_REGISTRYINDEX, MCP_JSON_NULL_KEY);
  push_closure(L, l_array, marker, 0);
  lua_setfield(L, -2, "array");
  push_closure(L, l_is_array, marker, 0);
  lua_setfield(L, -2, "is_array");
  push_closure(L, l_is_object, marker, 0);
  lua_setfield(L, -2, "is_object");
  push_closure(L, l_key_order, order, 0);
  lua_setfield(L, -2, "key_order");
  push_closure(L, l_set_key_order, order, 0);
  lua_setfield(L, -2, "set_key_order");
  lua_setfield(L, module, "json");

  push_closure(L, l_rpc_request, marker, order);
  lua_setfield(L, module, "rpc_request");
  lua_settop(L, module);
}
