/*
** monotonic.h: the clock every budget and duration is measured on, for every
** C module. It is a header, not a function of clock.c, because mcpclient.db
** and mcpclient.net cannot call into mcpclient.core (Lua opens C modules with
** RTLD_LOCAL).
*/
#ifndef MCPCLIENT_MONOTONIC_H
#define MCPCLIENT_MONOTONIC_H

#include <stdint.h>
#include <time.h>

/*
** Nanoseconds on CLOCK_MONOTONIC. Only differences mean anything (the origin
** is arbitrary): every budget and duration is measured on it, never a time
** of day. Safe to call from libcurl callbacks (no Lua, no allocation).
*/
static inline int64_t mcp_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

#endif
