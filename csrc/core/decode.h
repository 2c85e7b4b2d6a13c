/*
** decode.h: the JSON reader that the decoder (decode.c, JSON into Lua
** values) and the text builder (json_text.c, JSON into the encoder's text)
** share, that the JSON-RPC reader (rpc.c) walks a message with, and by
** which listing.c takes a listing's schemas as text. The codec's own
** interface: core.h offers the codec to everyone else.
**
** The reader follows jansson's rules with the codec's flags (see decode.c),
** so that both builders accept exactly what the decoder accepts. The small
** scanners a builder calls per token are inline here, so neither builder
** pays a call for them; the rare ones live in decode.c.
**
** A refusal is recorded where it is found (mcp_read_refuse: what and
** where, the first one kept) and then only returned upwards as 0, so the
** accepting path never spends anything on wording; the entry points word
** it once (mcp_read_push_refusal).
*/
#ifndef MCPCLIENT_DECODE_H
#define MCPCLIENT_DECODE_H

#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core.h"

/*
** Object keys remembered for reuse: a listing repeats the same few keys in
** every entry, and pushing a remembered key is a table read, where
** lua_pushlstring hashes the bytes and walks the string table (which holds
** every string of a big listing: cache misses). A power of two; keys of at
** most KEY_CACHE_LEN bytes (Lua's short strings, the ones it interns).
*/
#define MCP_READ_KEY_CACHE      64
#define MCP_READ_KEY_CACHE_LEN  40
#define MCP_READ_KEY_CACHE_FROM 16 /* keys read before the cache is made: a small text never makes it */

/*
** Two refusals the entry points tell apart (compared by address): nesting
** too deep (worded without a place), and the container cap reached.
*/
extern const char mcp_read_too_deep[], mcp_read_containers[];

/* A remembered key: its bytes (those of the string anchored in the cache table). */
typedef struct mcp_cached_key {
  const char *s;
  size_t len;
} mcp_cached_key;

typedef struct mcp_reader mcp_reader;

/*
** The first keys of an object, for the duplicate check: most objects of an
** answer have a few keys, and comparing with those is cheaper than a table
** lookup per key. Equal short strings are one interned object, so the
** pointers are usually equal; a long key is compared by its bytes.
*/
#define MCP_SEEN_KEYS 8
typedef struct mcp_seen_key {
  const char *s;
  size_t len;
} mcp_seen_key;

/*
** Values at one path of the text handed to a taker instead of being built
** (a listing's tool schemas, written as text by the listing's taker): the
** member names from the top value down (NULL: each element of an array),
** then the names of the members taken in the object those steps reach. The
** taker pushes the value at f->p (which of `ends` it is: `which`) and
** returns 1, or 0 on a refusal, as the decoder's own builders do.
*/
typedef struct mcp_read_path {
  const char *const *steps;
  int nsteps;
  const char *const *ends;
  int nends;
  int (*take)(mcp_reader *f, int depth, int which);
} mcp_read_path;

/*
** The reader's state. marker, order, scratch, keys are stack indexes
** (order 0: keys unrecorded). A role (see mcp_decode_value) says where a
** value stands on the path; 0 off it.
*/
struct mcp_reader {
  lua_State *L;
  const unsigned char *p, *end, *start;
  int marker, order, scratch;
  int keys;                               /* the key cache: a table of KEY_CACHE strings, made on first use */
  uint64_t cached;                        /* which of its slots hold a key */
  unsigned uncached;                      /* keys read while there was no cache yet */
  mcp_cached_key key[MCP_READ_KEY_CACHE]; /* each slot's key, valid where `cached` says so */
  int object_hint,
    object_size; /* the size the next object starts at; the member count of the last one read */
  size_t containers, max_containers; /* objects and arrays opened so far, and the cap (0: none) */
  size_t scratch_len;
  unsigned char *buf;        /* the scratch userdata's bytes */
  const mcp_read_path *path; /* values taken instead of built (NULL: none) */
  void *taker;               /* the taker's own state */
  int taken_order; /* the order table for what a taker reads as tables (outside, keys are unrecorded) */
  const char *why; /* the first refusal: what (NULL: none yet) */
  const unsigned char *at; /* ... and where */
};

/* Bytes a string may hold unescaped and unchecked: printable ASCII but '"' and '\\'. */
extern const unsigned char mcp_read_plain[256];

/* The reader's functions in decode.c (see there). */
int mcp_read_refuse(mcp_reader *f, const unsigned char *at, const char *why);
/* A refusal recorded, as the 0 the reading returns (a constant: the compiler sees the path end). */
#define MCP_REFUSE(f, at, why) (mcp_read_refuse((f), (at), (why)), 0)
void mcp_read_open(mcp_reader *f, lua_State *L, const char *s, size_t len);
void mcp_read_push_refusal(const mcp_reader *f);
int mcp_read_string(mcp_reader *f, const unsigned char **s, const unsigned char **e, int *escaped, int *wide);
int mcp_read_real(mcp_reader *f, const unsigned char *s, const unsigned char *e, double *out);
size_t mcp_read_unicode_escape(const unsigned char *s, const unsigned char *end, unsigned long *cp);
size_t mcp_put_utf8(unsigned char *o, unsigned long cp);
int mcp_read_key(mcp_reader *f, mcp_seen_key *key);
int mcp_read_repeated(lua_State *L, const mcp_seen_key *seen, int n_seen, int obj, const mcp_seen_key *key);
int mcp_decode_value(mcp_reader *f, int depth, int role);
int mcp_decode_member_role(const mcp_reader *f, int role, const char *key, size_t len);
int mcp_decode_element_role(const mcp_reader *f, int role);

