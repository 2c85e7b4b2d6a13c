/*
** validate.c: a tool result's structuredContent checked against the tool's
** outputSchema, core.validate_output(schema, value).
**
** The schema and the value are Lua values as the codec decodes them
** (json.c): arrays carry the array marker (a plain sequence 1..n counts as
** one too), objects are tables with string keys ({} is an object), JSON
** null is core.json.null, and a listed schema may be a lazy object
** (lazy.c), built here before it is read. A schema that is neither a
** table nor a boolean (a string too: JSON text is the caller's to decode)
** cannot be read: "schema".
**
** The keywords checked: type (a name or a list of names; "integer" is a
** number with no fractional part, 1.0 included), properties, required,
** additionalProperties (a boolean or a schema), patternProperties (its
** presence only: see below), items (a schema, or the older list form with
** additionalItems), prefixItems, enum, const (JSON equality: 1 equals 1.0,
** objects whatever their key order), $ref (a JSON pointer into the same
** schema: "#", "#/$defs/Name", "#/definitions/Name", any other local
** pointer), anyOf, oneOf, allOf, not, minimum, maximum, exclusiveMinimum,
** exclusiveMaximum (a number, or the older boolean beside minimum/maximum),
** minLength and maxLength (in characters: UTF-8 sequences, an invalid byte
** one character), pattern (a subset of ECMA regular expressions, run
** without backtracking: see "Patterns"), minItems, maxItems. A boolean schema is itself: true
** accepts everything, false nothing. $ref with other keywords beside it:
** both hold.
**
** Not checked, so never a reason to refuse a value: every other keyword
** (format, multipleOf, uniqueItems, if/then/else, unevaluated*, ...), a
** keyword whose value has the wrong shape ("required": true, a minimum that
** is a string), and a pattern outside the subset. When patternProperties is present,
** additionalProperties is not checked either (without matching the
** patterns this file cannot tell which properties are additional). What is
** not checked can only let a value through, never refuse a valid one.
**
** Bounds, so a hostile schema or value cannot hang the host or exhaust its
** stacks: MAX_DEPTH levels of evaluation (a subschema applied, a member or
** an element entered, a $ref followed, a level of a const/enum comparison:
** a $ref that leads back to itself without entering the value ends here),
** and MAX_STEPS steps (a schema member read, a value member or element
** visited, a comparison node, 64 bytes of a string counted, a character
** searched for a pattern, and a step per four threads the search runs). A check that
** hits a bound, or a $ref that does not resolve (or leaves the schema),
** ends as "unchecked": the result names why ("depth", "steps", "schema"),
** never true.
**
** Places in the value are named as paths: "$" the value itself, ".name" a
** member whose name is an identifier ([A-Za-z_][A-Za-z0-9_]*), ["name"] any
** other member (JSON string escapes for '"', '\' and control bytes), [i] an
** element, counted from 0. When several places fail, which one is named
** follows the tables' iteration order.
**
** Nothing here allocates C memory: the path is kept as references into the
** (unchanged) tables on the C stack and written only on failure, so a Lua
** error (out of memory) can leave at any point.
*/
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MAX_DEPTH         64         /* evaluation levels: subschemas, members, references, comparisons */
#define MAX_STEPS         (1L << 22) /* ~0.5 s of the costliest steps; a 2 MiB value of 200k objects needs 2M */
#define STRING_STEP_BYTES 64         /* a string costs one step per this many bytes counted */
#define MAX_PATH_TEXT     (64 * 1024) /* bytes of the path written; a longer one ends in "..." */

enum outcome { OK, FAIL, ABORT };

/* The kinds of JSON value a Lua value is, as the codec encodes it. */
enum vkind { V_NULL, V_BOOLEAN, V_INTEGER, V_REAL, V_STRING, V_ARRAY, V_OBJECT, V_OTHER };

static const char *const kind_names[] = {"null",   "boolean", "integer", "number",
                                         "string", "array",   "object",  "a value JSON cannot carry"};

/* One step of the path into the value: a member (its name) or an element (0-based). */
typedef struct {
  const char *key; /* NULL: an element */
  size_t len;
  lua_Integer index;
} segment;

typedef struct {
  lua_State *L;
  int root;         /* stack index of the root schema */
  int depth;        /* evaluation levels entered */
  long steps;       /* steps taken */
  int quiet;        /* > 0: inside anyOf/oneOf/not, where a failure is not the answer */
  int recorded;     /* a failure or an abort has been written */
  int out_path;     /* stack index of the path written on failure */
  int out_reason;   /* stack index of the reason */
  const char *why;  /* the bound an ABORT hit: "depth", "steps", "schema" */
  int machine_slot; /* stack index of the pattern machine (a userdata, made on the first pattern) */
  int machine;      /* it is made */
  int npath;
  segment path[MAX_DEPTH + 1];
} checker;

/* The keywords read, by index. */
enum {
  KW_TYPE,
  KW_PROPERTIES,
  KW_REQUIRED,
  KW_ADDITIONAL,
  KW_PATTERN_PROPERTIES,
  KW_ITEMS,
  KW_PREFIX_ITEMS,
  KW_ADDITIONAL_ITEMS,
  KW_ENUM,
  KW_CONST,
  KW_REF,
  KW_ANY_OF,
  KW_ONE_OF,
  KW_ALL_OF,
  KW_NOT,
  KW_MINIMUM,
  KW_MAXIMUM,
  KW_EXCLUSIVE_MINIMUM,
  KW_EXCLUSIVE_MAXIMUM,
  KW_MIN_LENGTH,
  KW_MAX_LENGTH,
  KW_MIN_ITEMS,
  KW_MAX_ITEMS,
  KW_PATTERN,
  KW_COUNT
};

static const char *const keywords[KW_COUNT] = {
  "type",
  "properties",
  "required",
  "additionalProperties",
  "patternProperties",
  "items",
  "prefixItems",
  "additionalItems",
  "enum",
  "const",
  "$ref",
  "anyOf",
  "oneOf",
  "allOf",
  "not",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minLength",
  "maxLength",
  "minItems",
  "maxItems",
  "pattern",
};

/*
** The keyword index of the key s (n bytes), or -1. A schema's members are
** few; the keywords are compared by length and first byte before the rest.
*/
static int keyword_index(const char *s, size_t n) {
  int i;
  for (i = 0; i < KW_COUNT; i++) {
    const char *k = keywords[i];
    if (k[0] == s[0] && strlen(k) == n && memcmp(k, s, n) == 0) return i;
  }
  return -1;
}

/* ==================================================================== */
/* Values                                                               */
/* ==================================================================== */

/*
** What JSON value the Lua value at idx is: a marked table an array, an
** unmarked one an object when empty or keyed by a string first, an array
** when keyed by an integer first (a sequence, as the encoder writes it).
** A lazy object is built first.
*/
static enum vkind kind_of(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return V_NULL;
    case LUA_TBOOLEAN: return V_BOOLEAN;
    case LUA_TNUMBER: return lua_isinteger(L, idx) ? V_INTEGER : V_REAL;
    case LUA_TSTRING: return V_STRING;
    case LUA_TLIGHTUSERDATA: return mcp_json_is_null(L, idx) ? V_NULL : V_OTHER;
    case LUA_TTABLE: {
      enum vkind k;
      idx = lua_absindex(L, idx);
      if (mcp_json_is_array(L, idx)) return V_ARRAY;
      mcp_json_lazy_settle(L, idx);
      lua_pushnil(L);
      if (lua_next(L, idx) == 0) return V_OBJECT;
      k = lua_type(L, -2) == LUA_TSTRING ? V_OBJECT : lua_isinteger(L, -2) ? V_ARRAY : V_OTHER;
      lua_pop(L, 2);
      return k;
    }
    default: return V_OTHER;
  }
}

