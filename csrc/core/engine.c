/*
** engine.c: the engine's wait (engine.h). One epoll descriptor per Lua state
** holds libcurl's sockets (registered by the HTTP leg), the descriptors Lua
** watches while an operation waits on them, the descriptors the core reads
** itself (a stdio child's stdout and stderr, registered for the child's
** life), and one timer (libcurl's). Waiting on it wakes for whichever is
** ready first, so a pipe is read as soon as it has bytes, not at the next
** polling tick; and a host's event loop can poll that one descriptor instead
** (pollfd, timeout, step: the protocol cqueues and a luv poll handle use).
**
** This file needs no libcurl: a program that only speaks stdio gets the
** engine without mapping the HTTP leg's libraries.
*/
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core.h"
#include "engine.h"

#define ENGINE_MT   "mcpclient.engine"
#define MAX_EVENTS  64
#define MAX_WAIT_MS 1000 /* core.engine_step never waits longer: its caller polls hooks between turns */

/*
** One turn: wait at most ms milliseconds (less when the driver's timer is
** due sooner), then hand ready driver descriptors and a due timer to the
** driver, and ready owned descriptors to their handlers (which read them, so
** what a child wrote is in its buffers when the turn ends). Watched
** descriptors are only woken for: their waiter reads their readiness itself
** (core.fd_ready), so no event is lost between two turns.
*/
static void engine_run(mcp_engine *e, int ms) {
  struct epoll_event events[MAX_EVENTS];
  int n, i;
  if (e->epfd < 0) return;
  if (e->timer_ns >= 0) {
    int64_t left = e->timer_ns - mcp_monotonic_ns();
    int due = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
    if (due < ms) ms = due;
  }
  if (ms < 0) ms = 0;
  n = epoll_wait(e->epfd, events, MAX_EVENTS, ms);
  for (i = 0; i < n; i++) {
    uint64_t data = events[i].data.u64;
    unsigned kind = (unsigned)(data >> 32);
    int fd = (int)(uint32_t)data;
    if (kind == MCP_ENGINE_DRIVER && e->driver != NULL) e->driver_ready(e->driver, fd, events[i].events);
    else if (kind == MCP_ENGINE_OWNED && fd < e->owned_size && e->owned[fd].handler != NULL)
      e->owned[fd].handler(e->owned[fd].owner, fd, events[i].events); /* a handler may disown a later entry */
  }
  if (e->timer_ns >= 0 && e->driver != NULL && mcp_monotonic_ns() >= e->timer_ns) {
    e->timer_ns = -1;
    e->driver_timer(e->driver);
  }
}

/* __gc: at exit, after the driver (which holds the engine, so it is finalized first). */
static int engine_gc(lua_State *L) {
  mcp_engine *e = luaL_checkudata(L, 1, ENGINE_MT);
  if (e->epfd >= 0) close(e->epfd);
  e->epfd = -1;
  e->driver = NULL;
  free(e->owned);
  e->owned = NULL;
  e->owned_size = 0;
  return 0;
}

/*
** The engine of this Lua state (core.h), made on first use and held by the
** registry until the state closes. Its descriptor is close-on-exec: a child the
** stdio channel starts never inherits it.
*/
mcp_engine *mcp_engine_of(lua_State *L) {
  mcp_engine *e;
  if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_ENGINE_KEY) == LUA_TUSERDATA) {
    e = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return e;
  }
  lua_pop(L, 1);
  e = lua_newuserdatauv(L, sizeof *e, 0);
  memset(e, 0, sizeof *e);
  e->epfd = -1;
  e->timer_ns = -1;
  e->run = engine_run;
  luaL_setmetatable(L, ENGINE_MT);
  e->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (e->epfd < 0) luaL_error(L, "the engine could not create its epoll descriptor: %s", strerror(errno));
  lua_setfield(L, LUA_REGISTRYINDEX, MCP_ENGINE_KEY);
  return e;
}

/*
** Own fd for the core (core.h): level triggered for events, its readiness
** handed to handler(owner, ...) by each turn. 0, or -1 with errno set (no
** memory for the table, or epoll refused it): nothing is left registered.
*/
int mcp_engine_own(mcp_engine *e, int fd, unsigned events, void (*handler)(void *, int, unsigned),
                   void *owner) {
  struct epoll_event ev;
  if (e->epfd < 0 || fd < 0) {
    errno = EBADF;
    return -1;
  }
  if (fd >= e->owned_size) {
    int size = fd < 16 ? 32 : fd * 2;
    mcp_engine_slot *grown = realloc(e->owned, sizeof *grown * (size_t)size);
    if (!grown) {
      errno = ENOMEM;
      return -1;
    }
    memset(grown + e->owned_size, 0, sizeof *grown * (size_t)(size - e->owned_size));
    e->owned = grown;
    e->owned_size = size;
  }
  memset(&ev, 0, sizeof ev);
  ev.events = events;
  ev.data.u64 = ((uint64_t)MCP_ENGINE_OWNED << 32) | (uint32_t)fd;
  if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 &&
      (errno != EEXIST || epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev) != 0))
    return -1;
  e->owned[fd].handler = handler;
  e->owned[fd].owner = owner;
  return 0;
}

/*
** Stop owning fd (core.h): out of the epoll set and the table; a no-op for a
** descriptor that is not owned. Call it before fd is closed, so the number a
** later open reuses is never taken for this one.
*/
void mcp_engine_disown(mcp_engine *e, int fd) {
  struct epoll_event ev;
  if (fd < 0 || fd >= e->owned_size || e->owned[fd].handler == NULL) return;
  e->owned[fd].handler = NULL;
  e->owned[fd].owner = NULL;
  memset(&ev, 0, sizeof ev);
  if (e->epfd >= 0) epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, &ev);
}

