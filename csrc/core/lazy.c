/*
** lazy.c: JSON objects built only when read. A listing hands every tool's
** schema over, and most callers read few of them (or only hand them on as
** text): building thousands of schemas as Lua tables is what made a
** listing as costly as a client that parses everything. So a listed
** schema stays the JSON text the decoder already wrote (what json.encode
** gives for the decoded value) inside an empty table whose metatable
** decodes it on the first read: index, assignment, #, pairs, ipairs. The
** decoded members are then moved into that very table and the metatable
** is dropped, so from then on it is an ordinary decoded table (key order
** recorded), and a reference kept by anyone stays the same table.
**
** Raw access (next, rawget, rawlen) cannot be intercepted: it sees an
** empty table until the first read. The codec, the normaliser and the
** measure therefore settle a lazy table before they read it raw
** (mcp_json_lazy_settle, which calls the metatable's `settle`: this file's
** builder), the encoder writes its text as it is, and the normaliser
** judges its text directly. json.c keeps the table of pending texts and
** knows a lazy object by its metatable, so the codec and the normaliser
** never call this file; it stands above them.
*/
#include <string.h>

#include "core.h"

/*
** Push the table of pending texts (created on first use).
*/
static void push_pending(lua_State *L) {
  mcp_push_weak_registry_table(L, MCP_JSON_LAZY_PENDING);
}

/*
** Build the lazy object at idx now, if it is one not read yet: decode its
** text (key order recorded), move the members into it, forget the text
** and drop the metatable. Returns 1 when it did. Raises only when memory
** runs out (the text is the decoder's own and always decodes).
*/
static int settle(lua_State *L, int idx) {
  int top = lua_gettop(L), d;
  size_t len;
  const char *s;
  idx = lua_absindex(L, idx);
  if (!mcp_json_lazy_text(L, idx)) return 0;
  luaL_checkstack(L, 6, "lazy JSON");
  s = lua_tolstring(L, -1, &len);
  if (!mcp_json_decode(L, s, len, 1) || !lua_istable(L, -1)) {
    lua_settop(L, top);
    return luaL_error(L, "a lazy JSON object holds text that is not a JSON object");
  }
  d = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, d) != 0) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, idx);
  }
  if (mcp_json_push_key_order(L, d) == LUA_TTABLE) mcp_json_set_key_order(L, idx, -1);
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setmetatable(L, idx);
  push_pending(L);
  lua_pushvalue(L, idx);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_settop(L, top);
  return 1;
}

/*
** Replace the JSON text at idx with a lazy object holding it, the table of
** pending texts and the metatable already at the (absolute) stack indices
** `pending` and `meta`: a page wraps many, and each registry lookup would
** cost as much as the wrapping itself.
*/
static void wrap_with(lua_State *L, int idx, int pending, int meta) {
  lua_createtable(L, 0, 0);
  lua_pushvalue(L, meta);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_pushvalue(L, idx);
  lua_rawset(L, pending);
  lua_replace(L, idx);
}

/* The metatable's `settle` (see mcp_json_lazy_settle): the object built now. */
static int lazy_settle(lua_State *L) {
  settle(L, 1);
  return 0;
}

/* __index: the first read builds the object; the key is then read from it. */
static int lazy_index(lua_State *L) {
  settle(L, 1);
  lua_settop(L, 2);
  lua_rawget(L, 1);
  return 1;
}

/* __newindex: built first, so the assignment lands beside the members. */
static int lazy_newindex(lua_State *L) {
  settle(L, 1);
  lua_settop(L, 3);
  lua_rawset(L, 1);
  return 0;
}

/* __len: the length of the built object. */
static int lazy_len(lua_State *L) {
  settle(L, 1);
  lua_pushinteger(L, (lua_Integer)lua_rawlen(L, 1));
  return 1;
}

/* The iterator __pairs hands out: next over the built table. */
static int lazy_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

/* __pairs: built first, then walked as any table is. */
static int lazy_pairs(lua_State *L) {
  settle(L, 1);
  lua_pushcfunction(L, lazy_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/*
** The schemas of a listed tool field by field: a JSON object's text
** becomes a lazy object; any other text (a server may send a string, a
** list or null where a schema belongs) is decoded at once, as an eager
** listing would give it.
*/
static void lazy_field(lua_State *L, int tool, const char *field, int pending, int meta) {
  size_t len;
  const char *s;
  if (lua_getfield(L, tool, field) != LUA_TSTRING) {
    lua_pop(L, 1);
    return;
  }
  s = lua_tolstring(L, -1, &len);
  if (len > 0 && s[0] == '{') {
    wrap_with(L, lua_gettop(L), pending, meta);
  } else if (!mcp_json_decode(L, s, len, 1)) {
    lua_pop(L, 2); /* the message and the text */
    return;        /* not JSON: never the decoder's own text; left as it is */
  } else {
    lua_remove(L, -2);
  }
  lua_setfield(L, tool, field);
}

/*
** lazy_schemas(page) -> page: each tool table of the list whose
** inputSchema or outputSchema is JSON text (a listing read with schemas as
** text) gets it as a lazy object instead, in place.
*/
static int l_lazy_schemas(lua_State *L) {
  lua_Integer i, n;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  push_pending(L);                          /* 2 */
  luaL_getmetatable(L, MCP_JSON_LAZY_META); /* 3 */
  n = (lua_Integer)lua_rawlen(L, 1);
  for (i = 1; i <= n; i++) {
    if (lua_rawgeti(L, 1, i) == LUA_TTABLE) {
      lazy_field(L, 4, "inputSchema", 2, 3);
      lazy_field(L, 4, "outputSchema", 2, 3);
    }
    lua_pop(L, 1);
  }
  lua_settop(L, 1);
  return 1;
}

/*
** lazy_object(text) -> a lazy object holding the JSON object text (which
** must be what json.encode writes: compact, as the decoder's text form
** is); anything but an object's text is refused.
*/
static int l_lazy_object(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  if (len == 0 || s[0] != '{') luaL_argerror(L, 1, "not the text of a JSON object");
  lua_settop(L, 1);
  mcp_json_lazy_wrap(L, 1);
  return 1;
}

/*
** lazy_text(value) -> the JSON text of a lazy object not read yet, or nil.
*/
static int l_lazy_text(lua_State *L) {
  luaL_checkany(L, 1);
  if (!mcp_json_lazy_text(L, 1)) lua_pushnil(L);
  return 1;
}

/*
** Adds core.lazy_schemas, core.lazy_object and core.lazy_text; the
** metatable is made once per Lua state and reused when the module is
** opened again, so objects made under one opening stay lazy under the next.
*/
void mcp_register_lazy(lua_State *L) {
  static const luaL_Reg meta[] = {
    {"__index", lazy_index}, {"__newindex", lazy_newindex}, {"__len", lazy_len},
    {"__pairs", lazy_pairs}, {"settle", lazy_settle},       {NULL, NULL},
  };
  static const luaL_Reg fns[] = {
    {"lazy_schemas", l_lazy_schemas},
    {"lazy_object", l_lazy_object},
    {"lazy_text", l_lazy_text},
    {NULL, NULL},
  };
  if (luaL_newmetatable(L, MCP_JSON_LAZY_META)) {
    luaL_setfuncs(L, meta, 0);
    lua_pushnil(L); /* no __name: tostring shows a table, as for an eager one */
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  push_pending(L);
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
}
