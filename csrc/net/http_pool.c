/*
** http_pool.c: the pools (core.http_pool). A pool is a libcurl share handle
** holding one connection cache and one DNS cache, shared by the legs made
** with it, so kept-alive connections and pinned addresses belong to one
** connection to one server and never cross to another. The pin loaded into a
** pool's DNS cache, and the proxy its connections go through, are fixed once
** a transfer used it: a send with another pin or proxy moves its leg to a
** fresh pool, and a pool whose idle connection holds
** unasked bytes is retired for a successor. Choosing the pool may raise (it
** runs before anything is allocated for a send); applying it to the handle
** does not.
*/
#include <poll.h>

#include "http.h"

/*
** Closes the pool's idle connections and frees it; safe on a half-built pool
** and idempotent. libcurl refuses while a leg still uses the share (at exit
** the collector may finalize a pool before its legs): the pool is then marked
** closing, and the release of a leg that used it ends it.
*/
void mcp_http_pool_release(Pool *pool) {
  if (pool->share != NULL && curl_share_cleanup(pool->share) != CURLSHE_OK) {
    pool->closing = 1;
    return;
  }
  pool->share = NULL;
  curl_slist_free_all(pool->resolve);
  pool->resolve = NULL;
  free(pool->pin);
  pool->pin = NULL;
  free(pool->proxy);
  pool->proxy = NULL;
  pool->version++;
}

/* close() and __gc: a pool is collected only after every leg made with it (they hold it). */
int mcp_http_pool_gc(lua_State *L) {
  mcp_http_pool_release(luaL_checkudata(L, 1, POOL_MT));
  return 0;
}

/*
** core.http_pool(): created closed, then the share handle is acquired; it
** shares connections and DNS answers (the pin) among the legs made with it.
*/
int mcp_http_pool_new(lua_State *L) {
  Pool *pool;
  mcp_http_ensure_curl(L);
  pool = lua_newuserdatauv(L, sizeof *pool, 1); /* its successor, once retired */
  memset(pool, 0, sizeof *pool);
  luaL_setmetatable(L, POOL_MT);
  pool->share = curl_share_init();
  if (pool->share == NULL ||
      curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
      curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
    mcp_http_pool_release(pool);
    return luaL_error(L, "libcurl could not create a connection pool");
  }
  return 1;
}

/*
** Bytes waiting on the idle kept-alive connection arrived unasked (a server
** writing past its Content-Length): libcurl 7.88 would read them as the next
** response. Such a connection is not reused.
*/
static int idle_connection_dirty(Leg *leg) {
  struct pollfd p;
  if (leg->last_socket == CURL_SOCKET_BAD) return 0;
  p.fd = leg->last_socket;
  p.events = POLLIN;
  p.revents = 0;
  return poll(&p, 1, 0) != 0;
}

/* Move the leg (at index 1) to the pool on top of the stack, which is popped. */
static Pool *move_to_pool(lua_State *L, Leg *leg) {
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, 1, UV_POOL);
  leg->pool = lua_touserdata(L, -1);
  leg->applied = NULL;
  lua_pop(L, 1);
  return leg->pool;
}

/*
** A pool whose idle connection was found dirty is retired: its successor (a
** fresh pool with the same pin) takes every leg that comes to send, so no
** leg of the connection is handed that connection again.
*/
static Pool *current_pool(lua_State *L, Leg *leg) {
  lua_getiuservalue(L, 1, UV_POOL);
  while (lua_getiuservalue(L, -1, 1) == LUA_TUSERDATA) lua_remove(L, -2);
  lua_pop(L, 1);
  if (lua_touserdata(L, -1) != leg->pool) return move_to_pool(L, leg);
  lua_pop(L, 1);
  if (idle_connection_dirty(leg)) {
    Pool *old = leg->pool, *fresh;
    leg->last_socket = CURL_SOCKET_BAD;
    mcp_http_pool_new(L);
    fresh = lua_touserdata(L, -1);
    if (old->pin != NULL && (fresh->pin = strdup(old->pin)) == NULL) luaL_error(L, "not enough memory");
    if (old->pin != NULL && (fresh->resolve = curl_slist_append(NULL, old->pin)) == NULL)
      luaL_error(L, "not enough memory");
    if (old->proxy != NULL && (fresh->proxy = strdup(old->proxy)) == NULL) luaL_error(L, "not enough memory");
    lua_getiuservalue(L, 1, UV_POOL);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1);
    lua_pop(L, 1);
    return move_to_pool(L, leg);
  }
  return leg->pool;
}

/* Two optional texts: both absent, or both present and equal. */
static int same_text(const char *a, const char *b) {
  return a == NULL ? b == NULL : (b != NULL && strcmp(a, b) == 0);
}

/*
** Make sure the leg's pool holds exactly this send's pin and proxy (may
** raise: it runs before anything is allocated for the send). An unused pool
** adopts them; a pool whose pin or proxy differs is left to the legs still
** using it and this leg moves to a fresh pool: its empty connection cache
** cannot hand back a connection dialled to another address or by another
** route, and its empty DNS cache forgets the old pin. Unchanged, both are
** kept, so the warm path stays one connection.
*/
void mcp_http_choose_pool(lua_State *L, Leg *leg, const Request *r) {
  Pool *pool = current_pool(L, leg);
  struct curl_slist *list = NULL;
  char *copy = NULL, *proxy = NULL;
  if (same_text(r->pin, pool->pin) && same_text(r->proxy, pool->proxy)) return;
  if (pool->used || pool->share == NULL) {
    mcp_http_pool_new(L);
    pool = move_to_pool(L, leg);
  }
  if (r->pin != NULL) {
    size_t n = strlen(r->pin) + 1;
    if ((copy = malloc(n)) == NULL || (list = curl_slist_append(NULL, r->pin)) == NULL) {
      free(copy);
      luaL_error(L, "not enough memory");
    }
    memcpy(copy, r->pin, n);
  }
  if (r->proxy != NULL && (proxy = strdup(r->proxy)) == NULL) {
    free(copy);
    curl_slist_free_all(list);
    luaL_error(L, "not enough memory");
  }
  curl_slist_free_all(pool->resolve);
  pool->resolve = list;
  free(pool->pin);
  pool->pin = copy;
  free(pool->proxy);
  pool->proxy = proxy;
  pool->version++;
}

/*
** Send through the leg's pool, with the pool's pin loaded into its DNS cache
** and the pool's proxy (or none: "" keeps libcurl from reading one from the
** environment). libcurl keeps a loaded pin in the pool's cache for good, so
** the handle is given the pool again only when it is another pool, or this
** one's share, pin or proxy changed since: a warm call does not make libcurl
** re-read them.
*/
const char *mcp_http_apply_pool(Leg *leg) {
  Pool *pool = leg->pool;
  if (leg->applied == pool && leg->applied_version == pool->version) return NULL;
  leg->applied = NULL;
  if (curl_easy_setopt(leg->easy, CURLOPT_SHARE, pool->share) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_RESOLVE, pool->resolve) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_PROXY, pool->proxy != NULL ? pool->proxy : "") != CURLE_OK)
    return "libcurl could not use the connection pool";
  pool->used = 1;
  leg->applied = pool;
  leg->applied_version = pool->version;
  return NULL;
}
