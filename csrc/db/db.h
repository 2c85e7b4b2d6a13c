/*
** mcpclient.db: the store's database drivers (SQLite, PostgreSQL), a module
** of their own so a program that only speaks MCP never maps libsqlite3 or
** libpq. The module is loaded next to mcpclient.core but cannot call into it
** (Lua opens C modules with RTLD_LOCAL), so sqlite.c and pg.c include this
** header and not core.h: a call to a core.so function does not compile here.
*/
#ifndef MCPCLIENT_DB_H
#define MCPCLIENT_DB_H

#include <lua.h>
#include <lauxlib.h>

/*
** Each registrar expects the module table at the top of the stack and
** leaves it there.
*/
void mcp_register_sqlite(lua_State *L); /* sqlite.c: db.sqlite_open(), db.sqlite_version */
void mcp_register_pg(lua_State *L);     /* pg.c:     db.pg_connect(), db.pg_version */

/*
** db.c: whether the value at idx is json.null (a bound parameter that binds
** SQL NULL). False for every value while mcpclient.core is not open, since
** no json.null exists then.
*/
int mcp_db_is_null(lua_State *L, int idx);

#endif
