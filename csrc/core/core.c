/*
** luaopen_mcpclient_core: builds the module table from every concern.
** busted re-opens C modules once per spec file, so nothing here may assume it
** runs once.
**
** Three C modules, each linking only its own libraries: this one (jansson
** only: the engine, JSON, decoding, event streams, the schema normaliser,
** the text rule, the clock); mcpclient.net (net.c: the HTTP legs and what
** else needs libcurl, libcrypto or libidn2), loaded on the first use of one
** of its names; and mcpclient.db (db.c: the store's database drivers).
** Requiring this module maps none of the other two's libraries.
*/
#include <string.h>

#include "core.h"

LUALIB_API int luaopen_mcpclient_core(lua_State *L);

/*
** The names mcpclient.net gives, reached through this module's table so
** callers keep one table: core.http_leg() loads the network module, and its
** functions join the table for every later use.
*/
static const char *const net_names[] = {
  "http_leg", "http_pool", "address_bytes", "idna", "url_host", "lookup", "crypto", "loopback_listen", NULL,
};

/*
** __index of the module table: a network name loads mcpclient.net and copies
** its functions in; any other missing name is nil, as for a plain table.
*/
static int core_index(lua_State *L) {
  const char *key = lua_tostring(L, 2);
  int i;
  if (lua_type(L, 2) != LUA_TSTRING) return 0;
  for (i = 0; net_names[i] != NULL && strcmp(net_names[i], key) != 0; i++) {}
  if (net_names[i] == NULL) return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "mcpclient.net");
  lua_call(L, 1, 1);
  luaL_checktype(L, -1, LUA_TTABLE);
  for (i = 0; net_names[i] != NULL; i++) {
    lua_getfield(L, -1, net_names[i]);
    lua_setfield(L, 1, net_names[i]);
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, 1);
  return 1;
}

/*
** The module table, filled by each concern's registrar. json comes first:
** it creates the registry state (array marker, key-order table) that the
** other files' calls to the codec rely on.
*/
LUALIB_API int luaopen_mcpclient_core(lua_State *L) {
  lua_newtable(L);
  mcp_register_json(L);
  mcp_register_engine(L);
  mcp_register_pipe(L);
  mcp_register_decode(L);
  mcp_register_rpc(L);
  mcp_register_listing(L);
  mcp_register_sse(L);
  mcp_register_clock(L);
  mcp_register_text(L);
  mcp_register_schema(L);
  mcp_register_lazy(L);
  mcp_register_process(L);
  mcp_register_json_reference(L);
  mcp_register_validate(L);
  lua_pushliteral(L, MCP_VERSION);
  lua_setfield(L, -2, "version");
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, core_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  return 1;
}