/* 1 when the number at idx has no fractional part (an integer, or a real such as 1.0). */
static int is_whole(lua_State *L, int idx) {
  lua_Number d;
  if (lua_isinteger(L, idx)) return 1;
  d = lua_tonumber(L, idx);
  return d - d == 0 && d == floor(d); /* d - d is NaN for infinities and NaN */
}

/* The number at idx as a count for minLength and the like: -1 when it is none (negative, fractional). */
static lua_Integer count_of(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TNUMBER) return -1;
  if (lua_isinteger(L, idx)) return lua_tointeger(L, idx) < 0 ? -1 : lua_tointeger(L, idx);
  {
    lua_Number d = lua_tonumber(L, idx);
    if (!(d >= 0) || d != floor(d)) return -1;
    return d >= 9.0e18 ? (lua_Integer)9000000000000000000LL : (lua_Integer)d;
  }
}

/* ==================================================================== */
/* Failures                                                             */
/* ==================================================================== */

/*
** Write a member name of the path: .name for an identifier, else ["name"]
** with the JSON string escapes.
*/
static void add_key(luaL_Buffer *b, const char *s, size_t n) {
  size_t i;
  int ident = n > 0 && !(s[0] >= '0' && s[0] <= '9');
  for (i = 0; i < n && ident; i++) {
    unsigned char c = (unsigned char)s[i];
    ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (ident) {
    luaL_addchar(b, '.');
    luaL_addlstring(b, s, n);
    return;
  }
  luaL_addstring(b, "[\"");
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      luaL_addchar(b, '\\');
      luaL_addchar(b, (char)c);
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      char *end = mcp_json_put_u(hex, c);
      luaL_addlstring(b, hex, (size_t)(end - hex));
    } else {
      luaL_addchar(b, (char)c);
    }
  }
  luaL_addstring(b, "\"]");
}

/*
** Write the path to where the check is now into the checker's path slot,
** and the reason (the string at the top of the stack, popped) into its
** reason slot.
*/
static void write_failure(checker *c) {
  lua_State *L = c->L;
  luaL_Buffer b;
  int i;
  luaL_checkstack(L, 4, "output validation");
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '$');
  for (i = 0; i < c->npath; i++) {
    if (luaL_bufflen(&b) > MAX_PATH_TEXT) {
      luaL_addstring(&b, "...");
      break;
    }
    if (c->path[i].key != NULL) {
      add_key(&b, c->path[i].key, c->path[i].len);
    } else {
      lua_pushfstring(L, "[%I]", (LUAI_UACINT)c->path[i].index);
      luaL_addvalue(&b);
    }
  }
  luaL_pushresult(&b);
  lua_replace(L, c->out_path);
  lua_replace(L, c->out_reason);
  c->recorded = 1;
}

/*
** A failure here, the reason (a format and its arguments, as
** lua_pushfstring takes them) written when it is the answer: the first
** one met outside anyOf/oneOf/not. Returns FAIL.
*/
static enum outcome fail(checker *c, const char *fmt, ...) {
  if (c->quiet == 0 && !c->recorded) {
    va_list ap;
    va_start(ap, fmt);
    luaL_checkstack(c->L, 4, "output validation");
    lua_pushvfstring(c->L, fmt, ap);
    va_end(ap);
    write_failure(c);
  }
  return FAIL;
}

/*
** The check cannot go on: a bound hit, or a schema that cannot be read
** (why: "depth", "steps", "schema"). Written whatever the nesting: it is
** the answer. Returns ABORT.
*/
static enum outcome abort_check(checker *c, const char *why, const char *fmt, ...) {
  va_list ap;
  c->why = why;
  c->recorded = 0;
  c->quiet = 0;
  va_start(ap, fmt);
  luaL_checkstack(c->L, 4, "output validation");
  lua_pushvfstring(c->L, fmt, ap);
  va_end(ap);
  write_failure(c);
  return ABORT;
}

/* One step of the budget, n at once; ABORT once it is spent. */
static enum outcome spend(checker *c, long n) {
  c->steps += n;
  if (c->steps > MAX_STEPS)
    return abort_check(c, "steps", "checking it takes more than %d steps", (int)MAX_STEPS);
  return OK;
}

/* ==================================================================== */
/* Equality (const, enum)                                               */
/* ==================================================================== */

/*
** JSON equality of the values at a and b: the same kind (any two numbers
** compare as numbers), arrays element by element, objects by their members
** whatever the order. Each node a step, each level one of depth. Returns
** OK (equal), FAIL (not) or ABORT.
*/
static enum outcome equal(checker *c, int a, int b, int level) {
  lua_State *L = c->L;
  enum vkind ka = kind_of(L, a), kb = kind_of(L, b);
  enum outcome r = spend(c, 1);
  if (r != OK) return r;
  if (c->depth + level > MAX_DEPTH)
    return abort_check(c, "depth", "comparing it nests deeper than %d levels", MAX_DEPTH);
  if ((ka == V_INTEGER || ka == V_REAL) && (kb == V_INTEGER || kb == V_REAL))
    return lua_compare(L, a, b, LUA_OPEQ) ? OK : FAIL;
  if (ka != kb) return FAIL;
  switch (ka) {
    case V_NULL: return OK;
    case V_BOOLEAN: return lua_toboolean(L, a) == lua_toboolean(L, b) ? OK : FAIL;
    case V_STRING: return lua_rawequal(L, a, b) ? OK : FAIL;
    case V_ARRAY: {
      lua_Integer i, n = (lua_Integer)lua_rawlen(L, a);
      if (n != (lua_Integer)lua_rawlen(L, b)) return FAIL;
      luaL_checkstack(L, 4, "output validation");
      for (i = 1; i <= n && r == OK; i++) {
        lua_rawgeti(L, a, i);
        lua_rawgeti(L, b, i);
        r = equal(c, lua_gettop(L) - 1, lua_gettop(L), level + 1);
        lua_pop(L, 2);
      }
      return r;
    }
    case V_OBJECT: {
      long na = 0, nb = 0;
      luaL_checkstack(L, 6, "output validation");
      lua_pushnil(L);
      while (r == OK && lua_next(L, a) != 0) {
        na++;
        lua_pushvalue(L, -2);
        if (lua_rawget(L, b) == LUA_TNIL) r = FAIL;
        else r = equal(c, lua_gettop(L) - 1, lua_gettop(L), level + 1);
        lua_pop(L, 2);
      }
      if (r != OK) {
        lua_pop(L, 1); /* the key lua_next left */
        return r;
      }
      lua_pushnil(L);
      while (lua_next(L, b) != 0) {
        lua_pop(L, 1);
        nb++;
        if ((r = spend(c, 1)) != OK) {
          lua_pop(L, 1);
          return r;
        }
      }
      return na == nb ? OK : FAIL;
    }
    case V_INTEGER:
    case V_REAL:
    case V_OTHER: break;
  }
  return FAIL;
}

/* ==================================================================== */
/* References                                                           */
/* ==================================================================== */

