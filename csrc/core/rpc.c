/*
** rpc.c: JSON-RPC classification of one response (core.rpc_classify): the
** decoder's reader walks the message, keeping only the members a verdict
** reads (method, id, error, result), and the answer is one of result /
** error / other / malformed. A refusal is worded here from the decoder's
** record (or as a blank body, or a body past the container cap).
**
** Decodings other than tables are plugged in by name (mcp_rpc_add_decoding):
** a path of the message whose values a taker writes instead (listing.c's
** "text" and "kept" for a tools/list answer's schemas). This file knows
** the envelope only.
*/
#include <string.h>

#include "decode.h"

#define DECODINGS_KEY "mcpclient.rpc.decodings" /* registry: name -> the mcp_rpc_decoding (light userdata) */

/* ==================================================================== */
/* Reading the message                                                  */
/* ==================================================================== */

/* The members of a JSON-RPC message classify reads, in this order on the stack. */
enum { M_METHOD, M_ID, M_ERROR, M_RESULT, M_COUNT };

/*
** Which of those members the key at the stack top names, or -1.
*/
static int message_member(lua_State *L) {
  size_t n;
  const char *k = lua_tolstring(L, -1, &n);
  switch (n) {
    case 2: return memcmp(k, "id", 2) == 0 ? M_ID : -1;
    case 5: return memcmp(k, "error", 5) == 0 ? M_ERROR : -1;
    case 6:
      if (memcmp(k, "method", 6) == 0) return M_METHOD;
      return memcmp(k, "result", 6) == 0 ? M_RESULT : -1;
    default: return -1;
  }
}

/*
** Read the message object at f->p ('{') without building it: the members
** classify reads go to the M_COUNT slots from `slots` (which hold nil for
** an absent one), every other member is read (its verdict counts) and
** dropped. Nobody is handed the message itself, so its table would be built
** only to be thrown away. The keys stay on the stack until the end, so the
** duplicate check compares live strings. Returns 1, 0 on a refusal, or -1
** when the object has more members than that check holds (the caller then
** reads it the general way).
*/
static int read_message(mcp_reader *f, int slots, int role) {
  lua_State *L = f->L;
  mcp_seen_key seen[MCP_SEEN_KEYS], key;
  int n_seen = 0, which, sep;
  f->p++;
  mcp_skip_blanks(f);
  if (f->p < f->end && *f->p == '}') {
    f->p++;
    return 1;
  }
  luaL_checkstack(L, MCP_SEEN_KEYS + 4, "JSON decoder");
  for (;;) {
    const unsigned char *token = f->p;
    if (!mcp_read_key(f, &key)) return 0;
    if (n_seen == MCP_SEEN_KEYS) return -1;
    if (mcp_read_repeated(L, seen, n_seen, 0, &key)) return MCP_REFUSE(f, token, "duplicate object key");
    seen[n_seen++] = key;
    mcp_skip_blanks(f);
    if (f->p >= f->end || *f->p != ':') return MCP_REFUSE(f, f->p, "':' expected");
    f->p++;
    mcp_skip_blanks(f);
    which = message_member(L);
    if (!mcp_decode_value(f, 2, role != 0 ? mcp_decode_member_role(f, role, key.s, key.len) : 0)) return 0;
    if (which >= 0) lua_replace(L, slots + which);
    else lua_pop(L, 1);
    if ((sep = mcp_read_separator(f, '}')) == MCP_SEP_BAD) return 0;
    if (sep == MCP_SEP_END) return 1;
  }
}

/*
** The top of a JSON-RPC answer: its members pushed as M_COUNT values
** (returns M_COUNT) when read_message takes the object at f->p, else the
** value the general way (returns 1); 0 on a refusal.
*/
static int push_message(mcp_reader *f, int role) {
  lua_State *L = f->L;
  const unsigned char *start = f->p;
  size_t containers = f->containers;
  int slots = lua_gettop(L) + 1, i, r;
  luaL_checkstack(L, M_COUNT + 2, "JSON decoder");
  for (i = 0; i < M_COUNT; i++) lua_pushnil(L);
  r = mcp_read_open_container(f) ? read_message(f, slots, role) : 0;
  if (r >= 0) {
    lua_settop(L, r ? slots + M_COUNT - 1 : slots - 1);
    return r ? M_COUNT : 0;
  }
  lua_settop(L, slots - 1);
  f->p = start;
  f->containers = containers;
  return mcp_decode_value(f, 1, role);
}

/* ==================================================================== */
/* Classification                                                       */
/* ==================================================================== */

