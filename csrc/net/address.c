/*
** address.c: what the host gate needs to judge exactly what will be dialled.
** Numeric addresses as bytes (classified by prefix in Lua), a host name in
** the A-label form libcurl would dial, the host libcurl itself reads from a
** URL, and name resolution that a caller can abandon at its deadline or
** cancel hook.
*/
#define _GNU_SOURCE /* dladdr and RTLD_NODELETE: keeping this module loaded while a lookup runs */
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <idn2.h>

#include "core.h"

#define LOOKUP_MT   "mcpclient.lookup"
#define HOST_MAX    256  /* a DNS name is at most 253 bytes */
#define WAIT_MAX_MS 1000 /* the longest single wait of lookup:wait() */

/*
** address_bytes(text) -> 4- or 16-byte string, or nil when text is not a
** numeric IPv4/IPv6 address. Only what inet_pton accepts counts: no
** shorthand like "127.1", which the gate first rewrites to dotted quad.
*/
static int l_address_bytes(lua_State *L) {
  const char *text = luaL_checkstring(L, 1);
  unsigned char bytes[16];
  if (inet_pton(AF_INET, text, bytes) == 1) lua_pushlstring(L, (const char *)bytes, 4);
  else if (inet_pton(AF_INET6, text, bytes) == 1) lua_pushlstring(L, (const char *)bytes, 16);
  else lua_pushnil(L);
  return 1;
}

/*
** idna(name) -> the A-label form ("bücher.test" -> "xn--bcher-kva.test"), or
** nil, reason. The same conversion libcurl applies to a non-ASCII host
** (IDNA 2008 after NFC, then UTS #46 transitional as its fallback), done
** here so the gate resolves, judges and pins the name that is dialled.
*/
static int l_idna(lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  char copy[HOST_MAX];
  char *out = NULL;
  int rc;
  if (n == 0 || n >= sizeof copy || memchr(name, '\0', n) != NULL ||
      !mcp_utf8_valid((const unsigned char *)name, n)) {
    lua_pushnil(L);
    lua_pushliteral(L, "the host name is empty, too long or not UTF-8");
    return 2;
  }
  memcpy(copy, name, n + 1);
  rc = idn2_lookup_u8((const uint8_t *)copy, (uint8_t **)&out, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
  if (rc != IDN2_OK) rc = idn2_lookup_u8((const uint8_t *)copy, (uint8_t **)&out, IDN2_TRANSITIONAL);
  if (rc != IDN2_OK) {
    lua_pushnil(L);
    lua_pushstring(L, idn2_strerror(rc));
    return 2;
  }
  n = strlen(out);
  if (n >= sizeof copy) n = 0;
  memcpy(copy, out, n);
  idn2_free(out);
  if (n == 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "the host name's A-label form is too long");
    return 2;
  }
  lua_pushlstring(L, copy, n);
  return 1;
}

