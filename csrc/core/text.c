/*
** text.c: the text rule, what the client does to text the far side wrote
** before a person, a log, a message or a model reads it: clip and label
** (controls, C1 and bidi/invisible formatting out, bounded), flattening of
** content blocks, and the UTF-8-safe result bound. These run on every tool result and every error message, so each is one
** linear pass that stops as soon as the rest of the input cannot matter, and
** every output is valid UTF-8 whatever bytes came in.
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core.h"

#define CLIP_LIMIT  200   /* code points of far-side text in a message */
#define LABEL_LIMIT 100   /* code points of a server's self-description */
#define BOUND_LIMIT 50000 /* bytes of a tool result handed on */

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */
#define ELLIPSIS    "\xE2\x80\xA6" /* U+2026 */

/*
** Append the repair of s[0..n) to b (each maximal invalid subpart becomes
** U+FFFD), stopping before the first unit whose repaired form would take the
** output past cap bytes. Returns 1 when all of s fit. Valid runs are copied
** in one piece, so clean text costs one memcpy. Stopping early is what keeps
** bounding a 2 MiB result proportional to the bound, not to the result.
*/
static int utf8_repair_into(luaL_Buffer *b, const unsigned char *s, size_t n, size_t cap) {
  size_t i = 0, run = 0, out = 0;
  while (i < n) {
    int ok;
    uint32_t cp;
    size_t len = s[i] < 0x80 ? (ok = 1, 1) : mcp_utf8_unit(s + i, n - i, &ok, &cp);
    size_t outlen = ok ? len : sizeof REPLACEMENT - 1;
    if (outlen > cap - out) {
      luaL_addlstring(b, (const char *)s + run, i - run);
      return 0;
    }
    out += outlen;
    if (!ok) {
      luaL_addlstring(b, (const char *)s + run, i - run);
      luaL_addlstring(b, REPLACEMENT, sizeof REPLACEMENT - 1);
      run = i + len;
    }
    i += len;
  }
  luaL_addlstring(b, (const char *)s + run, i - run);
  return 1;
}

/* A string argument, strictly: a number is not remote text. */
static const char *check_text(lua_State *L, int arg, size_t *len) {
  luaL_checktype(L, arg, LUA_TSTRING);
  return lua_tolstring(L, arg, len);
}

/* ==================================================================== */
/* clip and label                                                       */
/* ==================================================================== */

/* Control characters in the text rule's sense: C0, DEL and every hidden code point. */
static int is_control(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || mcp_utf8_hidden(cp);
}

/*
** Push clip(s): control runs become one space, the ends are trimmed, and
** more than limit code points become the first limit plus an ellipsis.
** Spaces are held back as a count and written only when something visible
** follows them, which trims the end for free and keeps the buffer at most
** limit code points; the scan stops at the first visible character past the
** limit, so a 3 MiB body costs no more than its first few hundred bytes
** (plus any blank run before that character).
*/
static void push_clip(lua_State *L, const char *text, size_t n, lua_Integer limit) {
  const unsigned char *s = (const unsigned char *)text;
  luaL_Buffer b;
  size_t i = 0;
  lua_Integer emitted = 0, pending = 0;
  int in_control = 0;
  luaL_buffinit(L, &b);
  while (i < n) {
    int ok;
    uint32_t cp;
    size_t len = mcp_utf8_unit(s + i, n - i, &ok, &cp);
    if (ok && (cp == ' ' || is_control(cp))) {
      int control = cp != ' ';
      if (emitted > 0 && !(control && in_control)) pending++;
      in_control = control;
      i += len;
      continue;
    }
    in_control = 0;
    if (emitted + pending >= limit) { /* this character would be number limit+1 */
      for (; emitted < limit; emitted++) luaL_addchar(&b, ' ');
      luaL_addlstring(&b, ELLIPSIS, sizeof ELLIPSIS - 1);
      break;
    }
    for (; pending > 0; pending--, emitted++) luaL_addchar(&b, ' ');
    if (ok) luaL_addlstring(&b, text + i, len);
    else luaL_addlstring(&b, REPLACEMENT, sizeof REPLACEMENT - 1);
    emitted++;
    i += len;
  }
  luaL_pushresult(&b);
}

