/*
** pg.c: a small libpq binding for the shared store on PostgreSQL.
**
**   db.pg_connect(conninfo [, { connect_timeout_ms = 5000, password = secret }]) -> db | nil, message, code
**   db:exec(sql)                 -> true | nil, message, code   (a script: no parameters)
**   db:execute(sql [, params])   -> changes | nil, message, code
**   db:query(sql [, params])     -> { row, ... } | nil, message, code
**   db:changes(), db:timeout(ms), db:alive(), db:in_transaction(), db:close()
**
** Debian's Lua bindings for PostgreSQL either have no bound parameters
** (LuaSQL) or lose 64-bit integers and text after a NUL (LuaDBI), and neither
** bounds a wait. Here every value travels as a bound parameter ($1, $2, ...):
** an integer as an exact int8, a number as float8, a string as text of its
** exact length (a string holding a NUL byte cannot be PostgreSQL text and is
** refused with code "22021" instead of being cut), {blob = s} as bytea in
** binary form. Results come back typed by column: int2/int4/int8 as Lua
** integers (exact), float and numeric as numbers, bool as 1/0, bytea decoded,
** everything else as a string of its exact length.
**
** Every wait is bounded: the connection is made with PQconnectStartParams and
** polled against a deadline; each statement is sent in non-blocking mode and
** its result awaited with poll() against db:timeout(ms) (default 5000). When
** the deadline passes the statement is cancelled (PQcancel) and given a grace
** to end (default 1000 ms), the cancel repeated every 100 ms of it; a server
** that does not answer even then loses the connection. The grace is one for
** the whole statement (every result of it is read within it), and each
** cancel the server took is given 100 ms to land, even past the grace's end.
**
** Failures of the database return nil, message, code: code is the SQLSTATE
** the server sent ("23505", "40001", "57014" when a statement ran out of
** time), "08001" for a connection that could not be made and "08006" for one
** that was lost. Messages carry the server's primary message only (never the
** DETAIL lines, which quote row values) and never the connection string,
** which may hold a password. Misuse (wrong argument types, a closed handle)
** raises.
*/
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "db.h"
#include "monotonic.h"

#define PG_MT "mcpclient.pg_db"

/* Type oids from the server's catalogue (stable across versions). */
#define OID_BOOL    16
#define OID_BYTEA   17
#define OID_INT8    20
#define OID_INT2    21
#define OID_INT4    23
#define OID_FLOAT4  700
#define OID_FLOAT8  701
#define OID_NUMERIC 1700

/* How long a cancelled statement may take to end before the connection is dropped (default). */
#define CANCEL_GRACE_MS  1000
/* How often the cancel is sent again during that grace (one may reach the server too early). */
#define CANCEL_REPEAT_MS 100

typedef struct Pg {
  PGconn *conn;        /* NULL after close, or once given up (then not closed) */
  int closed;          /* db:close() ran: further use is misuse */
  int timeout_ms;      /* the bound of every statement */
  int grace_ms;        /* and how long its cancel may take to land */
  lua_Integer changes; /* rows changed by the last execute */
} Pg;

/*
** The time one statement has, kept across every result it returns: its
** bound, then once cancelled the grace, the cancel repeated within it.
*/
typedef struct Bound {
  int64_t wake_ns;      /* when to look again: the bound, then the next repeat of the cancel */
  int64_t grace_end_ns; /* when the grace ends (set by the first cancel) */
  int grace_ms;
  int cancelled; /* a cancel was sent */
} Bound;

enum { RUN_SCRIPT, RUN_EXECUTE, RUN_QUERY };

/* ==================================================================== */
/* Failures                                                             */
/* ==================================================================== */

/* Push the failure triple nil, message, code. */
static int push_failure(lua_State *L, const char *message, const char *code) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s (%s)", message, code);
  lua_pushstring(L, code);
  return 3;
}