/*
** url_host(url) -> the host libcurl's own URL parser reads (IPv6 in
** brackets), or nil when it does not parse. The gate compares it with the
** host it judged: if the two ever differ, libcurl would look up a name the
** gate never saw, so the connection is refused instead.
*/
static int l_url_host(lua_State *L) {
  const char *url = luaL_checkstring(L, 1);
  char copy[HOST_MAX];
  char *host = NULL;
  size_t n = 0;
  CURLU *u = curl_url();
  if (u == NULL) return luaL_error(L, "out of memory");
  if (curl_url_set(u, CURLUPART_URL, url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
    n = strlen(host);
    if (n >= sizeof copy) n = 0;
    memcpy(copy, host, n);
  }
  curl_free(host);
  curl_url_cleanup(u);
  if (n == 0) lua_pushnil(L);
  else lua_pushlstring(L, copy, n);
  return 1;
}

/* ==================================================================== */
/* lookup(host): getaddrinfo on a helper thread                         */
/* ==================================================================== */

/*
** The state a lookup shares with its thread. Whoever lets go of it last
** frees it: the thread when the caller abandoned the lookup first (the
** system resolver cannot be interrupted), the caller otherwise. Every field
** after the mutex is read and written under it.
*/
typedef struct Shared {
  pthread_mutex_t mutex;
  pthread_cond_t done_cond;
  char name[HOST_MAX];
  int done, abandoned, rc, saved_errno;
  int wake; /* an eventfd the thread makes readable when done: the engine can wait on it */
  struct addrinfo *list;
} Shared;

/* The Lua side: one pointer, NULL once the lookup was closed. */
typedef struct Lookup {
  Shared *shared;
} Lookup;

/* Free the shared state and its answer; the mutex is not held. */
static void shared_free(Shared *s) {
  if (s->list != NULL) freeaddrinfo(s->list);
  if (s->wake >= 0) close(s->wake);
  pthread_cond_destroy(&s->done_cond);
  pthread_mutex_destroy(&s->mutex);
  free(s);
}

/*
** The helper thread: resolve, publish, and free everything itself when the
** caller has already gone.
*/
static void *lookup_thread(void *arg) {
  Shared *s = arg;
  struct addrinfo hints, *list = NULL;
  int rc, saved_errno, abandoned;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  rc = getaddrinfo(s->name, NULL, &hints, &list);
  saved_errno = errno;
  pthread_mutex_lock(&s->mutex);
  s->rc = rc;
  s->saved_errno = saved_errno;
  s->list = rc == 0 ? list : NULL;
  s->done = 1;
  abandoned = s->abandoned;
  if (s->wake >= 0) {
    uint64_t one = 1;
    ssize_t put = write(s->wake, &one, sizeof one); /* never blocks nor fails: one write, counter 1 */
    (void)put;
  }
  pthread_cond_signal(&s->done_cond);
  pthread_mutex_unlock(&s->mutex);
  if (abandoned) shared_free(s);
  return NULL;
}

/* Let go of the lookup: free it when the thread is done, else leave it to the thread. */
static void lookup_release(Lookup *lk) {
  Shared *s = lk->shared;
  int done;
  if (s == NULL) return;
  lk->shared = NULL;
  pthread_mutex_lock(&s->mutex);
  done = s->done;
  s->abandoned = 1;
  pthread_mutex_unlock(&s->mutex);
  if (done) shared_free(s);
}

/*
** A thread that outlives its caller runs code of this module, so the module
** must never be unloaded (lua_close unloads C modules): the first lookup
** marks it as never to be deleted. 1 when done.
*/
static int keep_module_loaded(void) {
  static int kept = 0; /* also the address dladdr finds this module by */
  Dl_info info;
  if (kept) return 1;
  if (dladdr(&kept, &info) == 0 || info.dli_fname == NULL) return 0;
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == NULL) return 0;
  kept = 1;
  return 1;
}

/* A mutex, a condition on the monotonic clock, a detached thread; 0 on failure, nothing left behind. */
static int shared_start(Shared *s) {
  pthread_condattr_t attr;
  pthread_attr_t tattr;
  pthread_t thread;
  int ok;
  if (!keep_module_loaded()) return 0;
  if (pthread_mutex_init(&s->mutex, NULL) != 0) return 0;
  if (pthread_condattr_init(&attr) != 0) goto no_cond;
  ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&s->done_cond, &attr) == 0;
  pthread_condattr_destroy(&attr);
  if (!ok) goto no_cond;
  if (pthread_attr_init(&tattr) != 0) goto no_thread;
  ok = pthread_attr_setdetachstate(&tattr, PTHREAD_CREATE_DETACHED) == 0 &&
       pthread_create(&thread, &tattr, lookup_thread, s) == 0;
  pthread_attr_destroy(&tattr);
  if (ok) return 1;
no_thread:
  pthread_cond_destroy(&s->done_cond);
no_cond:
  pthread_mutex_destroy(&s->mutex);
  return 0;
}

/*
** lookup(host) -> a lookup running on its own thread, or nil, reason. Brackets
** around an IPv6 literal are dropped. The caller waits on it in short slices
** (lookup:wait) between looks at its own deadline and cancel hook, and may
** close it at any time without waiting for the system resolver.
*/
static int l_lookup(lua_State *L) {
  size_t len;
  const char *host = luaL_checklstring(L, 1, &len);
  Lookup *lk;
  Shared *s;
  if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
    host++;
    len -= 2;
  }
  if (len == 0 || len >= HOST_MAX || memchr(host, '\0', len) != NULL) {
    lua_pushnil(L);
    lua_pushliteral(L, "the host name is empty, too long or contains NUL");
    return 2;
  }
  lk = lua_newuserdatauv(L, sizeof *lk, 0);
  lk->shared = NULL;
  luaL_setmetatable(L, LOOKUP_MT);
  s = calloc(1, sizeof *s);
  if (s == NULL) return luaL_error(L, "out of memory");
  s->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* -1: lookup:fd() says none, waits use slices */
  memcpy(s->name, host, len);
  s->name[len] = '\0';
  if (!shared_start(s)) {
    if (s->wake >= 0) close(s->wake);
    free(s);
    lua_pushnil(L);
    lua_pushliteral(L, "a resolver thread could not be started");
    return 2;
  }
  lk->shared = s;
  return 1;
}

