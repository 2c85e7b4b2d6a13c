/*
** decode.c: the one JSON decoder, a single pass that writes Lua values
** directly, for the hot paths (every response body, every catalogue page)
** and every other caller: core.json.decode and mcp_json_decode. It reads the
** text once and creates only the Lua values (jansson builds a tree of its
** own, a hashtable per object and a copy of every string, that would then
** be copied into Lua).
**
** It keeps jansson's verdict and value on every input (fuzz/decode_fuzz.c
** holds it to jansson, the oracle in json_reference.c). So it follows
** jansson's rules with the codec's flags: any value at the top, only
** blanks (space, tab, LF, CR) around it, strict UTF-8 everywhere, no raw
** control characters in strings, \u0000 allowed in strings but not in
** object keys, surrogate escapes only in valid pairs, duplicate keys
** refused, integers exact in 64 bits (overflow refuses, it is not rounded),
** reals through strtod (overflow to infinity refuses, underflow does not),
** containers nested at most MCP_JSON_MAX_DEPTH deep, and one quirk of
** jansson's reader kept (mcp_skip_lost_nul in decode.h).
**
** It words its own refusals: where one is found, what and where are
** recorded (mcp_read_refuse) and the reading returns 0 upwards; the entry
** point then writes "invalid JSON: <what> at line L column C" (C counts
** bytes from the line's start, from 1), never quoting the text itself.
**
** Values at one path of the text may be handed to a taker instead of
** built (mcp_read_path): that is how a listing's schemas become text
** (listing.c) without this file knowing what a listing is.
**
** Raises only when Lua runs out of memory or stack: scratch space is a
** userdata on the Lua stack, so such a raise leaks nothing.
*/
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"

#define SMALL_NUMBER    64 /* bytes of a real's text converted from the C stack */
/*
** Sizes a non-empty container starts with. The member count is not known
** until the container ends; starting small but not at 1 saves the first
** rehashes, which dominate on the small objects a catalogue is made of.
** An object in an array starts at the size of the object before it (a
** listing's entries are alike), up to OBJECT_HINT_MAX members.
*/
#define OBJECT_HINT     4
#define OBJECT_HINT_MAX 64
#define ARRAY_HINT      4

/* A rare path kept out of the hot function that calls it, so the hot one stays small. */
#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))
#else
#define COLD
#endif

/* Bytes a string may hold unescaped and unchecked: printable ASCII but '"' and '\\'. */
const unsigned char mcp_read_plain[256] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The two refusals the entry points tell apart by address (decode.h). */
const char mcp_read_too_deep[] = "nesting deeper than 512 levels",
           mcp_read_containers[] = "too many objects and arrays";

/* ==================================================================== */
/* Refusals                                                             */
/* ==================================================================== */

/*
** Record a refusal: what (a static phrase) and where (the byte it was found
** at). The first one found is kept (the callers above it only pass the 0
** on); one found at the end of the text is the text ending early. Returns
** 0, so a scanner can `return MCP_REFUSE(...)`.
*/
COLD int mcp_read_refuse(mcp_reader *f, const unsigned char *at, const char *why) {
  if (f->why != NULL) return 0;
  f->why =
    at >= f->end && why != mcp_read_too_deep && why != mcp_read_containers ? "unexpected end of text" : why;
  f->at = at;
  return 0;
}

/*
** Push the recorded refusal as the codec's message: "invalid JSON: what
** at line L column C", or without a place for nesting too deep (a bound,
** not a place in the text).
*/
COLD void mcp_read_push_refusal(const mcp_reader *f) {
  const unsigned char *p, *line = f->start, *at = f->at != NULL ? f->at : f->p;
  lua_Integer n = 1;
  if (f->why == mcp_read_too_deep) {
    lua_pushfstring(f->L, "invalid JSON: %s", mcp_read_too_deep);
    return;
  }
  if (at > f->end) at = f->end;
  for (p = f->start; p < at; p++) {
    if (*p == '\n') {
      n++;
      line = p + 1;
    }
  }
  lua_pushfstring(f->L, "invalid JSON: %s at line %I column %I", f->why != NULL ? f->why : "unreadable text",
                  n, (lua_Integer)(at - line) + 1);
}

/* ==================================================================== */
/* Strings and numbers                                                  */
/* ==================================================================== */

