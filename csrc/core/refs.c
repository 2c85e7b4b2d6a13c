/*
** refs.c: local references in a 2025-era input schema, written out.
**
** Servers built on pydantic (the MCP Python SDK among them) describe every
** nested model, list of models, optional model and enum as a definition in
** "$defs" (pydantic 2) or "definitions" (pydantic 1) and point at it with
** "$ref": "#/$defs/Item". The normaliser keeps a schema a model can be shown
** whole, without references, so each such reference is replaced by a copy of
** the definition it names, and the definitions are then dropped (on their
** own they constrain nothing). A reference with other keywords beside it
** keeps them, the definition joining as one more "allOf" entry: both hold,
** as they do for "$ref" with siblings in JSON Schema 2019-09 and later.
**
** Refused, with the reference's place named: a reference that is not a
** string; one that leaves the schema (never fetched); one that names
** anything but a whole definition; one whose definition is missing
** (dangling); and one that leads back to a definition being written out (a
** recursive model: it has no finite form without references). Bounded like
** the rest of the normaliser: at most MAX_CONTAINERS objects and arrays
** written (each takes at least two bytes, so more could never fit the size
** cap) and MAX_NEST levels.
*/
#include <string.h>

#include "core.h"

#define MAX_CONTAINERS 8192 /* half the stored-size cap in bytes */
#define MAX_NEST       64   /* levels the copy descends; a kept schema may nest 12 */
#define SHOWN          120  /* code points of a path or a reference shown in a reason */

static const char *const def_keys[] = {"$defs", "definitions"};

typedef struct {
  lua_State *L;
  int defs[2]; /* the schema's "$defs" and "definitions" objects (stack indexes), or 0 */
  int active;  /* definition (its table) -> true while it is being written out */
  long containers;
} Inliner;

/*
** Record a refusal: the reason (a format with the reference's place and
** the reference, both clipped to the text rule) is left in the registry
** for the normaliser's message; returns MCP_REFS_REFUSED.
*/
static int refuse(Inliner *in, const char *fmt, int path, const char *ref, size_t ref_len) {
  lua_State *L = in->L;
  size_t n;
  const char *p = lua_tolstring(L, path, &n);
  mcp_text_clip(L, p, n, SHOWN);
  if (ref != NULL) mcp_text_clip(L, ref, ref_len, SHOWN);
  else lua_pushliteral(L, "");
  lua_pushfstring(L, fmt, lua_tostring(L, -2), lua_tostring(L, -1));
  lua_setfield(L, LUA_REGISTRYINDEX, MCP_REFS_REASON);
  lua_pop(L, 2);
  return MCP_REFS_REFUSED;
}

/*
** Push the JSON pointer of member `key` (at index k) below the pointer at `path`.
*/
static void push_child_path(lua_State *L, int path, int k) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushvalue(L, path);
  luaL_addvalue(&b);
  luaL_addchar(&b, '/');
  if (lua_type(L, k) == LUA_TSTRING) {
    size_t n, i;
    const char *s = lua_tolstring(L, k, &n);
    for (i = 0; i < n; i++) {
      if (s[i] == '~') luaL_addstring(&b, "~0");
      else if (s[i] == '/') luaL_addstring(&b, "~1");
      else luaL_addchar(&b, s[i]);
    }
  } else if (lua_isinteger(L, k)) {
    lua_pushfstring(L, "%I", (LUAI_UACINT)(lua_tointeger(L, k) - 1)); /* JSON arrays count from 0 */
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
}

/* What a value is to the copy: the schema itself, a schema, a map of name -> schema, or data. */
enum kind { K_ROOT, K_SCHEMA, K_MAP, K_DATA };

static int copy_value(Inliner *in, int v, int path, int depth, enum kind kind);

/*
** The kind of a schema's member by its keyword: the keywords holding a map
** of schemas, and those holding data (values, not schemas: a "$ref" in
** them is data and is left as it is), else a schema or a list of them.
*/
static enum kind member_kind(lua_State *L, int k) {
  static const char *const maps[] = {"properties", "patternProperties", "$defs", "definitions",
                                     "dependentSchemas"};
  static const char *const data[] = {"default", "const", "enum", "examples"};
  size_t i;
  if (lua_type(L, k) != LUA_TSTRING) return K_SCHEMA;
  for (i = 0; i < sizeof maps / sizeof maps[0]; i++) {
    if (strcmp(lua_tostring(L, k), maps[i]) == 0) return K_MAP;
  }
  for (i = 0; i < sizeof data / sizeof data[0]; i++) {
    if (strcmp(lua_tostring(L, k), data[i]) == 0) return K_DATA;
  }
  return K_SCHEMA;
}

