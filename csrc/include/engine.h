/*
** engine.h: the engine every exchange of the process waits on, shared by the
** C modules. It is one epoll descriptor with one timer: descriptors a driver
** registers (libcurl's sockets), descriptors Lua watches (a child's pipes) and
** the driver's next timeout all wake the same wait, so one poll of that
** descriptor (by the engine itself, or by a host's event loop) covers them all.
**
** The engine is a userdata in the registry under MCP_ENGINE_KEY, made by the
** core module. Another module (the HTTP leg) cannot call the core's functions
** (Lua opens C modules with RTLD_LOCAL), so what it needs is here: the struct,
** and inline calls that work on it directly; the engine calls back into the
** driver only through the function pointers the driver installs.
*/
#ifndef MCPCLIENT_ENGINE_H
#define MCPCLIENT_ENGINE_H

#include <stdint.h>
#include <sys/epoll.h>

#include "monotonic.h"

/*
** The registry slot holding the engine. Not the metatable's name
** ("mcpclient.engine", kept by luaL_newmetatable under that name in the same
** registry): the instance stored there would replace the metatable, and the
** finalizer's luaL_checkudata would then refuse the engine at state close,
** leaving it unfreed.
*/
#define MCP_ENGINE_KEY "mcpclient.engine.instance"

/* What an epoll entry belongs to, in the high half of its data word. */
#define MCP_ENGINE_WATCH  1u /* a descriptor Lua watches: readiness is read by poll(), nothing dispatched */
#define MCP_ENGINE_DRIVER 2u /* a descriptor the driver registered: its readiness goes to driver_ready */
#define MCP_ENGINE_OWNED  3u /* a descriptor the core reads itself (a child's pipe): it goes to its handler */

/* Readiness bits handed to the driver (epoll's own bits, so no translation is needed). */
#define MCP_ENGINE_IN  EPOLLIN
#define MCP_ENGINE_OUT EPOLLOUT
#define MCP_ENGINE_ERR (EPOLLERR | EPOLLHUP)

/*
** What reads an owned descriptor when it is ready: called inside a turn of
** the engine with the owner given at registration. It must neither raise
** nor wait, and must leave the descriptor not ready (or stop owning it):
** an owned descriptor is level triggered, so one left ready wakes every
** later turn at once.
*/
typedef void (*mcp_engine_handler)(void *owner, int fd, unsigned events);

/* An owned descriptor's handler and owner, kept by descriptor number. */
typedef struct mcp_engine_slot {
  mcp_engine_handler handler; /* NULL: the number is not owned */
  void *owner;
} mcp_engine_slot;

typedef struct mcp_engine {
  /*
  ** Wait at most ms milliseconds (0: do not wait) for a descriptor or the
  ** timer, then dispatch what is ready to the driver. Set by the core
  ** (engine.c), called through this pointer from the other module.
  */
  void (*run)(struct mcp_engine *e, int ms);
  int epfd;         /* the descriptor a host polls; -1 once closed */
  int64_t timer_ns; /* the driver's next timeout on the monotonic clock, or -1 for none */
  /* The driver (the HTTP leg's multi handle), or NULL before the first HTTP connection. */
  void *driver;
  void (*driver_ready)(void *driver, int fd, unsigned events); /* a registered descriptor is ready */
  void (*driver_timer)(void *driver);                          /* its timer is due */
  int (*driver_running)(void *driver);                         /* transfers still in it */
  mcp_engine_slot *owned; /* by descriptor number: the core's own descriptors (engine.c) */
  int owned_size;
} mcp_engine;

/*
** Register fd for the driver with the wanted epoll events (0 removes it);
** known says whether it was registered already.
** Returns 0, or -1 with errno set. Nothing here raises or allocates.
*/
static inline int mcp_engine_driver_fd(mcp_engine *e, int fd, unsigned events, int known) {
  struct epoll_event ev;
  ev.events = events;
  ev.data.u64 = ((uint64_t)MCP_ENGINE_DRIVER << 32) | (uint32_t)fd;
  if (e->epfd < 0) return -1;
  if (events == 0) return known ? epoll_ctl(e->epfd, EPOLL_CTL_DEL, fd, &ev) : 0;
  if (epoll_ctl(e->epfd, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0) return 0;
  /* The entry may outlive what we knew of it (a descriptor number reused after a close). */
  return epoll_ctl(e->epfd, known ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

/* Set the driver's timer: ms milliseconds from now, or none when ms < 0. */
static inline void mcp_engine_driver_timer(mcp_engine *e, long ms) {
  e->timer_ns = ms < 0 ? -1 : mcp_monotonic_ns() + (int64_t)ms * 1000000;
}

#endif