/*
** C API of clip, for messages other C files compose from far-side text.
*/
void mcp_text_clip(lua_State *L, const char *s, size_t n, lua_Integer limit) {
  push_clip(L, s, n, limit);
}

/*
** 1 when clip would give the text back unchanged, judged in one cheap pass:
** at most limit bytes of printable ASCII, neither end a space. Most names
** and descriptions a server lists are such text, and a listing clips four
** fields of each of thousands of entries: these skip building a copy.
*/
static int clean_ascii(const char *text, size_t n, lua_Integer limit) {
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  if ((lua_Unsigned)n > (lua_Unsigned)limit) return 0;
  if (n > 0 && (s[0] == ' ' || s[n - 1] == ' ')) return 0;
  /* eight bytes at a time: a word holds a byte below 0x20 or past 0x7E exactly when a test fires */
  for (; n - i >= 8; i += 8) {
    uint64_t x;
    memcpy(&x, s + i, 8);
    if ((((x - ones * 0x20) & ~x) | ((x + ones) | x)) & highs) return 0;
  }
  for (; i < n; i++) {
    if (s[i] < 0x20 || s[i] >= 0x7F) return 0;
  }
  return 1;
}

/*
** clip(text [, limit = 200]) -> text: applied to every fragment of remote or
** exception text that reaches a message, a log line or a terminal. Text the
** rule would not change is returned as it is, uncopied.
*/
static int l_clip(lua_State *L) {
  size_t n;
  const char *s = check_text(L, 1, &n);
  lua_Integer limit = luaL_optinteger(L, 2, CLIP_LIMIT);
  luaL_argcheck(L, limit >= 0, 2, "limit must not be negative");
  if (clean_ascii(s, n, limit)) {
    lua_settop(L, 1);
    return 1;
  }
  push_clip(L, s, n, limit);
  return 1;
}

/* ==================================================================== */
/* listed entries                                                       */
/* ==================================================================== */

#define LISTED_FIELDS 16 /* display fields one listing names, at most */

/* A display field of a listing: its name (a string anchored on the stack) and its clip limit. */
typedef struct Shown {
  int key; /* stack index of the name */
  lua_Integer limit;
} Shown;

/*
** The display fields of clip_listed's map at idx into fields[] (names
** pushed above the stack top so they stay anchored); returns their count.
** Misuse raises: a name that is not a string, a limit that is not a
** non-negative integer, more than LISTED_FIELDS of them.
*/
static int listed_fields(lua_State *L, int idx, Shown *fields) {
  int n = 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_argerror(L, idx, "display field names must be strings");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
      luaL_argerror(L, idx, "display field limits must be non-negative integers");
    if (n == LISTED_FIELDS) luaL_argerror(L, idx, "too many display fields");
    luaL_checkstack(L, 3, "clip_listed");
    fields[n].limit = lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, -1); /* the name stays, one copy anchored, one for lua_next */
    fields[n].key = lua_gettop(L) - 1;
    n++;
  }
  return n;
}

