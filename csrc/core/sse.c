/*
** sse.c: an incremental decoder for text/event-stream bodies. A POST
** answered with an event stream is read to its end (or to our answer), and
** the last event id is kept so an interrupted stream can be resumed.
** It follows the WHATWG HTML rules for interpreting an event stream, with
** one lenient exception: at end of stream a pending event is dispatched even
** without its closing blank line (servers that close the connection right
** after their last event still deliver it). Bytes are passed
** through unchanged; the JSON layer validates the payload's UTF-8.
**
** All buffers belong to the decoder userdata and are allocated with the
** state's allocator, so a Lua error raised part-way through a feed leaves
** nothing unowned: close/__gc frees whatever has been grown so far.
*/
#include <stdint.h>
#include <string.h>

#include "core.h"

#define SSE_MT "mcpclient.sse_decoder"

/*
** A growable byte buffer; capacity doubles, so appending n bytes costs O(n)
** amortised. Not the Buf of net/http.h, on purpose: that one is filled from
** libcurl callbacks, so it uses malloc and reports failure instead of
** raising. This one is filled from Lua calls, so it uses the state's
** allocator (memory limits apply) and raises, which is safe because the
** decoder userdata owns it and close/__gc frees it.
*/
typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

/* The leading-BOM filter: 0..2 bytes of it seen so far, or BOM_DECIDED. */
#define BOM_DECIDED 3
static const unsigned char bom_bytes[3] = {0xEF, 0xBB, 0xBF};

typedef struct Decoder {
  lua_Alloc alloc; /* the allocator the buffers came from, kept for __gc */
  void *alloc_ud;
  int open;       /* 0 before acquisition and after close */
  int finished;   /* finish() has run: no more input */
  int bom;        /* see BOM_DECIDED */
  int after_cr;   /* the last byte seen ended a line with CR: skip one LF */
  int has_id_buf; /* an id field has been seen (the buffer may be empty) */
  int id_dirty;   /* id_buf changed since the last dispatch */
  int has_last_id;
  int has_retry;
  lua_Integer retry;
  Buf line;    /* the unterminated line carried across chunks */
  Buf data;    /* data buffer: each data line plus "\n" */
  Buf type;    /* event type buffer */
  Buf id_buf;  /* last event ID buffer */
  Buf last_id; /* last event ID string, set at dispatch */
} Decoder;

/* Where completed events go: the results array at stack index idx, n so far. */
typedef struct Out {
  int idx;
  lua_Integer n;
} Out;

/*
** Make room for extra more bytes. Raises on overflow or exhaustion; the buffer
** is still owned by the decoder then, so nothing leaks.
*/
static void buf_reserve(lua_State *L, Decoder *d, Buf *b, size_t extra) {
  size_t need, cap;
  void *p;
  if (extra <= b->cap - b->len) return;
  if (extra > SIZE_MAX / 2 - b->len) luaL_error(L, "event stream too large");
  need = b->len + extra;
  cap = b->cap ? b->cap : 64;
  while (cap < need) cap *= 2;
  p = d->alloc(d->alloc_ud, b->p, b->cap, cap);
  if (p == NULL) luaL_error(L, "not enough memory for the event stream");
  b->p = p;
  b->cap = cap;
}

