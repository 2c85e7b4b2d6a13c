/*
** pipe.c: raw descriptors for Lua: a pipe, and reads, writes and closes that
** never block on a descriptor the engine says is ready. What waits on a
** descriptor (engine.await) needs these to be tested with a real pipe, and a
** channel that speaks over pipes reads and writes through them.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

#define READ_MAX (1024 * 1024) /* the most one fd_read returns */

/* A descriptor argument: a non-negative integer. */
static int check_fd(lua_State *L, int idx) {
  lua_Integer fd = luaL_checkinteger(L, idx);
  luaL_argcheck(L, fd >= 0 && fd <= INT_MAX, idx, "not a file descriptor");
  return (int)fd;
}

/* nil, "again" when the descriptor would block, else nil and the system's message. */
static int push_errno(lua_State *L, int err) {
  lua_pushnil(L);
  if (err == EAGAIN || err == EWOULDBLOCK) lua_pushliteral(L, "again");
  else lua_pushstring(L, strerror(err));
  return 2;
}

/*
** core.pipe() -> read_fd, write_fd: both ends close-on-exec and non-blocking,
** so a read or write the engine did not announce returns "again" instead of
** stalling the process.
*/
static int l_pipe(lua_State *L) {
  int fds[2], i;
  if (pipe(fds) != 0) return luaL_error(L, "pipe: %s", strerror(errno));
  for (i = 0; i < 2; i++) {
    if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0 || fcntl(fds[i], F_SETFL, O_NONBLOCK) != 0) {
      int err = errno;
      close(fds[0]);
      close(fds[1]);
      return luaL_error(L, "pipe: %s", strerror(err));
    }
  }
  lua_pushinteger(L, fds[0]);
  lua_pushinteger(L, fds[1]);
  return 2;
}

/*
** core.fd_read(fd [, max]) -> bytes ("" at end of file) | nil, "again" | nil,
** message. At most max bytes (default and limit 1 MiB).
*/
static int l_fd_read(lua_State *L) {
  int fd = check_fd(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, READ_MAX);
  luaL_Buffer b;
  char *p;
  ssize_t n;
  luaL_argcheck(L, max > 0 && max <= READ_MAX, 2, "max must be between 1 and 1048576");
  p = luaL_buffinitsize(L, &b, (size_t)max);
  do {
    n = read(fd, p, (size_t)max);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return push_errno(L, errno);
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

/* core.fd_write(fd, bytes) -> bytes written (maybe fewer) | nil, "again" | nil, message. */
static int l_fd_write(lua_State *L) {
  int fd = check_fd(L, 1);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  ssize_t n;
  do {
    n = write(fd, s, len);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return push_errno(L, errno);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* core.fd_close(fd): close it (a descriptor already closed is no error). */
static int l_fd_close(lua_State *L) {
  close(check_fd(L, 1));
  return 0;
}

/* Adds pipe, fd_read, fd_write and fd_close to the module table. */
void mcp_register_pipe(lua_State *L) {
  static const luaL_Reg fns[] = {{"pipe", l_pipe},
                                 {"fd_read", l_fd_read},
                                 {"fd_write", l_fd_write},
                                 {"fd_close", l_fd_close},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