/* Wait on the condition until done or ms milliseconds have passed; the mutex is held. */
static void wait_done(Shared *s, long ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  while (!s->done)
    if (pthread_cond_timedwait(&s->done_cond, &s->mutex, &until) == ETIMEDOUT) break;
}

/*
** Push the finished answer: { numeric addresses } in getaddrinfo order,
** duplicates removed, or nil, reason. Runs after the thread is done, so the
** list is the caller's alone; it is freed on close or collection, so a raise
** here leaks nothing.
*/
static int push_answer(lua_State *L, Shared *s) {
  struct addrinfo *ai;
  lua_Integer n = 0;
  if (s->rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, s->rc == EAI_SYSTEM ? strerror(s->saved_errno) : gai_strerror(s->rc));
    return 2;
  }
  lua_newtable(L);
  for (ai = s->list; ai != NULL; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN + 16];
    lua_Integer j;
    int seen = 0;
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, NULL, 0, NI_NUMERICHOST) != 0) continue;
    for (j = 1; j <= n && !seen; j++) {
      lua_rawgeti(L, -1, j);
      seen = strcmp(lua_tostring(L, -1), text) == 0;
      lua_pop(L, 1);
    }
    if (seen) continue;
    lua_pushstring(L, text);
    lua_rawseti(L, -2, ++n);
  }
  if (n > 0) return 1;
  lua_pushnil(L);
  lua_pushliteral(L, "the host name resolved to no address");
  return 2;
}

/*
** lookup:wait(ms) -> false while the resolver is still busy after waiting up
** to ms milliseconds (it returns at once when the answer comes), else true
** followed by the answer: { addresses } or nil, reason.
*/
static int lookup_wait(lua_State *L) {
  Lookup *lk = luaL_checkudata(L, 1, LOOKUP_MT);
  lua_Integer ms = luaL_checkinteger(L, 2);
  Shared *s = lk->shared;
  int done;
  if (s == NULL) return luaL_error(L, "attempt to use a closed lookup");
  luaL_argcheck(L, ms >= 0 && ms <= WAIT_MAX_MS, 2, "must be between 0 and 1000 milliseconds");
  pthread_mutex_lock(&s->mutex);
  if (ms > 0) wait_done(s, (long)ms);
  done = s->done;
  pthread_mutex_unlock(&s->mutex);
  lua_pushboolean(L, done);
  if (!done) return 1;
  return 1 + push_answer(L, s);
}

/*
** lookup:fd() -> a descriptor that turns readable once the answer is in (the
** engine waits on it: engine.await), or nil when none could be made (then
** wait in slices).
*/
static int lookup_fd(lua_State *L) {
  Lookup *lk = luaL_checkudata(L, 1, LOOKUP_MT);
  if (lk->shared == NULL) return luaL_error(L, "attempt to use a closed lookup");
  if (lk->shared->wake < 0) lua_pushnil(L);
  else lua_pushinteger(L, lk->shared->wake);
  return 1;
}

/* lookup:close(): abandon or free; also __gc and __close. */
static int lookup_close(lua_State *L) {
  lookup_release(luaL_checkudata(L, 1, LOOKUP_MT));
  return 0;
}

/*
** Adds address_bytes, idna, url_host and lookup to the module table; the
** lookup metatable is made only the first time (busted reopens the module).
*/
void mcp_register_address(lua_State *L) {
  static const luaL_Reg methods[] = {
    {"wait", lookup_wait}, {"fd", lookup_fd}, {"close", lookup_close}, {NULL, NULL}};
  static const luaL_Reg fns[] = {{"address_bytes", l_address_bytes},
                                 {"idna", l_idna},
                                 {"url_host", l_url_host},
                                 {"lookup", l_lookup},
                                 {NULL, NULL}};
  if (luaL_newmetatable(L, LOOKUP_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, lookup_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, lookup_close);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
}
