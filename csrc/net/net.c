/*
** luaopen_mcpclient_net: the module of everything that needs libcurl,
** libcrypto or libidn2: the HTTP legs (http_*.c), host names and lookups
** (address.c), OAuth's crypto (crypto.c) and the login redirect listener
** (loopback.c). It is apart from mcpclient.core so a program that speaks MCP
** only over stdio (or only uses JSON) never maps those libraries: the core
** module loads it on the first use of one of its names (core.http_leg, ...),
** which is the first HTTP connection or OAuth use. The HTTP leg drives the
** core's engine (engine.h), so the core is loaded first.
*/
#include "core.h"

LUALIB_API int luaopen_mcpclient_net(lua_State *L);

/*
** The module table. busted re-opens C modules once per spec file, so nothing
** here may assume it runs once; one-time global state (libcurl) is guarded
** where it lives.
*/
LUALIB_API int luaopen_mcpclient_net(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "mcpclient.core");
  lua_call(L, 1, 0); /* the engine the legs drive, and the registry state of the codec */
  lua_newtable(L);
  mcp_register_http(L);
  mcp_register_address(L);
  mcp_register_crypto(L);
  mcp_register_loopback(L);
  lua_pushliteral(L, MCP_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