/*
** Push the schema the local reference at idx names (a JSON pointer after
** '#', from the root schema), or return ABORT ("schema") naming it. The
** pointer's ~0 and ~1 are read; an element of a list by its index from 0.
*/
static enum outcome push_reference(checker *c, int idx) {
  lua_State *L = c->L;
  size_t n, i;
  const char *s;
  if (lua_type(L, idx) != LUA_TSTRING)
    return abort_check(c, "schema", "a \"$ref\" in the schema is not a string");
  s = lua_tolstring(L, idx, &n);
  if (n == 0 || s[0] != '#' || (n > 1 && s[1] != '/'))
    return abort_check(c, "schema", "the schema's reference \"%s\" does not point into the schema itself",
                       n > 120 ? "(too long to show)" : s);
  lua_pushvalue(L, c->root);
  i = 1;
  while (i < n) {
    luaL_Buffer b;
    size_t j = i + 1;
    enum outcome r = spend(c, 1);
    if (r != OK) {
      lua_pop(L, 1);
      return r;
    }
    luaL_buffinit(L, &b);
    for (; j < n && s[j] != '/'; j++) {
      if (s[j] == '~' && j + 1 < n && (s[j + 1] == '0' || s[j + 1] == '1')) {
        luaL_addchar(&b, s[j + 1] == '0' ? '~' : '/');
        j++;
      } else {
        luaL_addchar(&b, s[j]);
      }
    }
    luaL_pushresult(&b);
    i = j;
    if (lua_type(L, -2) != LUA_TTABLE || mcp_json_is_null(L, -2)) {
      lua_pop(L, 2);
      return abort_check(c, "schema", "the schema's reference \"%s\" does not resolve",
                         n > 120 ? "(too long to show)" : s);
    }
    mcp_json_lazy_settle(L, -2);
    if (mcp_json_is_array(L, -2)) {
      lua_Integer k;
      int digits = 1;
      size_t m, q;
      const char *t = lua_tolstring(L, -1, &m);
      for (q = 0; q < m; q++) digits = digits && t[q] >= '0' && t[q] <= '9';
      k = digits && m > 0 && m < 10 ? (lua_Integer)strtol(t, NULL, 10) + 1 : 0;
      lua_pop(L, 1);
      lua_rawgeti(L, -1, k);
    } else {
      lua_rawget(L, -2);
    }
    lua_remove(L, -2);
  }
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return abort_check(c, "schema", "the schema's reference \"%s\" does not resolve",
                       n > 120 ? "(too long to show)" : s);
  }
  return OK;
}

/* ==================================================================== */
/* Patterns                                                             */
/* ==================================================================== */

/*
** "pattern" is an ECMA regular expression, searched for anywhere in the
** string (code point by code point, as with the "u" flag). It is never run
** by backtracking: the supported subset is compiled to a small program and
** run as a set of threads that all advance one character at a time (a
** Pike machine without captures), so the time is at most the string's
** length times the program's size, charged to the step budget. The subset:
** literals, ".", classes ("[a-z\d]", "[^...]"), \d \D \w \W \s \S, the
** escapes \t \n \v \f \r \0 \xHH \uHHHH (no surrogate), an escaped syntax
** character, "^" and "$" (the string's ends), groups "(...)" and "(?:...)",
** "|", and the quantifiers * + ? {n} {n,} {n,m} (n, m at most 1000; a lazy
** "?" after one changes nothing for a search). Anything else (a lookaround,
** a back reference, \b, a named group, a property escape, a flag) and a
** pattern over MAX_PATTERN bytes or compiling past MAX_PROGRAM
** instructions is not checked: it never refuses a value.
*/
#define MAX_PATTERN 1024 /* bytes of a pattern compiled */
#define MAX_NODES   1024 /* nodes of its tree */
#define MAX_PROGRAM 4096 /* instructions of its program */
#define MAX_RANGES  1024 /* ranges of all its classes */
#define MAX_CLASSES 256
#define MAX_REPEAT  1000 /* the largest count of a {n,m} */

#define MAX_GROUPS 32 /* groups nested in one another */

/* A node: a leaf, N_SEQ (its terms, linked by next, from a), N_ALT (its alternatives, likewise), N_REPEAT. */
enum node_kind { N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_BOL, N_EOL, N_SEQ, N_ALT, N_REPEAT };
enum op { OP_CHAR, OP_ANY, OP_CLASS, OP_BOL, OP_EOL, OP_SPLIT, OP_JMP, OP_MATCH };

/* The class escapes, as bits of a class: \d \D \w \W \s \S. */
#define CE_DIGIT     1u
#define CE_NOT_DIGIT 2u
#define CE_WORD      4u
#define CE_NOT_WORD  8u
#define CE_SPACE     16u
#define CE_NOT_SPACE 32u

typedef struct {
  unsigned char kind;
  int a, next;  /* the first child (or the class index), the next sibling (-1: none) */
  uint32_t cp;  /* N_CHAR */
  int min, max; /* N_REPEAT; max -1: unbounded */
} rx_node;

typedef struct {
  unsigned char op;
  int x, y; /* targets, the class index */
  uint32_t cp;
} rx_inst;

typedef struct {
  int first, count; /* its ranges */
  unsigned escapes; /* CE_* */
  int negated;
} rx_class;

/* A compiled pattern and the machine's lists; one per check, kept as a Lua userdata. */
typedef struct {
  const char *source; /* the pattern compiled last (a string the schema holds), and its length */
  size_t source_len;
  int usable; /* it compiled: 1; not supported: 0 */
  int nnodes, ninst, nranges, nclasses;
  rx_node nodes[MAX_NODES];
  rx_inst prog[MAX_PROGRAM];
  uint32_t ranges[MAX_RANGES][2];
  rx_class classes[MAX_CLASSES];
  int list[2][MAX_PROGRAM];   /* the threads now and next */
  unsigned mark[MAX_PROGRAM]; /* the step a pc was last added at, plus one */
  int stack[2 * MAX_PROGRAM + 2];
} rx_machine;

typedef struct {
  rx_machine *m;
  const unsigned char *s, *end;
  int failed; /* not supported, or over a bound */
  int groups; /* groups open */
} rx_parser;

static int rx_alt(rx_parser *p);

/* A new node of the tree, or -1 (the parser fails) when there is no room. */
static int rx_new(rx_parser *p, int kind, int a) {
  rx_node *n;
  if (p->m->nnodes >= MAX_NODES) {
    p->failed = 1;
    return -1;
  }
  n = &p->m->nodes[p->m->nnodes];
  memset(n, 0, sizeof *n);
  n->kind = (unsigned char)kind;
  n->a = a;
  n->next = -1;
  return p->m->nnodes++;
}

/* The next code point of the pattern (UTF-8), advancing; an invalid byte fails the parse. */
static uint32_t rx_next_cp(rx_parser *p) {
  int ok;
  uint32_t cp = 0;
  size_t len = mcp_utf8_unit(p->s, (size_t)(p->end - p->s), &ok, &cp);
  if (!ok) p->failed = 1;
  p->s += len;
  return cp;
}

