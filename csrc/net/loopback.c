/*
** loopback.c: the one-shot HTTP listener a browser sign-in waits on for the
** authorization redirect (`mcpclient login`, mcp.oauth.loopback_authorize:
** the browser brings the code to http://127.0.0.1:<port>/callback). Bound to
** 127.0.0.1 only, on a port the kernel picks or the one asked for (a fixed
** port can be forwarded over SSH); it answers GET requests for the callback
** path with a short page and hands the request target to Lua, anything else
** with 404. Bounded: a deadline for the wait, 8 KiB per request head, one
** request per connection. A connection taken in is given two seconds to send
** its head whatever the wait's deadline, so a caller may wait in short slices
** (to look at a cancel hook in between) without cutting a browser off.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"

#define LISTENER_MT "mcpclient.loopback_listener"
#define MAX_HEAD    8192

typedef struct {
  int fd; /* -1 once closed */
  int port;
} Listener;

static const char PAGE[] =
  "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\n"
  "Connection: close\r\n\r\nmcpclient received the authorization response. You can close this window.\n";
static const char NOT_FOUND[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/*
** Milliseconds left until `deadline_ns`, at least 0.
*/
static int ms_left(int64_t deadline_ns) {
  int64_t left = (deadline_ns - mcp_monotonic_ns()) / 1000000;
  if (left < 0) return 0;
  if (left > 3600000) return 3600000;
  return (int)left;
}

/*
** Wait until fd is ready for `events` or the deadline passes: 1 ready, 0 not.
*/
static int wait_for(int fd, short events, int64_t deadline_ns) {
  struct pollfd p;
  int r;
  p.fd = fd;
  p.events = events;
  p.revents = 0;
  do {
    r = poll(&p, 1, ms_left(deadline_ns));
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

/*
** Read one request head (up to the blank line) into buf; returns its length,
** or 0 when the peer sent nothing usable before the deadline.
*/
static size_t read_head(int fd, char *buf, int64_t deadline_ns) {
  size_t used = 0;
  while (used < MAX_HEAD - 1 && wait_for(fd, POLLIN, deadline_ns)) {
    ssize_t n = read(fd, buf + used, MAX_HEAD - 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
    buf[used] = '\0';
    if (strstr(buf, "\r\n\r\n") != NULL || strstr(buf, "\n\n") != NULL) return used;
  }
  return 0;
}

/*
** The target of a "GET <target> HTTP/..." line in buf, terminated in place;
** NULL for any other request.
*/
static char *get_target(char *buf) {
  char *target, *end;
  if (strncmp(buf, "GET ", 4) != 0) return NULL;
  target = buf + 4;
  end = strchr(target, ' ');
  if (end == NULL || end == target) return NULL;
  *end = '\0';
  return target;
}

/*
** Whether the target's path (before any '?') is exactly `path`.
*/
static int path_is(const char *target, const char *path) {
  size_t n = strlen(path);
  return strncmp(target, path, n) == 0 && (target[n] == '\0' || target[n] == '?');
}

/*
** Send all of `text`, best effort within the deadline (the browser's page is
** a courtesy; the code has arrived either way).
*/
static void send_all(int fd, const char *text, size_t len, int64_t deadline_ns) {
  while (len > 0 && wait_for(fd, POLLOUT, deadline_ns)) {
    ssize_t n = write(fd, text, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    len -= (size_t)n;
  }
}

/*
** One connection: read its head, answer it. Pushes the target and returns 1
** for a GET of `path`; returns 0 for anything else (answered 404).
*/
static int serve_one(lua_State *L, int fd, const char *path) {
  char buf[MAX_HEAD];
  char *target = NULL;
  int64_t short_deadline = mcp_monotonic_ns() + (int64_t)2000000000;
  if (read_head(fd, buf, short_deadline) > 0) target = get_target(buf);
  if (target != NULL && path_is(target, path)) {
    send_all(fd, PAGE, sizeof PAGE - 1, short_deadline);
    lua_pushstring(L, target);
    return 1;
  }
  send_all(fd, NOT_FOUND, sizeof NOT_FOUND - 1, short_deadline);
  return 0;
}

/*
** listener:accept(seconds, path) -> target | nil, reason. Waits for a GET of
** `path` (the query string is kept in the target) for at most `seconds`.
*/
static int l_accept(lua_State *L) {
  Listener *li = (Listener *)luaL_checkudata(L, 1, LISTENER_MT);
  lua_Number seconds = luaL_checknumber(L, 2);
  const char *path = luaL_checkstring(L, 3);
  int64_t deadline_ns;
  luaL_argcheck(L, seconds > 0 && seconds <= 3600, 2, "seconds must be in (0, 3600]");
  if (li->fd < 0) return luaL_error(L, "the listener is closed");
  deadline_ns = mcp_monotonic_ns() + (int64_t)(seconds * 1e9);
  while (wait_for(li->fd, POLLIN, deadline_ns)) {
    int fd = accept(li->fd, NULL, NULL);
    int got;
    if (fd < 0) continue;
    got = serve_one(L, fd, path);
    close(fd);
    if (got) return 1;
  }
  lua_pushnil(L);
  lua_pushliteral(L, "no authorization response arrived in time");
  return 2;
}

/*
** listener:port() -> the port the kernel chose.
*/
static int l_port(lua_State *L) {
  Listener *li = (Listener *)luaL_checkudata(L, 1, LISTENER_MT);
  lua_pushinteger(L, li->port);
  return 1;
}

/*
** listener:close(); idempotent, also __gc and __close.
*/
static int l_close(lua_State *L) {
  Listener *li = (Listener *)luaL_checkudata(L, 1, LISTENER_MT);
  if (li->fd >= 0) close(li->fd);
  li->fd = -1;
  return 0;
}

/*
** Bind a listening socket on 127.0.0.1, on *port (0: the kernel chooses);
** returns the fd and sets *port, or -1 with errno set.
*/
static int bind_loopback(int *port) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  int one = 1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  /* a fixed port is bound again right after the last login's connections closed */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)*port);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

/*
** loopback_listen([port]) -> listener | nil, reason (the environment refused
** a socket, or the port is taken). No port or 0: the kernel picks one.
*/
static int l_listen(lua_State *L) {
  lua_Integer asked = luaL_optinteger(L, 1, 0);
  int port, fd;
  Listener *li;
  luaL_argcheck(L, asked >= 0 && asked <= 65535, 1, "port must be in [0, 65535]");
  port = (int)asked;
  fd = bind_loopback(&port);
  if (fd < 0) {
    lua_pushnil(L);
    if (asked > 0) {
      lua_pushfstring(L, "port %d on 127.0.0.1 could not be opened: %s", (int)asked, strerror(errno));
    } else {
      lua_pushfstring(L, "no loopback port could be opened: %s", strerror(errno));
    }
    return 2;
  }
  li = (Listener *)lua_newuserdatauv(L, sizeof *li, 0);
  li->fd = fd;
  li->port = port;
  luaL_setmetatable(L, LISTENER_MT);
  return 1;
}

/*
** Adds loopback_listen to the module table (expected at the top of the stack).
*/
void mcp_register_loopback(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"accept", l_accept}, {"port", l_port}, {"close", l_close}, {NULL, NULL}};
  if (luaL_newmetatable(L, LISTENER_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_listen);
  lua_setfield(L, -2, "loopback_listen");
}
