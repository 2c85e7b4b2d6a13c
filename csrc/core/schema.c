/*
** schema.c: the schema normaliser. A tool's inputSchema is
** carried only if every constraint in what we keep is one a model can be told
** faithfully; anything we would have to drop to carry it (conditionals,
** pattern keys, a reference that cannot be written out, ...) refuses the
** whole tool, because dropping a constraint widens what the tool accepts.
** Never repairs; says why it refused. Local references into "$defs" or
** "definitions" are written out first when they are what stands in the way
** (refs.c), and the steps judge the schema that results.
**
** Values are Lua tables in the shape the JSON codec (json.c) produces:
** arrays carry the array marker, objects may carry a key-order record, JSON
** null is core.json.null. {} and [] stay distinct (the codec keeps them
** apart), so an array is never accepted where a map is required.
**
** The steps, in order: no table is no schema (1); the top-level type must be
** "object" (2); a refused keyword at the top refuses (3); only the retained
** keys are kept, in retained order (4); the kept values must have the shapes
** JSON Schema gives them (5); a walk over everything kept looks for refused
** keywords at any depth, nesting past MAX_DEPTH, invalid UTF-8 and values
** JSON cannot carry (6); the kept schema, encoded with '/' and non-ASCII
** escaped, must fit in MAX_ENCODED_BYTES (7); the result is that kept table (8).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MAX_DEPTH         12          /* deepest container level, root = 1 */
#define MAX_ENCODED_BYTES 16384       /* measured on the escaped encoding */
#define MAX_VISITS        (1L << 20)  /* see walk() */
#define KEPT_BUFFER       (64 * 1024) /* the largest text buffer normalise_schema_text keeps between calls */

/* Kept top-level keys, in output order. */
static const char *const retained[] = {
  "type", "description", "properties", "required", "additionalProperties", "allOf", "anyOf", "oneOf", "not",
};

/* Keywords that refuse the schema; the first in this order is the one named. */
static const char *const refused[] = {
  "$ref",
  "$dynamicRef",
  "$defs",
  "definitions",
  "if",
  "then",
  "else",
  "patternProperties",
  "propertyNames",
  "dependentSchemas",
  "dependentRequired",
  "unevaluatedProperties",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Why a kept value has the wrong shape; each names the key, so the operator
** knows what to ask the server's author to fix. */
enum shape { BAD_DESCRIPTION, BAD_ADDITIONAL, BAD_REQUIRED, BAD_PROPERTIES, UNENCODABLE };
static const char *const shape_reasons[] = {
  "its \"description\" is not a string",
  "its \"additionalProperties\" is a schema (only true, false or {} is carried)",
  "its \"required\" is not a list of strings",
  "its \"properties\" is not an object of schemas",
  "it holds a value JSON cannot carry",
};

enum verdict {
  ACCEPTED,
  NO_SCHEMA,
  NOT_OBJECT,
  KEYWORD,
  MALFORMED,
  TOO_DEEP,
  BAD_UTF8,
  TOO_BIG,
  NOT_JSON,
  REFERENCE, /* a local reference refused; the reason is in the registry at MCP_REFS_REASON */
  UNCLEAR
};

/*
** Push the reason sentence for a refusal (no trailing period: the caller
** composes it into a larger message that names the tool and the server).
*/
static void push_reason(lua_State *L, enum verdict v, int keyword) {
  switch (v) {
    case NO_SCHEMA: lua_pushliteral(L, "the server advertised no parameter schema"); break;
    case NOT_OBJECT: lua_pushliteral(L, "its top-level type is not \"object\""); break;
    case KEYWORD:
      lua_pushfstring(L,
                      "it uses \"%s\", which this import does not carry: dropping the keyword would "
                      "widen what the tool accepts, letting a model produce arguments the server then "
                      "rejects",
                      refused[keyword]);
      break;
    case MALFORMED: lua_pushstring(L, shape_reasons[keyword]); break;
    case TOO_DEEP: lua_pushfstring(L, "it nests deeper than %d levels", MAX_DEPTH); break;
    case BAD_UTF8: lua_pushliteral(L, "it contains bytes that are not valid UTF-8"); break;
    case TOO_BIG: lua_pushfstring(L, "it exceeds %d bytes once stored", MAX_ENCODED_BYTES); break;
    case NOT_JSON: lua_pushliteral(L, "its parameter schema is not valid JSON"); break;
    case REFERENCE:
      if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_REFS_REASON) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushliteral(L, "a \"$ref\" in it cannot be written out");
      }
      break;
    case ACCEPTED:
    case UNCLEAR: lua_pushnil(L); break;
  }
}