/*
** The failure for a server result: its primary message (first line only)
** and its SQLSTATE. The DETAIL and CONTEXT fields are left out: they quote
** the values of the rows involved.
*/
static int push_result_failure(lua_State *L, const PGresult *res) {
  const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
  const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  size_t len;
  if (primary == NULL) primary = "the database reported an error";
  len = strcspn(primary, "\n");
  lua_pushnil(L);
  lua_pushlstring(L, primary, len);
  lua_pushfstring(L, "%s (%s)", lua_tostring(L, -1), state ? state : "XX000");
  lua_remove(L, -2);
  lua_pushstring(L, state ? state : "XX000");
  return 3;
}

/*
** The failure for a connection-level problem: libpq's message up to its
** first line break (it names host, port and user, never the password).
*/
static int push_conn_failure(lua_State *L, PGconn *conn, const char *fallback, const char *code) {
  const char *msg = conn ? PQerrorMessage(conn) : NULL;
  if (msg == NULL || *msg == '\0') msg = fallback;
  lua_pushnil(L);
  lua_pushlstring(L, msg, strcspn(msg, "\n"));
  lua_pushfstring(L, "%s (%s)", lua_tostring(L, -1), code);
  lua_remove(L, -2);
  lua_pushstring(L, code);
  return 3;
}

/* ==================================================================== */
/* Waiting on the socket against a deadline                             */
/* ==================================================================== */

/* Milliseconds left until deadline_ns (0 when it has passed). */
static int ms_left(int64_t deadline_ns) {
  int64_t left = deadline_ns - mcp_monotonic_ns();
  if (left <= 0) return 0;
  left = (left + 999999) / 1000000;
  return left > INT_MAX ? INT_MAX : (int)left;
}

/*
** Wait until the socket is ready for `events` or the deadline passes.
** Returns 1 ready, 0 timed out, -1 the socket failed.
*/
static int wait_socket(PGconn *conn, short events, int64_t deadline_ns) {
  struct pollfd pfd;
  int rc, left;
  pfd.fd = PQsocket(conn);
  pfd.events = events;
  if (pfd.fd < 0) return -1;
  for (;;) {
    left = ms_left(deadline_ns);
    pfd.revents = 0;
    rc = poll(&pfd, 1, left);
    if (rc > 0) return 1;
    if (rc == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

/* ==================================================================== */
/* Handles                                                              */
/* ==================================================================== */

/* The db at idx, raising when it is closed: using a closed handle is misuse. */
static Pg *check_db(lua_State *L, int idx) {
  Pg *p = (Pg *)luaL_checkudata(L, idx, PG_MT);
  if (p->closed) luaL_error(L, "attempt to use a closed database");
  return p;
}

/* db:close(): end the connection. Idempotent; also __gc and __close. */
static int l_db_close(lua_State *L) {
  Pg *p = (Pg *)luaL_checkudata(L, 1, PG_MT);
  p->closed = 1;
  if (p->conn != NULL) {
    PQfinish(p->conn);
    p->conn = NULL;
  }
  return 0;
}

/* __tostring: type and state, never the connection string (it may hold a password). */
static int l_db_tostring(lua_State *L) {
  Pg *p = (Pg *)luaL_checkudata(L, 1, PG_MT);
  lua_pushfstring(L, "postgresql db (%s)",
                  p->closed                                               ? "closed"
                  : p->conn != NULL && PQstatus(p->conn) == CONNECTION_OK ? "open"
                                                                          : "lost");
  return 1;
}

/*
** Drive PQconnectPoll until the connection is made, fails, or the deadline
** passes. Returns 1 made, 0 timed out, -1 failed.
*/
static int poll_connect(PGconn *conn, int64_t deadline_ns) {
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  for (;;) {
    int ready;
    if (st == PGRES_POLLING_OK) return 1;
    if (st == PGRES_POLLING_FAILED) return -1;
    ready = wait_socket(conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline_ns);
    if (ready == 0) return 0;
    if (ready < 0) return -1;
    st = PQconnectPoll(conn);
  }
}

/*
** The notice processor: notices are dropped. libpq's default prints them
** to stderr, and a terminal never gets text the database wrote unless it
** went through the text rule; nothing the store does depends on a notice.
*/
static void drop_notice(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/*
** Read the options table at idx: connect_timeout_ms (default 5000) and
** password (a secret the caller resolved from a reference; it goes to libpq
** as its own keyword, never into a connection string). Unknown keys raise.
*/
static int connect_options(lua_State *L, int idx, const char **password) {
  int timeout = 5000;
  *password = NULL;
  if (lua_isnoneornil(L, idx)) return timeout;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
    if (strcmp(key, "connect_timeout_ms") == 0) {
      if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) <= 0 || lua_tointeger(L, -1) > INT_MAX)
        luaL_error(L, "pg_connect: connect_timeout_ms must be a positive integer");
      timeout = (int)lua_tointeger(L, -1);
    } else if (strcmp(key, "password") == 0) {
      size_t len;
      if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "pg_connect: password must be a string");
      *password = lua_tolstring(L, -1, &len); /* kept alive by the options table */
      if (strlen(*password) != len) luaL_error(L, "pg_connect: password contains a NUL byte");
    } else {
      luaL_error(L, "pg_connect: unknown option \"%s\"", key);
    }
    lua_pop(L, 1);
  }
  return timeout;
}