/*
** clip_listed(page, into, id, display) -> n: the entries of a listing page
** as the caller gets them, appended to the array `into` (which may be
** `page` itself: it is then compacted in place). An entry is kept when it
** is a table whose member `id` is a string (that member kept exactly: a
** later request sends it back); each of its members named in `display`
** (name -> limit) is replaced by clip(value, limit), or removed when it is
** not a string (dropped rather than converted). Returns the new length of
** `into`. The entries are decoded JSON, so they are read and written raw.
** Runs once per page over up to thousands of entries: text the rule leaves
** as it is (short printable ASCII, the usual case) is not touched at all.
*/
static int l_clip_listed(lua_State *L) {
  Shown fields[LISTED_FIELDS];
  lua_Integer i, count, n;
  int nfields, k, in_place, entry;
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TSTRING);
  lua_settop(L, 4);
  in_place = lua_rawequal(L, 1, 2);
  nfields = listed_fields(L, 4, fields);
  count = (lua_Integer)lua_rawlen(L, 1);
  n = in_place ? 0 : (lua_Integer)lua_rawlen(L, 2);
  luaL_checkstack(L, 4, "clip_listed");
  entry = lua_gettop(L) + 1;
  for (i = 1; i <= count; i++) {
    if (lua_rawgeti(L, 1, i) != LUA_TTABLE) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, 3);
    if (lua_rawget(L, entry) != LUA_TSTRING) {
      lua_pop(L, 2);
      continue;
    }
    lua_pop(L, 1);
    for (k = 0; k < nfields; k++) {
      size_t len;
      const char *s;
      lua_pushvalue(L, fields[k].key);
      switch (lua_rawget(L, entry)) {
        case LUA_TNIL: break;
        case LUA_TSTRING:
          s = lua_tolstring(L, -1, &len);
          if (clean_ascii(s, len, fields[k].limit)) break;
          lua_pushvalue(L, fields[k].key);
          push_clip(L, s, len, fields[k].limit);
          lua_rawset(L, entry);
          break;
        default:
          lua_pushvalue(L, fields[k].key);
          lua_pushnil(L);
          lua_rawset(L, entry);
      }
      lua_pop(L, 1);
    }
    if (in_place && n + 1 == i) {
      n++;
      lua_pop(L, 1);
    } else {
      lua_rawseti(L, 2, ++n);
    }
  }
  if (in_place)
    for (i = count; i > n; i--) {
      lua_pushnil(L);
      lua_rawseti(L, 2, i);
    }
  lua_pushinteger(L, n);
  return 1;
}

/*
** label(value) -> text: the server's self-description (protocol version,
** name, version) shown to the operator, clipped at 100; anything that is
** not a string is shown as nothing rather than converted.
*/
static int l_label(lua_State *L) {
  size_t n;
  const char *s;
  luaL_checkany(L, 1);
  if (lua_type(L, 1) != LUA_TSTRING) {
    lua_pushliteral(L, "");
    return 1;
  }
  s = lua_tolstring(L, 1, &n);
  push_clip(L, s, n, LABEL_LIMIT);
  return 1;
}

/* ==================================================================== */
/* flatten                                                              */
/* ==================================================================== */

/*
** Labels a dropped block may be counted under, in ascending byte order so
** that a bit mask read from low to high is already sorted. The server's own
** type string is never echoed: anything not in this list is "other".
*/
static const char *const drop_labels[] = {"audio", "image", "other", "resource", "resource_link"};
#define DROP_OTHER 2

/* Index into drop_labels for the block at the top of the stack. */
static int drop_label(lua_State *L) {
  size_t n, k;
  const char *type;
  if (lua_type(L, -1) != LUA_TTABLE) return DROP_OTHER;
  lua_pushliteral(L, "type");
  lua_rawget(L, -2);
  if (lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    return DROP_OTHER;
  }
  type = lua_tolstring(L, -1, &n);
  for (k = 0; k < sizeof drop_labels / sizeof drop_labels[0]; k++) {
    if (k != DROP_OTHER && strlen(drop_labels[k]) == n && memcmp(drop_labels[k], type, n) == 0) {
      lua_pop(L, 1);
      return (int)k;
    }
  }
  lua_pop(L, 1);
  return DROP_OTHER;
}

/*
** Classify the block at the top of the stack: 1 = a text block with text to
** keep, 0 = a text block with nothing to keep (not counted as dropped),
** -1 = dropped.
*/
static int text_block(lua_State *L) {
  int keep;
  if (lua_type(L, -1) != LUA_TTABLE) return -1;
  lua_pushliteral(L, "type");
  lua_rawget(L, -2);
  keep =
    lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) == 4 && memcmp(lua_tostring(L, -1), "text", 4) == 0;
  lua_pop(L, 1);
  if (!keep) return -1;
  lua_pushliteral(L, "text");
  lua_rawget(L, -2);
  keep = lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) > 0;
  lua_pop(L, 1);
  return keep;
}