/*
** Record on dst the key order recorded for src, less the keys dst does not
** hold, then `extra` (NULL: none) when dst holds it and the order did not
** name it. Nothing when src has no record.
*/
static void copy_order(lua_State *L, int src, int dst, const char *extra) {
  lua_Integer i, n, kept = 0;
  int o, seen = 0;
  if (mcp_json_push_key_order(L, src) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  o = lua_gettop(L);
  n = (lua_Integer)lua_rawlen(L, o);
  lua_createtable(L, (int)n + 1, 0);
  for (i = 1; i <= n; i++) {
    if (lua_rawgeti(L, o, i) == LUA_TSTRING) {
      lua_pushvalue(L, -1);
      if (lua_rawget(L, dst) != LUA_TNIL) {
        lua_pop(L, 1);
        if (extra != NULL && strcmp(lua_tostring(L, -1), extra) == 0) seen = 1;
        lua_rawseti(L, o + 1, ++kept);
        continue;
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  if (extra != NULL && !seen) {
    lua_pushstring(L, extra);
    lua_rawseti(L, o + 1, ++kept);
  }
  mcp_json_set_key_order(L, dst, o + 1);
  lua_settop(L, o - 1);
}

/* 1 when the key at k is the string s. */
static int key_is(lua_State *L, int k, const char *s) {
  return lua_type(L, k) == LUA_TSTRING && strcmp(lua_tostring(L, k), s) == 0;
}

/*
** Which definition a reference names: pushes the definition's value and
** its pointer and returns 0, or refuses. A definition is named by
** "#/$defs/<name>" or "#/definitions/<name>" (~1 and ~0 read as '/' and '~').
*/
static int find_definition(Inliner *in, const char *ref, size_t len, int path) {
  lua_State *L = in->L;
  size_t i, j, k = 0;
  luaL_Buffer name;
  if (len == 0 || ref[0] != '#') {
    return refuse(in, "its \"$ref\" at %s points outside the schema (%s), and references are never fetched",
                  path, ref, len);
  }
  for (i = 0; i < 2; i++) {
    k = strlen(def_keys[i]);
    if (len > k + 3 && ref[1] == '/' && memcmp(ref + 2, def_keys[i], k) == 0 && ref[k + 2] == '/' &&
        memchr(ref + k + 3, '/', len - k - 3) == NULL)
      break;
  }
  if (i == 2) {
    return refuse(in, "its \"$ref\" at %s (%s) names no whole definition in \"$defs\" or \"definitions\"",
                  path, ref, len);
  }
  luaL_buffinit(L, &name);
  for (j = k + 3; j < len; j++) {
    if (ref[j] == '~' && j + 1 < len && (ref[j + 1] == '0' || ref[j + 1] == '1')) {
      luaL_addchar(&name, ref[j + 1] == '0' ? '~' : '/');
      j++;
    } else {
      luaL_addchar(&name, ref[j]);
    }
  }
  luaL_pushresult(&name);
  if (in->defs[i] == 0 || lua_rawget(L, in->defs[i]) == LUA_TNIL) {
    lua_pop(L, 1);
    return refuse(in, "its \"$ref\" at %s points to %s, which the schema does not define", path, ref, len);
  }
  if (lua_type(L, -1) != LUA_TBOOLEAN &&
      (lua_type(L, -1) != LUA_TTABLE || mcp_json_is_null(L, -1) || mcp_json_is_array(L, -1))) {
    lua_pop(L, 1);
    return refuse(in, "its \"$ref\" at %s points to %s, which is not a schema", path, ref, len);
  }
  lua_pushlstring(L, ref, len);
  return 0;
}

/*
** Copy the member whose key is at k (its value on the top of the stack) of
** the container at v into the table at out, written out; a schema's "$ref"
** is left out (its caller writes it out), and so are the root's
** definitions. Leaves the key on the stack.
*/
static int copy_member(Inliner *in, int k, int out, int path, int depth, enum kind kind, int array) {
  lua_State *L = in->L;
  enum kind of = kind == K_MAP || array ? K_SCHEMA : member_kind(L, k);
  int r;
  if ((kind != K_MAP && !array && key_is(L, k, "$ref")) ||
      (kind == K_ROOT && (key_is(L, k, def_keys[0]) || key_is(L, k, def_keys[1])))) {
    lua_pop(L, 1);
    return 0;
  }
  push_child_path(L, path, k);
  r = copy_value(in, k + 1, lua_gettop(L), depth + 1, of);
  if (r != 0) return r;
  lua_remove(L, -2); /* the path */
  lua_remove(L, -2); /* the original value */
  lua_pushvalue(L, k);
  lua_insert(L, -2);
  lua_rawset(L, out);
  return 0;
}

/*
** Copy the members of the container at v (of kind `kind`) into the table
** at out, each written out (below the pointer at path). They are walked in
** a fixed order, so that of several bad references the one a refusal names
** does not depend on how the table was built: an array's by index, an
** object's in its recorded key order (the order written), then any key the
** record does not name.
*/
static int copy_members(Inliner *in, int v, int out, int path, int depth, enum kind kind) {
  lua_State *L = in->L;
  int array = mcp_json_is_array(L, v), order, r;
  lua_Integer i, n;
  if (array) {
    n = (lua_Integer)lua_rawlen(L, v);
    for (i = 1; i <= n; i++) {
      lua_pushinteger(L, i);
      lua_rawgeti(L, v, i);
      if ((r = copy_member(in, lua_gettop(L) - 1, out, path, depth, kind, array)) != 0) return r;
      lua_pop(L, 1);
    }
  }
  order = mcp_json_push_key_order(L, v) == LUA_TTABLE ? lua_gettop(L) : 0;
  if (order == 0) lua_pop(L, 1);
  for (i = 1, n = order != 0 ? (lua_Integer)lua_rawlen(L, order) : 0; i <= n; i++) {
    lua_rawgeti(L, order, i);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, out) != LUA_TNIL) { /* a key the record names twice */
      lua_pop(L, 2);
      continue;
    }
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, v) == LUA_TNIL) {
      lua_pop(L, 2);
      continue;
    }
    if ((r = copy_member(in, lua_gettop(L) - 1, out, path, depth, kind, array)) != 0) return r;
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  while (lua_next(L, v) != 0) {
    lua_pushvalue(L, -2);
    if ((array && lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 &&
         lua_tointeger(L, -1) <= (lua_Integer)lua_rawlen(L, v)) ||
        lua_rawget(L, out) != LUA_TNIL) { /* copied above */
      lua_pop(L, 2);
      continue;
    }
    lua_pop(L, 1);
    if ((r = copy_member(in, lua_gettop(L) - 1, out, path, depth, kind, array)) != 0) return r;
  }
  if (order != 0) lua_remove(L, order);
  return 0;
}

/*
** An object holding "$ref" at v: push the definition written out, or, with
** other members beside the reference, those members with the definition
** as one more "allOf" entry.
*/
static int copy_reference(Inliner *in, int v, int path, int depth) {
  lua_State *L = in->L;
  int base = lua_gettop(L), def, copy, out, r;
  size_t len;
  const char *ref;
  lua_pushliteral(L, "$ref");
  if (lua_rawget(L, v) != LUA_TSTRING) {
    lua_settop(L, base);
    return refuse(in, "its \"$ref\" at %s is not a string%s", path, NULL, 0);
  }
  ref = lua_tolstring(L, -1, &len);
  if ((r = find_definition(in, ref, len, path)) != 0) {
    lua_settop(L, base);
    return r;
  }
  def = base + 2; /* the definition; its pointer above it */
  lua_pushvalue(L, def);
  if (lua_rawget(L, in->active) != LUA_TNIL) {
    size_t n;
    const char *at = lua_tolstring(L, def + 1, &n);
    r = refuse(in,
               "its \"$ref\" at %s leads back to %s, a definition it lies in: a recursive schema has no form "
               "without references",
               path, at, n);
    lua_settop(L, base);
    return r;
  }
  lua_pop(L, 1);
  lua_pushvalue(L, def);
  lua_pushboolean(L, 1);
  lua_rawset(L, in->active);
  r = copy_value(in, def, def + 1, depth + 1, K_SCHEMA); /* the definition, at its own place */
  lua_pushvalue(L, def);
  lua_pushnil(L);
  lua_rawset(L, in->active);
  if (r != 0) {
    lua_settop(L, base);
    return r;
  }
  copy = lua_gettop(L);
  lua_pushnil(L);
  if (lua_next(L, v) != 0 && (lua_pop(L, 1), key_is(L, -1, "$ref")) && lua_next(L, v) == 0) {
    lua_replace(L, base + 1); /* "$ref" alone: the definition itself */
    lua_settop(L, base + 1);
    return 0;
  }
  lua_settop(L, copy);
  lua_newtable(L);
  out = lua_gettop(L);
  if ((r = copy_members(in, v, out, path, depth, K_SCHEMA)) != 0) {
    lua_settop(L, base);
    return r;
  }
  lua_pushliteral(L, "allOf");
  if (lua_rawget(L, out) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 1, 0);
    mcp_json_mark_array(L, -1);
    lua_pushliteral(L, "allOf");
    lua_pushvalue(L, -2);
    lua_rawset(L, out);
  } else if (!mcp_json_is_array(L, -1)) {
    lua_settop(L, base);
    return refuse(in, "its \"$ref\" at %s stands beside an \"allOf\" that is not a list%s", path, NULL, 0);
  }
  lua_pushvalue(L, copy);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 1);
  copy_order(L, v, out, "allOf");
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return 0;
}