/*
** db.pg_connect(conninfo [, options]): a URI ("postgresql://...") or a
** key=value string; the empty string takes everything from the PG*
** environment. The string is checked with PQconninfoParse first so that a
** malformed one is reported without quoting it back. The userdata exists
** before the connection, so a raise in between leaks nothing.
*/
static int l_connect(lua_State *L) {
  size_t len;
  const char *conninfo = luaL_checklstring(L, 1, &len);
  const char *password;
  int timeout = connect_options(L, 2, &password), made;
  /* later keywords override what the connection string says */
  const char *keys[] = {"dbname", "client_encoding", password ? "password" : NULL, NULL};
  const char *values[] = {conninfo, "UTF8", password, NULL};
  char *parse_error = NULL;
  PQconninfoOption *parsed;
  Pg *p;
  if (strlen(conninfo) != len) return push_failure(L, "the connection string contains a NUL byte", "08001");
  parsed = PQconninfoParse(conninfo, &parse_error);
  if (parse_error != NULL) PQfreemem(parse_error);
  if (parsed == NULL) return push_failure(L, "the connection string could not be parsed", "08001");
  PQconninfoFree(parsed);
  p = (Pg *)lua_newuserdatauv(L, sizeof(Pg), 0);
  p->conn = NULL;
  p->closed = 0;
  p->timeout_ms = 5000;
  p->grace_ms = CANCEL_GRACE_MS;
  p->changes = 0;
  luaL_setmetatable(L, PG_MT);
  /* expand_dbname = 1: the first "dbname" value is the whole connection string */
  p->conn = PQconnectStartParams(keys, values, 1);
  if (p->conn == NULL) return push_failure(L, "out of memory for a connection", "08001");
  PQsetNoticeProcessor(p->conn, drop_notice, NULL);
  if (PQstatus(p->conn) == CONNECTION_BAD) made = -1;
  else made = poll_connect(p->conn, mcp_monotonic_ns() + (int64_t)timeout * 1000000);
  if (made <= 0) {
    int n = made == 0 ? push_failure(L, "the connection was not made in time", "08001")
                      : push_conn_failure(L, p->conn, "the connection failed", "08001");
    PQfinish(p->conn);
    p->conn = NULL;
    return n;
  }
  if (PQsetnonblocking(p->conn, 1) != 0) {
    int n = push_conn_failure(L, p->conn, "the connection could not be made non-blocking", "08001");
    PQfinish(p->conn);
    p->conn = NULL;
    return n;
  }
  return 1;
}

/* ==================================================================== */
/* Parameters                                                           */
/* ==================================================================== */

typedef struct Params {
  int n;
  const char **values;
  int *lengths, *formats;
  Oid *types;
  char (*numbers)[32]; /* the text of integer and float parameters */
} Params;