/*
** 1 when the table at idx is a list: decoded from a JSON array (the
** marker), or a plain Lua sequence 1..n with nothing else in it.
*/
static int is_list(lua_State *L, int idx) {
  lua_Unsigned n, count = 0;
  if (lua_type(L, idx) != LUA_TTABLE || mcp_json_is_null(L, idx)) return 0;
  if (mcp_json_is_array(L, idx)) return 1;
  n = lua_rawlen(L, idx);
  if (n == 0) return 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_Integer k;
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1) || (k = lua_tointeger(L, -1)) < 1 || (lua_Unsigned)k > n) {
      lua_pop(L, 1);
      return 0;
    }
    count++;
  }
  return count == n;
}

/*
** flatten(content) -> text, note|nil: the text blocks joined by "\n", and a
** note naming how many blocks of which kinds were dropped (a model reading
** only the text must learn that something was left out). The note has no trailing newline: the caller puts it
** before the answer, because results are cut at a byte bound and a trailing
** note would be the part cut away.
*/
/* Push the text of block i of the list at index 1 (a block text_block kept). */
static void push_block_text(lua_State *L, lua_Integer i) {
  lua_rawgeti(L, 1, i);
  lua_pushliteral(L, "text");
  lua_rawget(L, -2);
  lua_remove(L, -2);
}

static int l_flatten(lua_State *L) {
  luaL_Buffer b;
  lua_Integer i, n, dropped = 0, kept = 0, first = 0;
  unsigned labels = 0, k;
  char names[64];
  size_t used = 0;
  luaL_checkany(L, 1);
  if (!is_list(L, 1)) {
    lua_pushliteral(L, "");
    lua_pushnil(L);
    return 2;
  }
  n = (lua_Integer)lua_rawlen(L, 1);
  for (i = 1; i <= n; i++) {
    int kind;
    lua_rawgeti(L, 1, i);
    kind = text_block(L);
    if (kind < 0) {
      labels |= 1u << drop_label(L);
      dropped++;
    }
    lua_pop(L, 1);
    if (kind <= 0) continue;
    /* one text block is handed on as the string it is: the buffer starts with the second */
    if (kept++ == 0) {
      first = i;
      continue;
    }
    if (kept == 2) {
      luaL_buffinit(L, &b);
      push_block_text(L, first);
      luaL_addvalue(&b);
    }
    /* the buffer needs a balanced stack: separator first, then the text alone on top */
    luaL_addchar(&b, '\n');
    push_block_text(L, i);
    luaL_addvalue(&b);
  }
  if (kept >= 2) luaL_pushresult(&b);
  else if (kept == 1) push_block_text(L, first);
  else lua_pushliteral(L, "");
  if (dropped == 0) {
    lua_pushnil(L);
    return 2;
  }
  names[0] = '\0';
  for (k = 0; k < sizeof drop_labels / sizeof drop_labels[0]; k++) {
    if (labels & (1u << k)) {
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", drop_labels[k]);
    }
  }
  lua_pushfstring(L, "[mcpclient reads text only and dropped %I non-text content %s (%s).]",
                  (LUAI_UACINT)dropped, dropped == 1 ? "block" : "blocks", names);
  return 2;
}

/* ==================================================================== */
/* bound and repair                                                     */
/* ==================================================================== */