/*
** Whether the value at idx is a decoded JSON object: a table without the array marker.
*/
static int is_object(lua_State *L, int idx, int marker) {
  int r;
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  if (!lua_getmetatable(L, idx)) return 1;
  r = !lua_rawequal(L, -1, marker);
  lua_pop(L, 1);
  return r;
}

/*
** Push root[k] (raw) and return its type.
*/
static int member(lua_State *L, int root, const char *k) {
  lua_pushstring(L, k);
  return lua_rawget(L, root);
}

/*
** The JSON-RPC error at e: "error", code (0 unless an integer), message
** ("no message" unless a string).
*/
static int push_rpc_error(lua_State *L, int e) {
  lua_pushliteral(L, "error");
  if (member(L, e, "code") != LUA_TNUMBER || !lua_isinteger(L, -1)) {
    lua_pop(L, 1);
    lua_pushinteger(L, 0);
  }
  if (member(L, e, "message") != LUA_TSTRING) {
    lua_pop(L, 1);
    lua_pushliteral(L, "no message");
  }
  return 3;
}

/*
** Classify a response by its members method, id, error and result (at the
** M_COUNT stack slots from `first`, nil when absent) with the kinds, details and
** precedence the oracle's classifier (json_reference.c) has on jansson's
** tree.
*/
static int classify_members(lua_State *L, int first, lua_Integer expected, int marker) {
  int id = first + M_ID, e = first + M_ERROR, r = first + M_RESULT, id_matches;
  if (!lua_isnil(L, first + M_METHOD)) {
    lua_pushliteral(L, "other");
    lua_pushliteral(L, "a server request or notification");
    return 2;
  }
  id_matches = lua_isinteger(L, id) && lua_tointeger(L, id) == expected;
  if (is_object(L, e, marker)) {
    if (!id_matches && !mcp_json_is_null(L, id)) {
      lua_pushliteral(L, "other");
      lua_pushliteral(L, "a response to another request");
      return 2;
    }
    return push_rpc_error(L, e);
  }
  if (is_object(L, r, marker)) {
    lua_pushstring(L, id_matches ? "result" : "other");
    if (id_matches) lua_pushvalue(L, r);
    else lua_pushliteral(L, "a response to another request");
    return 2;
  }
  lua_pushliteral(L, "malformed");
  lua_pushliteral(L, "the response carries neither a result nor an error");
  return 2;
}

/*
** Classify the decoded response at root (read the general way): a JSON
** object's members go to classify_members.
*/
static int classify(lua_State *L, int root, lua_Integer expected, int marker) {
  int first;
  if (!is_object(L, root, marker)) {
    lua_pushliteral(L, "malformed");
    lua_pushliteral(L, "the body is not a JSON object");
    return 2;
  }
  first = lua_gettop(L) + 1;
  member(L, root, "method");
  member(L, root, "id");
  member(L, root, "error");
  member(L, root, "result");
  return classify_members(L, first, expected, marker);
}

/*
** Whether the text holds only blanks (space, tab, LF, CR, NUL, VT): such a
** body is "empty", a clearer message than a refusal at column 1.
*/
static int is_blank(const char *s, size_t len) {
  size_t i;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\0' && c != '\v') return 0;
  }
  return 1;
}

/*
** How many objects and arrays the text opens outside strings, for a body
** the reader gave up on: past the cap, that (not where it stopped) is what
** the caller hears, whatever else is wrong with the text.
*/
static size_t count_containers(const char *s, size_t len) {
  size_t i, n = 0;
  int in_string = 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '{' || c == '[') {
      n++;
    }
  }
  return n;
}

/*
** Push "malformed" and why the body at s was refused: past the container
** cap, blank, or the decoder's recorded refusal.
*/
static int push_refused(lua_State *L, const mcp_reader *f, const char *s, size_t len,
                        lua_Integer max_containers) {
  lua_pushliteral(L, "malformed");
  if (max_containers > 0 && count_containers(s, len) > (size_t)max_containers)
    lua_pushfstring(L, "the response holds more than %I objects and arrays", max_containers);
  else if (is_blank(s, len)) lua_pushliteral(L, "empty body");
  else mcp_read_push_refusal(f);
  return 2;
}

