/*
** json_text.c: the text builder, the codec's second builder over the
** decoder's reader (decode.h): a JSON value read with the decoder's grammar
** and written, in the same pass, as exactly the text json.encode gives for
** the decoded value. The schema normaliser reads an object's members off
** it (mcp_canonical_object), and a listing's schemas are written with it
** (listing.c), so a catalogue's schemas never become tables.
**
** It never words a refusal: where it gives up, its caller reads the value
** again through the decoder, which has the final word.
*/
#include <string.h>

#include "decode.h"

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

/*
** Grow the output to hold m more bytes, by replacing the userdata in its
** slot, so nothing is freed by hand.
*/
static void text_grow(mcp_reader *f, mcp_text *t, size_t m) {
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
static const unsigned char *text_bytes(const mcp_text *t, size_t at) {
  return at < t->n ? t->out + at : t->run + (at - t->n);
}

/*
** Write the pending run out up to the input byte at p, which starts the
** run from then on. Called where the input and the text part: the caller
** then writes its token in the encoder's form and moves the run past it.
*/
static void text_flush(mcp_reader *f, mcp_text *t, const unsigned char *p) {
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
static void text_skip_blanks(mcp_reader *f, mcp_text *t) {
  text_flush(f, t, f->p);
  mcp_skip_blanks(f);
  t->run = f->p;
}

/* Skip blanks at f->p, if any (compact input has none: then this is one test, inline). */
#define text_blanks(f, t)                                                                                    \
  ((void)((f)->p >= (f)->end || (*(f)->p != ' ' && *(f)->p != '\n' && *(f)->p != '\r' && *(f)->p != '\t') || \
          (text_skip_blanks((f), (t)), 0)))

/*
** A token read from `token` to its end `e` whose text is the input's: the
** run goes on over it. Only when jansson's reader lost a NUL after it
** (mcp_skip_lost_nul moved f->p past e) does the run part there, the NUL left out.
*/
static void text_same(mcp_reader *f, mcp_text *t, const unsigned char *e) {
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
  if (mcp_utf8_hidden((uint32_t)cp)) return put_u(o, cp); /* all of them lie below U+10000 */
  return o + mcp_put_utf8(o, cp);
}

/*
** Write the string body [s, e) that mcp_read_string accepted, decoding its
** escapes and writing each character back in the encoder's form. Returns
** 0 when an escape is refused, or (for a key) when it decodes to NUL.
*/
static int put_escaped_string(mcp_text *t, const unsigned char *s, const unsigned char *e, int key) {
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
          used = mcp_read_unicode_escape(s + 2, e, &cp);
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
      s += mcp_utf8_unit(s, (size_t)(e - s), &ok, &u); /* mcp_read_string validated it */
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
static COLD int emit_odd_string(mcp_reader *f, mcp_text *t, int key) {
  const unsigned char *s, *e, *token = f->p;
  int escaped, wide;
  if (!mcp_read_string(f, &s, &e, &escaped, &wide)) return 0;
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
static inline int emit_string(mcp_reader *f, mcp_text *t, int key) {
  const unsigned char *e = mcp_skip_plain(f->p + 1, f->end);
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
static int emit_number(mcp_reader *f, mcp_text *t) {
  const unsigned char *s, *e;
  int real;
  if (!mcp_read_number(f, &s, &e, &real)) return 0;
  if (real) {
    char tmp[MCP_JSON_REAL_MAX];
    double d;
    size_t len;
    if (!mcp_read_real(f, s, e, &d) || (len = mcp_json_format_real(d, tmp)) == 0) return 0;
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
    if (!mcp_read_integer(f, s, e, &v)) return 0;
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
static int emit_literal(mcp_reader *f, mcp_text *t, const char *w, size_t n) {
  const unsigned char *token = f->p;
  if (!mcp_read_literal(f, w, n)) return 0;
  text_same(f, t, token + n);
  return 1;
}

static int emit_value(mcp_reader *f, mcp_text *t, int depth, int level);

/*
** Whether the key at keys[n] repeats one of keys[0..n) (all in the text).
*/
static int repeated_key(const mcp_text *t, const KeySpan *keys, int n) {
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
static int emit_member_value(mcp_reader *f, mcp_text *t, int depth, size_t key_at, size_t key_len) {
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
static int emit_open(mcp_reader *f, mcp_text *t, unsigned char close) {
  f->p++;
  text_blanks(f, t);
  if (f->p >= f->end || *f->p != close) return 0;
  f->p++;
  return 1;
}

/* Read what follows a member or an element, as mcp_read_separator does, its blanks left out of the text. */
static inline int emit_separator(mcp_reader *f, mcp_text *t, unsigned char close) {
  text_blanks(f, t);
  if (f->p >= f->end || (*f->p != ',' && *f->p != close)) return MCP_SEP_BAD;
  if (*f->p++ == close) return MCP_SEP_END;
  text_blanks(f, t);
  return MCP_SEP_MORE;
}

/*
** Read the object at f->p, a container at level `level` of the value (1:
** the value itself). Keys below the top level go through the refused test
** when the normaliser gave one.
*/
static int emit_object(mcp_reader *f, mcp_text *t, int depth, int level) {
  KeySpan keys[MAX_KEYS];
  int n = 0, objects = 1, sep = MCP_SEP_MORE;
  if (emit_open(f, t, '}')) sep = MCP_SEP_END;
  while (sep == MCP_SEP_MORE) {
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
    if ((sep = emit_separator(f, t, '}')) == MCP_SEP_BAD) return 0;
  }
  if (level == 2 && objects) t->shape = MCP_SHAPE_OBJECT_OF_OBJECTS;
  return 1;
}

/*
** Read the array at f->p, a container at level `level` of the value.
*/
static int emit_array(mcp_reader *f, mcp_text *t, int depth, int level) {
  int strings = 1, sep = MCP_SEP_MORE;
  if (emit_open(f, t, ']')) sep = MCP_SEP_END;
  while (sep == MCP_SEP_MORE) {
    if (f->p >= f->end) return 0;
    strings = strings && *f->p == '"';
    if (!(*f->p == '"' ? emit_string(f, t, 0) : emit_value(f, t, depth + 1, level + 1))) return 0;
    if ((sep = emit_separator(f, t, ']')) == MCP_SEP_BAD) return 0;
  }
  if (level == 2 && strings) t->shape = MCP_SHAPE_STRING_LIST;
  return 1;
}

/*
** Read the value at f->p, found at container level depth of the whole
** text (bounded as the table decoder bounds it) and level `level` of the
** value being written. Returns 0 when the builder gives up.
*/
static int emit_value(mcp_reader *f, mcp_text *t, int depth, int level) {
  if (f->p >= f->end) return 0;
  switch (*f->p) {
    case '{':
    case '[':
      if (depth > MCP_JSON_MAX_DEPTH || level > MAX_LEVELS || !mcp_read_open_container(f)) return 0;
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
int mcp_text_value(mcp_reader *f, mcp_text *t, int depth, const unsigned char **text, size_t *len) {
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
** Start a text builder writing into a buffer anchored at a new stack slot:
** the userdata at stack index `reuse` when it is one of at least cap bytes
** (a caller's buffer kept across calls), else a new one.
*/
void mcp_text_open(mcp_text *t, lua_State *L, int reuse, size_t cap) {
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
  mcp_reader f;
  mcp_text t;
  const unsigned char *out;
  mcp_read_open(&f, L, s, len);
  mcp_text_open(&t, L, reuse, len + 16);
  t.refused = refused;
  t.members = members;
  mcp_skip_blanks(&f);
  if (f.p >= f.end || *f.p != '{' || !mcp_text_value(&f, &t, 1, &out, text_len)) {
    lua_settop(L, base);
    return -1;
  }
  mcp_skip_blanks(&f);
  if (f.p != f.end) {
    lua_settop(L, base);
    return -1;
  }
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  *text = (const char *)out;
  return t.nmembers;
}