/*
** bound(text [, limit = 50000]) -> text, truncated: repair to valid UTF-8
** first, then cut at a character boundary and append the
** marker so the whole stays within limit bytes. Input longer than the limit
** is cut for certain (repair never shortens), so only the first limit bytes
** are ever read.
*/
static int l_bound(lua_State *L) {
  size_t n, mlen, keep, len, cut;
  const char *s = check_text(L, 1, &n);
  lua_Integer limit = luaL_optinteger(L, 2, BOUND_LIMIT);
  char marker[80];
  luaL_Buffer b;
  luaL_argcheck(L, limit > 0, 2, "limit must be positive");
  mlen = (size_t)snprintf(marker, sizeof marker,
                          "\n" ELLIPSIS "[tool result truncated at " LUA_INTEGER_FMT " bytes]",
                          (LUAI_UACINT)limit);
  luaL_argcheck(L, (lua_Unsigned)limit >= mlen, 2, "limit is shorter than the truncation marker");
  if ((lua_Unsigned)n <= (lua_Unsigned)limit && mcp_utf8_valid((const unsigned char *)s, n)) {
    lua_settop(L, 1);
    lua_pushboolean(L, 0);
    return 2;
  }
  luaL_buffinit(L, &b);
  if (utf8_repair_into(&b, (const unsigned char *)s, n, (size_t)limit)) {
    luaL_pushresult(&b);
    lua_pushboolean(L, 0);
    return 2;
  }
  /* the buffer holds whole characters only, so backing off continuation bytes finds a boundary */
  keep = (size_t)limit - mlen;
  len = luaL_bufflen(&b);
  if (len > keep) {
    const char *p = luaL_buffaddr(&b);
    cut = keep;
    while (cut > 0 && ((unsigned char)p[cut] & 0xC0) == 0x80) cut--;
    luaL_buffsub(&b, len - cut);
  }
  luaL_addlstring(&b, marker, mlen);
  luaL_pushresult(&b);
  lua_pushboolean(L, 1);
  return 2;
}

/*
** repair_utf8(text) -> text: each maximal invalid subpart replaced by
** U+FFFD; valid text comes back as the same string, uncopied.
*/
static int l_repair_utf8(lua_State *L) {
  size_t n;
  const char *s = check_text(L, 1, &n);
  luaL_Buffer b;
  if (mcp_utf8_valid((const unsigned char *)s, n)) {
    lua_settop(L, 1);
    return 1;
  }
  luaL_buffinit(L, &b);
  utf8_repair_into(&b, (const unsigned char *)s, n, SIZE_MAX);
  luaL_pushresult(&b);
  return 1;
}

/* ==================================================================== */
/* inert: the text rule for a body a model or a terminal reads          */
/* ==================================================================== */

/*
** A body (a tool result, a resource's text, a prompt's messages) keeps its
** lines: tabs and line feeds stay, every other way of breaking a line
** (CR LF, a lone CR, U+2028, U+2029) becomes one line feed, so "\n" is the
** only line break a reader can see. What a terminal would obey goes without
** a trace: C0 but tab and line feed, DEL, C1, the bidi and invisible
** formatting characters, and each escape sequence whole, so "\27[31mred"
** reads "red" and no parameter bytes are left behind:
**   CSI (ESC [ or U+009B): parameter bytes 0x30-0x3F, intermediate bytes
**     0x20-0x2F, then one final byte 0x40-0x7E if it follows;
**   OSC, DCS, SOS, PM, APC (ESC ] P X ^ _, or U+009D U+0090 U+0098 U+009E
**     U+009F): a string up to BEL, ST (ESC \ or U+009C), another ESC, or
**     the end of its line (the line break is kept, so no line is lost);
**   any other ESC: intermediate bytes 0x20-0x2F, then one byte 0x30-0x7E.
** Whatever ends a sequence early is read as text again. Invalid UTF-8 becomes
** U+FFFD, and the result is bounded as bound() bounds one.
*/

/* 1 when the code point at this place is kept as it is. */
static int body_keeps(uint32_t cp) {
  return !mcp_utf8_hidden(cp) && cp != 0x2028 && cp != 0x2029;
}

/*
** The high bit of each byte of the word x that inert must look at: one past
** ASCII, below 0x20 but tab and line feed, or DEL. Exact per byte (no
** borrow crosses a byte: each test runs on seven bits), so text with many
** lines still goes eight bytes at a time.
*/
static uint64_t body_flags(uint64_t x) {
  const uint64_t ones = 0x0101010101010101u, low7 = 0x7F7F7F7F7F7F7F7Fu, highs = ~low7;
  uint64_t y = x & low7;
  uint64_t below = ~(y + ones * 0x60) & highs; /* y < 0x20: adding 0x60 stays under 0x80 */
  uint64_t tab = ~((y ^ ones * 0x09) + low7) & highs, lf = ~((y ^ ones * 0x0A) + low7) & highs;
  uint64_t del = ~((y ^ ones * 0x7F) + low7) & highs;
  return (x & highs) | (below & ~tab & ~lf) | del;
}

