/* placeholder: filled in by the http work */
#include "core.h"

void mcp_register_http(lua_State *L) { (void)L; }