/*
** Index of s in refused[], or -1. Every key of a schema goes through this,
** so the keywords are found by length first: most keys have a length no
** keyword has, and the others meet at most three candidates.
*/
static int refused_index(const char *s, size_t n) {
  /* by length: 1 + the refused[] index of each keyword that long, 0 after the last (checked on opening) */
  static const unsigned char by_length[22][4] = {
    [2] = {5},  [4] = {1, 6, 7}, [5] = {3},      [11] = {2, 4},
    [13] = {9}, [16] = {10},     [17] = {8, 11}, [21] = {12},
  };
  int i;
  if (n >= COUNT(by_length)) return -1;
  for (i = 0; by_length[n][i] != 0; i++) {
    const char *w = refused[by_length[n][i] - 1];
    if (w[0] == s[0] && memcmp(w, s, n) == 0) return by_length[n][i] - 1;
  }
  return -1;
}

/* ==================================================================== */
/* Shapes                                                               */
/* ==================================================================== */

/*
** 1 when the value at idx is a JSON object: a table, not null, not an array, string keys only.
*/
static int is_object(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE || mcp_json_is_null(L, idx) || mcp_json_is_array(L, idx)) return 0;
  mcp_json_lazy_settle(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      return 0;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/*
** 1 when the value at idx is a list of strings: array-marked or a plain
** sequence 1..n and nothing else. An empty unmarked table is an object ({}),
** which is not a list.
*/
static int is_string_list(lua_State *L, int idx) {
  lua_Unsigned n, count = 0;
  if (lua_type(L, idx) != LUA_TTABLE || mcp_json_is_null(L, idx)) return 0;
  mcp_json_lazy_settle(L, idx);
  n = lua_rawlen(L, idx);
  if (n == 0 && !mcp_json_is_array(L, idx)) return 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_Integer k;
    if (lua_type(L, -1) != LUA_TSTRING || !lua_isinteger(L, -2) || (k = lua_tointeger(L, -2)) < 1 ||
        (lua_Unsigned)k > n) {
      lua_pop(L, 2);
      return 0;
    }
    lua_pop(L, 1);
    count++;
  }
  return count == n;
}

/*
** Push t[k] without metamethods (the key-order record may live in a metatable); returns its type.
*/
static int rawfield(lua_State *L, int t, const char *k) {
  lua_pushstring(L, k);
  return lua_rawget(L, t);
}

/*
** 1 when additionalProperties at idx is carried as it is (a boolean), or
** is the empty schema {}, which accepts every value exactly as true does:
** then the filtered table at f holds true instead (the same constraint in
** its boolean spelling, so nothing is widened). The official SDK's zod
** .passthrough() emits {}.
*/
static int additional_ok(lua_State *L, int f, int idx) {
  int empty;
  if (lua_type(L, idx) == LUA_TBOOLEAN) return 1;
  if (!is_object(L, idx)) return 0;
  lua_pushnil(L);
  empty = lua_next(L, idx) == 0;
  if (!empty) lua_pop(L, 2);
  if (empty) {
    lua_pushliteral(L, "additionalProperties");
    lua_pushboolean(L, 1);
    lua_rawset(L, f);
  }
  return empty;
}