/*
** A scratch buffer of at least n bytes, anchored at the scratch slot. Grows
** by replacing the userdata, so nothing is ever freed by hand.
*/
static unsigned char *scratch(mcp_reader *f, size_t n) {
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
size_t mcp_put_utf8(unsigned char *o, unsigned long cp) {
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
size_t mcp_read_unicode_escape(const unsigned char *s, const unsigned char *end, unsigned long *cp) {
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
static int push_escaped(mcp_reader *f, const unsigned char *s, const unsigned char *e, int *nul) {
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
        used = mcp_read_unicode_escape(s + 2, e, &cp);
        if (used == 0) return MCP_REFUSE(f, s, "invalid \\u escape in a string");
        if (cp == 0) *nul = 1;
        w += mcp_put_utf8(w, cp);
        s += used;
        break;
      default: return MCP_REFUSE(f, s, "invalid escape in a string");
    }
    s += 2;
  }
  lua_pushlstring(f->L, (const char *)o, (size_t)(w - o));
  return 1;
}

/*
** Read the string starting at the opening quote f->p without decoding it:
** its body is [*s, *e), f->p moves past the closing quote. *escaped is set
** when the body holds a backslash, *wide when it holds a byte past 0x7F.
** Returns 0 on a refusal: no closing quote, a raw control character,
** invalid UTF-8 (escapes are judged when they are decoded).
*/
int mcp_read_string(mcp_reader *f, const unsigned char **s, const unsigned char **e, int *escaped,
                    int *wide) {
  const unsigned char *p = f->p + 1, *end = f->end;
  *s = p;
  *escaped = *wide = 0;
  for (;;) {
    p = mcp_skip_plain(p, end);
    if (p >= end) return MCP_REFUSE(f, p, "unterminated string");
    if (*p == '"') break;
    if (*p == '\\') {
      *escaped = 1;
      if (p + 1 >= end) return MCP_REFUSE(f, end, "unterminated string");
      p += 2; /* the escaped byte is judged when decoding; a '"' here never closes */
    } else if (*p < 0x20) {
      return MCP_REFUSE(f, p, "control character in a string");
    } else {
      int ok;
      uint32_t cp;
      size_t n;
      *wide = 1;
      n = mcp_utf8_unit(p, (size_t)(end - p), &ok, &cp);
      if (!ok) return MCP_REFUSE(f, p, "invalid UTF-8 in a string");
      p += n;
    }
  }
  *e = p;
  f->p = p + 1;
  return 1;
}

/*
** Push the string starting at the opening quote f->p; the value escapes
** decoded. Sets *nul when it holds a NUL byte (object keys may not).
** Returns 0 on a refusal: no closing quote, a raw control character,
** invalid UTF-8, a bad escape.
*/
static int push_string(mcp_reader *f, int *nul) {
  const unsigned char *s, *e;
  int escaped, wide;
  s = f->p + 1;
  e = mcp_skip_plain(s, f->end);
  if (e < f->end && *e == '"') { /* printable ASCII only, the common case: no second look */
    f->p = e + 1;
    *nul = 0;
    lua_pushlstring(f->L, (const char *)s, (size_t)(e - s));
    return 1;
  }
  if (!mcp_read_string(f, &s, &e, &escaped, &wide)) return 0;
  *nul = 0;
  if (!escaped) {
    lua_pushlstring(f->L, (const char *)s, (size_t)(e - s));
    return 1;
  }
  return push_escaped(f, s, e, nul);
}

/*
** Read the real written in [s, e) into *out through strtod, as jansson
** reads it: the C library's rounding, '.' swapped for the locale's decimal
** point, an overflow to infinity refused, an underflow kept (0 or subnormal).
*/
int mcp_read_real(mcp_reader *f, const unsigned char *s, const unsigned char *e, double *out) {
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
  if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE) return MCP_REFUSE(f, s, "real number overflow");
  *out = d;
  return 1;
}

/*
** Push the number at f->p: an integer when it has neither fraction nor
** exponent, else a real.
*/
static int push_number(mcp_reader *f) {
  const unsigned char *s, *e;
  int real;
  lua_Integer i;
  double d;
  if (!mcp_read_number(f, &s, &e, &real)) return 0;
  if (real) {
    if (!mcp_read_real(f, s, e, &d)) return 0;
    lua_pushnumber(f->L, d);
  } else {
    if (!mcp_read_integer(f, s, e, &i)) return 0;
    lua_pushinteger(f->L, i);
  }
  return 1;
}

/* ==================================================================== */
/* Objects and arrays                                                   */
/* ==================================================================== */

