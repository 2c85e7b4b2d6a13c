/*
** mcpclient.core: the C half of mcpclient.
** Each concern lives in its own file and adds its functions to the module
** table (or to a sub-table) when luaopen_mcpclient_core runs. Helpers one C
** file offers another are declared here, so each has exactly one definition.
*/
#ifndef MCPCLIENT_CORE_H
#define MCPCLIENT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <lauxlib.h>

#define MCP_VERSION "0.1.0"

/* ==================================================================== */
/* Registrars                                                           */
/* ==================================================================== */

/*
** Each registrar expects the module table at the top of the stack and
** leaves it there. core.c calls those of mcpclient.core in this order, json
** first because it creates the registry state (and the core.json table)
** the others' C calls rely on; no registrar replaces another's names.
** net.c calls those of mcpclient.net. Every name either module offers is
** listed here, besides the version each sets itself (a spec holds this
** list to the modules).
*/
void mcp_register_json(lua_State *L);    /* json.c:     core.json.{encode, try_encode, decode, null, array,
                                                          is_array, is_object, key_order, set_key_order}
                                                          (the table; its decode is decode.c's),
                                                          core.rpc_request */
void mcp_register_engine(lua_State *L);  /* engine.c:   core.engine_step, core.engine_watch,
                                                          core.engine_pollfd, core.engine_timeout,
                                                          core.fd_ready */
void mcp_register_pipe(lua_State *L);    /* pipe.c:     core.pipe, core.fd_read, core.fd_write,
                                                          core.fd_close */
void mcp_register_decode(lua_State *L);  /* decode.c:   the decoder, core.json.decode */
void mcp_register_rpc(lua_State *L);     /* rpc.c:      core.rpc_classify */
void mcp_register_listing(lua_State *L); /* listing.c:  rpc_classify's "text" and "kept" decodings */
void mcp_register_sse(lua_State *L);     /* sse.c:      core.sse_decoder */
void mcp_register_clock(lua_State *L);   /* clock.c:    core.monotonic_ns, core.now, core.sleep */
void mcp_register_text(lua_State *L);    /* text.c:     core.clip, core.clip_listed, core.label,
                                                          core.flatten, core.bound, core.inert,
                                                          core.repair_utf8 */
void mcp_register_schema(lua_State *L);  /* schema.c:   core.normalise_schema, core.normalise_schema_text,
                                                          core.decode_stored_schema */
void mcp_register_lazy(lua_State *L);    /* lazy.c:     core.lazy_schemas, core.lazy_object, core.lazy_text */
void mcp_register_process(lua_State *L); /* process.c:  core.spawn, core.process_line_cap */

/* json_reference.c: core.json_reference.{decode, classify}, the fuzz harnesses' oracle (jansson) */
void mcp_register_json_reference(lua_State *L);
void mcp_register_validate(lua_State *L); /* validate.c: core.validate_output */

/* mcpclient.net (its names are reached through core's table too) */
void mcp_register_http(lua_State *L);     /* http_leg.c: net.http_leg, net.http_pool */
void mcp_register_address(lua_State *L);  /* address.c:  net.address_bytes, net.idna, net.url_host,
                                                          net.lookup */
void mcp_register_crypto(lua_State *L);   /* crypto.c:   net.crypto.{sha256, random_bytes, base64,
                                                          base64url, jws_sign, ec_key} */
void mcp_register_loopback(lua_State *L); /* loopback.c: net.loopback_listen (the login redirect) */

/* ==================================================================== */
/* The engine (engine.c)                                                */
/* ==================================================================== */

/*
** The engine of the Lua state (mcp_engine_of raises only when it cannot be
** made), for the core's own descriptors: mcp_engine_own registers fd (level
** triggered, for events) so that each turn of the engine in which it is
** ready calls handler(owner, fd, events); 0, or -1 with errno set.
** mcp_engine_disown takes it out again; call it before closing fd.
*/
struct mcp_engine;
struct mcp_engine *mcp_engine_of(lua_State *L);
int mcp_engine_own(struct mcp_engine *e, int fd, unsigned events, void (*handler)(void *, int, unsigned),
                   void *owner);
void mcp_engine_disown(struct mcp_engine *e, int fd);

