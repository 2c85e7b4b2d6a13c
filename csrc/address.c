/*
** address.c: numeric IP addresses as bytes, so the host gate (Lua) can
** classify an address by prefix without parsing IPv6 text itself.
*/
#include <arpa/inet.h>

#include "core.h"

/*
** address_bytes(text) -> 4- or 16-byte string, or nil when text is not a
** numeric IPv4/IPv6 address. Only what inet_pton accepts counts: no
** shorthand like "127.1", which libcurl would not dial the same way.
*/
static int l_address_bytes(lua_State *L) {
  const char *text = luaL_checkstring(L, 1);
  unsigned char bytes[16];
  if (inet_pton(AF_INET, text, bytes) == 1)
    lua_pushlstring(L, (const char *)bytes, 4);
  else if (inet_pton(AF_INET6, text, bytes) == 1)
    lua_pushlstring(L, (const char *)bytes, 16);
  else
    lua_pushnil(L);
  return 1;
}

void mcp_register_address(lua_State *L) {
  lua_pushcfunction(L, l_address_bytes);
  lua_setfield(L, -2, "address_bytes");
}