/* n hex digits at the parser's place as a number, or -1. */
static long rx_hex(rx_parser *p, int n) {
  long v = 0;
  int i;
  if (p->end - p->s < n) return -1;
  for (i = 0; i < n; i++) {
    unsigned char c = p->s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  p->s += n;
  return v;
}

/*
** The escape after a backslash (the backslash read): a character (its
** code point, returns 1), a class escape (*escapes set, returns 2), or 0
** when it is not in the subset. in_class: inside [...], where \b is a
** backspace and '-' may be escaped.
*/
static int rx_escape(rx_parser *p, uint32_t *cp, unsigned *escapes, int in_class) {
  unsigned char c;
  long v;
  if (p->s >= p->end) return 0;
  c = *p->s++;
  switch (c) {
    case 'd': *escapes = CE_DIGIT; return 2;
    case 'D': *escapes = CE_NOT_DIGIT; return 2;
    case 'w': *escapes = CE_WORD; return 2;
    case 'W': *escapes = CE_NOT_WORD; return 2;
    case 's': *escapes = CE_SPACE; return 2;
    case 'S': *escapes = CE_NOT_SPACE; return 2;
    case 't': *cp = 9; return 1;
    case 'n': *cp = 10; return 1;
    case 'v': *cp = 11; return 1;
    case 'f': *cp = 12; return 1;
    case 'r': *cp = 13; return 1;
    case '0':
      if (p->s < p->end && *p->s >= '0' && *p->s <= '9') return 0;
      *cp = 0;
      return 1;
    case 'x':
      if ((v = rx_hex(p, 2)) < 0) return 0;
      *cp = (uint32_t)v;
      return 1;
    case 'u':
      if ((v = rx_hex(p, 4)) < 0 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
      *cp = (uint32_t)v;
      return 1;
    case 'b':
      if (!in_class) return 0;
      *cp = 8;
      return 1;
    default:
      if (strchr("^$\\.*+?()[]{}|/", c) != NULL || (in_class && c == '-')) {
        *cp = c;
        return 1;
      }
      return 0;
  }
}

/* A class "[...]", the '[' read: its node, or -1. */
static int rx_class_node(rx_parser *p) {
  rx_machine *m = p->m;
  rx_class *k;
  int idx, node;
  if (m->nclasses >= MAX_CLASSES) {
    p->failed = 1;
    return -1;
  }
  idx = m->nclasses++;
  k = &m->classes[idx];
  k->first = m->nranges;
  k->count = 0;
  k->escapes = 0;
  k->negated = 0;
  if (p->s < p->end && *p->s == '^') {
    k->negated = 1;
    p->s++;
  }
  while (!p->failed) {
    uint32_t lo, hi;
    unsigned esc = 0;
    int got;
    if (p->s >= p->end) {
      p->failed = 1;
      break;
    }
    if (*p->s == ']') {
      p->s++;
      break;
    }
    if (*p->s == '\\') {
      p->s++;
      got = rx_escape(p, &lo, &esc, 1);
      if (got == 0) p->failed = 1;
      if (got == 2) {
        k->escapes |= esc;
        if (p->s < p->end && *p->s == '-' && p->s + 1 < p->end && p->s[1] != ']') p->failed = 1;
        continue;
      }
    } else {
      lo = rx_next_cp(p);
    }
    hi = lo;
    if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
      p->s++;
      if (*p->s == '\\') {
        p->s++;
        if (rx_escape(p, &hi, &esc, 1) != 1) p->failed = 1;
      } else {
        hi = rx_next_cp(p);
      }
      if (hi < lo) p->failed = 1;
    }
    if (m->nranges >= MAX_RANGES) p->failed = 1;
    if (p->failed) break;
    m->ranges[m->nranges][0] = lo;
    m->ranges[m->nranges][1] = hi;
    m->nranges++;
    k->count++;
  }
  if (p->failed) return -1;
  node = rx_new(p, N_CLASS, idx);
  return node;
}

/* A count of {n,m} at the parser's place, or -1. */
static int rx_count(rx_parser *p) {
  int v = 0, digits = 0;
  while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
    v = v * 10 + (*p->s++ - '0');
    if (++digits > 4 || v > MAX_REPEAT) return -1;
  }
  return digits ? v : -1;
}

/* One atom and its quantifier: a node, or -1. */
static int rx_term(rx_parser *p) {
  int atom = -1, assertion = 0, min, max;
  unsigned char c = *p->s;
  if (c == '(') {
    p->s++;
    if (p->s < p->end && *p->s == '?') {
      if (p->s + 1 < p->end && p->s[1] == ':') p->s += 2;
      else p->failed = 1; /* a lookaround or a named group */
    }
    if (p->failed || ++p->groups > MAX_GROUPS) {
      p->failed = 1;
      return -1;
    }
    atom = rx_alt(p);
    p->groups--;
    if (p->failed || p->s >= p->end || *p->s != ')') {
      p->failed = 1;
      return -1;
    }
    p->s++;
  } else if (c == '[') {
    p->s++;
    atom = rx_class_node(p);
  } else if (c == '.') {
    p->s++;
    atom = rx_new(p, N_ANY, 0);
  } else if (c == '^' || c == '$') {
    p->s++;
    atom = rx_new(p, c == '^' ? N_BOL : N_EOL, 0);
    assertion = 1;
  } else if (c == '\\') {
    uint32_t cp = 0;
    unsigned esc = 0;
    int got;
    p->s++;
    got = rx_escape(p, &cp, &esc, 0);
    if (got == 0) {
      p->failed = 1;
      return -1;
    }
    if (got == 2) {
      int idx;
      if (p->m->nclasses >= MAX_CLASSES) {
        p->failed = 1;
        return -1;
      }
      idx = p->m->nclasses++;
      p->m->classes[idx].first = p->m->nranges;
      p->m->classes[idx].count = 0;
      p->m->classes[idx].escapes = esc;
      p->m->classes[idx].negated = 0;
      atom = rx_new(p, N_CLASS, idx);
    } else {
      atom = rx_new(p, N_CHAR, 0);
      if (atom >= 0) p->m->nodes[atom].cp = cp;
    }
  } else if (strchr("*+?{}]", c) != NULL) {
    p->failed = 1; /* nothing to repeat, or a stray bracket (an error with the "u" flag) */
    return -1;
  } else {
    uint32_t cp = rx_next_cp(p);
    atom = rx_new(p, N_CHAR, 0);
    if (atom >= 0) p->m->nodes[atom].cp = cp;
  }
  if (p->failed || atom < 0 || p->s >= p->end) return atom;
  c = *p->s;
  if (c == '*' || c == '+' || c == '?') {
    p->s++;
    min = c == '+' ? 1 : 0;
    max = c == '?' ? 1 : -1;
  } else if (c == '{') {
    p->s++;
    min = max = rx_count(p);
    if (min >= 0 && p->s < p->end && *p->s == ',') {
      p->s++;
      if (p->s < p->end && *p->s == '}') {
        max = -1;
      } else {
        max = rx_count(p);
        if (max < min) min = -1; /* max -1 (no count) too */
      }
    }
    if (min < 0 || p->s >= p->end || *p->s != '}') {
      p->failed = 1;
      return -1;
    }
    p->s++;
  } else {
    return atom;
  }
  if (assertion) {
    p->failed = 1;
    return -1;
  }
  if (p->s < p->end && *p->s == '?') p->s++; /* lazy: the same for a search */
  if (p->s < p->end && strchr("*+?{", *p->s) != NULL) {
    p->failed = 1;
    return -1;
  }
  {
    int r = rx_new(p, N_REPEAT, atom);
    if (r >= 0) {
      p->m->nodes[r].min = min;
      p->m->nodes[r].max = max;
    }
    return r;
  }
}