/*
** The role of the member `key` of an object whose own role is `role`: on
** the path (mcp_read_path) a step further when the key is the next step's
** name; past the last step, -(1 + i) for the i-th member taken; else 0.
*/
int mcp_decode_member_role(const mcp_reader *f, int role, const char *key, size_t len) {
  const mcp_read_path *path = f->path;
  const char *const *names;
  int i, n;
  if (role <= 0) return 0;
  if (len == 0) return 0; /* no step or member taken is named "" */
  if (role <= path->nsteps) {
    const char *step = path->steps[role - 1];
    return step != NULL && step[0] == key[0] && strlen(step) == len && memcmp(step, key, len) == 0 ? role + 1
                                                                                                   : 0;
  }
  names = path->ends;
  n = path->nends;
  for (i = 0; i < n; i++) /* the first byte first: most members of a taken object are not taken */
    if (names[i][0] == key[0] && strlen(names[i]) == len && memcmp(names[i], key, len) == 0) return -(1 + i);
  return 0;
}

/*
** The role of an element of an array whose own role is `role`: a step
** further when the path's next step is "each element".
*/
int mcp_decode_element_role(const mcp_reader *f, int role) {
  return role > 0 && role <= f->path->nsteps && f->path->steps[role - 1] == NULL ? role + 1 : 0;
}

/*
** Is the key at the stack top (its bytes in *key) one the object at obj
** already has? Among its first MCP_SEEN_KEYS keys by comparison, past them
** by a lookup in the object (which holds the first ones too).
*/
int mcp_read_repeated(lua_State *L, const mcp_seen_key *seen, int n_seen, int obj, const mcp_seen_key *key) {
  int i, found;
  if (n_seen >= MCP_SEEN_KEYS) {
    lua_pushvalue(L, -1);
    found = lua_rawget(L, obj) != LUA_TNIL;
    lua_pop(L, 1);
    return found;
  }
  for (i = 0; i < n_seen; i++)
    if (seen[i].len == key->len && (seen[i].s == key->s || memcmp(seen[i].s, key->s, key->len) == 0))
      return 1;
  return 0;
}

/*
** Push the object key starting at the opening quote f->p (0 on a refusal, as
** push_string; a key holding a NUL byte is refused too) and set *key to the
** pushed string's bytes. A plain short key seen before in this text is
** pushed from the cache; one not seen is pushed and remembered in one of
** the two slots its hash names (replacing what the second held when
** neither is free). The cache (a table) is made only from the text's
** MCP_READ_KEY_CACHE_FROM-th key on: a small answer's few keys are pushed
** as they are, with no table made for them.
*/
int mcp_read_key(mcp_reader *f, mcp_seen_key *key) {
  const unsigned char *s, *e, *token = f->p;
  int escaped, wide, nul = 0;
  size_t n, i;
  uint32_t h;
  unsigned slot;
  mcp_cached_key *c;
  if (f->p >= f->end || *f->p != '"') return MCP_REFUSE(f, f->p, "object key expected");
  if (!mcp_read_string(f, &s, &e, &escaped, &wide)) return 0;
  n = (size_t)(e - s);
  if (escaped) {
    if (!push_escaped(f, s, e, &nul)) return 0;
    if (nul) return MCP_REFUSE(f, token, "\\u0000 in an object key");
    key->s = lua_tolstring(f->L, -1, &key->len);
    return 1;
  }
  key->len = n;
  if (n == 0 || n > MCP_READ_KEY_CACHE_LEN || (f->cached == 0 && f->uncached++ < MCP_READ_KEY_CACHE_FROM)) {
    key->s = lua_pushlstring(f->L, (const char *)s, n);
    return 1;
  }
  for (i = 0, h = 2166136261u; i < n; i++) h = (h ^ s[i]) * 16777619u; /* FNV-1a */
  for (i = 0; i < 2; i++, h >>= 8) { /* two places a key may be in: few keys ever share both */
    slot = h & (MCP_READ_KEY_CACHE - 1);
    c = &f->key[slot];
    if ((f->cached >> slot & 1u) && c->len == n && memcmp(c->s, s, n) == 0) {
      lua_rawgeti(f->L, f->keys, (lua_Integer)slot + 1);
      key->s = c->s;
      return 1;
    }
    if (!(f->cached >> slot & 1u)) break; /* a free place: the key was never in the second */
  }
  /* remembered in the free place, else in the second one */
  if (f->cached == 0) {
    lua_createtable(f->L, MCP_READ_KEY_CACHE, 0);
    lua_replace(f->L, f->keys);
  }
  key->s = lua_pushlstring(f->L, (const char *)s, n);
  lua_pushvalue(f->L, -1);
  lua_rawseti(f->L, f->keys, (lua_Integer)slot + 1);
  c->s = key->s;
  c->len = n;
  f->cached |= (uint64_t)1 << slot;
  return 1;
}