/*
** Set parameter i from the value at the stack top. Returns 0, 1 for a
** string holding a NUL byte (a failure the caller reports), or raises for
** a value that cannot be bound.
*/
static int bind_one(lua_State *L, Params *ps, int i) {
  size_t len;
  const char *s;
  ps->values[i] = NULL, ps->lengths[i] = 0, ps->formats[i] = 0, ps->types[i] = 0;
  switch (lua_type(L, -1)) {
    case LUA_TNIL: return 0;
    case LUA_TNUMBER:
      if (lua_isinteger(L, -1)) {
        snprintf(ps->numbers[i], sizeof ps->numbers[i], "%lld", (long long)lua_tointeger(L, -1));
        ps->types[i] = OID_INT8;
      } else {
        snprintf(ps->numbers[i], sizeof ps->numbers[i], "%.17g", (double)lua_tonumber(L, -1));
        ps->types[i] = OID_FLOAT8;
      }
      ps->values[i] = ps->numbers[i];
      return 0;
    case LUA_TBOOLEAN:
      /* untyped: the server reads "1"/"0" as the column's integer or boolean */
      ps->values[i] = lua_toboolean(L, -1) ? "1" : "0";
      return 0;
    case LUA_TSTRING:
      s = lua_tolstring(L, -1, &len);
      if (strlen(s) != len) return 1;
      ps->values[i] = s;
      return 0;
    case LUA_TLIGHTUSERDATA:
      if (mcp_db_is_null(L, -1)) return 0;
      break;
    case LUA_TTABLE:
      lua_pushliteral(L, "blob");
      if (lua_rawget(L, -2) == LUA_TSTRING) {
        s = lua_tolstring(L, -1, &len);
        lua_pop(L, 1);
        if (len > INT_MAX) luaL_error(L, "parameter %d: blob too large", i + 1);
        ps->values[i] = s, ps->lengths[i] = (int)len, ps->formats[i] = 1, ps->types[i] = OID_BYTEA;
        return 0;
      }
      lua_pop(L, 1);
      break;
    default: break;
  }
  return luaL_error(L,
                    "parameter %d: a %s cannot be bound (use an integer, number, string, boolean, "
                    "json.null or {blob = string})",
                    i + 1, luaL_typename(L, -1));
}

/*
** Fill ps from the array at pi (absent: none; params.n counts trailing
** nils). The arrays live in a userdata left on the stack, so a raise frees
** them; strings stay alive in the caller's table. Returns the index of the
** first string parameter holding a NUL byte, or 0.
*/
static int bind_params(lua_State *L, int pi, Params *ps) {
  lua_Integer n, i;
  char *block;
  size_t each = sizeof(char *) + 2 * sizeof(int) + sizeof(Oid) + 32;
  ps->n = 0;
  if (lua_isnoneornil(L, pi)) {
    lua_pushnil(L);
    return 0;
  }
  luaL_checktype(L, pi, LUA_TTABLE);
  lua_pushliteral(L, "n");
  if (lua_rawget(L, pi) == LUA_TNIL) {
    n = (lua_Integer)lua_rawlen(L, pi);
  } else {
    int ok;
    n = lua_tointegerx(L, -1, &ok);
    if (!ok || n < 0) luaL_error(L, "params.n must be a non-negative integer");
  }
  lua_pop(L, 1);
  if (n > 65535) luaL_error(L, "too many parameters (%I)", n);
  block = (char *)lua_newuserdatauv(L, (size_t)n * each + 1, 0);
  ps->n = (int)n;
  ps->numbers = (char(*)[32])block;
  ps->values = (const char **)(block + (size_t)n * 32);
  ps->lengths = (int *)(block + (size_t)n * (32 + sizeof(char *)));
  ps->formats = ps->lengths + n;
  ps->types = (Oid *)(ps->formats + n);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, pi, i + 1);
    if (bind_one(L, ps, (int)i)) {
      lua_pop(L, 1);
      return (int)i + 1;
    }
    lua_pop(L, 1);
  }
  return 0;
}

/* ==================================================================== */
/* Results                                                              */
/* ==================================================================== */

/* The value of one hex digit (the server writes only valid ones). */
static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;
}