/* A sequence of terms up to '|', ')' or the end: an N_SEQ node, or -1. */
static int rx_cat(rx_parser *p) {
  int seq = rx_new(p, N_SEQ, -1), last = -1;
  while (!p->failed && p->s < p->end && *p->s != '|' && *p->s != ')') {
    int t = rx_term(p);
    if (t < 0) {
      p->failed = 1;
      return -1;
    }
    if (last < 0) p->m->nodes[seq].a = t;
    else p->m->nodes[last].next = t;
    last = t;
  }
  return p->failed ? -1 : seq;
}

/* Alternatives: an N_ALT node (one alternative: its N_SEQ), or -1. */
static int rx_alt(rx_parser *p) {
  int first = rx_cat(p), alt, last;
  if (p->failed || p->s >= p->end || *p->s != '|') return p->failed ? -1 : first;
  alt = rx_new(p, N_ALT, first);
  last = first;
  while (!p->failed && p->s < p->end && *p->s == '|') {
    int next;
    p->s++;
    next = rx_cat(p);
    if (p->failed) return -1;
    p->m->nodes[last].next = next;
    last = next;
  }
  return p->failed ? -1 : alt;
}

/* Append an instruction; its index, or -1 when the program is full. */
static int rx_emit1(rx_machine *m, int op, int x, int y) {
  if (m->ninst >= MAX_PROGRAM) return -1;
  m->prog[m->ninst].op = (unsigned char)op;
  m->prog[m->ninst].x = x;
  m->prog[m->ninst].y = y;
  m->prog[m->ninst].cp = 0;
  return m->ninst++;
}

/*
** The program of node n appended (a repetition written out min times, then
** max - min optional copies or a loop). 0, or -1 when it does not fit.
** Sequences and alternatives are walked as lists; the recursion goes one
** level per group or quantifier, at most MAX_GROUPS groups deep.
*/
static int rx_emit(rx_machine *m, int n) {
  rx_node *x = &m->nodes[n];
  int i, at, split;
  switch (x->kind) {
    case N_EMPTY: return 0;
    case N_CHAR:
      if ((at = rx_emit1(m, OP_CHAR, 0, 0)) < 0) return -1;
      m->prog[at].cp = x->cp;
      return 0;
    case N_ANY: return rx_emit1(m, OP_ANY, 0, 0) < 0 ? -1 : 0;
    case N_CLASS: return rx_emit1(m, OP_CLASS, x->a, 0) < 0 ? -1 : 0;
    case N_BOL: return rx_emit1(m, OP_BOL, 0, 0) < 0 ? -1 : 0;
    case N_EOL: return rx_emit1(m, OP_EOL, 0, 0) < 0 ? -1 : 0;
    case N_SEQ:
      for (i = x->a; i >= 0; i = m->nodes[i].next) {
        if (rx_emit(m, i) < 0) return -1;
      }
      return 0;
    case N_ALT: {
      int pending = -1; /* the jumps to the end, chained through their targets */
      for (i = x->a; i >= 0; i = m->nodes[i].next) {
        int last = m->nodes[i].next < 0, jmp;
        split = -1;
        if (!last) {
          if ((split = rx_emit1(m, OP_SPLIT, 0, 0)) < 0) return -1;
          m->prog[split].x = m->ninst;
        }
        if (rx_emit(m, i) < 0) return -1;
        if (!last) {
          if ((jmp = rx_emit1(m, OP_JMP, pending, 0)) < 0) return -1;
          pending = jmp;
          m->prog[split].y = m->ninst;
        }
      }
      while (pending >= 0) {
        int before = m->prog[pending].x;
        m->prog[pending].x = m->ninst;
        pending = before;
      }
      return 0;
    }
    case N_REPEAT: {
      int min = m->nodes[n].min, max = m->nodes[n].max, child = m->nodes[n].a;
      for (i = 0; i < min; i++) {
        if (rx_emit(m, child) < 0) return -1;
      }
      if (max < 0) {
        if ((split = rx_emit1(m, OP_SPLIT, 0, 0)) < 0) return -1;
        m->prog[split].x = m->ninst;
        if (rx_emit(m, child) < 0 || rx_emit1(m, OP_JMP, split, 0) < 0) return -1;
        m->prog[split].y = m->ninst;
        return 0;
      }
      for (i = min; i < max; i++) {
        if ((split = rx_emit1(m, OP_SPLIT, 0, 0)) < 0) return -1;
        m->prog[split].x = m->ninst;
        if (rx_emit(m, child) < 0) return -1;
        m->prog[split].y =
          m->ninst; /* past this copy; the later copies are inside: x?(x?(...)) is x{0,k} too */
      }
      return 0;
    }
    default: return -1;
  }
}

/* Compile the pattern s (n bytes) into m: 1, or 0 when it is outside the subset or a bound. */
static int rx_compile(rx_machine *m, const char *s, size_t n) {
  rx_parser p;
  int root;
  m->nnodes = m->ninst = m->nranges = m->nclasses = 0;
  if (n > MAX_PATTERN) return 0;
  p.m = m;
  p.s = (const unsigned char *)s;
  p.end = p.s + n;
  p.failed = 0;
  p.groups = 0;
  root = rx_alt(&p);
  if (p.failed || root < 0 || p.s != p.end) return 0;
  if (rx_emit(m, root) < 0 || rx_emit1(m, OP_MATCH, 0, 0) < 0) return 0;
  return 1;
}

