/*
** json_reference.c: jansson's reading of JSON, kept as the oracle the
** decoder is held to. fuzz/decode_fuzz.c and fuzz/listing_fuzz.c compare
** the decoder (decode.c) and the classifier (rpc.c) with these, verdict
** and value, on every input they make: core.json_reference.decode and
** core.json_reference.classify, and mcp_json_reference_decode for C.
** Nothing on a request's path calls them.
**
** jansson builds its tree (duplicate keys, invalid UTF-8 and out-of-range
** integers refused there), and this file converts it to Lua values as the
** decoder builds them: integers stay lua_Integer, arrays carry the marker
** metatable, JSON null is json.null. The tree is boxed in a userdata with
** __gc while it is converted, so a Lua error (memory) raised part-way
** cannot leak it. It shares no reading code with the decoder (is_blank and
** count_containers are its own copies), so a fault in one is not in both.
*/
#include <string.h>

#include <jansson.h>

#include "core.h"

_Static_assert(sizeof(lua_Integer) == sizeof(json_int_t), "lua_Integer must be jansson's json_int_t");
_Static_assert(sizeof(lua_Number) == sizeof(double), "lua_Number must be double");

#define TREE_KEY "mcpclient.json.tree" /* registry: metatable of the tree box */

#define LOAD_FLAGS    (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL)
#define DEPTH_MESSAGE "invalid JSON: nesting deeper than 512 levels"

/* Conversion state: stack indexes of the array marker and the order table (0: unordered). */
typedef struct Dec {
  lua_State *L;
  int marker, order;
} Dec;

/*
** Release the boxed tree now; idempotent, so __gc may run it again.
*/
static void drop_tree(json_t **box) {
  json_t *root = *box;
  *box = NULL;
  if (root != NULL) json_decref(root);
}

/*
** __gc of the tree box: frees a tree left behind by an error during conversion.
*/
static int tree_gc(lua_State *L) {
  json_t **box = (json_t **)lua_touserdata(L, 1);
  if (box != NULL) drop_tree(box);
  return 0;
}

/*
** Push a closed (empty) tree box; the tree is put in only after it exists.
*/
static json_t **new_tree_box(lua_State *L, int mt) {
  json_t **box = (json_t **)lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  lua_pushvalue(L, mt);
  lua_setmetatable(L, -2);
  return box;
}

/*
** Parse text into the box; on failure push the short "invalid JSON: ..." message and return 0.
*/
static int load_tree(lua_State *L, json_t **box, const char *s, size_t len) {
  json_error_t err;
  *box = json_loadb(s, len, LOAD_FLAGS, &err);
  if (*box != NULL) return 1;
  if (json_error_code(&err) == json_error_stack_overflow) lua_pushliteral(L, DEPTH_MESSAGE);
  else {
    /* jansson quotes the offending bytes (" near 'SecretToken'"); a message never carries body bytes */
    char *near = strstr(err.text, " near ");
    if (near != NULL) *near = '\0';
    lua_pushfstring(L, "invalid JSON: %s at line %d column %d", err.text, err.line, err.column);
  }
  return 0;
}

/*
** A count for lua_createtable, which takes an int hint.
*/
static int size_hint(size_t n) {
  return n > 0x7fffffff ? 0 : (int)n;
}

/*
** Push the Lua value of j, a container at nesting level depth. Returns 0, or
** -1 (pushing nothing more to rely on) when nesting exceeds the bound.
*/
static int to_lua(Dec *d, json_t *j, int depth) {
  lua_State *L = d->L;
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      size_t n = json_object_size(j), i = 0;
      int obj, keys = 0;
      void *it;
      if (depth > MCP_JSON_MAX_DEPTH) return -1;
      luaL_checkstack(L, 8, "JSON decoder");
      lua_createtable(L, 0, size_hint(n));
      obj = lua_gettop(L);
      if (d->order != 0 && n > 0) {
        lua_createtable(L, size_hint(n), 0);
        keys = obj + 1;
      }
      for (it = json_object_iter(j); it != NULL; it = json_object_iter_next(j, it)) {
        lua_pushlstring(L, json_object_iter_key(it), json_object_iter_key_len(it));
        if (keys != 0) {
          lua_pushvalue(L, -1);
          lua_rawseti(L, keys, (lua_Integer)++i);
        }
        if (to_lua(d, json_object_iter_value(it), depth + 1) != 0) return -1;
        lua_rawset(L, obj);
      }
      if (keys != 0) {
        lua_pushvalue(L, obj);
        lua_insert(L, keys);
        lua_rawset(L, d->order);
      }
      return 0;
    }
    case JSON_ARRAY: {
      size_t n = json_array_size(j), i;
      int arr;
      if (depth > MCP_JSON_MAX_DEPTH) return -1;
      luaL_checkstack(L, 8, "JSON decoder");
      lua_createtable(L, size_hint(n), 0);
      arr = lua_gettop(L);
      lua_pushvalue(L, d->marker);
      lua_setmetatable(L, arr);
      for (i = 0; i < n; i++) {
        if (to_lua(d, json_array_get(j, i), depth + 1) != 0) return -1;
        lua_rawseti(L, arr, (lua_Integer)i + 1);
      }
      return 0;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); return 0;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); return 0;
    case JSON_REAL: lua_pushnumber(L, (lua_Number)json_real_value(j)); return 0;
    case JSON_TRUE: lua_pushboolean(L, 1); return 0;
    case JSON_FALSE: lua_pushboolean(L, 0); return 0;
    default: mcp_json_push_null(L); return 0;
  }
}

