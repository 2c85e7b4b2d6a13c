/* placeholder: filled in by the schema work */
#include "core.h"

void mcp_register_schema(lua_State *L) { (void)L; }