/* ==================================================================== */
/* The clock (clock.c)                                                  */
/* ==================================================================== */

/* mcp_monotonic_ns(): the clock every module measures on. */
#include "monotonic.h"

/* ==================================================================== */
/* The JSON codec (json.c)                                              */
/* ==================================================================== */

/*
** The codec (json.c: the encoder and what the codec shares; decode.c: the
** decoder; json_text.c: the text builder) also serves the other C files
** (the schema normaliser measures and orders what it keeps with the same
** codec the wire uses). These calls find the codec's state in the registry
** (json.c makes it), so they work from any C function once the module is
** open. Its reader is declared in decode.h, for the codec's own files.
*/
#define MCP_JSON_ARRAY_KEY "mcpclient.json.array" /* registry: the array marker metatable */
#define MCP_JSON_ORDER_KEY "mcpclient.json.order" /* registry: weak-keyed table -> key list */
#define MCP_JSON_MAX_DEPTH 512
#define MCP_JSON_ASCII     1 /* escape '/' as \/ and non-ASCII as \uXXXX: the measure of a stored schema's size */

#define MCP_JSON_REAL_MAX 48 /* bytes mcp_json_format_real may write */
/* The encoder's \uXXXX for u at o (6 bytes); returns the end. */
char *mcp_json_put_u(char *o, unsigned long u);
/* The encoder's text for the real d into out; its length, or 0 when d has no JSON form. */
size_t mcp_json_format_real(lua_Number d, char *out);
/* Encode the value at idx and push the text; NULL on success, else a static reason and nothing pushed. */
const char *mcp_json_encode(lua_State *L, int idx, int flags);
/*
** decode.c: decode len bytes at s and push the value (returns 1) or the
** "invalid JSON: ..." message (returns 0). Raises only on memory or stack.
*/
int mcp_json_decode(lua_State *L, const char *s, size_t len, int ordered);
/* json_reference.c: the same through jansson, the oracle the fuzz harnesses hold mcp_json_decode to. */
int mcp_json_reference_decode(lua_State *L, const char *s, size_t len, int ordered);
/* Push the key list recorded for the table at t, or nil; returns the pushed value's type. */
int mcp_json_push_key_order(lua_State *L, int t);
/* Record the key order the encoder uses for the table at t (keys: array of strings at k). */
void mcp_json_set_key_order(lua_State *L, int t, int k);
void mcp_json_push_null(lua_State *L);
int mcp_json_is_null(lua_State *L, int idx);
/*
** json.null is also kept in the registry under this key, for the database
** module (db.c), which cannot call mcp_json_is_null: it is another shared
** object, opened RTLD_LOCAL.
*/
#define MCP_JSON_NULL_KEY "mcpclient.json.null"
int mcp_json_is_array(lua_State *L, int idx);    /* carries the array marker */
void mcp_json_mark_array(lua_State *L, int idx); /* give the table at idx the array marker */
/* Push the weak-keyed table kept in the registry under key, made on first use. */
void mcp_push_weak_registry_table(lua_State *L, const char *key);

/*
** body.c (linked into core and net: the leg makes held bodies, the decoder
** reads them): a response body the leg hands over without a copy. push takes
** ownership of bytes (from malloc) once it returns; bytes gives the body at
** idx (NULL when idx is no held body; raises when it was read already);
** release frees them (read once: rpc_classify releases what it read).
*/
void mcp_body_push(lua_State *L, char *bytes, size_t len);
const char *mcp_body_bytes(lua_State *L, int idx, size_t *len);
void mcp_body_release(lua_State *L, int idx);

/*
** json.c: JSON objects kept as text until first read (lazy.c makes them and
** builds them: the metatable under MCP_JSON_LAZY_META, whose `settle` field
** builds one in place; the texts in the weak table under
** MCP_JSON_LAZY_PENDING). Raw readers settle one first (build it now; 1
** when it was lazy); the encoder and the normaliser may take its text
** instead (pushed, 1; nothing, 0).
*/
#define MCP_JSON_LAZY_META    "mcpclient.json.lazy"         /* registry: the metatable of a lazy object */
#define MCP_JSON_LAZY_PENDING "mcpclient.json.lazy.pending" /* registry: weak-keyed lazy object -> its text */
int mcp_json_lazy_settle(lua_State *L, int idx);
int mcp_json_lazy_text(lua_State *L, int idx);
void mcp_json_lazy_wrap(lua_State *L, int idx); /* the object text at idx becomes a lazy object */