/*
** The first argument as a string; numbers are not text, so no coercion.
*/
static const char *check_text(lua_State *L, int arg, size_t *len) {
  if (lua_type(L, arg) != LUA_TSTRING) luaL_typeerror(L, arg, "string");
  return lua_tolstring(L, arg, len);
}

/*
** Decode len bytes at s with the marker, order table (0: unordered) and
** tree-box metatable at the given stack indexes. Pushes the value and
** returns 1, or pushes the "invalid JSON: ..." message and returns 0; the
** tree box it used is left below the result, for the caller to drop.
*/
static int decode_with(lua_State *L, const char *s, size_t len, int marker, int order, int tree_mt) {
  int box_idx;
  json_t **box;
  Dec d;
  box = new_tree_box(L, tree_mt);
  box_idx = lua_gettop(L);
  if (!load_tree(L, box, s, len)) return 0;
  d.L = L;
  d.marker = marker;
  d.order = order;
  if (to_lua(&d, *box, 1) != 0) {
    lua_settop(L, box_idx);
    drop_tree(box);
    lua_pushliteral(L, DEPTH_MESSAGE);
    return 0;
  }
  drop_tree(box);
  return 1;
}

/*
** json_reference.decode(text [, ordered]) -> value | nil, message: the
** oracle's verdict and value (and jansson's wording).
** Upvalues: array marker, order table, tree-box metatable.
*/
static int l_reference_decode(lua_State *L) {
  size_t len;
  const char *s = check_text(L, 1, &len);
  int ordered = lua_toboolean(L, 2);
  lua_settop(L, 2);
  if (decode_with(L, s, len, lua_upvalueindex(1), ordered ? lua_upvalueindex(2) : 0, lua_upvalueindex(3)))
    return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

/*
** The C API of json_reference.decode: the same conversion, with the
** marker, order table and box metatable fetched from the registry. Pushes
** exactly one value: the decoded value (returns 1) or the message (returns
** 0). Raises only when memory or the stack runs out.
*/
int mcp_json_reference_decode(lua_State *L, const char *s, size_t len, int ordered) {
  int base = lua_gettop(L), ok;
  luaL_checkstack(L, 6, "JSON decoder");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, TREE_KEY);
  if (!lua_istable(L, base + 1) || !lua_istable(L, base + 3))
    return luaL_error(L, "the JSON codec is not loaded");
  ok = decode_with(L, s, len, base + 1, ordered && lua_istable(L, base + 2) ? base + 2 : 0, base + 3);
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return ok;
}

/*
** Whether every container in j sits at most MCP_JSON_MAX_DEPTH levels deep.
*/
static int depth_ok(json_t *j, int depth) {
  if (json_is_object(j)) {
    void *it;
    if (depth > MCP_JSON_MAX_DEPTH) return 0;
    for (it = json_object_iter(j); it != NULL; it = json_object_iter_next(j, it))
      if (!depth_ok(json_object_iter_value(it), depth + 1)) return 0;
  } else if (json_is_array(j)) {
    size_t i, n = json_array_size(j);
    if (depth > MCP_JSON_MAX_DEPTH) return 0;
    for (i = 0; i < n; i++)
      if (!depth_ok(json_array_get(j, i), depth + 1)) return 0;
  }
  return 1;
}

/*
** Whether the text holds only blanks (space, tab, LF, CR, NUL, VT): such a
** body is "empty", a clearer message than a parse error at column 1.
*/
static int is_blank(const char *s, size_t len) {
  size_t i;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\0' && c != '\v') return 0;
  }
  return 1;
}

/*
** Return kind and detail (both literals), freeing the tree first.
*/
static int classified(lua_State *L, json_t **box, const char *kind, const char *detail) {
  drop_tree(box);
  lua_pushstring(L, kind);
  lua_pushstring(L, detail);
  return 2;
}