/* 1 when cp is in the set of the class escape e (one of CE_DIGIT, CE_WORD, CE_SPACE). */
static int rx_in_escape(unsigned e, uint32_t cp) {
  if (e == CE_DIGIT) return cp >= '0' && cp <= '9';
  if (e == CE_WORD)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  return cp == ' ' || (cp >= 9 && cp <= 13) || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/* 1 when class k matches cp. */
static int rx_class_has(const rx_machine *m, const rx_class *k, uint32_t cp) {
  int i, in = 0;
  for (i = 0; i < k->count && !in; i++) {
    in = cp >= m->ranges[k->first + i][0] && cp <= m->ranges[k->first + i][1];
  }
  if (!in && (k->escapes & CE_DIGIT)) in = rx_in_escape(CE_DIGIT, cp);
  if (!in && (k->escapes & CE_NOT_DIGIT)) in = !rx_in_escape(CE_DIGIT, cp);
  if (!in && (k->escapes & CE_WORD)) in = rx_in_escape(CE_WORD, cp);
  if (!in && (k->escapes & CE_NOT_WORD)) in = !rx_in_escape(CE_WORD, cp);
  if (!in && (k->escapes & CE_SPACE)) in = rx_in_escape(CE_SPACE, cp);
  if (!in && (k->escapes & CE_NOT_SPACE)) in = !rx_in_escape(CE_SPACE, cp);
  return k->negated ? !in : in;
}

/*
** Add the thread at pc to list l for the step `gen`, following jumps,
** splits and the assertions at position pos (at_start, at_end) without a
** recursion: each pc once per step. Returns 1 when MATCH is reached.
*/
static int rx_add(rx_machine *m, int l, int *count, int pc, unsigned gen, int at_start, int at_end) {
  int sp = 0;
  m->stack[sp++] = pc;
  while (sp > 0) {
    rx_inst *in;
    pc = m->stack[--sp];
    if (m->mark[pc] == gen) continue;
    m->mark[pc] = gen;
    in = &m->prog[pc];
    switch (in->op) {
      case OP_JMP: m->stack[sp++] = in->x; break;
      case OP_SPLIT:
        m->stack[sp++] = in->y;
        m->stack[sp++] = in->x;
        break;
      case OP_BOL:
        if (at_start) m->stack[sp++] = pc + 1;
        break;
      case OP_EOL:
        if (at_end) m->stack[sp++] = pc + 1;
        break;
      case OP_MATCH: return 1;
      default: m->list[l][(*count)++] = pc; break;
    }
  }
  return 0;
}

/*
** Search the string s (n bytes) for the compiled pattern: OK (found), FAIL,
** or ABORT (the step budget, charged the threads of each character).
*/
static enum outcome rx_search(checker *c, rx_machine *m, const unsigned char *s, size_t n) {
  size_t i = 0;
  int now = 0, count = 0;
  unsigned gen = 1;
  memset(m->mark, 0, sizeof m->mark[0] * (size_t)m->ninst);
  if (rx_add(m, now, &count, 0, gen, 1, n == 0)) return OK;
  while (i < n) {
    int ok, k, next = 1 - now, ncount = 0;
    uint32_t cp;
    size_t len = mcp_utf8_unit(s + i, n - i, &ok, &cp);
    enum outcome r = spend(c, 1 + count / 4);
    if (r != OK) return r;
    if (!ok) cp = 0xFFFD;
    i += len;
    gen++;
    for (k = 0; k < count; k++) {
      rx_inst *in = &m->prog[m->list[now][k]];
      int hit = 0;
      switch (in->op) {
        case OP_CHAR: hit = in->cp == cp; break;
        case OP_ANY: hit = cp != '\n' && cp != '\r' && cp != 0x2028 && cp != 0x2029; break;
        case OP_CLASS: hit = rx_class_has(m, &m->classes[in->x], cp); break;
        default: break;
      }
      if (hit && rx_add(m, next, &ncount, m->list[now][k] + 1, gen, 0, i == n)) return OK;
    }
    if (rx_add(m, next, &ncount, 0, gen, 0, i == n)) return OK; /* a match may start at any character */
    now = next;
    count = ncount;
  }
  return FAIL;
}

/*
** The string at v against "pattern" at p: searched when the pattern is in
** the subset (compiled once per check for the same pattern), else not
** checked. The machine lives in a userdata at c->machine, made on first use.
*/
static enum outcome check_pattern(checker *c, int v, int p) {
  lua_State *L = c->L;
  rx_machine *m;
  size_t plen, n;
  const char *pattern, *s;
  enum outcome r;
  if (lua_type(L, p) != LUA_TSTRING) return OK;
  pattern = lua_tolstring(L, p, &plen);
  if (c->machine == 0) {
    m = (rx_machine *)lua_newuserdatauv(L, sizeof *m, 0);
    m->source = NULL;
    lua_replace(L, c->machine_slot);
    c->machine = 1;
  }
  m = (rx_machine *)lua_touserdata(L, c->machine_slot);
  if (m->source != pattern || m->source_len != plen) {
    m->source = pattern; /* the schema's string: alive and unchanged for the whole check */
    m->source_len = plen;
    m->usable = rx_compile(m, pattern, plen);
  }
  if (!m->usable) return OK;
  s = lua_tolstring(L, v, &n);
  r = rx_search(c, m, (const unsigned char *)s, n);
  if (r == FAIL)
    return fail(c, "the string does not match the pattern %s", plen > 120 ? "(too long to show)" : pattern);
  return r;
}

/* ==================================================================== */
/* The check                                                            */
/* ==================================================================== */

static enum outcome check(checker *c, int v, int s);

/*
** Check the value at v against the schema at s with the path one step
** longer (key: a member name, NULL for element index), then step back.
*/
static enum outcome check_at(checker *c, int v, int s, const char *key, size_t len, lua_Integer index) {
  enum outcome r;
  c->path[c->npath].key = key;
  c->path[c->npath].len = len;
  c->path[c->npath].index = index;
  c->npath++;
  r = check(c, v, s);
  c->npath--;
  return r;
}

/*
** A number failure: the value at v and the bound at m written as Lua
** writes them (luaL_tolstring pushes copies: lua_tostring would turn the
** value itself into a string), words between them.
*/
static enum outcome number_fail(checker *c, int v, const char *words, int m) {
  lua_State *L = c->L;
  enum outcome r;
  luaL_checkstack(L, 4, "output validation");
  luaL_tolstring(L, v, NULL);
  luaL_tolstring(L, m, NULL);
  r = fail(c, "%s is %s %s", lua_tostring(L, -2), words, lua_tostring(L, -1));
  lua_pop(L, 2);
  return r;
}

/* 1 when kw[w] is present and the boolean true (the older exclusive form). */
static int flag(lua_State *L, const int *kw, int w) {
  return kw[w] != 0 && lua_type(L, kw[w]) == LUA_TBOOLEAN && lua_toboolean(L, kw[w]);
}

/* The number at v against the bounds among kw[] (stack indexes, 0: absent). */
static enum outcome check_number(checker *c, int v, const int *kw) {
  lua_State *L = c->L;
  int m;
  if ((m = kw[KW_MINIMUM]) != 0 && lua_type(L, m) == LUA_TNUMBER) {
    int excl = flag(L, kw, KW_EXCLUSIVE_MINIMUM);
    if (excl ? !lua_compare(L, m, v, LUA_OPLT) : !lua_compare(L, m, v, LUA_OPLE))
      return number_fail(c, v, excl ? "not above the exclusive minimum" : "below the minimum", m);
  }
  if ((m = kw[KW_MAXIMUM]) != 0 && lua_type(L, m) == LUA_TNUMBER) {
    int excl = flag(L, kw, KW_EXCLUSIVE_MAXIMUM);
    if (excl ? !lua_compare(L, v, m, LUA_OPLT) : !lua_compare(L, v, m, LUA_OPLE))
      return number_fail(c, v, excl ? "not below the exclusive maximum" : "above the maximum", m);
  }
  if ((m = kw[KW_EXCLUSIVE_MINIMUM]) != 0 && lua_type(L, m) == LUA_TNUMBER && !lua_compare(L, m, v, LUA_OPLT))
    return number_fail(c, v, "not above the exclusive minimum", m);
  if ((m = kw[KW_EXCLUSIVE_MAXIMUM]) != 0 && lua_type(L, m) == LUA_TNUMBER && !lua_compare(L, v, m, LUA_OPLT))
    return number_fail(c, v, "not below the exclusive maximum", m);
  return OK;
}

/* The string at v against minLength and maxLength, counted in characters, then pattern. */
static enum outcome check_string(checker *c, int v, const int *kw) {
  lua_State *L = c->L;
  lua_Integer lo = kw[KW_MIN_LENGTH] ? count_of(L, kw[KW_MIN_LENGTH]) : -1;
  lua_Integer hi = kw[KW_MAX_LENGTH] ? count_of(L, kw[KW_MAX_LENGTH]) : -1;
  size_t n, i = 0;
  lua_Integer chars = 0;
  const unsigned char *s;
  enum outcome r;
  if (lo < 0 && hi < 0) return kw[KW_PATTERN] ? check_pattern(c, v, kw[KW_PATTERN]) : OK;
  s = (const unsigned char *)lua_tolstring(L, v, &n);
  if ((r = spend(c, (long)(n / STRING_STEP_BYTES))) != OK) return r;
  while (i < n) {
    int ok;
    uint32_t cp;
    i += mcp_utf8_unit(s + i, n - i, &ok, &cp);
    chars++;
  }
  if (lo >= 0 && chars < lo)
    return fail(c, "the string is %I characters long, under the minLength %I", (LUAI_UACINT)chars,
                (LUAI_UACINT)lo);
  if (hi >= 0 && chars > hi)
    return fail(c, "the string is %I characters long, over the maxLength %I", (LUAI_UACINT)chars,
                (LUAI_UACINT)hi);
  return kw[KW_PATTERN] ? check_pattern(c, v, kw[KW_PATTERN]) : OK;
}

/* 1 when the schema at s is one a list keyword may hold: an object or a boolean. */
static int is_schema(lua_State *L, int s) {
  return lua_type(L, s) == LUA_TBOOLEAN ||
         (lua_type(L, s) == LUA_TTABLE && !mcp_json_is_null(L, s) && !mcp_json_is_array(L, s));
}

/* 1 when the value at idx is a non-empty list (array-marked, or a sequence). */
static int is_list(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TTABLE && kind_of(L, idx) == V_ARRAY && lua_rawlen(L, idx) > 0;
}

/* The array at v against items, prefixItems, additionalItems, minItems, maxItems. */
static enum outcome check_array(checker *c, int v, const int *kw) {
  lua_State *L = c->L;
  lua_Integer n = (lua_Integer)lua_rawlen(L, v), i, lo, hi, prefix = 0;
  int items = kw[KW_ITEMS], rest = 0, tuple = 0;
  enum outcome r = OK;
  lo = kw[KW_MIN_ITEMS] ? count_of(L, kw[KW_MIN_ITEMS]) : -1;
  hi = kw[KW_MAX_ITEMS] ? count_of(L, kw[KW_MAX_ITEMS]) : -1;
  if (lo >= 0 && n < lo)
    return fail(c, "the array has %I items, under the minItems %I", (LUAI_UACINT)n, (LUAI_UACINT)lo);
  if (hi >= 0 && n > hi)
    return fail(c, "the array has %I items, over the maxItems %I", (LUAI_UACINT)n, (LUAI_UACINT)hi);
  if (kw[KW_PREFIX_ITEMS] && is_list(L, kw[KW_PREFIX_ITEMS])) {
    tuple = kw[KW_PREFIX_ITEMS];
    if (items && is_schema(L, items)) rest = items;
  } else if (items && is_list(L, items)) { /* the older tuple form */
    tuple = items;
    if (kw[KW_ADDITIONAL_ITEMS] && is_schema(L, kw[KW_ADDITIONAL_ITEMS])) rest = kw[KW_ADDITIONAL_ITEMS];
  } else if (items && is_schema(L, items)) {
    rest = items;
  }
  if (tuple) prefix = (lua_Integer)lua_rawlen(L, tuple);
  luaL_checkstack(L, 4, "output validation");
  for (i = 1; i <= n && r == OK; i++) {
    int sub;
    if (i <= prefix) {
      lua_rawgeti(L, tuple, i);
    } else if (rest) {
      lua_pushvalue(L, rest);
    } else {
      break;
    }
    sub = lua_gettop(L);
    lua_rawgeti(L, v, i);
    if ((r = spend(c, 1)) == OK) r = check_at(c, sub + 1, sub, NULL, 0, i - 1);
    lua_pop(L, 2);
  }
  return r;
}

/* The object at v against properties, required, additionalProperties. */
static enum outcome check_object(checker *c, int v, const int *kw) {
  lua_State *L = c->L;
  int props = kw[KW_PROPERTIES], extra = kw[KW_ADDITIONAL], req = kw[KW_REQUIRED];
  enum outcome r = OK;
  int base;
  if (props && (lua_type(L, props) != LUA_TTABLE || kind_of(L, props) != V_OBJECT)) props = 0;
  if (extra && (kw[KW_PATTERN_PROPERTIES] || !is_schema(L, extra))) extra = 0;
  luaL_checkstack(L, 6, "output validation");
  if (req && lua_type(L, req) == LUA_TTABLE && kind_of(L, req) == V_ARRAY) {
    lua_Integer i, n = (lua_Integer)lua_rawlen(L, req);
    for (i = 1; i <= n && r == OK; i++) {
      if (lua_rawgeti(L, req, i) == LUA_TSTRING) {
        lua_pushvalue(L, -1);
        if (lua_rawget(L, v) == LUA_TNIL) {
          size_t len;
          const char *name = lua_tolstring(L, -2, &len);
          r = fail(c, "the required property \"%s\" is missing",
                   len > 120 ? "(a name too long to show)" : name);
        }
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      if (r == OK) r = spend(c, 1);
    }
  }
  if (r != OK || (!props && !extra)) return r;
  base = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, v) != 0) {
    int sub = 0, value = lua_gettop(L), key = value - 1;
    size_t len;
    const char *name;
    if ((r = spend(c, 1)) != OK) break;
    if (lua_type(L, key) != LUA_TSTRING) {
      lua_pop(L, 1);
      continue;
    }
    name = lua_tolstring(L, key, &len);
    if (props) {
      lua_pushvalue(L, key);
      if (lua_rawget(L, props) != LUA_TNIL) sub = lua_gettop(L);
      else lua_pop(L, 1);
    }
    if (!sub && extra) {
      lua_pushvalue(L, extra);
      sub = lua_gettop(L);
      if (lua_isboolean(L, sub) && !lua_toboolean(L, sub)) {
        c->path[c->npath].key = name;
        c->path[c->npath].len = len;
        c->npath++;
        r = fail(c, "the property is not allowed (additionalProperties is false)");
        c->npath--;
        break;
      }
    }
    if (sub) r = check_at(c, value, sub, name, len, 0);
    lua_settop(L, key);
    if (r != OK) break;
  }
  lua_settop(L, base); /* a loop left early leaves its key */
  return r;
}