/*
** Push the object at f->p ('{'), at container level depth, with the role
** `role`. Keys in text order go to a list recorded in the order table when
** keys are recorded (only for a non-empty object, like json.c). Returns 0
** on a refusal.
*/
static int push_object(mcp_reader *f, int depth, int role) {
  lua_State *L = f->L;
  mcp_seen_key seen[MCP_SEEN_KEYS], key;
  int obj, keys = 0, n_seen = 0, sep;
  lua_Integer n = 0;
  f->p++;
  luaL_checkstack(L, 6, "JSON decoder");
  mcp_skip_blanks(f);
  if (f->p < f->end && *f->p == '}') {
    f->p++;
    lua_createtable(L, 0, 0);
    f->object_hint = OBJECT_HINT;
    f->object_size = 0;
    return 1;
  }
  lua_createtable(L, 0, f->object_hint);
  f->object_hint = OBJECT_HINT; /* the objects inside it start small */
  obj = lua_gettop(L);
  if (f->order != 0) {
    lua_createtable(L, 4, 0);
    keys = obj + 1;
  }
  for (;;) {
    const unsigned char *token = f->p;
    if (!mcp_read_key(f, &key)) return 0;
    if (mcp_read_repeated(L, seen, n_seen, obj, &key)) return MCP_REFUSE(f, token, "duplicate object key");
    if (n_seen < MCP_SEEN_KEYS) seen[n_seen] = key;
    n_seen++;
    if (keys != 0) {
      lua_pushvalue(L, -1);
      lua_rawseti(L, keys, ++n);
    }
    mcp_skip_blanks(f);
    if (f->p >= f->end || *f->p != ':') return MCP_REFUSE(f, f->p, "':' expected");
    f->p++;
    mcp_skip_blanks(f);
    if (!mcp_decode_value(f, depth + 1, role != 0 ? mcp_decode_member_role(f, role, key.s, key.len) : 0))
      return 0;
    lua_rawset(L, obj);
    if ((sep = mcp_read_separator(f, '}')) == MCP_SEP_BAD) return 0;
    if (sep == MCP_SEP_END) break;
  }
  if (keys != 0) {
    lua_pushvalue(L, obj);
    lua_insert(L, keys);
    lua_rawset(L, f->order);
  }
  f->object_size = n_seen;
  return 1;
}

/*
** Push the array at f->p ('['), carrying the array marker; its elements
** take the role mcp_decode_element_role gives them. An object element
** starts at the size of the object element before it. Returns 0 on a
** refusal.
*/
static int push_array(mcp_reader *f, int depth, int role) {
  lua_State *L = f->L;
  int arr, empty, sep, hint = OBJECT_HINT, element = role != 0 ? mcp_decode_element_role(f, role) : 0;
  lua_Integer n = 0;
  f->p++;
  luaL_checkstack(L, 4, "JSON decoder");
  mcp_skip_blanks(f);
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
    f->object_hint = hint;
    f->object_size = 0;
    if (!mcp_decode_value(f, depth + 1, element)) return 0;
    if (f->object_size > 0) hint = f->object_size < OBJECT_HINT_MAX ? f->object_size : OBJECT_HINT_MAX;
    lua_rawseti(L, arr, ++n);
    if ((sep = mcp_read_separator(f, ']')) == MCP_SEP_BAD) return 0;
    if (sep == MCP_SEP_END) {
      f->object_hint = OBJECT_HINT;
      return 1;
    }
  }
}