/* Decode bytea's hex text form ("\x4142") and push the bytes. */
static void push_bytea(lua_State *L, const char *s, size_t len) {
  luaL_Buffer b;
  size_t i, n;
  char *out;
  if (len < 2 || s[0] != '\\' || s[1] != 'x') {
    lua_pushlstring(L, s, len);
    return;
  }
  n = (len - 2) / 2;
  out = luaL_buffinitsize(L, &b, n);
  for (i = 0; i < n; i++) out[i] = (char)(hex_value(s[2 + 2 * i]) * 16 + hex_value(s[3 + 2 * i]));
  luaL_pushresultsize(&b, n);
}

/* Push field (r, c) by its column type (text result format). */
static void push_field(lua_State *L, const PGresult *res, int r, int c) {
  const char *s = PQgetvalue(res, r, c);
  size_t len = (size_t)PQgetlength(res, r, c);
  switch (PQftype(res, c)) {
    case OID_INT2:
    case OID_INT4:
    case OID_INT8: lua_pushinteger(L, (lua_Integer)strtoll(s, NULL, 10)); break;
    case OID_FLOAT4:
    case OID_FLOAT8:
    case OID_NUMERIC: lua_pushnumber(L, (lua_Number)strtod(s, NULL)); break;
    case OID_BOOL: lua_pushinteger(L, s[0] == 't'); break;
    case OID_BYTEA: push_bytea(L, s, len); break;
    default: lua_pushlstring(L, s, len); break;
  }
}

/* Push the rows of res as an array of { column = value } (NULL columns absent). */
static void push_rows(lua_State *L, const PGresult *res) {
  int rows = PQntuples(res), cols = PQnfields(res), r, c;
  lua_createtable(L, rows, 0);
  for (r = 0; r < rows; r++) {
    lua_createtable(L, 0, cols);
    for (c = 0; c < cols; c++) {
      if (PQgetisnull(res, r, c)) continue;
      lua_pushstring(L, PQfname(res, c));
      push_field(L, res, r, c);
      lua_rawset(L, -3);
    }
    lua_rawseti(L, -2, r + 1);
  }
}

/* ==================================================================== */
/* Running a statement against the deadline                             */
/* ==================================================================== */

/*
** Ask the server to cancel the running statement (it ends it with 57014).
** PQcancel returns once the server has taken the request.
*/
static void cancel_running(PGconn *conn) {
  PGcancel *cancel = PQgetCancel(conn);
  char errbuf[256];
  if (cancel != NULL) {
    PQcancel(cancel, errbuf, (int)sizeof errbuf);
    PQfreeCancel(cancel);
  }
}

/*
** Flush the sent statement and read until libpq has a whole result, within
** b (kept across the statement's results: a result read after the cancel
** leaves the rest of the statement in the same grace, not out of time). At
** the bound the statement is cancelled, and the cancel repeated every
** CANCEL_REPEAT_MS of the grace: a cancel that reaches the server before the
** backend has begun the statement (it is still idle, or busy elsewhere on a
** loaded machine) is ignored there, and one cancel would then leave the
** statement to run its full length. Each cancel is given CANCEL_REPEAT_MS
** to land, counted from when the server took it, even past the grace's end:
** on a loaded machine PQcancel itself takes time, and the backend more to
** answer it. Returns 1 ready, 0 out of time even after the grace, -1 the
** connection failed.
*/
static int await_ready(PGconn *conn, Bound *b) {
  int flushing = 1;
  for (;;) {
    int ready;
    if (flushing) {
      int f = PQflush(conn);
      if (f < 0) return -1;
      flushing = f == 1;
    }
    if (!flushing) {
      if (PQconsumeInput(conn) == 0) return -1;
      if (!PQisBusy(conn)) return 1;
    }
    ready = wait_socket(conn, flushing ? (POLLIN | POLLOUT) : POLLIN, b->wake_ns);
    if (ready < 0) return -1;
    if (ready == 0) {
      int64_t now_ns = mcp_monotonic_ns();
      if (!b->cancelled) {
        b->cancelled = 1;
        b->grace_end_ns = now_ns + (int64_t)b->grace_ms * 1000000;
      } else if (now_ns >= b->grace_end_ns) {
        return 0;
      }
      cancel_running(conn);
      b->wake_ns = mcp_monotonic_ns() + (int64_t)CANCEL_REPEAT_MS * 1000000;
      if (b->grace_end_ns < b->wake_ns) b->grace_end_ns = b->wake_ns; /* the last cancel's moment */
    }
  }
}