/* The kinds the "type" name s stands for, as a bit set over enum vkind; 0 for a name it does not know. */
static unsigned type_bits(lua_State *L, int idx) {
  static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
  size_t k;
  const char *s;
  if (lua_type(L, idx) != LUA_TSTRING) return 0;
  s = lua_tostring(L, idx);
  for (k = 0; k < sizeof names / sizeof names[0]; k++) {
    if (strcmp(s, names[k]) == 0) {
      if (k == V_REAL) return (1u << V_INTEGER) | (1u << V_REAL); /* "number" */
      return 1u << k;
    }
  }
  return 0;
}

/* The value at v (of kind k) against "type" at t: a name or a non-empty list of names (one it does not know: not checked). */
static enum outcome check_type(checker *c, int v, enum vkind k, int t) {
  lua_State *L = c->L;
  unsigned bits = 0;
  int known = 0;
  if (lua_type(L, t) == LUA_TSTRING) {
    bits = type_bits(L, t);
    known = bits != 0;
  } else if (lua_type(L, t) == LUA_TTABLE && kind_of(L, t) == V_ARRAY) {
    lua_Integer i, n = (lua_Integer)lua_rawlen(L, t);
    known = n > 0; /* an empty list names no type: not checked */
    for (i = 1; i <= n; i++) {
      unsigned b;
      lua_rawgeti(L, t, i);
      b = type_bits(L, -1);
      lua_pop(L, 1);
      if (b == 0) known = 0;
      bits |= b;
    }
  }
  if (!known) return OK;
  if (bits & (1u << k)) return OK;
  if (k == V_REAL && (bits & (1u << V_INTEGER)) && is_whole(L, v)) return OK;
  if (lua_type(L, t) == LUA_TSTRING)
    return fail(c, "expected %s, got %s", lua_tostring(L, t),
                k == V_REAL && (bits & (1u << V_INTEGER)) ? "a number with a fraction" : kind_names[k]);
  return fail(c, "its type, %s, is none of those the schema allows", kind_names[k]);
}

