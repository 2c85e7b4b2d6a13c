/*
** luaopen_mcpclient_core: builds the module table from every concern.
** busted re-opens C modules once per spec file, so nothing here may assume it
** runs once; one-time global state (libcurl) is guarded where it lives.
** The store's database drivers are not here but in mcpclient.db (db.c), so
** requiring this module never maps libsqlite3 or libpq.
*/
#include "core.h"

LUALIB_API int luaopen_mcpclient_core(lua_State *L);

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
  mcp_register_sse(L);
  mcp_register_http(L);
  mcp_register_clock(L);
  mcp_register_address(L);
  mcp_register_text(L);
  mcp_register_schema(L);
  mcp_register_crypto(L);
  mcp_register_loopback(L);
  lua_pushliteral(L, MCP_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