/*
** Step 5 on the filtered table at f: the retained values a model will be
** shown must have the shapes JSON Schema gives them. allOf/anyOf/oneOf/not
** are carried verbatim and not checked here (the walk still inspects them).
** Returns 0, or 1 + the enum shape of the first value that is wrong.
*/
static int well_formed(lua_State *L, int f) {
  int bad = 0, p;
  if (rawfield(L, f, "description") != LUA_TNIL && lua_type(L, -1) != LUA_TSTRING) bad = 1 + BAD_DESCRIPTION;
  if (!bad && rawfield(L, f, "additionalProperties") != LUA_TNIL && !additional_ok(L, f, lua_gettop(L))) {
    bad = 1 + BAD_ADDITIONAL;
  }
  if (!bad && rawfield(L, f, "required") != LUA_TNIL && !is_string_list(L, lua_gettop(L)))
    bad = 1 + BAD_REQUIRED;
  if (!bad && rawfield(L, f, "properties") != LUA_TNIL) {
    int ok;
    p = lua_gettop(L);
    ok = is_object(L, p);
    lua_pushnil(L);
    while (ok && lua_next(L, p) != 0) {
      ok = is_object(L, lua_gettop(L));
      lua_pop(L, ok ? 1 : 2);
    }
    if (!ok) bad = 1 + BAD_PROPERTIES;
  }
  lua_settop(L, f);
  return bad;
}

/* ==================================================================== */
/* The walk (step 6)                                                    */
/* ==================================================================== */

typedef struct {
  int keyword;     /* index into refused[] of the first found, or -1 */
  int too_deep;    /* a container sits below MAX_DEPTH */
  int bad_utf8;    /* a key or string value is not UTF-8 */
  int unencodable; /* a key or value JSON has no form for */
  int overflow;    /* more containers than MAX_VISITS */
  long visits;
} walk_state;

enum key_kind { K_INTEGER, K_FLOAT, K_STRING, K_OTHER };

/* One key of a table being walked; string pointers stay valid because the table is not modified. */
typedef struct {
  enum key_kind kind;
  lua_Integer i;
  lua_Number num;
  const char *s;
  size_t len;
  size_t pos; /* position in lua_next order, to keep K_OTHER stable */
  int seen;   /* visited through the key-order record */
} key_ref;

/*
** Order of visits for a table without a key-order record: integer keys
** ascending (so arrays and sequences go in index order), then other numbers,
** then strings byte-wise, then anything else as found. Only the first
** refused keyword is reported, so the order must not depend on hashing.
*/
static int key_cmp(const void *a, const void *b) {
  const key_ref *x = a, *y = b;
  int c;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  switch (x->kind) {
    case K_INTEGER: return (x->i > y->i) - (x->i < y->i);
    case K_FLOAT: return (x->num > y->num) - (x->num < y->num);
    case K_STRING:
      c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
      if (c != 0) return c;
      return (x->len > y->len) - (x->len < y->len);
    case K_OTHER: break;
  }
  return (x->pos > y->pos) - (x->pos < y->pos);
}

static int walk(lua_State *L, int t, int level, walk_state *st);

/*
** Visit the value under key k of the table at t: check strings, descend
** into containers. Returns 1 when the walk must stop.
*/
static int visit(lua_State *L, int t, int level, const key_ref *k, walk_state *st) {
  int stop = 0;
  switch (k->kind) {
    case K_INTEGER: lua_pushinteger(L, k->i); break;
    case K_FLOAT: lua_pushnumber(L, k->num); break;
    case K_STRING: lua_pushlstring(L, k->s, k->len); break;
    case K_OTHER: return 0;
  }
  switch (lua_rawget(L, t)) {
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, -1, &n);
      if (!mcp_utf8_valid((const unsigned char *)s, n)) st->bad_utf8 = 1;
      break;
    }
    case LUA_TTABLE:
      if (!mcp_json_is_null(L, -1)) {
        if (level < MCP_JSON_MAX_DEPTH) stop = walk(L, lua_gettop(L), level + 1, st);
        else st->too_deep = 1;
      }
      break;
    case LUA_TNUMBER:
    case LUA_TBOOLEAN: break;
    default:
      if (!mcp_json_is_null(L, -1)) st->unencodable = 1;
      break;
  }
  lua_pop(L, 1);
  return stop;
}