/*
** Push a copy of the value at v (found at the pointer at `path`), every
** reference in it written out. The root's definitions are left out of its copy.
*/
static int copy_value(Inliner *in, int v, int path, int depth, enum kind kind) {
  lua_State *L = in->L;
  int out, marked, has_ref, r, is_root = kind == K_ROOT;
  luaL_checkstack(L, 16, "schema references");
  if (kind == K_DATA || lua_type(L, v) != LUA_TTABLE || mcp_json_is_null(L, v)) {
    lua_pushvalue(L, v);
    return 0;
  }
  if (depth > MAX_NEST) return MCP_REFS_TOO_DEEP;
  if (++in->containers > MAX_CONTAINERS) return MCP_REFS_TOO_BIG;
  mcp_json_lazy_settle(L, v);
  marked = mcp_json_is_array(L, v);
  lua_pushliteral(L, "$ref");
  has_ref = !marked && kind != K_MAP && lua_rawget(L, v) != LUA_TNIL;
  lua_pop(L, 1);
  if (has_ref && !is_root) return copy_reference(in, v, path, depth);
  lua_newtable(L);
  out = lua_gettop(L);
  if (marked) mcp_json_mark_array(L, out);
  if (has_ref) { /* the root: its members as they are, its reference written out below */
    lua_pushnil(L);
    while (lua_next(L, v) != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, out);
    }
  } else if ((r = copy_members(in, v, out, path, depth, kind)) != 0) {
    return r;
  }
  if (is_root) {
    lua_pushnil(L);
    lua_setfield(L, out, def_keys[0]);
    lua_pushnil(L);
    lua_setfield(L, out, def_keys[1]);
  }
  if (!marked) copy_order(L, v, out, NULL);
  if (has_ref) {
    if ((r = copy_reference(in, out, path, depth)) != 0) return r;
    lua_remove(L, out);
  }
  return 0;
}

