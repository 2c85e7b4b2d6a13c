/*
** clock.c: Lua's view of the monotonic clock every budget and duration is
** measured on (monotonic.h), and a sleep for waits that must not spin
** (event-stream retry intervals).
*/
#include <errno.h>
#include <math.h>
#include <time.h>

#include "core.h"

/*
** monotonic_ns() -> integer nanoseconds, for Lua code that measures
** durations on the same clock as the C leg.
*/
static int l_monotonic_ns(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)mcp_monotonic_ns());
  return 1;
}

/*
** Seconds (fractional) on the same clock, for Lua-side arithmetic.
*/
static int l_now(lua_State *L) {
  lua_pushnumber(L, (lua_Number)mcp_monotonic_ns() / 1e9);
  return 1;
}

/*
** sleep(seconds): fractions allowed; interrupted sleeps resume.
*/
static int l_sleep(lua_State *L) {
  lua_Number seconds = luaL_checknumber(L, 1);
  struct timespec ts;
  luaL_argcheck(L, seconds >= 0 && seconds < 1e6, 1, "seconds must be between 0 and 1e6");
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - floor(seconds)) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  return 0;
}

/*
** Adds monotonic_ns, now and sleep to the module table.
*/
void mcp_register_clock(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"monotonic_ns", l_monotonic_ns},
    {"now", l_now},
    {"sleep", l_sleep},
    {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