/*
** Step 6 over the container at t (level: root = 1). Refused keywords are
** looked for as keys at each container before its values are visited, values
** in the order the encoder writes them (key-order record first, then the rest
** sorted), so the keyword named is the first a reader of the stored schema
** would meet. The walk goes on below MAX_DEPTH because a keyword anywhere
** outranks depth as the reason; it stops at the codec's own depth limit,
** which also ends a cyclic table, and after MAX_VISITS containers, which only
** a table graph sharing subtables can reach (a 2 MiB response cannot), and
** whose encoding would be far over the byte cap anyway.
** Returns 1 when the walk must stop (keyword found or overflow).
*/
static int walk(lua_State *L, int t, int level, walk_state *st) {
  int base = lua_gettop(L), best = -1, stop = 0;
  size_t count = 0, i = 0;
  key_ref *keys;
  if (++st->visits > MAX_VISITS) {
    st->overflow = 1;
    return 1;
  }
  if (level > MAX_DEPTH) st->too_deep = 1;
  luaL_checkstack(L, 8, "schema walk");
  mcp_json_lazy_settle(L, t);
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lua_pop(L, 1);
    count++;
  }
  keys = (key_ref *)lua_newuserdatauv(L, (count ? count : 1) * sizeof *keys, 0);
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    key_ref *k = &keys[i];
    lua_pop(L, 1);
    k->pos = i++;
    k->seen = 0;
    switch (lua_type(L, -1)) {
      case LUA_TSTRING: {
        int kw;
        k->kind = K_STRING;
        k->s = lua_tolstring(L, -1, &k->len);
        kw = refused_index(k->s, k->len);
        if (kw >= 0 && (best < 0 || kw < best)) best = kw;
        if (!mcp_utf8_valid((const unsigned char *)k->s, k->len)) st->bad_utf8 = 1;
        break;
      }
      case LUA_TNUMBER:
        if (lua_isinteger(L, -1)) {
          k->kind = K_INTEGER;
          k->i = lua_tointeger(L, -1);
        } else {
          k->kind = K_FLOAT;
          k->num = lua_tonumber(L, -1);
        }
        break;
      default:
        k->kind = K_OTHER;
        st->unencodable = 1;
        break;
    }
  }
  if (best >= 0) {
    st->keyword = best;
    lua_settop(L, base);
    return 1;
  }
  qsort(keys, count, sizeof *keys, key_cmp);
  if (!mcp_json_is_array(L, t)) {
    if (mcp_json_push_key_order(L, t) == LUA_TTABLE) {
      int r = lua_gettop(L);
      lua_Integer j, n = (lua_Integer)lua_rawlen(L, r);
      for (j = 1; j <= n && !stop; j++) {
        if (lua_rawgeti(L, r, j) == LUA_TSTRING) {
          key_ref probe, *hit;
          probe.kind = K_STRING;
          probe.s = lua_tolstring(L, -1, &probe.len);
          hit = (key_ref *)bsearch(&probe, keys, count, sizeof *keys, key_cmp);
          if (hit != NULL && !hit->seen) {
            hit->seen = 1;
            stop = visit(L, t, level, hit, st);
          }
        }
        lua_pop(L, 1);
      }
    }
  }
  for (i = 0; i < count && !stop; i++) {
    if (!keys[i].seen) stop = visit(L, t, level, &keys[i], st);
  }
  lua_settop(L, base);
  return stop;
}

/* ==================================================================== */
/* Steps 1-8                                                            */
/* ==================================================================== */

/*
** Steps 6 and 7 the exact way, for a kept table f the one-pass measure
** (measure.c) did not find clean: the ordered walk names the first refused
** keyword a reader would meet, then the encoding gives the size. Returns
** the verdict (ACCEPTED with *len set); the stack is left as it was.
*/
static enum verdict exact_measure(lua_State *L, int f, int *keyword, size_t *len) {
  walk_state st = {-1, 0, 0, 0, 0, 0};
  walk(L, f, 1, &st);
  if (st.overflow) return TOO_BIG;
  if (st.keyword >= 0) {
    *keyword = st.keyword;
    return KEYWORD;
  }
  if (st.too_deep) return TOO_DEEP;
  if (st.bad_utf8) return BAD_UTF8;
  if (st.unencodable || mcp_json_encode(L, f, MCP_JSON_ASCII) != NULL) {
    *keyword = UNENCODABLE;
    return MALFORMED;
  }
  *len = lua_rawlen(L, -1);
  lua_pop(L, 1);
  return ACCEPTED;
}