/*
** Length of the leading run of s[0..n) that inert keeps byte for byte:
** printable ASCII, tab, line feed, and valid UTF-8 it keeps; eight ASCII
** bytes at a time.
*/
static size_t body_span(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t end;
#ifdef __SSE2__
    /* sixteen bytes a test while they are clean ASCII: a result's text is mostly such runs */
    {
      const __m128i space = _mm_set1_epi8(0x20), tab = _mm_set1_epi8('\t'), lf = _mm_set1_epi8('\n');
      const __m128i del = _mm_set1_epi8(0x7F);
      while (n - i >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        /* signed: a byte past ASCII is negative, so "below 0x20" catches it too */
        __m128i odd = _mm_andnot_si128(_mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, lf)),
                                       _mm_cmplt_epi8(v, space));
        if (_mm_movemask_epi8(_mm_or_si128(odd, _mm_cmpeq_epi8(v, del)))) break;
        i += 16;
      }
    }
#endif
    if (n - i >= 8) {
      uint64_t x;
      memcpy(&x, s + i, 8);
      if (!body_flags(x)) {
        i += 8;
        continue;
      }
    }
    /* a word with something to look at: its bytes one by one (a character may run past it) */
    end = n - i >= 8 ? i + 8 : n;
    while (i < end) {
      unsigned char c = s[i];
      if ((c >= 0x20 && c < 0x7F) || c == '\t' || c == '\n') {
        i++;
      } else if (c < 0x80) {
        return i;
      } else {
        int ok;
        uint32_t cp;
        size_t len = mcp_utf8_unit(s + i, n - i, &ok, &cp);
        if (!ok || !body_keeps(cp)) return i;
        i += len;
      }
    }
  }
  return n;
}

/* Past a CSI's parameter, intermediate and final bytes, from i. */
static size_t skip_csi(const unsigned char *s, size_t n, size_t i) {
  while (i < n && s[i] >= 0x30 && s[i] <= 0x3F) i++;
  while (i < n && s[i] >= 0x20 && s[i] <= 0x2F) i++;
  if (i < n && s[i] >= 0x40 && s[i] <= 0x7E) i++;
  return i;
}

/* Past a control string (OSC, DCS, SOS, PM, APC) and its terminator, from i. */
static size_t skip_string(const unsigned char *s, size_t n, size_t i) {
  for (; i < n; i++) {
    unsigned char c = s[i];
    if (c == 0x07) return i + 1;
    if (c == '\n' || c == '\r') return i;
    if (c == 0x1B) return i + 1 < n && s[i + 1] == '\\' ? i + 2 : i;
    if (c == 0xC2 && i + 1 < n && s[i + 1] == 0x9C) return i + 2;
  }
  return n;
}

/* Past the escape sequence whose ESC was just before i. */
static size_t skip_escape(const unsigned char *s, size_t n, size_t i) {
  unsigned char c;
  if (i >= n) return i;
  c = s[i];
  if (c == '[') return skip_csi(s, n, i + 1);
  if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') return skip_string(s, n, i + 1);
  while (i < n && s[i] >= 0x20 && s[i] <= 0x2F) i++;
  if (i < n && s[i] >= 0x30 && s[i] <= 0x7E) i++;
  return i;
}

/* Where inert writes: a buffer that takes no more than cap bytes. */
typedef struct Sink {
  luaL_Buffer b;
  size_t out, cap;
  int full; /* something did not fit: the text is cut */
} Sink;

/*
** Append the kept run s[0..len) (whole characters), or as much of it as
** fits, cut at a character boundary.
*/
static void sink_run(Sink *k, const unsigned char *s, size_t len) {
  if (len > k->cap - k->out) {
    len = k->cap - k->out;
    while (len > 0 && (s[len] & 0xC0) == 0x80) len--;
    k->full = 1;
  }
  luaL_addlstring(&k->b, (const char *)s, len);
  k->out += len;
}

