/*
** listing.c: the decodings of a tools/list answer that core.rpc_classify
** offers besides tables. With "text", each listed tool's inputSchema and
** outputSchema come back as JSON text (what json.encode writes for the
** decoded value), written by the text builder in the decoder's one pass,
** so a catalogue's schemas never become tables (lazy.c makes them tables
** on first read). With "kept", the input schema comes back as what an
** import keeps of it, judged by schema.c from the text and the description
** of its members written in the same pass.
**
** It stands above both the codec and the schema normaliser: the codec
** hands it the values at result.tools[i].{inputSchema, outputSchema}
** (mcp_read_path), and it hands the text to schema.c. Neither knows of it.
*/
#include "decode.h"

/* The path of a listed tool's schemas in a tools/list answer: result.tools[i].inputSchema / .outputSchema. */
static const char *const schema_steps[] = {"result", "tools", NULL};
static const char *const schema_names[] = {"inputSchema", "outputSchema"};

/*
** Replace the decoded schema at the top of the stack with its JSON text,
** or with `keep` with what an import keeps of it. 0 (the value left as it
** is) when it would not encode, which decoded JSON never is.
*/
static int schema_value_as_text(lua_State *L, int keep) {
  if (mcp_json_encode(L, -1, 0) != NULL) return 0;
  lua_remove(L, -2);
  if (keep) {
    size_t len;
    const char *text = lua_tolstring(L, -1, &len);
    mcp_schema_keep(L, text, len, NULL, -1);
    lua_remove(L, -2);
  }
  return 1;
}

/*
** Push a listed tool's schema at f->p as its JSON text, or with `keep`, as
** what an import keeps of it (schema.c judges the text and the description
** of its members written in the same pass). When the text builder gives
** up, the value is read again as tables and those are encoded: the same
** text, or the decoder's refusal.
*/
static int push_schema_text(mcp_reader *f, int depth, int keep) {
  mcp_member members[MCP_MAX_MEMBERS];
  int ok;
  mcp_text *t = (mcp_text *)f->taker;
  const unsigned char *start = f->p, *text;
  size_t containers = f->containers, len;
  t->members = keep ? members : NULL;
  t->refused = keep ? mcp_schema_keyword : NULL;
  if (mcp_text_value(f, t, depth, &text, &len)) {
    if (keep) mcp_schema_keep(f->L, (const char *)text, len, members, text[0] == '{' ? t->nmembers : -1);
    else lua_pushlstring(f->L, (const char *)text, len);
    return 1;
  }
  f->p = start;
  f->containers = containers;
  f->why = NULL; /* the builder gave up: the decoder's reading has the final word */
  f->at = NULL;
  f->order =
    f->taken_order; /* the text keeps the schema's key order: so must the tables it is written from */
  ok = mcp_decode_value(f, depth, 0);
  f->order = 0;
  return ok && schema_value_as_text(f->L, keep);
}

/* The taker of "text": both schemas as text. */
static int take_text(mcp_reader *f, int depth, int which) {
  (void)which;
  return push_schema_text(f, depth, 0);
}

/* The taker of "kept": the input schema (which 0) as kept, the output schema as text. */
static int take_kept(mcp_reader *f, int depth, int which) {
  return push_schema_text(f, depth, which == 0);
}

/*
** Open the text builder one answer's schemas are written with: its state
** and its buffer, both on the Lua stack for the call.
*/
static void open_text(mcp_reader *f) {
  mcp_text *t = (mcp_text *)lua_newuserdatauv(f->L, sizeof *t, 0);
  mcp_text_open(t, f->L, 0, 4096);
  f->taker = t;
}

static const mcp_read_path text_path = {schema_steps, 3, schema_names, 2, take_text};
static const mcp_read_path kept_path = {schema_steps, 3, schema_names, 2, take_kept};
static const mcp_rpc_decoding text_decoding = {&text_path, open_text};
static const mcp_rpc_decoding kept_decoding = {&kept_path, open_text};

/*
** Offers core.rpc_classify the decodings "text" and "kept" (so it runs
** after mcp_register_rpc's state exists, which it makes on demand).
*/
void mcp_register_listing(lua_State *L) {
  mcp_rpc_add_decoding(L, "text", &text_decoding);
  mcp_rpc_add_decoding(L, "kept", &kept_decoding);
}