/*
** Run steps 1-8 on the value at index s. Accepted: pushes the new
** filtered table and returns ACCEPTED. Refused: pushes nothing, returns the
** verdict (and the keyword's index for KEYWORD).
*/
static enum verdict normalise_plain(lua_State *L, int s, int *keyword) {
  int f, o, n = 0, bad;
  size_t k, len;
  if (lua_type(L, s) != LUA_TTABLE || mcp_json_is_null(L, s)) return NO_SCHEMA;
  mcp_json_lazy_settle(L, s);
  if (rawfield(L, s, "type") != LUA_TSTRING || (lua_tolstring(L, -1, &len), len != 6) ||
      memcmp(lua_tostring(L, -1), "object", 6) != 0) {
    lua_pop(L, 1);
    return NOT_OBJECT;
  }
  lua_pop(L, 1);
  for (k = 0; k < COUNT(refused); k++) {
    lua_pushstring(L, refused[k]);
    if (lua_rawget(L, s) != LUA_TNIL) {
      lua_pop(L, 1);
      *keyword = (int)k;
      return KEYWORD;
    }
    lua_pop(L, 1);
  }
  lua_createtable(L, 0, (int)COUNT(retained));
  f = lua_gettop(L);
  lua_createtable(L, (int)COUNT(retained), 0);
  o = lua_gettop(L);
  for (k = 0; k < COUNT(retained); k++) {
    lua_pushstring(L, retained[k]);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, s) == LUA_TNIL) {
      lua_pop(L, 2);
      continue;
    }
    lua_rawset(L, f);
    lua_pushstring(L, retained[k]);
    lua_rawseti(L, o, ++n);
  }
  mcp_json_set_key_order(L, f, o);
  lua_pop(L, 1);
  if ((bad = well_formed(L, f)) != 0) {
    lua_pop(L, 1);
    *keyword = bad - 1;
    return MALFORMED;
  }
  len = mcp_schema_measure(L, f, MAX_DEPTH, MAX_VISITS, refused_index);
  if (len == 0) {
    enum verdict v = exact_measure(L, f, keyword, &len);
    if (v != ACCEPTED) {
      lua_pop(L, 1);
      return v;
    }
  }
  if (len > MAX_ENCODED_BYTES) {
    lua_pop(L, 1);
    return TOO_BIG;
  }
  return ACCEPTED;
}

/*
** 1 when a refusal of the schema at s may go away once its local
** references are written out: it named "$ref", "$defs" or "definitions",
** or the top-level type was missing beside a top-level "$ref" (pydantic's
** shape for a recursive model at the root).
*/
static int refers(lua_State *L, int s, enum verdict v, int keyword) {
  int top;
  if (v == KEYWORD) return keyword == 0 || keyword == 2 || keyword == 3; /* $ref, $defs, definitions */
  if (v != NOT_OBJECT || lua_type(L, s) != LUA_TTABLE || mcp_json_is_null(L, s)) return 0;
  top = rawfield(L, s, "$ref") != LUA_TNIL;
  lua_pop(L, 1);
  return top;
}

/*
** Steps 1-8, with local references into "$defs"/"definitions" written out
** first when they are what the plain steps refused (refs.c): the steps then
** judge the schema a model would be shown. Pushes as normalise_plain does.
*/
static enum verdict normalise(lua_State *L, int s, int *keyword) {
  enum verdict v = normalise_plain(L, s, keyword);
  int r, copy;
  if (v == ACCEPTED || !refers(L, s, v, *keyword)) return v;
  r = mcp_schema_inline_refs(L, s);
  if (r == MCP_REFS_REFUSED) return REFERENCE;
  if (r == MCP_REFS_TOO_BIG) return TOO_BIG;
  if (r == MCP_REFS_TOO_DEEP) return TOO_DEEP;
  copy = lua_gettop(L);
  v = normalise_plain(L, copy, keyword);
  if (v == ACCEPTED) lua_remove(L, copy);
  else lua_settop(L, copy - 1);
  return v;
}