/*
** The decoding named by the string at arg (registered by
** mcp_rpc_add_decoding), or an argument error.
*/
static const mcp_rpc_decoding *decoding_arg(lua_State *L, int arg) {
  const mcp_rpc_decoding *d = NULL;
  if (lua_getfield(L, LUA_REGISTRYINDEX, DECODINGS_KEY) == LUA_TTABLE) {
    lua_pushvalue(L, arg);
    lua_rawget(L, -2);
    d = (const mcp_rpc_decoding *)lua_touserdata(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (d == NULL) luaL_argerror(L, arg, lua_pushfstring(L, "invalid option '%s'", lua_tostring(L, arg)));
  return d;
}

/*
** core.rpc_classify(text, expected_id [, decoding [, max_containers]]) —
** one JSON-RPC response: "result", table | "error", code, message |
** "other", why | "malformed", why; with max_containers, a result also
** returns how many objects and arrays the text opened (so a caller can
** bound several responses together), and a body opening more is
** malformed. decoding: false (key order not recorded), true (recorded), or
** the name of a registered decoding (listing.c's "text" and "kept": a
** tools/list answer whose tools' schemas come back as JSON text, or the
** input schema as what an import keeps of it; key order recorded only in
** what the taker reads as tables). text may also be a held body (body.c):
** read in place, then released. Upvalues: array marker, order table.
*/
static int l_rpc_classify(lua_State *L) {
  size_t len;
  const char *held = mcp_body_bytes(L, 1, &len), *s;
  const mcp_rpc_decoding *decoding = NULL;
  lua_Integer expected, max_containers = luaL_optinteger(L, 4, 0);
  int ordered = lua_toboolean(L, 3), n, first;
  mcp_reader f;
  if (held != NULL) s = held;
  else if (lua_type(L, 1) != LUA_TSTRING) return luaL_typeerror(L, 1, "string"); /* numbers are not text */
  else s = lua_tolstring(L, 1, &len);
  if (!lua_isinteger(L, 2)) luaL_typeerror(L, 2, "integer"); /* ids are integers: no "1" or 1.0 */
  expected = lua_tointeger(L, 2);
  if (lua_type(L, 3) == LUA_TSTRING) decoding = decoding_arg(L, 3);
  lua_settop(L, 4);
  mcp_read_open(&f, L, s, len);
  f.marker = lua_upvalueindex(1);
  f.order = ordered || decoding != NULL ? lua_upvalueindex(2) : 0;
  f.max_containers = max_containers > 0 ? (size_t)max_containers : 0;
  if (decoding != NULL) {
    f.path = decoding->path;
    f.taken_order = f.order;
    f.order = 0; /* outside what the taker reads, a decoding records no key order */
    decoding->open(&f);
  }
  first = lua_gettop(L) + 1;
  mcp_skip_blanks(&f);
  if (f.p < f.end && *f.p == '{') n = push_message(&f, decoding != NULL ? 1 : 0);
  else n = mcp_decode_value(&f, 1, decoding != NULL ? 1 : 0);
  if (n != 0) {
    mcp_skip_blanks(&f);
    if (f.p != f.end) n = MCP_REFUSE(&f, f.p, "end of file expected");
  }
  if (n == 0) {
    n = push_refused(L, &f, s, len, max_containers);
    mcp_body_release(L, 1);
    return n;
  }
  mcp_body_release(L, 1); /* everything decoded is a copy: the bytes can go now */
  if (n == M_COUNT) n = classify_members(L, first, expected, lua_upvalueindex(1));
  else n = classify(L, first, expected, lua_upvalueindex(1));
  if (max_containers <= 0 || !lua_isstring(L, -n) || strcmp(lua_tostring(L, -n), "result") != 0) return n;
  lua_pushinteger(L, (lua_Integer)f.containers);
  return n + 1;
}

/*
** C API: offer the decoding d to core.rpc_classify under `name` (d is
** static: it outlives every Lua state).
*/
void mcp_rpc_add_decoding(lua_State *L, const char *name, const mcp_rpc_decoding *d) {
  luaL_checkstack(L, 3, "mcpclient.core");
  if (lua_getfield(L, LUA_REGISTRYINDEX, DECODINGS_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, DECODINGS_KEY);
  }
  lua_pushlightuserdata(L, (void *)(uintptr_t)d);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
}

/*
** Adds core.rpc_classify, over the array marker and order table json.c
** keeps in the registry (so it runs after mcp_register_json).
*/
void mcp_register_rpc(lua_State *L) {
  luaL_checkstack(L, 3, "mcpclient.core");
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ARRAY_KEY);
  lua_getfield(L, LUA_REGISTRYINDEX, MCP_JSON_ORDER_KEY);
  lua_pushcclosure(L, l_rpc_classify, 2);
  lua_setfield(L, -2, "rpc_classify");
}
