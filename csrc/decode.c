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
** A second builder writes a value as JSON text instead of Lua values (see
** "The text builder"): a tools/list answer read with the "text" decoding
** keeps its tools' schemas as text, so a catalogue's schemas never become
** tables, and with the "kept" decoding its tools' input schemas come back
** as what an import keeps of them, judged in the same pass; outside the
** schemas a listing records no key order.
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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core.h"

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
/*
** Object keys remembered for reuse: a listing repeats the same few keys in
** every entry, and pushing a remembered key is a table read, where
** lua_pushlstring hashes the bytes and walks the string table (which holds
** every string of a big listing: cache misses). A power of two; keys of at
** most KEY_CACHE_LEN bytes (Lua's short strings, the ones it interns).
*/
#define KEY_CACHE       64
#define KEY_CACHE_LEN   40

/* A remembered key: its bytes (those of the string anchored in the cache table). */
typedef struct CachedKey {
  const char *s;
  size_t len;
} CachedKey;

/* Decoding state; marker, order, scratch, keys are stack indexes (order 0: keys unrecorded). */
typedef struct Fast {
  lua_State *L;
  const unsigned char *p, *end;
  int marker, order, scratch;
  int keys;                 /* the key cache: a table of KEY_CACHE strings, made on first use (nil before) */
  uint64_t cached;          /* which of its slots hold a key */
  CachedKey key[KEY_CACHE]; /* each slot's key, valid where `cached` says so */
  int object_hint,
    object_size; /* the size the next object starts at; the member count of the last one read */
  size_t containers, max_containers; /* objects and arrays opened so far, and the cap (0: none) */
  size_t scratch_len;
  unsigned char *buf;   /* the scratch userdata's bytes */
  struct Text *schemas; /* a tools/list answer: where its tools' schemas are written as text (else NULL) */
  int keep;             /* ... and its tools' input schemas are judged as an import judges them */
  int schema_order;     /* ... and the order table for a schema read as tables (its keys keep their order) */
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
** The first byte at or after p (before end) that is not plain. Catalogue
** text is mostly long plain runs, so this is most of a scan. Where SSE2 is
** there (every x86-64), sixteen bytes are tested at a time: one signed
** comparison with 0x20 finds both a control character and a byte past 0x7F
** (negative as a signed byte), two more find '"' and '\\', and the lowest
** bit of the mask is the first hit. Elsewhere eight bytes are tested at a
** time: a word holds no byte below 0x20, no '"', no '\\' and none past 0x7F
** exactly when none of the usual zero-byte tests fires (a test may also
** fire on a byte after a real hit, never without one); on a little-endian
** machine the lowest flag marks the first hit itself. Most strings in a
** listing are keys and short values, ended inside their first block.
*/
static inline const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
  while (end - p >= 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    int hit = _mm_movemask_epi8(_mm_or_si128(
      _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)), _mm_cmplt_epi8(x, space)));
    if (hit != 0) return p + __builtin_ctz((unsigned)hit);
    p += 16;
  }
#else
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  while (end - p >= 8) {
    uint64_t x, quote, backslash, hit;
    memcpy(&x, p, 8);
    quote = x ^ (ones * '"');
    backslash = x ^ (ones * '\\');
    hit = (((x - ones * 0x20) & ~x)            /* a byte below 0x20 */
           | ((quote - ones) & ~quote)         /* a '"' */
           | ((backslash - ones) & ~backslash) /* a '\\' */
           | x)                                /* a byte past 0x7F */
          & highs;
    if (hit) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      return p + (__builtin_ctzll(hit) >> 3);
#else
      break;
#endif
    }
    p += 8;
  }