/* ==================================================================== */
/* Schemas as text                                                      */
/* ==================================================================== */

/*
** A listing hands each schema over as JSON text (the store keeps text
** too), so the common case is answered from the text alone: the text
** builder (decode.c) writes it as the encoder would and describes its
** top-level members, and the steps above are read off that description.
** A schema that is not plainly clean (a refusal, whose reason depends on
** the order the table walk meets things, or a shape the checks below do
** not settle) goes the table way instead, which gives the same answer.
*/

/* The member of the described object whose key is name, or NULL. */
static const mcp_member *find_member(const char *text, const mcp_member *m, int n, const char *name) {
  size_t len = strlen(name);
  int i;
  for (i = 0; i < n; i++) {
    if (m[i].key_len == len + 2 && memcmp(text + m[i].key + 1, name, len) == 0) return &m[i];
  }
  return NULL;
}

/*
** What the ASCII form of the encoder-written text v (n bytes) adds to its
** length: '/' becomes \/, and a code point past 0x7F \uXXXX (a two-byte
** one adds 4 bytes, a three-byte one 3, a four-byte one 8 as a surrogate
** pair). Hidden code points are \uXXXX already. Only worth counting when
** the kept text is within a third of the size cap.
*/
static size_t ascii_extra(const char *v, size_t n) {
  const unsigned char *p = (const unsigned char *)v, *end = p + n;
  size_t extra = 0;
  for (; p < end; p++) {
    if (*p == '/') extra += 1;
    else if (*p >= 0xF0) extra += 8;
    else if (*p >= 0xE0) extra += 3;
    else if (*p >= 0xC0) extra += 4;
  }
  return extra;
}

/* The member's value text is exactly lit. */
#define VALUE_IS(text, m, lit) \
  ((m)->value_len == sizeof(lit) - 1 && memcmp((text) + (m)->value, lit, (m)->value_len) == 0)

/*
** Step 5 read off the text: 1 when the kept value of `name` has its shape
** for sure (additionalProperties {} is then written as true by the caller).
*/
static int text_shape_ok(const char *text, const mcp_member *m, const char *name) {
  const char *v = text + m->value;
  if (strcmp(name, "description") == 0) return v[0] == '"';
  if (strcmp(name, "additionalProperties") == 0)
    return VALUE_IS(text, m, "true") || VALUE_IS(text, m, "false") || VALUE_IS(text, m, "{}");
  if (strcmp(name, "required") == 0) return m->shape == MCP_SHAPE_STRING_LIST;
  if (strcmp(name, "properties") == 0) return m->shape == MCP_SHAPE_OBJECT_OF_OBJECTS;
  return 1;
}