/*
** Append n bytes (s may be NULL when n is 0).
*/
static void buf_append(lua_State *L, Decoder *d, Buf *b, const char *s, size_t n) {
  if (n == 0) return;
  buf_reserve(L, d, b, n);
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

/*
** Replace the contents with n bytes.
*/
static void buf_set(lua_State *L, Decoder *d, Buf *b, const char *s, size_t n) {
  b->len = 0;
  buf_append(L, d, b, s, n);
}

/*
** Give the memory back; the buffer is empty and reusable afterwards.
*/
static void buf_free(Decoder *d, Buf *b) {
  if (b->p != NULL) d->alloc(d->alloc_ud, b->p, b->cap, 0);
  b->p = NULL;
  b->len = b->cap = 0;
}

/*
** Push a buffer's bytes as a Lua string.
*/
static void buf_push(lua_State *L, const Buf *b, size_t len) {
  lua_pushlstring(L, len ? b->p : "", len);
}

/*
** The blank-line step: the last event ID buffer becomes the last event ID
** even when nothing is dispatched (MCP resumption needs the id of a priming
** event). An event whose data is empty is not dispatched either: the WHATWG
** rules would fire one for a lone "data:" line, but that is exactly the MCP
** priming event (id plus empty data), which carries no message for the caller.
*/
static void dispatch(lua_State *L, Decoder *d, Out *o) {
  if (d->id_dirty) {
    buf_set(L, d, &d->last_id, d->id_buf.p, d->id_buf.len);
    d->has_last_id = d->has_id_buf;
    d->id_dirty = 0;
  }
  if (d->data.len <= 1) { /* empty, or one empty data line ("\n") */
    d->data.len = 0;
    d->type.len = 0;
    return;
  }
  lua_createtable(L, 0, 3);
  buf_push(L, &d->data, d->data.len - 1); /* data lines always end in "\n": drop the last */
  lua_setfield(L, -2, "data");
  if (d->type.len > 0) { /* an empty type means the default, reported as nil */
    buf_push(L, &d->type, d->type.len);
    lua_setfield(L, -2, "event");
  }
  if (d->has_last_id) {
    buf_push(L, &d->last_id, d->last_id.len);
    lua_setfield(L, -2, "id");
  }
  lua_rawseti(L, o->idx, ++o->n);
  d->data.len = 0;
  d->type.len = 0;
}

/*
** Does the field name at f (n bytes) equal the literal name?
*/
static int field_is(const char *f, size_t n, const char *name) {
  return strlen(name) == n && memcmp(f, name, n) == 0;
}

/*
** A digits-only retry value sets the reconnection time; anything else
** (including an empty value) is ignored. Absurd values saturate rather than wrap.
*/
static void set_retry(Decoder *d, const char *v, size_t n) {
  lua_Integer ms = 0;
  size_t i;
  if (n == 0) return;
  for (i = 0; i < n; i++)
    if (v[i] < '0' || v[i] > '9') return;
  for (i = 0; i < n; i++) {
    int digit = v[i] - '0';
    if (ms > (LUA_MAXINTEGER - digit) / 10) {
      ms = LUA_MAXINTEGER;
      break;
    }
    ms = ms * 10 + digit;
  }
  d->retry = ms;
  d->has_retry = 1;
}

/*
** One complete line (terminator excluded): blank dispatches, ':' starts a
** comment, otherwise field up to the first ':' and value after it with one
** leading space removed; no ':' means the whole line is the field name.
*/
static void process_line(lua_State *L, Decoder *d, Out *o, const char *s, size_t n) {
  const char *colon, *v;
  size_t flen, vlen;
  if (n == 0) {
    dispatch(L, d, o);
    return;
  }
  if (s[0] == ':') return;
  colon = memchr(s, ':', n);
  if (colon != NULL) {
    flen = (size_t)(colon - s);
    v = colon + 1;
    vlen = n - flen - 1;
    if (vlen > 0 && *v == ' ') {
      v++;
      vlen--;
    }
  } else {
    flen = n;
    v = s + n;
    vlen = 0;
  }
  if (field_is(s, flen, "data")) {
    buf_reserve(L, d, &d->data, vlen + 1);
    buf_append(L, d, &d->data, v, vlen);
    buf_append(L, d, &d->data, "\n", 1);
  } else if (field_is(s, flen, "event")) {
    buf_set(L, d, &d->type, v, vlen);
  } else if (field_is(s, flen, "id")) {
    if (vlen == 0 || memchr(v, '\0', vlen) == NULL) {
      buf_set(L, d, &d->id_buf, v, vlen);
      d->has_id_buf = 1;
      d->id_dirty = 1;
    }
  } else if (field_is(s, flen, "retry")) {
    set_retry(d, v, vlen);
  }
}

/*
** Split bytes into lines at CRLF, LF or CR. A CR is acted on at once (it ends
** the line whatever follows); only whether a following LF belongs to it waits
** for the next byte, which may be in the next chunk. Lines wholly inside the
** chunk are processed in place; only a line crossing a chunk edge is copied.
*/
static void scan(lua_State *L, Decoder *d, Out *o, const char *s, size_t n) {
  size_t i = 0, start;
  if (n > 0 && d->after_cr) {
    d->after_cr = 0;
    if (s[0] == '\n') i = 1;
  }
  start = i;
  while (i < n) {
    char c = s[i];
    if (c != '\n' && c != '\r') {
      i++;
      continue;
    }
    if (d->line.len == 0) {
      process_line(L, d, o, s + start, i - start);
    } else {
      buf_append(L, d, &d->line, s + start, i - start);
      process_line(L, d, o, d->line.p, d->line.len);
      d->line.len = 0;
    }
    if (c == '\r') {
      if (i + 1 == n) d->after_cr = 1;
      else if (s[i + 1] == '\n') i++;
    }
    start = ++i;
  }
  buf_append(L, d, &d->line, s + start, n - start);
}

/*
** Drop a UTF-8 BOM at the very start of the stream, however the chunks split
** it; if the stream starts with only part of one, those bytes are ordinary input.
*/
static void feed_bytes(lua_State *L, Decoder *d, Out *o, const char *s, size_t n) {
  while (d->bom != BOM_DECIDED && n > 0) {
    if ((unsigned char)s[0] == bom_bytes[d->bom]) {
      d->bom++;
      s++;
      n--;
    } else {
      int seen = d->bom;
      d->bom = BOM_DECIDED;
      scan(L, d, o, (const char *)bom_bytes, (size_t)seen);
    }
  }
  scan(L, d, o, s, n);
}

/*
** The partial BOM still held back at end of stream is ordinary input.
*/
static void flush_bom(lua_State *L, Decoder *d, Out *o) {
  if (d->bom != BOM_DECIDED) {
    int seen = d->bom;
    d->bom = BOM_DECIDED;
    scan(L, d, o, (const char *)bom_bytes, (size_t)seen);
  }
}

/*
** The decoder at argument 1; raises if it has been closed.
*/
static Decoder *check_open(lua_State *L) {
  Decoder *d = (Decoder *)luaL_checkudata(L, 1, SSE_MT);
  if (!d->open) luaL_error(L, "attempt to use a closed event-stream decoder");
  return d;
}

/*
** Closed, or finished: either way no more input is accepted.
*/
static Decoder *check_feedable(lua_State *L) {
  Decoder *d = check_open(L);
  if (d->finished) luaL_error(L, "event-stream decoder already finished");
  return d;
}

/*
** dec:feed(chunk) -> array of the events this chunk completed, in order.
*/
static int l_feed(lua_State *L) {
  Decoder *d = check_feedable(L);
  size_t n;
  const char *s;
  Out o;
  luaL_checktype(L, 2, LUA_TSTRING);
  s = lua_tolstring(L, 2, &n);
  lua_settop(L, 2);
  lua_newtable(L);
  o.idx = 3;
  o.n = 0;
  feed_bytes(L, d, &o, s, n);
  return 1;
}

/*
** dec:finish() -> the events pending at end of stream: a held-back partial
** BOM and an unterminated last line are processed, then the lenient final
** dispatch. The per-event buffers are released; the ids and retry stay readable.
*/
static int l_finish(lua_State *L) {
  Decoder *d = check_feedable(L);
  Out o;
  lua_settop(L, 1);
  lua_newtable(L);
  o.idx = 2;
  o.n = 0;
  d->finished = 1;
  flush_bom(L, d, &o);
  if (d->line.len > 0) {
    process_line(L, d, &o, d->line.p, d->line.len);
    d->line.len = 0;
  }
  dispatch(L, d, &o);
  buf_free(d, &d->line);
  buf_free(d, &d->data);
  buf_free(d, &d->type);
  return 1;
}

/*
** dec:last_event_id() -> the last event ID string, or nil if no id was ever dispatched.
*/
static int l_last_event_id(lua_State *L) {
  Decoder *d = check_open(L);
  if (d->has_last_id) buf_push(L, &d->last_id, d->last_id.len);
  else lua_pushnil(L);
  return 1;
}

/*
** dec:retry() -> reconnection time in milliseconds, or nil if no valid retry field.
*/
static int l_retry(lua_State *L) {
  Decoder *d = check_open(L);
  if (d->has_retry) lua_pushinteger(L, d->retry);
  else lua_pushnil(L);
  return 1;
}

/*
** close, __gc and __close: free every buffer; idempotent.
*/
static int l_close(lua_State *L) {
  Decoder *d = (Decoder *)luaL_checkudata(L, 1, SSE_MT);
  if (d->open) {
    d->open = 0;
    buf_free(d, &d->line);
    buf_free(d, &d->data);
    buf_free(d, &d->type);
    buf_free(d, &d->id_buf);
    buf_free(d, &d->last_id);
  }
  return 0;
}

/*
** __tostring: says whether the decoder is still usable.
*/
static int l_tostring(lua_State *L) {
  Decoder *d = (Decoder *)luaL_checkudata(L, 1, SSE_MT);
  if (!d->open) lua_pushliteral(L, "sse_decoder (closed)");
  else lua_pushfstring(L, "sse_decoder (%p)", (void *)d);
  return 1;
}

/*
** core.sse_decoder() -> a new decoder. The userdata is created closed (all
** zero, nothing to free) and only then marked open.
*/
static int l_new(lua_State *L) {
  Decoder *d = (Decoder *)lua_newuserdatauv(L, sizeof(Decoder), 0);
  memset(d, 0, sizeof *d);
  luaL_setmetatable(L, SSE_MT);
  d->alloc = lua_getallocf(L, &d->alloc_ud);
  d->open = 1;
  return 1;
}

/*
** Adds core.sse_decoder. The metatable is built only the first time: busted
** reopens the module per spec file and existing decoders keep theirs.
*/
void mcp_register_sse(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"feed", l_feed},   {"finish", l_finish}, {"last_event_id", l_last_event_id},
    {"retry", l_retry}, {"close", l_close},   {NULL, NULL},
  };
  static const luaL_Reg metamethods[] = {
    {"__gc", l_close},
    {"__close", l_close},
    {"__tostring", l_tostring},
    {NULL, NULL},
  };
  if (luaL_newmetatable(L, SSE_MT)) {
    luaL_setfuncs(L, metamethods, 0);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_new);
  lua_setfield(L, -2, "sse_decoder");
}
