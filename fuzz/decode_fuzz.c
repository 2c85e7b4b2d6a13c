/*
** decode_fuzz.c: differential libFuzzer harness for the single-pass decoder
** (csrc/core/decode.c) against jansson (csrc/core/json_reference.c, the oracle). Input: one body as a server
** might send it. The checker (fuzz/lua/decode_check.lua) requires the same
** verdict and the same value from both, plain and key-ordered, and the same
** answer from both JSON-RPC classifiers; and of the schema measure
** (csrc/core/measure.c) on every table decoded: clean exactly when a model says
** so, and then the length of the encoder's ASCII form.
*/
#include "fuzz_common.h"

/* fuzz_fast_decode(text, ordered) -> true, value | false: the decoder's own verdict. */
static int fz_fast_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int ordered = lua_toboolean(L, 2);
  lua_settop(L, 2);
  if (!mcp_json_decode(L, s, len, ordered)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lua_pushboolean(L, 1);
  lua_insert(L, -2);
  return 2;
}

/* fuzz_slow_decode(text, ordered) -> true, value | false, message: jansson's (json_reference.c's C API). */
static int fz_slow_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int ok = mcp_json_reference_decode(L, s, len, lua_toboolean(L, 2));
  lua_pushboolean(L, ok);
  lua_insert(L, -2);
  return 2;
}

/* The normaliser's refused keywords (csrc/core/schema.c), as the checker's model lists them too. */
static int refused(const char *s, size_t n) {
  static const char *const names[] = {
    "$ref",
    "$dynamicRef",
    "$defs",
    "definitions",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "dependentSchemas",
    "dependentRequired",
    "unevaluatedProperties",
  };
  size_t k;
  for (k = 0; k < sizeof names / sizeof names[0]; k++)
    if (strlen(names[k]) == n && memcmp(names[k], s, n) == 0) return (int)k;
  return -1;
}

/* fuzz_measure(t) -> the one-pass schema measure (0: not clean), with the normaliser's bounds. */
static int fz_measure(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushinteger(L, (lua_Integer)mcp_schema_measure(L, 1, 12, 1L << 20, refused));
  return 1;
}

static void with_decoders(lua_State *L) {
  fz_with_ascii_encode(L);
  lua_register(L, "fuzz_measure", fz_measure);
  lua_register(L, "fuzz_fast_decode", fz_fast_decode);
  lua_register(L, "fuzz_slow_decode", fz_slow_decode);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_open("decode_check", with_decoders);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_run(data, size);
  return 0;
}