/*
** Steps 2-8 on the encoder-written object text described by m[0..n):
** ACCEPTED (the kept text pushed), TOO_BIG, or UNCLEAR (nothing pushed: the
** table way must answer). When everything is kept in the order written,
** the kept text is the text itself; when that is also the string at index
** `given` (0: none), that string is the answer and nothing is copied.
*/
static enum verdict normalise_described(lua_State *L, const char *text, size_t text_len, const mcp_member *m,
                                        int n, int given) {
  const mcp_member *kept[COUNT(retained)];
  int as_true[COUNT(retained)], whole = 1;
  const mcp_member *type = find_member(text, m, n, "type");
  size_t k, nkept = 0, len = 1, containers = 1;
  int i;
  luaL_Buffer b;
  if (type == NULL || !VALUE_IS(text, type, "\"object\"")) return UNCLEAR;
  for (i = 0; i < n; i++) {
    if (refused_index(text + m[i].key + 1, m[i].key_len - 2) >= 0) return UNCLEAR;
  }
  for (k = 0; k < COUNT(retained); k++) {
    const mcp_member *x = find_member(text, m, n, retained[k]);
    if (x == NULL) continue;
    if (!text_shape_ok(text, x, retained[k]) || x->refused || x->levels > MAX_DEPTH) return UNCLEAR;
    containers += x->containers;
    len += x->key_len + 1 + x->value_len + 1; /* "key":value and a ',' or the '}' */
    as_true[nkept] = strcmp(retained[k], "additionalProperties") == 0 && VALUE_IS(text, x, "{}");
    if (as_true[nkept]) len += 2; /* written as true */
    whole = whole && !as_true[nkept] && x == &m[nkept];
    kept[nkept++] = x;
  }
  if (containers > (size_t)MAX_VISITS) return UNCLEAR;
  if (len > MAX_ENCODED_BYTES / 3) { /* the ASCII form is at most three times as long */
    for (k = 0; k < nkept; k++) len += ascii_extra(text + kept[k]->value, kept[k]->value_len);
    if (len > MAX_ENCODED_BYTES) return TOO_BIG;
  }
  if (whole && nkept == (size_t)n) {
    size_t given_len = 0;
    const char *given_text = given != 0 ? lua_tolstring(L, given, &given_len) : NULL;
    if (given_text != NULL && given_len == text_len && memcmp(given_text, text, text_len) == 0)
      lua_pushvalue(L, given);
    else lua_pushlstring(L, text, text_len);
    return ACCEPTED;
  }
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  for (k = 0; k < nkept; k++) {
    const mcp_member *x = kept[k];
    if (k > 0) luaL_addchar(&b, ',');
    luaL_addlstring(&b, text + x->key, x->key_len);
    luaL_addchar(&b, ':');
    if (as_true[k]) luaL_addstring(&b, "true");
    else luaL_addlstring(&b, text + x->value, x->value_len);
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  return ACCEPTED;
}

/*
** The steps on the encoder-written schema text (len bytes) described by
** m[0..n) (n < 0: not described): pushes the kept schema as text and
** returns ACCEPTED, or pushes nothing and returns the verdict. `given`: as
** for normalise_described. What the description does not settle is
** decoded and goes the table way.
*/
static enum verdict keep_text(lua_State *L, const char *text, size_t len, const mcp_member *m, int n,
                              int given, int *keyword) {
  enum verdict v = n >= 0 ? normalise_described(L, text, len, m, n, given) : UNCLEAR;
  int top = lua_gettop(L);
  if (v != UNCLEAR) return v;
  if (!mcp_json_decode(L, text, len, 1)) {
    lua_pop(L, 1); /* the decoder's message: the verdict says it */
    return NOT_JSON;
  }
  v = normalise(L, top + 1, keyword);
  if (v == ACCEPTED && mcp_json_encode(L, -1, 0) != NULL) {
    v = MALFORMED;
    *keyword = UNENCODABLE;
  }
  if (v == ACCEPTED) lua_replace(L, top + 1);
  lua_settop(L, v == ACCEPTED ? top + 1 : top);
  return v;
}

/*
** The steps on the schema text at index 1 (any JSON text): pushes the kept
** schema as text and returns ACCEPTED, or pushes nothing and returns the
** verdict.
*/
static enum verdict normalise_text(lua_State *L, int *keyword) {
  mcp_member m[MCP_MAX_MEMBERS];
  size_t len, text_len;
  const char *s = lua_tolstring(L, 1, &len), *text;
  enum verdict v;
  int n = mcp_canonical_object(L, s, len, refused_index, m, &text, &text_len, lua_upvalueindex(1));
  if (n < 0) return keep_text(L, s, len, NULL, -1, 0, keyword);
  if (lua_rawlen(L, 2) <= KEPT_BUFFER) { /* the buffer, grown or not, serves the next call */
    lua_pushvalue(L, 2);
    lua_replace(L, lua_upvalueindex(1));
  }
  v = keep_text(L, text, text_len, m, n, 1, keyword);
  if (v == ACCEPTED) lua_replace(L, 2);
  lua_settop(L, v == ACCEPTED ? 2 : 1);
  return v;
}

/*
** The C API for the listing decoder: push what an import keeps of the
** encoder-written schema text (described by m[0..n), n < 0: not
** described): the kept text, or a table { refused = reason }.
*/
void mcp_schema_keep(lua_State *L, const char *text, size_t len, const mcp_member *m, int n) {
  int keyword = -1;
  enum verdict v = keep_text(L, text, len, m, n, 0, &keyword);
  if (v == ACCEPTED) return;
  lua_createtable(L, 0, 1);
  push_reason(L, v, keyword);
  lua_setfield(L, -2, "refused");
}

/* The C API of the keyword test: the refused keyword's index, or -1. */
int mcp_schema_keyword(const char *key, size_t len) {
  return refused_index(key, len);
}

/*
** normalise_schema(value) -> schema | nil, reason. The schema is a new
** table holding only the retained keys, in the retained order (recorded for
** the encoder); nested values are the caller's own tables, not copies. A
** string is not a schema (a server may send one where a schema belongs).
*/
static int l_normalise_schema(lua_State *L) {
  int keyword = -1;
  enum verdict v;
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  if (mcp_json_lazy_text(L, 1)) { /* a listed schema nobody has read: judged from its text, kept lazy */
    lua_replace(L, 1);
    v = normalise_text(L, &keyword);
    if (v == ACCEPTED) {
      mcp_json_lazy_wrap(L, -1);
      return 1;
    }
  } else {
    v = normalise(L, 1, &keyword);
  }
  if (v == ACCEPTED) return 1;
  lua_pushnil(L);
  push_reason(L, v, keyword);
  return 2;
}

/*
** normalise_schema_text(text) -> text | nil, reason: the same steps on a
** schema given as JSON text (a listing's text form), answering with the
** kept schema's text as json.encode writes the table normalise_schema
** keeps (the form the store keeps). Upvalue: the text builder's buffer,
** kept from call to call (a listing normalises thousands of schemas).
*/
static int l_normalise_schema_text(lua_State *L) {
  int keyword = -1;
  enum verdict v;
  luaL_checktype(L, 1, LUA_TSTRING);
  lua_settop(L, 1);
  v = normalise_text(L, &keyword);
  if (v == ACCEPTED) return 1;
  lua_pushnil(L);
  push_reason(L, v, keyword);
  return 2;
}

/*
** decode_stored_schema(text) -> table | nil. Only a JSON object is a
** stored schema ('{}' is the empty one, leading blanks are allowed);
** '[]', 'null' and broken text are none. The codec keeps key order so the
** schema is shown to a model the way the server wrote it. The decoder
** returns nil for bad text and raises only when memory or the stack runs
** out, and that error must reach the caller: swallowed, it would make a
** stored tool silently lose its schema (and drop out of the catalogue)
** whenever memory is short.
*/
static int l_decode_stored_schema(lua_State *L) {
  size_t n, i = 0;
  const char *s;
  luaL_checktype(L, 1, LUA_TSTRING);
  s = lua_tolstring(L, 1, &n);
  while (i < n &&
         (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\0' || s[i] == '\v')) {
    i++;
  }
  if (i == n || s[i] != '{') {
    lua_pushnil(L);
    return 1;
  }
  if (mcp_json_decode(L, s, n, 1) && is_object(L, lua_gettop(L))) return 1;
  lua_pushnil(L);
  return 1;
}

/*
** Adds normalise_schema, normalise_schema_text and decode_stored_schema. They reach the codec
** through its C API (key order, decode), which finds its state in the
** registry, so this file needs nothing from core.json's Lua table.
*/
void mcp_register_schema(lua_State *L) {
  size_t k;
  for (k = 0; k < COUNT(refused); k++) { /* refused_index's table must find every keyword */
    if (refused_index(refused[k], strlen(refused[k])) != (int)k)
      luaL_error(L, "mcpclient.core: schema.c's keyword table does not match its keywords");
  }
  lua_pushcfunction(L, l_decode_stored_schema);
  lua_setfield(L, -2, "decode_stored_schema");
  lua_newuserdatauv(L, 4096, 0);
  lua_pushcclosure(L, l_normalise_schema, 1);
  lua_setfield(L, -2, "normalise_schema");
  lua_newuserdatauv(L, 4096, 0);
  lua_pushcclosure(L, l_normalise_schema_text, 1);
  lua_setfield(L, -2, "normalise_schema_text");
}
