/*
** luaopen_mcpclient_db: the store's database drivers, sqlite.c and pg.c, as
** the module mcpclient.db. They are a module apart from mcpclient.core so that
** a program that only speaks MCP (connect, list, call) never maps libsqlite3
** and libpq: the protocol client requires mcpclient.core alone, and only the
** agent host's store requires this module, on first use.
**
** Like mcpclient.core, this may be opened more than once per Lua state
** (busted reopens C modules per spec file): each driver builds its
** metatables on the first opening only.
*/
#include "db.h"
#include "core.h" /* only for MCP_JSON_NULL_KEY: no core.so function is callable from here */

LUALIB_API int luaopen_mcpclient_db(lua_State *L);

/*
** json.null is a light userdata whose address lies in core.so; json.c
** publishes it in the registry under MCP_JSON_NULL_KEY so this module can
** recognise it without linking against the codec. Absent key: core is not
** open, and no value can be json.null.
*/
int mcp_db_is_null(lua_State *L, int idx) {
  int is_null;
  if (lua_type(L, idx) != LUA_TLIGHTUSERDATA) return 0;
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 1, "json.null");
  is_null =
    lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_NULL_KEY) == LUA_TLIGHTUSERDATA && lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return is_null;
}

/*
** The module table: db.sqlite_open, db.sqlite_path_state, db.sqlite_version, db.pg_connect,
** db.pg_version.
*/
LUALIB_API int luaopen_mcpclient_db(lua_State *L) {
  lua_newtable(L);
  mcp_register_sqlite(L);
  mcp_register_pg(L);
  return 1;
}
