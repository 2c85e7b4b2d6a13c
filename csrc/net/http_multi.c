/*
** http_multi.c: the one curl-multi handle per Lua state (the process, for a
** host with one state), which drives every transfer and is the driver of the
** engine (engine.c): libcurl's socket and timer callbacks put its sockets and
** its timeout into the engine's one epoll wait, and the engine hands their
** readiness back (curl_multi_socket_action), so a transfer, a watched pipe
** and a host's own loop all wait on one descriptor. Completion messages are
** routed to the legs they belong to. libcurl's global state is initialised
** here once; the handle is held by the registry and cleaned up when the state
** closes (__gc), after every leg.
**
** Rule: on_socket and on_timer are libcurl callbacks: they touch only C state
** (the engine's epoll set and timer), never Lua, so no Lua error can cross
** libcurl. Lua runs only between libcurl calls, in the leg's driving loop.
*/
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "http.h"

/*
** libcurl's global state is process-wide; busted reopens the module per file.
** libcurl's global init also initialises OpenSSL, which by default loads
** libcrypto's table of error texts: 0.6 MiB of resident memory, a twentieth
** of the whole process. Those texts are left out. TLS failures keep their
** wording (libssl's texts and the certificate verdicts are tables of their
** own); a failure inside libcrypto shows as its code, which `openssl errstr`
** turns back into text. A host that loaded the texts already keeps them.
*/
void mcp_http_ensure_curl(lua_State *L) {
  static int ready = 0;
  if (!ready) {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) luaL_error(L, "libcurl could not be initialised");
    ready = 1;
  }
}

/* __gc: at exit, after every leg (legs are made after the multi handle, so they are finalized first). */
static int multi_gc(lua_State *L) {
  Multi *m = luaL_checkudata(L, 1, MULTI_MT);
  if (m->engine != NULL && m->engine->driver == m) m->engine->driver = NULL;
  if (m->multi != NULL) curl_multi_cleanup(m->multi);
  m->multi = NULL;
  return 0;
}

/*
** Read the engine's completion messages into the legs they belong to. A
** message for a leg that is not the caller's must not be lost: that leg's
** own loop (or its coroutine) reads its outcome from the leg.
*/
static void engine_collect(CURLM *multi) {
  CURLMsg *msg;
  int queued;
  while ((msg = curl_multi_info_read(multi, &queued)) != NULL) {
    char *owner = NULL;
    Leg *leg;
    if (msg->msg != CURLMSG_DONE) continue;
    if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &owner) != CURLE_OK || owner == NULL) continue;
    leg = (Leg *)(void *)owner;
    if (leg->x.done) continue;
    leg->x.done = 1;
    leg->x.code = msg->data.result;
    leg->x.t1 = mcp_monotonic_ns();
  }
}

/*
** The sockets of connections, by number (Multi.sockets): libcurl opens and
** closes them through the callbacks below, so their life is known. One that
** no transfer watches any more (a kept-alive connection between two warm
** calls) stays in the engine's epoll set, parked, and the next transfer on
** it changes the interest only when it differs: a warm call makes no
** epoll_ctl, where a removal and an addition took two. A parked socket
** leaves the set before it is closed, so no entry outlives it (not even
** where a child inherited the descriptor), and when it turns ready while
** parked (the server closed the idle connection): libcurl learns of that
** when it next tries the connection, as before.
*/
#define SOCKET_OURS   0x80u /* opened by on_open_socket and not yet closed */
#define SOCKET_PARKED 0x40u /* in the epoll set, watched by no transfer */
#define SOCKET_WANTS  0x03u /* the interest it is in the set with: WANT_IN | WANT_OUT, 0 when not */
#define WANT_IN       0x01u
#define WANT_OUT      0x02u

/* The state of socket s, or NULL for one numbered past the table (never parked). */
static unsigned char *socket_state(Multi *m, curl_socket_t s) {
  return s >= 0 && s < TRACKED_SOCKETS ? &m->sockets[s] : NULL;
}

/* The epoll events of an interest. */
static unsigned events_of(unsigned want) {
  return (want & WANT_IN ? MCP_ENGINE_IN : 0u) | (want & WANT_OUT ? MCP_ENGINE_OUT : 0u);
}

/* libcurl's socket callback: watch s in the engine for what libcurl wants (nothing: park or forget it). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
  Multi *m = userp;
  unsigned want = 0;
  unsigned char *state = socket_state(m, s);
  int known = socketp != NULL;
  (void)easy;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) want |= WANT_IN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) want |= WANT_OUT;
  if (want == 0) {
    if (known && state != NULL && (*state & SOCKET_OURS) && (*state & SOCKET_WANTS)) *state |= SOCKET_PARKED;
    else mcp_engine_driver_fd(m->engine, s, 0, known);
  } else {
    int parked = state != NULL && (*state & SOCKET_PARKED);
    int in_set = parked && (*state & SOCKET_WANTS) == want; /* with this interest already */
    if (!in_set) in_set = mcp_engine_driver_fd(m->engine, s, events_of(want), known || parked) == 0;
    if (state != NULL && (*state & SOCKET_OURS)) *state = (unsigned char)(SOCKET_OURS | (in_set ? want : 0u));
  }
  curl_multi_assign(m->multi, s, want ? (void *)m : NULL); /* non-NULL: registered */
  return 0;
}