/* The value at v against the list of schemas at l under anyOf, oneOf or allOf (word says which). */
static enum outcome check_list(checker *c, int v, int l, int word) {
  lua_State *L = c->L;
  lua_Integer i, n = (lua_Integer)lua_rawlen(L, l), passed = 0;
  enum outcome r = OK;
  if (word != KW_ALL_OF) c->quiet++;
  luaL_checkstack(L, 4, "output validation");
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, l, i);
    r = check(c, v, lua_gettop(L));
    lua_pop(L, 1);
    if (r == ABORT) return ABORT; /* the abort left quiet at 0: it is the answer */
    if (word == KW_ALL_OF && r == FAIL) return FAIL;
    if (r == OK) passed++;
    if (word == KW_ANY_OF && passed > 0) break;
    if (word == KW_ONE_OF && passed > 1) break;
  }
  if (word == KW_ALL_OF) return OK;
  c->quiet--;
  if (word == KW_ANY_OF && passed == 0)
    return fail(c, "it matches none of the %I schemas of anyOf", (LUAI_UACINT)n);
  if (word == KW_ONE_OF && passed != 1) {
    if (passed == 0) return fail(c, "it matches none of the %I schemas of oneOf", (LUAI_UACINT)n);
    return fail(c, "it matches more than one of the schemas of oneOf (exactly one must match)");
  }
  return OK;
}

/*
** Check the value at v against the schema at s: one level of depth, a
** step, the schema's members read once (each a step), then the keywords
** in a fixed order: $ref, type, const, enum, the kind's own, the
** combinators.
*/
static enum outcome check(checker *c, int v, int s) {
  lua_State *L = c->L;
  int kw[KW_COUNT], top = lua_gettop(L), i;
  enum vkind k;
  enum outcome r;
  if (lua_type(L, s) == LUA_TBOOLEAN)
    return lua_toboolean(L, s) ? OK : fail(c, "the schema allows no value here (false)");
  if (lua_type(L, s) != LUA_TTABLE || mcp_json_is_null(L, s) || mcp_json_is_array(L, s)) return OK;
  if (c->depth >= MAX_DEPTH)
    return abort_check(c, "depth",
                       "checking it goes deeper than %d levels (a schema that refers to itself, "
                       "or a value nested too deep)",
                       MAX_DEPTH);
  if ((r = spend(c, 1)) != OK) return r;
  c->depth++;
  luaL_checkstack(L, 2 * KW_COUNT + 8, "output validation"); /* a key and a value kept per keyword */
  mcp_json_lazy_settle(L, s);
  memset(kw, 0, sizeof kw);
  lua_pushnil(L);
  while (lua_next(L, s) != 0) {
    int w = -1;
    if ((r = spend(c, 1)) != OK) {
      lua_settop(L, top);
      c->depth--;
      return r;
    }
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t n;
      const char *key = lua_tolstring(L, -2, &n);
      if (n > 0) w = keyword_index(key, n);
    }
    if (w >= 0 && kw[w] == 0) {
      lua_pushvalue(L, -2); /* the key stays on top for lua_next; the value below it, kept */
      kw[w] = lua_gettop(L) - 1;
    } else {
      lua_pop(L, 1);
    }
  }
  k = kind_of(L, v);
  r = OK;
  if (kw[KW_REF]) {
    r = push_reference(c, kw[KW_REF]);
    if (r == OK) r = check(c, v, lua_gettop(L));
  }
  if (r == OK && kw[KW_TYPE]) r = check_type(c, v, k, kw[KW_TYPE]);
  if (r == OK && kw[KW_CONST]) {
    r = equal(c, v, kw[KW_CONST], 1);
    if (r == FAIL) r = fail(c, "it is not the value the schema's const requires");
  }
  if (r == OK && kw[KW_ENUM] && lua_type(L, kw[KW_ENUM]) == LUA_TTABLE &&
      kind_of(L, kw[KW_ENUM]) == V_ARRAY) {
    lua_Integer j, n = (lua_Integer)lua_rawlen(L, kw[KW_ENUM]);
    r = FAIL;
    for (j = 1; j <= n && r == FAIL; j++) {
      lua_rawgeti(L, kw[KW_ENUM], j);
      r = equal(c, v, lua_gettop(L), 1);
      lua_pop(L, 1);
    }
    if (r == FAIL) r = fail(c, "it is none of the %I values the schema's enum allows", (LUAI_UACINT)n);
  }
  if (r == OK && (k == V_INTEGER || k == V_REAL)) r = check_number(c, v, kw);
  if (r == OK && k == V_STRING) r = check_string(c, v, kw);
  if (r == OK && k == V_ARRAY) r = check_array(c, v, kw);
  if (r == OK && k == V_OBJECT) r = check_object(c, v, kw);
  for (i = KW_ANY_OF; i <= KW_ALL_OF && r == OK; i++) {
    if (kw[i] && is_list(L, kw[i])) r = check_list(c, v, kw[i], i);
  }
  if (r == OK && kw[KW_NOT] && is_schema(L, kw[KW_NOT])) {
    c->quiet++;
    r = check(c, v, kw[KW_NOT]);
    if (r != ABORT) {
      c->quiet--;
      r = r == OK ? fail(c, "it matches the schema under \"not\"") : OK;
    }
  }
  lua_settop(L, top);
  c->depth--;
  return r;
}

/* ==================================================================== */
/* core.validate_output                                                 */
/* ==================================================================== */

/*
** validate_output(schema, value) -> true | nil, path, reason[, unchecked].
** schema: a schema table (lazy or not) or a boolean (a string is no
** schema: JSON text is decoded by the caller, so a server's string where a
** schema belongs is never read as one); value: the decoded structuredContent. unchecked, when present, says the
** check could not be finished ("depth", "steps", "schema") and path and
** reason say where and why; without it the value does not match.
*/
static int l_validate_output(lua_State *L) {
  checker c;
  enum outcome r;
  luaL_checkany(L, 1);
  luaL_checkany(L, 2);
  lua_settop(L, 2);
  memset(&c, 0, sizeof c);
  c.L = L;
  c.root = 1;
  lua_pushnil(L);
  c.out_path = lua_gettop(L);
  lua_pushnil(L);
  c.out_reason = lua_gettop(L);
  lua_pushnil(L);
  c.machine_slot = lua_gettop(L);
  if (lua_type(L, 1) != LUA_TBOOLEAN &&
      (lua_type(L, 1) != LUA_TTABLE || mcp_json_is_null(L, 1) || mcp_json_is_array(L, 1))) {
    lua_pushnil(L);
    lua_pushliteral(L, "$");
    lua_pushliteral(L, "the output schema is not a JSON object or a boolean");
    lua_pushliteral(L, "schema");
    return 4;
  }
  r = check(&c, 2, 1);
  if (r == OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushvalue(L, c.out_path);
  lua_pushvalue(L, c.out_reason);
  if (r == FAIL) return 3;
  lua_pushstring(L, c.why);
  return 4;
}

/* Adds validate_output. */
void mcp_register_validate(lua_State *L) {
  lua_pushcfunction(L, l_validate_output);
  lua_setfield(L, -2, "validate_output");
}