/*
** json_text.c's text builder, for the schema normaliser: the JSON object text
** s written as json.encode writes its decoded value (into a buffer pushed
** as a userdata, at *text: the one at stack index reuse when that is big
** enough, 0 for none), with its members described; -1 (nothing
** pushed) when s is no object or the builder gives up. Offsets are into
** *text; key spans include the quotes.
*/
#define MCP_MAX_MEMBERS 64
typedef int (*mcp_refused_fn)(const char *key, size_t len); /* >= 0: a refused keyword */
typedef struct mcp_member {
  size_t key, key_len, value, value_len;
  int levels;        /* the deepest container level inside the value, the object being level 1 */
  int refused;       /* a key inside the value passed the refused test */
  size_t containers; /* objects and arrays in the value */
  int shape;         /* MCP_SHAPE_* when the value has that shape, else 0 */
} mcp_member;
#define MCP_SHAPE_OBJECT_OF_OBJECTS 1 /* an object whose member values are all objects ({} too) */
#define MCP_SHAPE_STRING_LIST       2 /* an array of strings only ([] too) */
int mcp_canonical_object(lua_State *L, const char *s, size_t len, mcp_refused_fn refused, mcp_member *members,
                         const char **text, size_t *text_len, int reuse);

/* ==================================================================== */
/* The schema measure (measure.c)                                       */
/* ==================================================================== */

/*
** The stored (ASCII-form) length of the kept schema at t in one pass, or 0
** when it is not clean (a refused keyword, a container deeper than
** max_depth or past max_visits, invalid UTF-8, a shape or value the encoder
** refuses): the normaliser then takes its exact path for the reason.
*/
size_t mcp_schema_measure(lua_State *L, int t, int max_depth, long max_visits, mcp_refused_fn refused);

/*
** schema.c for the listing decoder: push what an import keeps of an
** encoder-written schema text described by m[0..n) (n < 0: not described):
** the kept text, or a table { refused = reason }; and the keyword test.
*/
void mcp_schema_keep(lua_State *L, const char *text, size_t len, const mcp_member *m, int n);
int mcp_schema_keyword(const char *key, size_t len);

/*
** refs.c: a schema's local references into "$defs"/"definitions" written
** out for the normaliser. Pushes the copy and returns 0, or pushes nothing
** and returns a refusal: MCP_REFS_REFUSED (the reason, naming the place,
** left in the registry at MCP_REFS_REASON), MCP_REFS_TOO_BIG, MCP_REFS_TOO_DEEP.
*/
#define MCP_REFS_REFUSED  1
#define MCP_REFS_TOO_BIG  2
#define MCP_REFS_TOO_DEEP 3
#define MCP_REFS_REASON   "mcpclient.schema.refs.reason"
int mcp_schema_inline_refs(lua_State *L, int s);

/* ==================================================================== */
/* UTF-8 (utf8.c, text.c)                                               */
/* ==================================================================== */

/*
** utf8.c's strict UTF-8 reader, shared by the encoder, the schema check and
** the host gate's name check (linked into core and net): no overlongs,
** surrogates or code points past U+10FFFF.
*/
/* Length of the unit at s (n > 0): a character (*ok = 1, *cp set) or the maximal invalid subpart (*ok = 0). */
size_t mcp_utf8_unit(const unsigned char *s, size_t n, int *ok, uint32_t *cp);
/* 1 when all n bytes are well-formed UTF-8. */
int mcp_utf8_valid(const unsigned char *s, size_t n);
/* utf8.c: 1 for C1 controls and the bidi/invisible characters the text rule removes and the encoder escapes. */
int mcp_utf8_hidden(uint32_t cp);
/* Push the text rule's clip of s: control runs one space, ends trimmed, at most limit code points. */
void mcp_text_clip(lua_State *L, const char *s, size_t n, lua_Integer limit);

#endif