/*
** inert(text [, limit = 50000]) -> text, truncated: the body rule above in
** one pass, then cut at a character boundary with bound()'s marker so the
** whole stays within limit bytes. Text the rule keeps as it is and that fits
** is returned as the same string, uncopied: the usual tool result costs one
** read. A cut text is read only until the output is full.
*/
static int l_inert(lua_State *L) {
  size_t n, i, span, mlen, keep, len;
  const unsigned char *s = (const unsigned char *)check_text(L, 1, &n);
  lua_Integer limit = luaL_optinteger(L, 2, BOUND_LIMIT);
  char marker[80];
  Sink k;
  luaL_argcheck(L, limit > 0, 2, "limit must be positive");
  mlen = (size_t)snprintf(marker, sizeof marker,
                          "\n" ELLIPSIS "[tool result truncated at " LUA_INTEGER_FMT " bytes]",
                          (LUAI_UACINT)limit);
  luaL_argcheck(L, (lua_Unsigned)limit >= mlen, 2, "limit is shorter than the truncation marker");
  /* never read more than one byte past what fits: a longer text is cut for certain */
  span = body_span(s, (lua_Unsigned)n > (lua_Unsigned)limit ? (size_t)limit + 1 : n);
  if (span == n && (lua_Unsigned)n <= (lua_Unsigned)limit) {
    lua_settop(L, 1);
    lua_pushboolean(L, 0);
    return 2;
  }
  k.out = 0;
  k.cap = (size_t)limit;
  k.full = 0;
  luaL_buffinit(L, &k.b);
  i = 0;
  for (;;) {
    unsigned char c;
    sink_run(&k, s + i, span);
    i += span;
    if (k.full || i == n) break;
    c = s[i];
    if (c == '\r' || c >= 0x80) {
      int ok = 1;
      uint32_t cp = c;
      size_t unit =
        c == '\r' ? (i + 1 < n && s[i + 1] == '\n' ? 2 : 1) : mcp_utf8_unit(s + i, n - i, &ok, &cp);
      i += unit;
      if (!ok) sink_run(&k, (const unsigned char *)REPLACEMENT, sizeof REPLACEMENT - 1);
      else if (cp == '\r' || cp == 0x2028 || cp == 0x2029) sink_run(&k, (const unsigned char *)"\n", 1);
      else if (body_keeps(cp)) sink_run(&k, s + i - unit, unit); /* a character the span's window cut off */
      else if (cp == 0x9B) i = skip_csi(s, n, i);
      else if (cp == 0x9D || cp == 0x90 || cp == 0x98 || cp == 0x9E || cp == 0x9F) i = skip_string(s, n, i);
    } else if (c == 0x1B) {
      i = skip_escape(s, n, i + 1);
    } else if (c < 0x20 || c == 0x7F) {
      i++; /* C0 but tab and line feed, or DEL */
    } else {
      sink_run(&k, s + i++, 1); /* a byte the span's window left out */
    }
    if (k.full) break;
    span = body_span(s + i, n - i > k.cap - k.out ? k.cap - k.out + 1 : n - i);
  }
  if (!k.full) {
    luaL_pushresult(&k.b);
    lua_pushboolean(L, 0);
    return 2;
  }
  /* the buffer holds whole characters only, so backing off continuation bytes finds a boundary */
  keep = (size_t)limit - mlen;
  len = luaL_bufflen(&k.b);
  if (len > keep) {
    const char *p = luaL_buffaddr(&k.b);
    size_t cut = keep;
    while (cut > 0 && ((unsigned char)p[cut] & 0xC0) == 0x80) cut--;
    luaL_buffsub(&k.b, len - cut);
  }
  luaL_addlstring(&k.b, marker, mlen);
  luaL_pushresult(&k.b);
  lua_pushboolean(L, 1);
  return 2;
}

/* Adds clip, clip_listed, label, flatten, bound, inert and repair_utf8 to the module table. */
void mcp_register_text(lua_State *L) {
  static const luaL_Reg fns[] = {{"clip", l_clip},
                                 {"clip_listed", l_clip_listed},
                                 {"label", l_label},
                                 {"flatten", l_flatten},
                                 {"bound", l_bound},
                                 {"inert", l_inert},
                                 {"repair_utf8", l_repair_utf8},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