/*
** The text builder (json_text.c): a value written as json.encode writes
** its decoded value, into a buffer that is a userdata at stack slot `slot`
** (mcp_text_open), with the top-level object's members described when
** `members` is set. mcp_text_value builds the value at f->p (no blanks
** before it): *text and *len are the input slice itself when nothing had
** to be rewritten, else the buffer; 0 when the builder gives up (then the
** caller reads the value again through the decoder).
*/
typedef struct mcp_text {
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
} mcp_text;
void mcp_text_open(mcp_text *t, lua_State *L, int reuse, size_t cap);
int mcp_text_value(mcp_reader *f, mcp_text *t, int depth, const unsigned char **text, size_t *len);

/*
** rpc.c: a decoding of core.rpc_classify besides tables, offered by name
** (mcp_rpc_add_decoding): the values at `path` go to its taker; `open`
** pushes what the taker keeps for one response (above the reader's slots,
** dropped with the call) and sets f->taker.
*/
typedef struct mcp_rpc_decoding {
  const mcp_read_path *path;
  void (*open)(mcp_reader *f);
} mcp_rpc_decoding;
void mcp_rpc_add_decoding(lua_State *L, const char *name, const mcp_rpc_decoding *d);

/* What follows a member or an element: another one, the end of the container, or a refusal. */
enum { MCP_SEP_BAD, MCP_SEP_MORE, MCP_SEP_END };

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
static inline const unsigned char *mcp_skip_plain(const unsigned char *p, const unsigned char *end) {
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
  while (p < end && mcp_read_plain[*p]) p++;
  return p;
}

/*
** Skip JSON blanks: exactly space, tab, LF and CR, as jansson does.
*/
static inline void mcp_skip_blanks(mcp_reader *f) {
  while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\r' || *f->p == '\t')) f->p++;
}

/*
** After a number or a literal, jansson has read one byte too far and puts
** it back; a NUL byte put back is lost (its reader takes NUL as "buffer
** empty" and reads on), so one NUL right after such a token vanishes:
** "1\0" and "[true\0]" are accepted, "1\0\0" is not. Mirrored here,
** because the verdict must be jansson's.
*/
static inline void mcp_skip_lost_nul(mcp_reader *f) {
  if (f->p < f->end && *f->p == '\0') f->p++;
}

/*
** Read the number at f->p: JSON's grammar exactly (no leading zeros, no
** bare '.', digits after '.' and after the exponent mark). Its text is
** [*s, *e); *real is set when it has a fraction or an exponent (else it
** is an integer). Returns 0 when the grammar refuses.
*/
static inline int mcp_read_number(mcp_reader *f, const unsigned char **s, const unsigned char **e,
                                  int *real) {
  const unsigned char *p = f->p, *end = f->end;
  *real = 0;
  if (p < end && *p == '-') p++;
  if (p >= end) return MCP_REFUSE(f, p, "invalid number");
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9')
    while (p < end && *p >= '0' && *p <= '9') p++;
  else return MCP_REFUSE(f, f->p, p == f->p ? "a value expected" : "invalid number");
  if (p < end && *p == '.') {
    *real = 1;
    if (++p >= end || *p < '0' || *p > '9') return MCP_REFUSE(f, p, "invalid number");
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    *real = 1;
    if (++p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return MCP_REFUSE(f, p, "invalid number");
    while (p < end && *p >= '0' && *p <= '9') p++;
  }
  *s = f->p;
  *e = p;
  f->p = p;
  mcp_skip_lost_nul(f);
  return 1;
}

/*
** Read the integer written in digits [s, e) (an optional '-' first) into
** *out exactly as strtoll reads it: out of the 64-bit range refuses
** (returns 0).
*/
static inline int mcp_read_integer(mcp_reader *f, const unsigned char *s, const unsigned char *e,
                                   lua_Integer *out) {
  const unsigned char *start = s;
  int neg = *s == '-';
  uint64_t v = 0, limit;
  if (neg) s++;
  limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; s < e; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (limit - d) / 10) return MCP_REFUSE(f, start, "too big integer");
    v = v * 10 + d;
  }
  if (neg) *out = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(lua_Integer)v;
  else *out = (lua_Integer)v;
  return 1;
}

/*
** Match the literal word w at f->p. jansson reads a whole run of letters as
** one token, so "truex" is one bad token: a letter right after the word
** refuses too.
*/
static inline int mcp_read_literal(mcp_reader *f, const char *w, size_t n) {
  const unsigned char *p = f->p;
  if ((size_t)(f->end - p) < n || memcmp(p, w, n) != 0) return MCP_REFUSE(f, p, "invalid literal");
  p += n;
  if (p < f->end && ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')) return MCP_REFUSE(f, f->p, "invalid literal");
  f->p = p;
  mcp_skip_lost_nul(f);
  return 1;
}

/*
** Count one more object or array; 0 once past the cap, so a body of
** hundreds of thousands of "{}" is given up before it is all built.
*/
static inline int mcp_read_open_container(mcp_reader *f) {
  if (++f->containers <= f->max_containers || f->max_containers == 0) return 1;
  return MCP_REFUSE(f, f->p, mcp_read_containers);
}

/*
** Read what follows a member or an element: ',' and the blanks after it
** (MCP_SEP_MORE), the closing byte (MCP_SEP_END), or anything else
** (MCP_SEP_BAD, refused).
*/
static inline int mcp_read_separator(mcp_reader *f, unsigned char close) {
  mcp_skip_blanks(f);
  if (f->p >= f->end || (*f->p != ',' && *f->p != close)) {
    mcp_read_refuse(f, f->p, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
    return MCP_SEP_BAD;
  }
  if (*f->p++ == close) return MCP_SEP_END;
  mcp_skip_blanks(f);
  return MCP_SEP_MORE;
}

#endif