/*
** Push the value at f->p, found at container level depth (the top is 1),
** with the role `role` (0 off the path; below 0 a value the path's taker
** takes). Returns 0 on a refusal, leaving whatever it pushed for the
** caller to drop.
*/
int mcp_decode_value(mcp_reader *f, int depth, int role) {
  int nul;
  if (f->p >= f->end) return MCP_REFUSE(f, f->p, "a value expected");
  if (role < 0) return f->path->take(f, depth, -role - 1);
  switch (*f->p) {
    case '{':
    case '[':
      if (depth > MCP_JSON_MAX_DEPTH) return MCP_REFUSE(f, f->p, mcp_read_too_deep);
      if (!mcp_read_open_container(f)) return 0;
      return *f->p == '{' ? push_object(f, depth, role) : push_array(f, depth, role);
    case '"': return push_string(f, &nul);
    case 't':
      if (!mcp_read_literal(f, "true", 4)) return 0;
      lua_pushboolean(f->L, 1);
      return 1;
    case 'f':
      if (!mcp_read_literal(f, "false", 5)) return 0;
      lua_pushboolean(f->L, 0);
      return 1;
    case 'n':
      if (!mcp_read_literal(f, "null", 4)) return 0;
      mcp_json_push_null(f->L);
      return 1;
    default: return push_number(f);
  }
}

/* ==================================================================== */
/* Entry points                                                         */
/* ==================================================================== */

/*
** Start a reader over len bytes at s, with two empty slots pushed for it,
** the scratch buffer's and the key cache's (the caller drops them); no
** marker, order table, cap or path yet.
*/
void mcp_read_open(mcp_reader *f, lua_State *L, const char *s, size_t len) {
  f->L = L;
  f->p = f->start = (const unsigned char *)s;
  f->end = f->p + len;
  f->marker = f->order = 0;
  f->scratch_len = 0;
  f->buf = NULL;
  f->containers = f->max_containers = 0;
  f->path = NULL;
  f->taker = NULL;
  f->taken_order = 0;
  f->why = NULL;
  f->at = NULL;
  f->cached = 0;
  f->uncached = 0;
  f->object_hint = OBJECT_HINT;
  f->object_size = 0;
  luaL_checkstack(L, 6, "JSON decoder");
  lua_pushnil(L);
  f->scratch = lua_gettop(L);
  lua_pushnil(L);
  f->keys = lua_gettop(L);
}

/*
** Decode len bytes at s with the array marker and order table at the given
** stack indexes (order 0: keys unrecorded). Pushes exactly one value: the
** decoded value (returns 1) or the refusal's message (returns 0).
*/
static int decode_text(lua_State *L, const char *s, size_t len, int marker, int order) {
  int base = lua_gettop(L), ok;
  mcp_reader f;
  mcp_read_open(&f, L, s, len);
  f.marker = marker;
  f.order = order;
  mcp_skip_blanks(&f);
  ok = mcp_decode_value(&f, 1, 0);
  if (ok) {
    mcp_skip_blanks(&f);
    if (f.p != f.end) ok = MCP_REFUSE(&f, f.p, "end of file expected");
  }
  if (!ok) {
    lua_settop(L, base + 2);
    mcp_read_push_refusal(&f);
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return ok;
}

/*
** The C API: decode with the codec's state fetched from the registry.
** Pushes exactly one value: the decoded value (returns 1) or the
** "invalid JSON: ..." message (returns 0). Raises only on memory or stack.
*/
int mcp_json_decode(lua_State *L, const char *s, size_t len, int ordered) {
  int base = lua_gettop(L), ok;
  luaL_checkstack(L, 4, "JSON decoder");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  if (!lua_istable(L, base + 1)) return luaL_error(L, "the JSON codec is not loaded");
  ok = decode_text(L, s, len, base + 1, ordered && lua_istable(L, base + 2) ? base + 2 : 0);
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return ok;
}

/*
** json.decode(text [, ordered]) -> value | nil, message. Numbers are not
** text: no coercion. Upvalues: array marker, order table.
*/
static int l_decode(lua_State *L) {
  size_t len;
  const char *s;
  int ordered = lua_toboolean(L, 2);
  if (lua_type(L, 1) != LUA_TSTRING) luaL_typeerror(L, 1, "string");
  s = lua_tolstring(L, 1, &len);
  lua_settop(L, 2);
  if (decode_text(L, s, len, lua_upvalueindex(1), ordered ? lua_upvalueindex(2) : 0)) return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

/*
** Adds core.json.decode, over the array marker and order table json.c
** keeps in the registry (so it runs after mcp_register_json).
*/
void mcp_register_decode(lua_State *L) {
  int module = lua_gettop(L);
  luaL_checkstack(L, 4, "mcpclient.core");
  if (lua_getfield(L, module, "json") != LUA_TTABLE) luaL_error(L, "mcpclient.core: json.c registers first");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  lua_pushcclosure(L, l_decode, 2);
  lua_setfield(L, -2, "decode");
  lua_settop(L, module);
}