/* libcurl's open-socket callback: the socket libcurl would make itself, remembered as a connection's. */
static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr) {
  unsigned char *state;
  curl_socket_t s = socket(addr->family, addr->socktype, addr->protocol);
  (void)purpose;
  if (s != CURL_SOCKET_BAD && (state = socket_state(clientp, s)) != NULL) *state = SOCKET_OURS;
  return s;
}

/* libcurl's close-socket callback: a parked socket leaves the epoll set first, then it is closed. */
static int on_close_socket(void *clientp, curl_socket_t s) {
  Multi *m = clientp;
  unsigned char *state = socket_state(m, s);
  if (state != NULL) {
    if (*state & SOCKET_PARKED) mcp_engine_driver_fd(m->engine, s, 0, 1);
    *state = 0;
  }
  return close(s);
}

/* The callbacks through which libcurl opens and closes the leg's connections (set once per leg). */
int mcp_http_own_sockets(Leg *leg) {
  CURL *e = leg->easy;
  return curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, (void *)leg->driver) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, (void *)leg->driver) == CURLE_OK;
}

/* libcurl's timer callback: when the engine must next call it, whatever the sockets do. */
static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
  Multi *m = userp;
  (void)multi;
  mcp_engine_driver_timer(m->engine, timeout_ms);
  return 0;
}

/* The engine's turn for one ready socket: libcurl works on it, then the outcomes are routed. */
static void driver_ready(void *driver, int fd, unsigned events) {
  Multi *m = driver;
  int action = 0;
  CURLMcode code;
  unsigned char *state = socket_state(m, fd);
  if (state != NULL && (*state & SOCKET_PARKED)) { /* no transfer wants it: out of the set */
    mcp_engine_driver_fd(m->engine, fd, 0, 1);
    *state = SOCKET_OURS;
    return;
  }
  if (events & MCP_ENGINE_IN) action |= CURL_CSELECT_IN;
  if (events & MCP_ENGINE_OUT) action |= CURL_CSELECT_OUT;
  if (events & MCP_ENGINE_ERR) action |= CURL_CSELECT_ERR;
  code = curl_multi_socket_action(m->multi, fd, action, &m->running);
  if (code != CURLM_OK && code != CURLM_BAD_SOCKET && m->code == CURLM_OK) m->code = code;
  engine_collect(m->multi);
}

/* The engine's turn for libcurl's timer. */
static void driver_timer(void *driver) {
  Multi *m = driver;
  CURLMcode code = curl_multi_socket_action(m->multi, CURL_SOCKET_TIMEOUT, 0, &m->running);
  if (code != CURLM_OK && m->code == CURLM_OK) m->code = code;
  engine_collect(m->multi);
}

/* Transfers in the engine (core.engine_step reports it). */
static int driver_running(void *driver) {
  return ((Multi *)driver)->handles;
}

/*
** The engine's driver: one multi handle for the Lua state (the process, for
** a host with one state), made on first use and held by the registry until
** the state closes, so no leg can outlive it; it holds the engine (made by
** the core module) the same way. Connections are bounded per pool and host;
** a transfer beyond the bound waits inside libcurl for a connection to come
** free.
*/
Multi *mcp_http_engine(lua_State *L) {
  Multi *m;
  mcp_engine *e;
  mcp_http_ensure_curl(L);
  if (lua_getfield(L, LUA_REGISTRYINDEX, MULTI_KEY) == LUA_TUSERDATA) {
    m = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return m;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_ENGINE_KEY) != LUA_TUSERDATA)
    luaL_error(L, "the engine is missing (mcpclient.core makes it)");
  e = lua_touserdata(L, -1);
  m = lua_newuserdatauv(L, sizeof *m, 1);
  memset(m, 0, sizeof *m);
  if (luaL_newmetatable(L, MULTI_MT)) {
    lua_pushcfunction(L, multi_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_insert(L, -2);
  lua_setiuservalue(L, -2, 1); /* the engine lives as long as its driver */
  m->engine = e;
  m->multi = curl_multi_init();
  if (m->multi == NULL) luaL_error(L, "libcurl could not create the engine's multi handle");
  curl_multi_setopt(m->multi, CURLMOPT_MAXCONNECTS, (long)ENGINE_CONNECTIONS);
  curl_multi_setopt(m->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)HOST_CONNECTIONS);
  curl_multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(m->multi, CURLMOPT_SOCKETDATA, (void *)m);
  curl_multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(m->multi, CURLMOPT_TIMERDATA, (void *)m);
  lua_setfield(L, LUA_REGISTRYINDEX, MULTI_KEY);
  e->driver = m;
  e->driver_ready = driver_ready;
  e->driver_timer = driver_timer;
  e->driver_running = driver_running;
  return m;
}

/*
** Put the configured handle into the engine; the exchange starts now.
*/
int mcp_http_engine_add(Leg *leg) {
  CURLM *multi = leg->driver->multi;
  memset(&leg->x, 0, sizeof leg->x);
  leg->x.t0 = mcp_monotonic_ns();
  if ((leg->x.multi_code = curl_multi_add_handle(multi, leg->easy)) != CURLM_OK) return 0;
  leg->multi = multi;
  leg->driver->handles++;
  return 1;
}

/* One turn of the engine (waiting at most ms): libcurl works on what is ready. */
CURLMcode mcp_http_engine_turn(Multi *m, int ms) {
  m->code = CURLM_OK;
  m->engine->run(m->engine, ms);
  return m->code;
}