#endif
  while (p < end && plain[*p]) p++;
  return p;
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
** Read the string starting at the opening quote f->p without decoding it:
** its body is [*s, *e), f->p moves past the closing quote. *escaped is set
** when the body holds a backslash, *wide when it holds a byte past 0x7F.
** Returns 0 on a refusal: no closing quote, a raw control character,
** invalid UTF-8 (escapes are judged when they are decoded).
*/
static int scan_string(Fast *f, const unsigned char **s, const unsigned char **e, int *escaped, int *wide) {
  const unsigned char *p = f->p + 1, *end = f->end;
  *s = p;
  *escaped = *wide = 0;
  for (;;) {
    p = skip_plain(p, end);
    if (p >= end) return 0;
    if (*p == '"') break;
    if (*p == '\\') {
      *escaped = 1;
      if (p + 1 >= end) return 0;
      p += 2; /* the escaped byte is judged when decoding; a '"' here never closes */
    } else if (*p < 0x20) {
      return 0;
    } else {
      int ok;
      uint32_t cp;
      *wide = 1;
      p += mcp_utf8_unit(p, (size_t)(end - p), &ok, &cp);
      if (!ok) return 0;
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
static int push_string(Fast *f, int *nul) {
  const unsigned char *s, *e;
  int escaped, wide;
  s = f->p + 1;
  e = skip_plain(s, f->end);
  if (e < f->end && *e == '"') { /* printable ASCII only, the common case: no second look */
    f->p = e + 1;
    *nul = 0;
    lua_pushlstring(f->L, (const char *)s, (size_t)(e - s));
    return 1;
  }
  if (!scan_string(f, &s, &e, &escaped, &wide)) return 0;
  *nul = 0;
  if (!escaped) {
    lua_pushlstring(f->L, (const char *)s, (size_t)(e - s));
    return 1;
  }
  return push_escaped(f, s, e, nul);
}

/*
** Read the integer written in digits [s, e) (an optional '-' first) into
** *out exactly as strtoll reads it: out of the 64-bit range refuses
** (returns 0).
*/
static int read_integer(const unsigned char *s, const unsigned char *e, lua_Integer *out) {
  int neg = *s == '-';
  uint64_t v = 0, limit;
  if (neg) s++;
  limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; s < e; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (limit - d) / 10) return 0;
    v = v * 10 + d;
  }
  if (neg) *out = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(lua_Integer)v;
  else *out = (lua_Integer)v;
  return 1;
}

/*
** Read the real written in [s, e) into *out through strtod, as jansson
** reads it: the C library's rounding, '.' swapped for the locale's decimal
** point, an overflow to infinity refused, an underflow kept (0 or subnormal).
*/
static int read_real(Fast *f, const unsigned char *s, const unsigned char *e, double *out) {
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
  *out = d;
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
** Read the number at f->p: JSON's grammar exactly (no leading zeros, no
** bare '.', digits after '.' and after the exponent mark). Its text is
** [*s, *e); *real is set when it has a fraction or an exponent (else it
** is an integer). Returns 0 when the grammar refuses.
*/
static int scan_number(Fast *f, const unsigned char **s, const unsigned char **e, int *real) {
  const unsigned char *p = f->p, *end = f->end;
  *real = 0;
  if (p < end && *p == '-') p++;
  if (p >= end) return 0;
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9')
    while (p < end && *p >= '0' && *p <= '9') p++;
  else return 0;
  if (p < end && *p == '.') {
    *real = 1;
    if (++p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    *real = 1;
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  *s = f->p;
  *e = p;
  f->p = p;
  skip_lost_nul(f);
  return 1;
}

/*
** Push the number at f->p: an integer when it has neither fraction nor
** exponent, else a real.
*/
static int push_number(Fast *f) {
  const unsigned char *s, *e;
  int real;
  lua_Integer i;
  double d;
  if (!scan_number(f, &s, &e, &real)) return 0;
  if (real) {
    if (!read_real(f, s, e, &d)) return 0;
    lua_pushnumber(f->L, d);
  } else {
    if (!read_integer(s, e, &i)) return 0;
    lua_pushinteger(f->L, i);
  }
  return 1;
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

/*
** Where a value sits in a tools/list answer, for the decoder that keeps the
** listed tools' schemas as text: only result.tools[i].inputSchema and
** .outputSchema are written as text (the input schema judged too, with
** the "kept" decoding); every other value has no role.
*/
enum role { R_NONE, R_MESSAGE, R_RESULT, R_TOOLS, R_TOOL, R_INPUT_SCHEMA, R_OUTPUT_SCHEMA };

static int push_value(Fast *f, int depth, enum role role);

/*
** The role of the member `key` (the string at the stack top) of an object
** whose own role is `role`.
*/
static enum role member_role(lua_State *L, enum role role) {
  size_t n;
  const char *k;
  if (role == R_NONE) return R_NONE;
  k = lua_tolstring(L, -1, &n);
  switch (role) {
    case R_MESSAGE: return n == 6 && memcmp(k, "result", 6) == 0 ? R_RESULT : R_NONE;
    case R_RESULT: return n == 5 && memcmp(k, "tools", 5) == 0 ? R_TOOLS : R_NONE;
    case R_TOOL:
      if (n == 11 && memcmp(k, "inputSchema", 11) == 0) return R_INPUT_SCHEMA;
      return n == 12 && memcmp(k, "outputSchema", 12) == 0 ? R_OUTPUT_SCHEMA : R_NONE;
    default: return R_NONE;
  }
}

/*
** The first keys of an object, for the duplicate check: most objects of an
** answer have a few keys, and comparing with those is cheaper than a table
** lookup per key. Equal short strings are one interned object, so the
** pointers are usually equal; a long key is compared by its bytes.
*/
#define SEEN_KEYS 8
typedef struct SeenKey {
  const char *s;
  size_t len;
} SeenKey;

/*
** Is the key at the stack top (its bytes in *key) one the object at obj
** already has? Among its first SEEN_KEYS keys by comparison, past them by a
** lookup in the object (which holds the first ones too).
*/
static int repeated(lua_State *L, const SeenKey *seen, int n_seen, int obj, const SeenKey *key) {
  int i, found;
  if (n_seen >= SEEN_KEYS) {
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
** neither is free).
*/
static int push_key(Fast *f, SeenKey *key) {
  const unsigned char *s, *e;
  int escaped, wide, nul = 0;
  size_t n, i;
  uint32_t h;
  unsigned slot;
  CachedKey *c;
  if (!scan_string(f, &s, &e, &escaped, &wide)) return 0;
  n = (size_t)(e - s);
  if (escaped) {
    if (!push_escaped(f, s, e, &nul) || nul) return 0;
    key->s = lua_tolstring(f->L, -1, &key->len);
    return 1;
  }
  key->len = n;
  if (n == 0 || n > KEY_CACHE_LEN) {
    key->s = lua_pushlstring(f->L, (const char *)s, n);
    return 1;
  }
  for (i = 0, h = 2166136261u; i < n; i++) h = (h ^ s[i]) * 16777619u; /* FNV-1a */
  for (i = 0; i < 2; i++, h >>= 8) { /* two places a key may be in: few keys ever share both */
    slot = h & (KEY_CACHE - 1);
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
    lua_createtable(f->L, KEY_CACHE, 0);
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

/* What follows a member or an element: another one, the end of the container, or a refusal. */
enum { SEP_BAD, SEP_MORE, SEP_END };

/*
** Read what follows a member or an element: ',' and the blanks after it
** (SEP_MORE), the closing byte (SEP_END), or anything else (SEP_BAD).
*/
static int separator(Fast *f, unsigned char close) {
  skip_blanks(f);
  if (f->p >= f->end || (*f->p != ',' && *f->p != close)) return SEP_BAD;
  if (*f->p++ == close) return SEP_END;
  skip_blanks(f);
  return SEP_MORE;
}

/*
** Push the object at f->p ('{'), at container level depth, with the role
** `role`. Keys in text order go to a list recorded in the order table when
** keys are recorded (only for a non-empty object, like json.c). Returns 0
** on a refusal.
*/
static int push_object(Fast *f, int depth, enum role role) {
  lua_State *L = f->L;
  SeenKey seen[SEEN_KEYS], key;
  int obj, keys = 0, n_seen = 0, sep;
  lua_Integer n = 0;
  f->p++;
  luaL_checkstack(L, 6, "JSON decoder");
  skip_blanks(f);
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
    if (f->p >= f->end || *f->p != '"' || !push_key(f, &key)) return 0;
    if (repeated(L, seen, n_seen, obj, &key)) return 0;
    if (n_seen < SEEN_KEYS) seen[n_seen] = key;
    n_seen++;
    if (keys != 0) {
      lua_pushvalue(L, -1);
      lua_rawseti(L, keys, ++n);
    }
    skip_blanks(f);
    if (f->p >= f->end || *f->p != ':') return 0;
    f->p++;
    skip_blanks(f);
    if (!push_value(f, depth + 1, member_role(L, role))) return 0;
    lua_rawset(L, obj);
    if ((sep = separator(f, '}')) == SEP_BAD) return 0;
    if (sep == SEP_END) break;
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
** Push the array at f->p ('['), carrying the array marker; the elements of
** the tools array are tools. An object element starts at the size of the
** object element before it. Returns 0 on a refusal.
*/
static int push_array(Fast *f, int depth, enum role role) {
  lua_State *L = f->L;
  int arr, empty, sep, hint = OBJECT_HINT;
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
    f->object_hint = hint;
    f->object_size = 0;
    if (!push_value(f, depth + 1, role == R_TOOLS ? R_TOOL : R_NONE)) return 0;
    if (f->object_size > 0) hint = f->object_size < OBJECT_HINT_MAX ? f->object_size : OBJECT_HINT_MAX;
    lua_rawseti(L, arr, ++n);
    if ((sep = separator(f, ']')) == SEP_BAD) return 0;
    if (sep == SEP_END) {
      f->object_hint = OBJECT_HINT;
      return 1;
    }
  }
}

/*
** Count one more object or array; 0 once past the cap, so a body of
** hundreds of thousands of "{}" is given up before it is all built.
*/
static int open_container(Fast *f) {
  return ++f->containers <= f->max_containers || f->max_containers == 0;
}

/* The members of a JSON-RPC message classify reads, in this order on the stack. */
enum { M_METHOD, M_ID, M_ERROR, M_RESULT, M_COUNT };

/*
** Which of those members the key at the stack top names, or -1.
*/
static int message_member(lua_State *L) {
  size_t n;
  const char *k = lua_tolstring(L, -1, &n);
  switch (n) {
    case 2: return memcmp(k, "id", 2) == 0 ? M_ID : -1;
    case 5: return memcmp(k, "error", 5) == 0 ? M_ERROR : -1;
    case 6:
      if (memcmp(k, "method", 6) == 0) return M_METHOD;
      return memcmp(k, "result", 6) == 0 ? M_RESULT : -1;
    default: return -1;
  }
}

/*
** Read the message object at f->p ('{') without building it: the members
** classify reads go to the M_COUNT slots from `slots` (which hold nil for
** an absent one), every other member is read (its verdict counts) and
** dropped. Nobody is handed the message itself, so its table would be built
** only to be thrown away. The keys stay on the stack until the end, so the
** duplicate check compares live strings. Returns 1, 0 on a refusal, or -1
** when the object has more members than that check holds (the caller then
** reads it the general way).
*/
static int read_message(Fast *f, int slots, enum role role) {
  lua_State *L = f->L;
  SeenKey seen[SEEN_KEYS], key;
  int n_seen = 0, which, sep;
  f->p++;
  skip_blanks(f);
  if (f->p < f->end && *f->p == '}') {
    f->p++;
    return 1;
  }
  luaL_checkstack(L, SEEN_KEYS + 4, "JSON decoder");
  for (;;) {
    if (f->p >= f->end || *f->p != '"' || !push_key(f, &key)) return 0;
    if (n_seen == SEEN_KEYS) return -1;
    if (repeated(L, seen, n_seen, 0, &key)) return 0;
    seen[n_seen++] = key;
    skip_blanks(f);
    if (f->p >= f->end || *f->p != ':') return 0;
    f->p++;
    skip_blanks(f);
    which = message_member(L);
    if (!push_value(f, 2, member_role(L, role))) return 0;
    if (which >= 0) lua_replace(L, slots + which);
    else lua_pop(L, 1);
    if ((sep = separator(f, '}')) == SEP_BAD) return 0;
    if (sep == SEP_END) return 1;
  }
}

/*
** The top of a JSON-RPC answer: its members pushed as M_COUNT values
** (returns M_COUNT) when read_message takes the object at f->p, else the
** value the general way (returns 1); 0 on a refusal.
*/
static int push_message(Fast *f, enum role role) {
  lua_State *L = f->L;
  const unsigned char *start = f->p;
  size_t containers = f->containers;
  int slots = lua_gettop(L) + 1, i, r;
  luaL_checkstack(L, M_COUNT + 2, "JSON decoder");
  for (i = 0; i < M_COUNT; i++) lua_pushnil(L);
  r = open_container(f) ? read_message(f, slots, role) : 0;
  if (r >= 0) {
    lua_settop(L, r ? slots + M_COUNT - 1 : slots - 1);
    return r ? M_COUNT : 0;
  }
  lua_settop(L, slots - 1);
  f->p = start;
  f->containers = containers;
  return push_value(f, 1, role);
}

/* ==================================================================== */
/* The text builder                                                     */
/* ==================================================================== */

/*
** Some values are wanted as text, not as Lua tables: a listed tool's schema
** is stored and shown as JSON text, and building its tables only to encode
** them again is what made a listing slow. The text builder reads such a
** value with the decoder's grammar and writes, in the same pass, exactly
** the text json.encode gives for the decoded value: no blanks, keys in the
** order written, strings escaped as the encoder escapes them (json.c's
** put_string in its UTF-8 form), integers in decimal, reals in the
** encoder's shortest form.
**
** Most of a schema is already in that form as the server sent it: compact
** JSON, strings of printable ASCII without escapes, integers. So the
** builder does not write token by token. It judges every token and keeps
** a run of input bytes that need no rewriting; only where the input
** differs from the encoder's text (a blank between tokens, a string with
** an escape or a byte past 0x7F, a real not in its shortest form, "-0",
** the NUL jansson's reader loses) is the run written out, with the token in
** the encoder's form after it. A schema with no such place is never copied
** at all: its text is the slice of the input it came in. The text is the
** same either way, byte for byte, so a stored schema's text (and so its
** fingerprint) does not depend on how it was built.
**
** It takes only the common case. Anything else (an object of more than
** MAX_KEYS members, whose duplicate check would cost too much by pairwise
** comparison, containers nested more than MAX_LEVELS below the value, or
** anything the grammar refuses) makes it give up, and the caller reads the
** same value again through the table decoder, which has the final word on
** the verdict; encoding what that builds gives the same text. So the
** builder never words a refusal, and a value it takes is one the table
** decoder takes too. fuzz/listing_fuzz.c holds the two paths equal.
*/

/* A rare path kept out of the hot function that calls it, so the hot one stays small. */
#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))
#else
#define COLD
#endif

#define MAX_KEYS   MCP_MAX_MEMBERS /* members of one object the builder checks for duplicates */
#define MAX_LEVELS 64              /* container levels below the value the builder writes */

/* One key written so far, as its place in the text: the encoder's text of a key is unique to it. */
typedef struct KeySpan {
  size_t at, len;
  unsigned char first; /* the key's first byte after the quote (the closing quote for "") */
} KeySpan;

typedef struct Text {
  unsigned char *out; /* the text written out so far: n bytes of cap, a userdata at stack slot `slot` */
  size_t n, cap;
  int slot;
  const unsigned char *run; /* the input from here to f->p: the text's next bytes, not written out */
  int levels;               /* deepest container level reached (the value written is level 1) */
  mcp_refused_fn refused;   /* the test for keys below the top level, or NULL */
  int refused_seen;         /* some key passed that test */
  mcp_member *members;      /* the top-level object's members, when wanted */
  int nmembers;
  int shape; /* MCP_SHAPE_* of the member value being written */
} Text;

/*
** Grow the output to hold m more bytes, by replacing the userdata in its
** slot, so nothing is freed by hand.
*/
static void text_grow(Fast *f, Text *t, size_t m) {
  size_t cap = t->cap * 2 > t->n + m ? t->cap * 2 : t->n + m + 256;
  unsigned char *nb = (unsigned char *)lua_newuserdatauv(f->L, cap, 0);
  if (t->n > 0) memcpy(nb, t->out, t->n);
  lua_replace(f->L, t->slot);
  t->out = nb;
  t->cap = cap;
}

/* Room for m more output bytes. */
#define text_room(f, t, m) ((void)((t)->cap - (t)->n >= (m) || (text_grow((f), (t), (m)), 0)))

/* Append n bytes (room already made). */
#define TEXT_PUT(t, s, len) (memcpy((t)->out + (t)->n, (s), (len)), (t)->n += (len))

/* Where the input byte at p (in the pending run) lies in the text. */
#define TEXT_AT(t, p) ((t)->n + (size_t)((p) - (t)->run))

/*
** The text's bytes from offset `at` on: written out already, or still in
** the pending run. A token lies wholly on one side (the run is written out
** only between tokens).
*/
static const unsigned char *text_bytes(const Text *t, size_t at) {
  return at < t->n ? t->out + at : t->run + (at - t->n);
}

/*
** Write the pending run out up to the input byte at p, which starts the
** run from then on. Called where the input and the text part: the caller
** then writes its token in the encoder's form and moves the run past it.
*/
static void text_flush(Fast *f, Text *t, const unsigned char *p) {
  size_t m = (size_t)(p - t->run);
  if (m > 0) {
    text_room(f, t, m);
    TEXT_PUT(t, t->run, m);
  }
  t->run = p;
}

/*
** The blanks at f->p: the text has none, so the run is written out before
** them and starts again after them.
*/
static void text_skip_blanks(Fast *f, Text *t) {
  text_flush(f, t, f->p);
  skip_blanks(f);
  t->run = f->p;
}

/* Skip blanks at f->p, if any (compact input has none: then this is one test, inline). */
#define text_blanks(f, t)                                                                                    \
  ((void)((f)->p >= (f)->end || (*(f)->p != ' ' && *(f)->p != '\n' && *(f)->p != '\r' && *(f)->p != '\t') || \
          (text_skip_blanks((f), (t)), 0)))

/*
** A token read from `token` to its end `e` whose text is the input's: the
** run goes on over it. Only when jansson's reader lost a NUL after it
** (skip_lost_nul moved f->p past e) does the run part there, the NUL left out.
*/
static void text_same(Fast *f, Text *t, const unsigned char *e) {
  if (f->p != e) {
    text_flush(f, t, e);
    t->run = f->p;
  }
}

/* Write \uXXXX for u at o, as the encoder does; returns the end. */
static unsigned char *put_u(unsigned char *o, unsigned long u) {
  return (unsigned char *)mcp_json_put_u((char *)o, u);
}

/*
** Write the code point cp as the encoder writes it inside a string: the
** short escapes, other controls as \u00XX, '"' and '\\' escaped, other
** ASCII as it is, hidden code points (C1 controls, bidi and invisible
** formatting) as \uXXXX, any other as UTF-8. Returns the new end of the
** output.
*/
static unsigned char *put_code_point(unsigned char *o, unsigned long cp) {
  static const unsigned char short_form[0x60] = {
    ['"'] = '"', ['\\'] = '\\', ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
  };
  if (cp < 0x60 && short_form[cp] != 0) {
    *o++ = '\\';
    *o++ = short_form[cp];
    return o;
  }
  if (cp < 0x20) return put_u(o, cp);
  if (cp < 0x80) {
    *o++ = (unsigned char)cp;
    return o;
  }
  if (mcp_text_hidden((uint32_t)cp)) return put_u(o, cp); /* all of them lie below U+10000 */
  return o + put_utf8(o, cp);
}

/*
** Write the string body [s, e) that scan_string accepted, decoding its
** escapes and writing each character back in the encoder's form. Returns
** 0 when an escape is refused, or (for a key) when it decodes to NUL.
*/
static int put_escaped_string(Text *t, const unsigned char *s, const unsigned char *e, int key) {
  unsigned char *o = t->out + t->n;
  while (s < e) {
    unsigned long cp;
    if (*s == '\\') {
      size_t used = 2;
      switch (s[1]) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
          used = unicode_escape(s + 2, e, &cp);
          if (used == 0 || (cp == 0 && key)) return 0;
          used += 2;
          break;
        default: return 0;
      }
      s += used;
    } else if (*s < 0x80) {
      cp = *s++;
    } else {
      int ok;
      uint32_t u;
      s += mcp_utf8_unit(s, (size_t)(e - s), &ok, &u); /* scan_string validated it */
      cp = u;
    }
    o = put_code_point(o, cp);
  }
  t->n = (size_t)(o - t->out);
  return 1;
}

/*
** Write the string at f->p (a key when key is set) that is not printable
** ASCII alone: one with escapes or bytes past 0x7F is written out
** character by character, in the encoder's form. Every input byte yields
** at most three output bytes (a two-byte C1 control becomes
** \u0080..\u009f), so room is made once.
*/
static COLD int emit_odd_string(Fast *f, Text *t, int key) {
  const unsigned char *s, *e, *token = f->p;
  int escaped, wide;
  if (!scan_string(f, &s, &e, &escaped, &wide)) return 0;
  if (!escaped && !wide) return 1;
  text_flush(f, t, token);
  text_room(f, t, 3 * (size_t)(e - s) + 2);
  t->out[t->n++] = '"';
  if (!put_escaped_string(t, s, e, key)) return 0;
  t->out[t->n++] = '"';
  t->run = f->p;
  return 1;
}

/*
** Read the string at f->p (a key when key is set). A body of printable
** ASCII is the encoder's text as it is: the run goes on over it.
*/
static inline int emit_string(Fast *f, Text *t, int key) {
  const unsigned char *e = skip_plain(f->p + 1, f->end);
  if (e < f->end && *e == '"') {
    f->p = e + 1;
    return 1;
  }
  return emit_odd_string(f, t, key);
}

/*
** Read the number at f->p: an integer is its own text but for "-0"
** (written 0), a real is written in the encoder's shortest form unless it
** is already written so.
*/
static int emit_number(Fast *f, Text *t) {
  const unsigned char *s, *e;
  int real;
  if (!scan_number(f, &s, &e, &real)) return 0;
  if (real) {
    char tmp[MCP_JSON_REAL_MAX];
    double d;
    size_t len;
    if (!read_real(f, s, e, &d) || (len = mcp_json_format_real(d, tmp)) == 0) return 0;
    if (len == (size_t)(e - s) && memcmp(tmp, s, len) == 0) {
      text_same(f, t, e);
    } else {
      text_flush(f, t, s);
      text_room(f, t, len);
      TEXT_PUT(t, tmp, len);
      t->run = f->p;
    }
  } else {
    lua_Integer v;
    if (!read_integer(s, e, &v)) return 0;
    if (v == 0 && *s == '-') {
      text_flush(f, t, s);
      text_room(f, t, 1);
      t->out[t->n++] = '0';
      t->run = f->p;
    } else {
      text_same(f, t, e);
    }
  }
  return 1;
}

/*
** Read the literal w at f->p: its own text.
*/
static int emit_literal(Fast *f, Text *t, const char *w, size_t n) {
  const unsigned char *token = f->p;
  if (!literal(f, w, n)) return 0;
  text_same(f, t, token + n);
  return 1;
}

static int emit_value(Fast *f, Text *t, int depth, int level);

/*
** Whether the key at keys[n] repeats one of keys[0..n) (all in the text).
*/
static int repeated_key(const Text *t, const KeySpan *keys, int n) {
  const unsigned char *k = text_bytes(t, keys[n].at);
  size_t len = keys[n].len;
  unsigned char first = keys[n].first;
  int i;
  for (i = 0; i < n; i++) {
    /* length and first byte first: most keys differ there, and it spares finding the bytes */
    if (keys[i].len == len && keys[i].first == first && memcmp(text_bytes(t, keys[i].at), k, len) == 0)
      return 1;
  }
  return 0;
}

/*
** Read the value of a member of the top-level object (for the normaliser,
** which asked for them) and note where it lies in the text and what it
** holds: the deepest level inside it (1 for a scalar), whether a key
** inside it passed the refused test and how many containers it has.
*/
static int emit_member_value(Fast *f, Text *t, int depth, size_t key_at, size_t key_len) {
  mcp_member *m;
  int outer_levels = t->levels, outer_refused = t->refused_seen;
  size_t value_at = TEXT_AT(t, f->p), containers = f->containers;
  if (t->nmembers == MAX_KEYS) return 0;
  t->levels = 1;
  t->refused_seen = 0;
  t->shape = 0;
  if (!emit_value(f, t, depth, 2)) return 0;
  m = &t->members[t->nmembers++];
  m->key = key_at;
  m->key_len = key_len;
  m->value = value_at;
  m->value_len = TEXT_AT(t, f->p) - value_at;
  m->levels = t->levels;
  m->refused = t->refused_seen;
  m->containers = f->containers - containers;
  m->shape = t->shape;
  if (outer_levels > t->levels) t->levels = outer_levels;
  t->refused_seen |= outer_refused;
  return 1;
}

/*
** Read the opening byte of the container at f->p and the blanks after it;
** 1 when it closes at once.
*/
static int emit_open(Fast *f, Text *t, unsigned char close) {
  f->p++;
  text_blanks(f, t);
  if (f->p >= f->end || *f->p != close) return 0;
  f->p++;
  return 1;
}

/* Read what follows a member or an element, as separator() does, its blanks left out of the text. */
static inline int emit_separator(Fast *f, Text *t, unsigned char close) {
  text_blanks(f, t);
  if (f->p >= f->end || (*f->p != ',' && *f->p != close)) return SEP_BAD;
  if (*f->p++ == close) return SEP_END;
  text_blanks(f, t);
  return SEP_MORE;
}

/*
** Read the object at f->p, a container at level `level` of the value (1:
** the value itself). Keys below the top level go through the refused test
** when the normaliser gave one.
*/
static int emit_object(Fast *f, Text *t, int depth, int level) {
  KeySpan keys[MAX_KEYS];
  int n = 0, objects = 1, sep = SEP_MORE;
  if (emit_open(f, t, '}')) sep = SEP_END;
  while (sep == SEP_MORE) {
    if (n == MAX_KEYS || f->p >= f->end || *f->p != '"') return 0;
    keys[n].at = TEXT_AT(t, f->p);
    if (!emit_string(f, t, 1)) return 0;
    keys[n].len = TEXT_AT(t, f->p) - keys[n].at;
    keys[n].first = text_bytes(t, keys[n].at)[1];
    if (n > 0 && repeated_key(t, keys, n)) return 0;
    if (t->refused != NULL && level >= 2 &&
        t->refused((const char *)text_bytes(t, keys[n].at) + 1, keys[n].len - 2) >= 0)
      t->refused_seen = 1;
    text_blanks(f, t);
    if (f->p >= f->end || *f->p != ':') return 0;
    f->p++;
    text_blanks(f, t);
    if (f->p >= f->end) return 0;
    objects = objects && *f->p == '{';
    if (level == 1 && t->members != NULL) {
      if (!emit_member_value(f, t, depth + 1, keys[n].at, keys[n].len)) return 0;
    } else if (!(*f->p == '"' ? emit_string(f, t, 0) : emit_value(f, t, depth + 1, level + 1))) {
      return 0; /* a string, the most common value, without the call */
    }
    n++;
    if ((sep = emit_separator(f, t, '}')) == SEP_BAD) return 0;
  }
  if (level == 2 && objects) t->shape = MCP_SHAPE_OBJECT_OF_OBJECTS;
  return 1;
}

/*
** Read the array at f->p, a container at level `level` of the value.
*/
static int emit_array(Fast *f, Text *t, int depth, int level) {
  int strings = 1, sep = SEP_MORE;
  if (emit_open(f, t, ']')) sep = SEP_END;
  while (sep == SEP_MORE) {
    if (f->p >= f->end) return 0;
    strings = strings && *f->p == '"';
    if (!(*f->p == '"' ? emit_string(f, t, 0) : emit_value(f, t, depth + 1, level + 1))) return 0;
    if ((sep = emit_separator(f, t, ']')) == SEP_BAD) return 0;
  }
  if (level == 2 && strings) t->shape = MCP_SHAPE_STRING_LIST;
  return 1;
}

/*
** Read the value at f->p, found at container level depth of the whole
** text (bounded as the table decoder bounds it) and level `level` of the
** value being written. Returns 0 when the builder gives up.
*/
static int emit_value(Fast *f, Text *t, int depth, int level) {
  if (f->p >= f->end) return 0;
  switch (*f->p) {
    case '{':
    case '[':
      if (depth > MCP_JSON_MAX_DEPTH || level > MAX_LEVELS || !open_container(f)) return 0;
      if (level > t->levels) t->levels = level;
      return *f->p == '{' ? emit_object(f, t, depth, level) : emit_array(f, t, depth, level);
    case '"': return emit_string(f, t, 0);
    case 't': return emit_literal(f, t, "true", 4);
    case 'f': return emit_literal(f, t, "false", 5);
    case 'n': return emit_literal(f, t, "null", 4);
    default: return emit_number(f, t);
  }
}

/*
** Build the text of the value at f->p (no blanks before it), with t's
** fields for the member description set. On success *text and *len are
** the text: the input slice itself when nothing had to be rewritten (no
** copy made), else the output written out to the end. 0 when the builder
** gives up.
*/
static int text_value(Fast *f, Text *t, int depth, const unsigned char **text, size_t *len) {
  const unsigned char *start = f->p;
  t->n = 0;
  t->run = start;
  t->levels = t->refused_seen = t->nmembers = t->shape = 0;
  if (!emit_value(f, t, depth, 1)) return 0;
  if (t->n == 0 && t->run == start) {
    *text = start;
    *len = (size_t)(f->p - start);
    return 1;
  }
  text_flush(f, t, f->p);
  *text = t->out;
  *len = t->n;
  return 1;
}

/*
** Replace the decoded schema at the top of the stack with its JSON text,
** or with `keep` with what an import keeps of it. 0 (the value left as it
** is) when it would not encode, which decoded JSON never is.
*/
static int schema_value_as_text(lua_State *L, int keep) {
  if (mcp_json_encode(L, -1, 0) != NULL) return 0;
  lua_remove(L, -2);
  if (keep) {
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    mcp_schema_keep(L, text, len, NULL, -1);
    lua_remove(L, -2);
  }
  return 1;
}

/*
** Push a listed tool's schema at f->p as its JSON text, or with `keep`, as
** what an import keeps of it (schema.c judges the text and the description
** of its members written in the same pass). When the text builder gives
** up, the value is read again as tables and those are encoded: the same
** text, or the table decoder's refusal.
*/
static int push_schema_text(Fast *f, int depth, int keep) {
  mcp_member members[MCP_MAX_MEMBERS];
  int ok;
  Text *t = f->schemas;
  const unsigned char *start = f->p, *text;
  size_t containers = f->containers, len;
  t->members = keep ? members : NULL;
  t->refused = keep ? mcp_schema_keyword : NULL;
  if (text_value(f, t, depth, &text, &len)) {
    if (keep) mcp_schema_keep(f->L, (const char *)text, len, members, text[0] == '{' ? t->nmembers : -1);
    else lua_pushlstring(f->L, (const char *)text, len);
    return 1;
  }
  f->p = start;
  f->containers = containers;
  f->order =
    f->schema_order; /* the text keeps the schema's key order: so must the tables it is written from */
  ok = push_value(f, depth, R_NONE);
  f->order = 0;
  return ok && schema_value_as_text(f->L, keep);
}

/*
** Push the value at f->p, found at container level depth (the top is 1),
** with the role `role`. Returns 0 on a refusal, leaving whatever it pushed
** for the caller to drop.
*/
static int push_value(Fast *f, int depth, enum role role) {
  int nul;
  if (f->p >= f->end) return 0;
  if (role == R_INPUT_SCHEMA || role == R_OUTPUT_SCHEMA)
    return push_schema_text(f, depth, role == R_INPUT_SCHEMA && f->keep);
  switch (*f->p) {
    case '{': return depth <= MCP_JSON_MAX_DEPTH && open_container(f) && push_object(f, depth, role);
    case '[': return depth <= MCP_JSON_MAX_DEPTH && open_container(f) && push_array(f, depth, role);
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

/* How fast_decode reads a tools/list answer: as any text, schemas as text, input schemas as kept. */
enum { LISTING_NONE, LISTING_TEXT, LISTING_KEPT };

/*
** Start a Fast reader over len bytes at s, with two empty slots pushed for
** it, the scratch buffer's and the key cache's (the caller drops them).
*/
static void fast_open(Fast *f, lua_State *L, const char *s, size_t len) {
  f->L = L;
  f->p = (const unsigned char *)s;
  f->end = f->p + len;
  f->marker = f->order = 0;
  f->scratch_len = 0;
  f->buf = NULL;
  f->containers = f->max_containers = 0;
  f->schemas = NULL;
  f->keep = f->schema_order = 0;
  f->cached = 0;
  f->object_hint = OBJECT_HINT;
  f->object_size = 0;
  luaL_checkstack(L, 6, "JSON decoder");
  lua_pushnil(L);
  f->scratch = lua_gettop(L);
  lua_pushnil(L);
  f->keys = lua_gettop(L);
}

/*
** Start a text builder writing into a buffer anchored at a new stack slot:
** the userdata at stack index `reuse` when it is one of at least cap bytes
** (a caller's buffer kept across calls), else a new one.
*/
static void text_open(Text *t, lua_State *L, int reuse, size_t cap) {
  if (reuse != 0 && lua_type(L, reuse) == LUA_TUSERDATA && lua_rawlen(L, reuse) >= cap) {
    lua_pushvalue(L, reuse);
    t->cap = lua_rawlen(L, reuse);
    t->out = (unsigned char *)lua_touserdata(L, -1);
  } else {
    t->cap = cap;
    t->out = (unsigned char *)lua_newuserdatauv(L, t->cap, 0);
  }
  t->slot = lua_gettop(L);
  t->n = 0;
  t->run = NULL;
  t->levels = 0;
  t->refused = NULL;
  t->refused_seen = 0;
  t->members = NULL;
  t->nmembers = 0;
  t->shape = 0;
}

/*
** Decode len bytes at s into one pushed value (returns 1), or push nothing
** and return 0 when jansson would refuse the text or it opens more than
** max_containers objects and arrays (0: no cap). marker and order are stack
** indexes of the array marker and the order table (order 0: no key order
** recorded). `listing` (LISTING_*): the text is a tools/list answer whose
** tools' schemas are pushed as JSON text, the input schemas as what an
** import keeps of them with LISTING_KEPT; key order is then recorded only
** in a schema the text builder hands back to the table reader. With `message`, a top-level
** object is read as push_message reads it: its members pushed instead
** (returns M_COUNT). *containers (if not NULL) gets the count of objects and
** arrays opened.
*/
static int fast_decode(lua_State *L, const char *s, size_t len, int marker, int order, size_t max_containers,
                       int listing, int message, size_t *containers) {
  int base = lua_gettop(L), n;
  enum role top = listing != LISTING_NONE ? R_MESSAGE : R_NONE;
  Fast f;
  Text t;
  fast_open(&f, L, s, len);
  f.marker = marker;
  f.order = order;
  f.max_containers = max_containers;
  if (listing != LISTING_NONE) {
    text_open(&t, L, 0, 4096);
    f.schemas = &t;
    f.keep = listing == LISTING_KEPT;
    f.schema_order = order;
    f.order = 0; /* outside its schemas a listing records no key order */
  }
  skip_blanks(&f);
  if (message && f.p < f.end && *f.p == '{') n = push_message(&f, top);
  else n = push_value(&f, 1, top);
  if (n != 0) skip_blanks(&f);
  if (n == 0 || f.p != f.end) {
    lua_settop(L, base);
    return 0;
  }
  if (listing != LISTING_NONE) lua_remove(L, base + 3); /* the text builder's buffer */
  lua_remove(L, base + 2);                              /* the key cache */
  lua_remove(L, base + 1);                              /* the scratch slot */
  if (containers != NULL) *containers = f.containers;
  return n;
}

/*
** The C API of the text builder for the schema normaliser: write the JSON
** object text s as json.encode would write its decoded value, and describe
** its members in members[] (room for MCP_MAX_MEMBERS): where each key and
** value lies in that text, the deepest level in the value, whether a key
** inside it passes `refused`. Pushes the builder's buffer (a userdata the
** caller pops: the one at stack index `reuse` when that is big enough, so
** a caller may keep one across calls), sets *text and *text_len (the text:
** in that buffer, or inside s itself when s is already that text but for
** blanks around it; valid while both are), and returns the member count; or returns -1
** with nothing pushed when s is not a JSON object or the builder gives up
** (the caller then decodes it).
*/
int mcp_canonical_object(lua_State *L, const char *s, size_t len, mcp_refused_fn refused, mcp_member *members,
                         const char **text, size_t *text_len, int reuse) {
  int base = lua_gettop(L);
  Fast f;
  Text t;
  const unsigned char *out;
  fast_open(&f, L, s, len);
  text_open(&t, L, reuse, len + 16);
  t.refused = refused;
  t.members = members;
  skip_blanks(&f);
  if (f.p >= f.end || *f.p != '{' || !text_value(&f, &t, 1, &out, text_len)) {
    lua_settop(L, base);
    return -1;
  }
  skip_blanks(&f);
  if (f.p != f.end) {
    lua_settop(L, base);
    return -1;
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  *text = (const char *)out;
  return t.nmembers;
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
  ok = fast_decode(L, s, len, base + 1, ordered && lua_istable(L, base + 2) ? base + 2 : 0, 0, 0, 0, NULL);
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
  if (fast_decode(L, s, len, lua_upvalueindex(1), ordered ? lua_upvalueindex(2) : 0, 0, 0, 0, NULL)) return 1;
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
** Classify a response by its members method, id, error and result (at the
** M_COUNT stack slots from `first`, nil when absent) exactly as json.c's
** rpc_classify does on jansson's tree, with the same kinds, details and
** precedence.
*/
static int classify_members(lua_State *L, int first, lua_Integer expected, int marker) {
  int id = first + M_ID, e = first + M_ERROR, r = first + M_RESULT, id_matches;
  if (!lua_isnil(L, first + M_METHOD)) {
    lua_pushliteral(L, "other");
    lua_pushliteral(L, "a server request or notification");
    return 2;
  }
  id_matches = lua_isinteger(L, id) && lua_tointeger(L, id) == expected;
  if (is_object(L, e, marker)) {
    if (!id_matches && !mcp_json_is_null(L, id)) {
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
** Classify the decoded response at root (read the general way): a JSON
** object's members go to classify_members.
*/
static int classify(lua_State *L, int root, lua_Integer expected, int marker) {
  int first;
  if (!is_object(L, root, marker)) {
    lua_pushliteral(L, "malformed");
    lua_pushliteral(L, "the body is not a JSON object");
    return 2;
  }
  first = lua_gettop(L) + 1;
  member(L, root, "method");
  member(L, root, "id");
  member(L, root, "error");
  member(L, root, "result");
  return classify_members(L, first, expected, marker);
}

/*
** In a result the jansson classifier built, write each listed tool's
** inputSchema and outputSchema as text, as the fast path gives them, the
** input schema as what an import keeps with `keep` (a value that would not
** encode, which decoded JSON never is, is dropped).
*/
static void schemas_as_text(lua_State *L, int result, int keep) {
  static const char *const names[] = {"inputSchema", "outputSchema"};
  lua_Integer i, n;
  int tools, k;
  luaL_checkstack(L, 8, "JSON decoder");
  if (member(L, result, "tools") != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  tools = lua_gettop(L);
  n = (lua_Integer)lua_rawlen(L, tools);
  for (i = 1; i <= n; i++) {
    if (lua_rawgeti(L, tools, i) == LUA_TTABLE) {
      for (k = 0; k < 2; k++) {
        lua_pushstring(L, names[k]);
        if (lua_rawget(L, -2) == LUA_TNIL) {
          lua_pop(L, 1);
          continue;
        }
        if (!schema_value_as_text(L, k == 0 && keep)) {
          lua_pop(L, 1);
          lua_pushnil(L);
        }
        lua_setfield(L, -3, names[k]);
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/*
** core.rpc_classify(text, expected_id [, decoding [, max_containers]]):
** the fast path of json.c's classifier (same arguments, kinds, details and
** extra count). decoding: false (key order not recorded), true (recorded),
** "text": a tools/list answer whose tools' inputSchema and outputSchema
** come back as JSON text, never built as tables (key order recorded only
** there, in the text); or "kept": the same, with each inputSchema as what
** an import keeps of it under the 2025 rule (core.normalise_schema_text's
** answer, judged in the same pass): the kept text, or { refused = reason }.
** A body it cannot decode, a blank one, or one opening more than
** max_containers objects and arrays goes to the jansson classifier, which
** words the refusal. text may also be a held body (body.c): read in place,
** then released. Upvalues: array marker, order table, the jansson
** rpc_classify.
*/
static int l_fast_classify(lua_State *L) {
  static const char *const listings[] = {"text", "kept", NULL};
  size_t len, containers = 0;
  const char *held = mcp_body_bytes(L, 1, &len);
  const char *s = held != NULL ? held : text_arg(L, 1, &len);
  lua_Integer expected, max_containers = luaL_optinteger(L, 4, 0);
  int ordered = lua_toboolean(L, 3), listing = LISTING_NONE, n, read;
  if (!lua_isinteger(L, 2)) luaL_typeerror(L, 2, "integer"); /* ids are integers: no "1" or 1.0 */
  expected = lua_tointeger(L, 2);
  if (lua_type(L, 3) == LUA_TSTRING)
    listing = luaL_checkoption(L, 3, NULL, listings) == 0 ? LISTING_TEXT : LISTING_KEPT;
  lua_settop(L, 4);
  read =
    fast_decode(L, s, len, lua_upvalueindex(1), ordered || listing != LISTING_NONE ? lua_upvalueindex(2) : 0,
                max_containers > 0 ? (size_t)max_containers : 0, listing, 1, &containers);
  if (read == 0) {
    if (held != NULL) { /* jansson reads strings: the rare refusal pays for one copy */
      lua_pushlstring(L, s, len);
      mcp_body_release(L, 1);
      lua_replace(L, 1);
    }
    n = delegate(L, 3, 4);
    if (listing != LISTING_NONE && lua_isstring(L, 1) && strcmp(lua_tostring(L, 1), "result") == 0)
      schemas_as_text(L, 2, listing == LISTING_KEPT);
    return n;
  }
  mcp_body_release(L, 1); /* everything decoded is a copy: the bytes can go now */
  if (read == M_COUNT) n = classify_members(L, 5, expected, lua_upvalueindex(1));
  else n = classify(L, 5, expected, lua_upvalueindex(1));
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