/*
** How many objects and arrays the text opens outside strings: one pass, no
** allocation, so a response can be refused before jansson builds a tree of
** hundreds of thousands of nodes from 2 MiB of "{},".
*/
static size_t count_containers(const char *s, size_t len) {
  size_t i, n = 0;
  int in_string = 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '{' || c == '[') {
      n++;
    }
  }
  return n;
}

/*
** json_reference.classify(text, expected_id [, ordered [, max_containers]]):
** core.rpc_classify's answer for one JSON-RPC response, as the oracle
** gives it (with max_containers, a result also returns how many objects
** and arrays the text opened):
**   "result", table | "error", code, message | "other", why | "malformed", why.
** Classified on the jansson tree; only a result returned is converted to Lua.
*/
static int l_reference_classify(lua_State *L) {
  size_t len;
  const char *s = check_text(L, 1, &len);
  lua_Integer expected;
  int ordered = lua_toboolean(L, 3), id_matches;
  json_t **box, *root, *id, *err, *res;
  lua_Integer max_containers = luaL_optinteger(L, 4, 0);
  size_t containers = max_containers > 0 ? count_containers(s, len) : 0;
  if (!lua_isinteger(L, 2)) luaL_typeerror(L, 2, "integer"); /* ids are integers: no "1" or 1.0 */
  expected = lua_tointeger(L, 2);
  lua_settop(L, 3);
  if (max_containers > 0 && containers > (size_t)max_containers) {
    lua_pushliteral(L, "malformed");
    lua_pushfstring(L, "the response holds more than %I objects and arrays", max_containers);
    return 2;
  }
  if (is_blank(s, len)) {
    lua_pushliteral(L, "malformed");
    lua_pushliteral(L, "empty body");
    return 2;
  }
  box = new_tree_box(L, lua_upvalueindex(3));
  if (!load_tree(L, box, s, len)) {
    lua_pushliteral(L, "malformed");
    lua_insert(L, -2);
    return 2;
  }
  root = *box;
  if (!depth_ok(root, 1)) return classified(L, box, "malformed", DEPTH_MESSAGE);
  if (!json_is_object(root)) return classified(L, box, "malformed", "the body is not a JSON object");
  if (json_object_get(root, "method") != NULL)
    return classified(L, box, "other", "a server request or notification");
  id = json_object_get(root, "id");
  id_matches = id != NULL && json_is_integer(id) && json_integer_value(id) == (json_int_t)expected;
  err = json_object_get(root, "error");
  if (err != NULL && json_is_object(err)) {
    json_t *code = json_object_get(err, "code"), *message = json_object_get(err, "message");
    if (!id_matches && !(id != NULL && json_is_null(id)))
      return classified(L, box, "other", "a response to another request");
    lua_pushliteral(L, "error");
    lua_pushinteger(L, code != NULL && json_is_integer(code) ? (lua_Integer)json_integer_value(code) : 0);
    if (message != NULL && json_is_string(message))
      lua_pushlstring(L, json_string_value(message), json_string_length(message));
    else lua_pushliteral(L, "no message");
    drop_tree(box);
    return 3;
  }
  res = json_object_get(root, "result");
  if (res != NULL && json_is_object(res)) {
    Dec d;
    if (!id_matches) return classified(L, box, "other", "a response to another request");
    d.L = L;
    d.marker = lua_upvalueindex(1);
    d.order = ordered ? lua_upvalueindex(2) : 0;
    lua_pushliteral(L, "result");
    (void)to_lua(&d, res, 2); /* depth_ok already bounded the whole tree */
    drop_tree(box);
    if (max_containers <= 0) return 2;
    lua_pushinteger(L, (lua_Integer)containers); /* so a caller can bound several responses together */
    return 3;
  }
  return classified(L, box, "malformed", "the response carries neither a result nor an error");
}

/*
** Adds core.json_reference.{decode, classify}, the oracle's (apart from
** core.json, which mcpclient.json hands to callers); runs after
** mcp_register_json, whose state they are built on.
*/
void mcp_register_json_reference(lua_State *L) {
  int module = lua_gettop(L);
  luaL_checkstack(L, 8, "mcpclient.core");
  lua_createtable(L, 0, 2);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  if (luaL_newmetatable(L, TREE_KEY)) {
    lua_pushcfunction(L, tree_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pushvalue(L, -3);
  lua_pushvalue(L, -3);
  lua_pushvalue(L, -3);
  lua_pushcclosure(L, l_reference_decode, 3);
  lua_setfield(L, module + 1, "decode");
  lua_pushcclosure(L, l_reference_classify, 3);
  lua_setfield(L, module + 1, "classify");
  lua_settop(L, module + 1);
  lua_setfield(L, module, "json_reference");
}
