/*
** body.c: a response body handed from the HTTP leg to the decoder without
** a copy. A large JSON answer (a catalogue page is ~130 KB) would otherwise
** exist twice at once: in the leg's buffer and as the Lua string the decoder
** reads. A held body is a userdata that owns the leg's malloc'd buffer
** instead; core.rpc_classify reads it in place and releases the bytes at
** once, so they never wait for the garbage collector (which sees only the
** small userdata and would let many such buffers pile up).
**
** In Lua a held body has a length (#body) and nothing else: it is read once,
** by rpc_classify; after that its length is 0.
*/
#include <stdlib.h>

#include "core.h"

#define BODY_MT "mcpclient.body"

typedef struct Held {
  char *bytes; /* malloc'd; NULL once released */
  size_t len;
} Held;

static int body_gc(lua_State *L) {
  mcp_body_release(L, 1);
  return 0;
}

static int body_len(lua_State *L) {
  Held *h = luaL_checkudata(L, 1, BODY_MT);
  lua_pushinteger(L, (lua_Integer)h->len);
  return 1;
}

static int body_tostring(lua_State *L) {
  Held *h = luaL_checkudata(L, 1, BODY_MT);
  lua_pushfstring(L, "mcpclient.body (%I bytes)", (lua_Integer)h->len);
  return 1;
}

/*
** Push a held body owning bytes (len of them, from malloc). The userdata is
** made before it takes the bytes, so a raise here leaves them with the
** caller, who still owns them.
*/
void mcp_body_push(lua_State *L, char *bytes, size_t len) {
  static const luaL_Reg meta[] = {
    {"__gc", body_gc}, {"__len", body_len}, {"__tostring", body_tostring}, {NULL, NULL}};
  Held *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->bytes = NULL;
  h->len = 0;
  if (luaL_newmetatable(L, BODY_MT)) luaL_setfuncs(L, meta, 0);
  lua_setmetatable(L, -2);
  h->bytes = bytes;
  h->len = len;
}

/* The bytes of the held body at idx (*len of them), or NULL when idx holds none. */
const char *mcp_body_bytes(lua_State *L, int idx, size_t *len) {
  Held *h = luaL_testudata(L, idx, BODY_MT);
  if (h == NULL) return NULL;
  if (h->bytes == NULL) luaL_error(L, "a response body is read once; this one was read already");
  *len = h->len;
  return h->bytes;
}

/* Free the bytes of the held body at idx, if it is one and still holds them. */
void mcp_body_release(lua_State *L, int idx) {
  Held *h = luaL_testudata(L, idx, BODY_MT);
  if (h == NULL) return;
  free(h->bytes);
  h->bytes = NULL;
  h->len = 0;
}
