/* placeholder: filled in by the json work */
#include "core.h"

void mcp_register_json(lua_State *L) { (void)L; }