/*
** Collect every result of the sent statement(s) within b; keep the first
** failure (or the last success) in *out. Returns 1 done, 0 timed out, -1
** lost.
*/
static int collect(PGconn *conn, Bound *b, PGresult **out) {
  PGresult *res;
  for (;;) {
    int ready = await_ready(conn, b);
    if (ready <= 0) return ready;
    res = PQgetResult(conn);
    if (res == NULL) return 1;
    if (*out == NULL) {
      *out = res;
    } else if (PQresultStatus(*out) == PGRES_FATAL_ERROR) {
      PQclear(res);
    } else {
      PQclear(*out);
      *out = res;
    }
  }
}

/*
** The failure of a statement that did not complete. Out of time even after
** the cancel: the connection is given up (its state is unknown), so the next
** statement fails fast instead of reading a stale answer.
*/
static int push_incomplete(lua_State *L, Pg *p, int ready) {
  int n;
  if (ready == 0) {
    lua_pushnil(L);
    lua_pushfstring(L,
                    "the statement did not finish within %d ms and the database did not answer "
                    "the cancel; the connection was closed (08006)",
                    p->timeout_ms);
    lua_pushliteral(L, "08006");
    n = 3;
  } else {
    n = push_conn_failure(L, p->conn, "the connection to the database was lost", "08006");
  }
  if (ready == 0 || PQstatus(p->conn) != CONNECTION_OK) {
    PQfinish(p->conn);
    p->conn = NULL;
  }
  return n;
}

/* Turn a finished result into the Lua results of mode. */
static int push_outcome(lua_State *L, Pg *p, PGresult *res, int mode, int cancelled) {
  ExecStatusType st = PQresultStatus(res);
  const char *tuples;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (cancelled && state != NULL && strcmp(state, "57014") == 0) {
      lua_pushnil(L);
      lua_pushfstring(L, "the statement did not finish within %d ms and was cancelled (57014)",
                      p->timeout_ms);
      lua_pushliteral(L, "57014");
      return 3;
    }
    return push_result_failure(L, res);
  }
  tuples = PQcmdTuples(res);
  p->changes = (tuples && *tuples) ? (lua_Integer)strtoll(tuples, NULL, 10) : 0;
  if (mode == RUN_QUERY) push_rows(L, res);
  else if (mode == RUN_EXECUTE) lua_pushinteger(L, p->changes);
  else lua_pushboolean(L, 1);
  return 1;
}

/*
** Send sql (with the parameters at pi unless a script) and return its
** outcome. The result is freed before the Lua results are returned; a raise
** while rows are built can only be out-of-memory, and leaks that one result.
*/
static int db_run(lua_State *L, int mode) {
  Pg *p = check_db(L, 1);
  size_t len;
  const char *sql = luaL_checklstring(L, 2, &len);
  Params ps = {0, NULL, NULL, NULL, NULL, NULL};
  PGresult *res = NULL;
  int sent, ready, n, nul = 0;
  Bound bound;
  if (strlen(sql) != len) luaL_error(L, "SQL text contains a NUL byte");
  lua_settop(L, 3);
  if (mode != RUN_SCRIPT) nul = bind_params(L, 3, &ps);
  if (nul) {
    lua_pushnil(L);
    lua_pushfstring(L,
                    "parameter %d is text holding a NUL byte, which PostgreSQL text cannot store; "
                    "bind it as {blob = string} (22021)",
                    nul);
    lua_pushliteral(L, "22021");
    return 3;
  }
  if (p->conn == NULL || PQstatus(p->conn) != CONNECTION_OK)
    return push_failure(L, "the connection to the database was lost", "08006");
  if (mode == RUN_SCRIPT) sent = PQsendQuery(p->conn, sql);
  else sent = PQsendQueryParams(p->conn, sql, ps.n, ps.types, ps.values, ps.lengths, ps.formats, 0);
  if (!sent) return push_conn_failure(L, p->conn, "the statement could not be sent", "08006");
  bound = (Bound){mcp_monotonic_ns() + (int64_t)p->timeout_ms * 1000000, 0, p->grace_ms, 0};
  ready = collect(p->conn, &bound, &res);
  if (ready <= 0 || res == NULL) {
    if (res != NULL) PQclear(res);
    return push_incomplete(L, p, ready);
  }
  n = push_outcome(L, p, res, mode, bound.cancelled);
  PQclear(res);
  return n;
}