/* The epoll events of an events string ("r", "w", "rw"); raises on anything else. */
static unsigned check_events(lua_State *L, int idx) {
  static const char *const names[] = {"r", "w", "rw", NULL};
  static const unsigned bits[] = {EPOLLIN, EPOLLOUT, EPOLLIN | EPOLLOUT};
  return bits[luaL_checkoption(L, idx, NULL, names)];
}

/* A descriptor argument: a non-negative integer. */
static int check_fd(lua_State *L, int idx) {
  lua_Integer fd = luaL_checkinteger(L, idx);
  luaL_argcheck(L, fd >= 0 && fd <= INT_MAX, idx, "not a file descriptor");
  return (int)fd;
}

/*
** core.engine_step(ms) -> transfers: wait up to ms milliseconds (at most
** 1000; 0 never blocks) for any descriptor or timer of the engine, run what
** is ready, and return how many HTTP transfers are still in the engine.
*/
static int l_engine_step(lua_State *L) {
  lua_Integer ms = luaL_checkinteger(L, 1);
  mcp_engine *e = mcp_engine_of(L);
  e->run(e, ms <= 0 ? 0 : ms > MAX_WAIT_MS ? MAX_WAIT_MS : (int)ms);
  lua_pushinteger(L, e->driver != NULL ? e->driver_running(e->driver) : 0);
  return 1;
}

/*
** core.engine_watch(fd, events): let fd wake the engine's wait when it is
** ready for events ("r", "w" or "rw"); nil stops watching it. Level
** triggered: a watched descriptor that stays ready wakes every wait, so a
** waiter watches only while it waits. A descriptor closed while watched
** leaves the engine by itself. Raises when the descriptor cannot be watched,
** or is one the engine reads itself (a running child's stdout or stderr).
*/
static int l_engine_watch(lua_State *L) {
  int fd = check_fd(L, 1);
  mcp_engine *e = mcp_engine_of(L);
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.data.u64 = ((uint64_t)MCP_ENGINE_WATCH << 32) | (uint32_t)fd;
  if (lua_isnoneornil(L, 2)) {
    if (fd < e->owned_size && e->owned[fd].handler != NULL) return 0; /* never watched: owned */
    epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, &ev); /* ENOENT, EBADF: not watched (any more) */
    return 0;
  }
  if (fd < e->owned_size && e->owned[fd].handler != NULL)
    return luaL_error(L, "engine_watch: descriptor %d is read by the engine itself", fd);
  ev.events = check_events(L, 2);
  if (epoll_ctl(e->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 &&
      (errno != ENOENT || epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) != 0))
    return luaL_error(L, "engine_watch: descriptor %d cannot be watched: %s", fd, strerror(errno));
  return 0;
}

/* core.engine_pollfd() -> the engine's epoll descriptor, readable when anything needs a turn. */
static int l_engine_pollfd(lua_State *L) {
  lua_pushinteger(L, mcp_engine_of(L)->epfd);
  return 1;
}

/* core.engine_timeout() -> seconds until the driver's timer is due (0 when overdue), or nil. */
static int l_engine_timeout(lua_State *L) {
  mcp_engine *e = mcp_engine_of(L);
  int64_t left;
  if (e->timer_ns < 0 || e->driver == NULL) return 0;
  left = e->timer_ns - mcp_monotonic_ns();
  lua_pushnumber(L, left <= 0 ? 0.0 : (lua_Number)left / 1e9);
  return 1;
}

/*
** core.fd_ready(fd, events) -> the part of events ("r", "w", "rw") fd is
** ready for now, or nil; never waits. A hung-up or failed descriptor counts
** as ready for everything asked, so its reader sees the end of file and its
** writer the error.
*/
static int l_fd_ready(lua_State *L) {
  struct pollfd p;
  int fd = check_fd(L, 1), r;
  unsigned want = check_events(L, 2);
  int in, out;
  p.fd = fd;
  p.events = (short)(((want & EPOLLIN) ? POLLIN : 0) | ((want & EPOLLOUT) ? POLLOUT : 0));
  p.revents = 0;
  do {
    r = poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return luaL_error(L, "fd_ready: %s", strerror(errno));
  if (p.revents & POLLNVAL) return luaL_error(L, "fd_ready: descriptor %d is not open", fd);
  in = (want & EPOLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR));
  out = (want & EPOLLOUT) && (p.revents & (POLLOUT | POLLHUP | POLLERR));
  if (in && out) lua_pushliteral(L, "rw");
  else if (in) lua_pushliteral(L, "r");
  else if (out) lua_pushliteral(L, "w");
  else lua_pushnil(L);
  return 1;
}

/*
** Adds engine_step, engine_watch, engine_pollfd, engine_timeout and fd_ready
** to the module table, and makes the engine (busted reopens the module per
** spec file: the registry keeps the one engine).
*/
void mcp_register_engine(lua_State *L) {
  static const luaL_Reg fns[] = {{"engine_step", l_engine_step},     {"engine_watch", l_engine_watch},
                                 {"engine_pollfd", l_engine_pollfd}, {"engine_timeout", l_engine_timeout},
                                 {"fd_ready", l_fd_ready},           {NULL, NULL}};
  if (luaL_newmetatable(L, ENGINE_MT)) {
    lua_pushcfunction(L, engine_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  mcp_engine_of(L);
  luaL_setfuncs(L, fns, 0);
}