/*
** C API for the normaliser: push a copy of the schema at s with every
** local reference written out and its definitions dropped, returning 0; or
** push nothing and return MCP_REFS_REFUSED (the reason in the registry at
** MCP_REFS_REASON), MCP_REFS_TOO_BIG or MCP_REFS_TOO_DEEP.
*/
int mcp_schema_inline_refs(lua_State *L, int s) {
  Inliner in;
  int top, i, r;
  s = lua_absindex(L, s);
  top = lua_gettop(L);
  luaL_checkstack(L, 8, "schema references");
  memset(&in, 0, sizeof in);
  in.L = L;
  for (i = 0; i < 2; i++) {
    lua_pushstring(L, def_keys[i]);
    lua_rawget(L, s);
    if (lua_type(L, -1) == LUA_TTABLE && !mcp_json_is_null(L, -1) && !mcp_json_is_array(L, -1)) {
      mcp_json_lazy_settle(L, -1);
      in.defs[i] = lua_gettop(L);
    }
  }
  lua_newtable(L);
  in.active = lua_gettop(L);
  lua_pushliteral(L, "#");
  r = copy_value(&in, s, lua_gettop(L), 1, K_ROOT);
  if (r != 0) {
    lua_settop(L, top);
    return r;
  }
  lua_replace(L, top + 1);
  lua_settop(L, top + 1);
  return 0;
}