/* The three entry points differ only in what a successful run returns. */
static int l_db_exec(lua_State *L) {
  return db_run(L, RUN_SCRIPT);
}
static int l_db_execute(lua_State *L) {
  return db_run(L, RUN_EXECUTE);
}
static int l_db_query(lua_State *L) {
  return db_run(L, RUN_QUERY);
}

/* ==================================================================== */
/* Connection-level calls                                               */
/* ==================================================================== */

/* db:changes(): rows changed (or returned) by the last statement. */
static int l_db_changes(lua_State *L) {
  Pg *p = check_db(L, 1);
  lua_pushinteger(L, p->changes);
  return 1;
}

/*
** db:timeout(ms [, grace_ms]): the bound of every following statement, and
** how long the cancel sent at that bound may take to land (default 1000)
** before the connection is given up. Returns the previous two.
*/
static int l_db_timeout(lua_State *L) {
  Pg *p = check_db(L, 1);
  lua_Integer ms = luaL_checkinteger(L, 2);
  lua_Integer grace = luaL_optinteger(L, 3, p->grace_ms);
  luaL_argcheck(L, ms > 0 && ms <= INT_MAX, 2, "milliseconds out of range");
  luaL_argcheck(L, grace > 0 && grace <= INT_MAX, 3, "milliseconds out of range");
  lua_pushinteger(L, p->timeout_ms);
  lua_pushinteger(L, p->grace_ms);
  p->timeout_ms = (int)ms;
  p->grace_ms = (int)grace;
  return 2;
}

/* db:alive(): whether the connection is still up (a lost one is not reopened here). */
static int l_db_alive(lua_State *L) {
  Pg *p = check_db(L, 1);
  lua_pushboolean(L, p->conn != NULL && PQstatus(p->conn) == CONNECTION_OK);
  return 1;
}

/* db:in_transaction(): whether a transaction is open (or failed and not yet rolled back). */
static int l_db_in_transaction(lua_State *L) {
  Pg *p = check_db(L, 1);
  PGTransactionStatusType st = p->conn ? PQtransactionStatus(p->conn) : PQTRANS_UNKNOWN;
  lua_pushboolean(L, st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE);
  return 1;
}

/*
** Registrar: db.pg_connect and db.pg_version. The metatable is built
** only on the first opening of the module (busted reopens it per spec file).
*/
void mcp_register_pg(lua_State *L) {
  static const luaL_Reg db_methods[] = {{"exec", l_db_exec},
                                        {"execute", l_db_execute},
                                        {"query", l_db_query},
                                        {"changes", l_db_changes},
                                        {"timeout", l_db_timeout},
                                        {"alive", l_db_alive},
                                        {"in_transaction", l_db_in_transaction},
                                        {"close", l_db_close},
                                        {NULL, NULL}};
  static const luaL_Reg db_meta[] = {
    {"__gc", l_db_close}, {"__close", l_db_close}, {"__tostring", l_db_tostring}, {NULL, NULL}};
  if (luaL_newmetatable(L, PG_MT)) {
    luaL_setfuncs(L, db_meta, 0);
    luaL_newlib(L, db_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_connect);
  lua_setfield(L, -2, "pg_connect");
  lua_pushinteger(L, PQlibVersion());
  lua_setfield(L, -2, "pg_version");
}
