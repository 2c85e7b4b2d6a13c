/* placeholder: filled in by the sse work */
#include "core.h"

void mcp_register_sse(lua_State *L) { (void)L; }
