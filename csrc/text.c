/* placeholder: filled in by the text work */
#include "core.h"

void mcp_register_text(lua_State *L) { (void)L; }
