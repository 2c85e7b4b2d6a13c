/*
** sqlite.c: a small SQLite binding for the embedded store.
**
**   db.sqlite_open(path [, { readonly = false, create = true }]) -> db | nil, message, code
**   db.sqlite_path_state(path)   -> "file" | "missing" | nil, message, code
**   db:exec(sql)                 -> true | nil, message, code   (a script: no parameters)
**   db:execute(sql [, params])   -> changes | nil, message, code
**   db:query(sql [, params])     -> { row, ... } | nil, message, code
**   db:insert(sql [, params])    -> last_insert_rowid | nil, message, code
**   db:changes(), db:busy_timeout(ms), db:close()
**
** The Debian Lua bindings lose 64-bit integers and cut text at NUL; here an
** integer binds as int64 and reads back as a Lua integer, text and blobs keep
** their exact length, and every value travels as a bound parameter.
**
** Failures of the database (locked, constraint, missing column, bad SQL for
** the current schema) return nil, message, code where code is the SQLite
** result code's name ("SQLITE_BUSY", "SQLITE_CONSTRAINT_UNIQUE"); the store
** above turns them into the library's failure value. Misuse (wrong argument
** types, a closed handle) raises.
**
** Statements are prepared once per SQL text and cached; they are not part of
** the interface. Ownership: each prepared statement lives in its own
** userdata from the moment it exists, so a raise never leaks one. The db
** userdata keeps a cache table (its user value: SQL text -> stmt userdata)
** and each stmt userdata keeps its db userdata alive through its own user
** value. Closing the db finalizes the cached statements and closes the
** connection with sqlite3_close_v2, which never fails.
*/
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db.h"

#define DB_MT   "mcpclient.sqlite_db"
#define STMT_MT "mcpclient.sqlite_stmt"

/* Statements cached per connection; SQL built at run time beyond this runs uncached. */
#define STMT_CACHE_MAX 256

typedef struct Db {
  sqlite3 *db; /* NULL before open and after close */
  int cached;  /* statements in the cache table */
} Db;

typedef struct Stmt {
  sqlite3_stmt *stmt; /* NULL after finalize */
  Db *owner;          /* kept alive by user value 1 (the db userdata) */
  int cached;         /* lives in the owner's cache: finalized by the db's close */
} Stmt;

enum { RUN_EXECUTE, RUN_QUERY, RUN_INSERT };

/* ==================================================================== */
/* Result code names                                                    */
/* ==================================================================== */

#define CODE(name) \
  { name, #name }
static const struct {
  int code;
  const char *name;
} code_names[] = {
  CODE(SQLITE_ERROR),
  CODE(SQLITE_INTERNAL),
  CODE(SQLITE_PERM),
  CODE(SQLITE_ABORT),
  CODE(SQLITE_BUSY),
  CODE(SQLITE_LOCKED),
  CODE(SQLITE_NOMEM),
  CODE(SQLITE_READONLY),
  CODE(SQLITE_INTERRUPT),
  CODE(SQLITE_IOERR),
  CODE(SQLITE_CORRUPT),
  CODE(SQLITE_NOTFOUND),
  CODE(SQLITE_FULL),
  CODE(SQLITE_CANTOPEN),
  CODE(SQLITE_PROTOCOL),
  CODE(SQLITE_EMPTY),
  CODE(SQLITE_SCHEMA),
  CODE(SQLITE_TOOBIG),
  CODE(SQLITE_CONSTRAINT),
  CODE(SQLITE_MISMATCH),
  CODE(SQLITE_MISUSE),
  CODE(SQLITE_NOLFS),
  CODE(SQLITE_AUTH),
  CODE(SQLITE_FORMAT),
  CODE(SQLITE_RANGE),
  CODE(SQLITE_NOTADB),
  CODE(SQLITE_BUSY_RECOVERY),
  CODE(SQLITE_BUSY_SNAPSHOT),
#ifdef SQLITE_BUSY_TIMEOUT
  CODE(SQLITE_BUSY_TIMEOUT),
#endif
  CODE(SQLITE_LOCKED_SHAREDCACHE),
  CODE(SQLITE_READONLY_RECOVERY),
  CODE(SQLITE_READONLY_CANTLOCK),
  CODE(SQLITE_READONLY_ROLLBACK),
  CODE(SQLITE_READONLY_DBMOVED),
  CODE(SQLITE_CANTOPEN_NOTEMPDIR),
  CODE(SQLITE_CANTOPEN_ISDIR),
  CODE(SQLITE_CANTOPEN_FULLPATH),
  CODE(SQLITE_CONSTRAINT_CHECK),
  CODE(SQLITE_CONSTRAINT_COMMITHOOK),
  CODE(SQLITE_CONSTRAINT_FOREIGNKEY),
  CODE(SQLITE_CONSTRAINT_FUNCTION),
  CODE(SQLITE_CONSTRAINT_NOTNULL),
  CODE(SQLITE_CONSTRAINT_PRIMARYKEY),
  CODE(SQLITE_CONSTRAINT_TRIGGER),
  CODE(SQLITE_CONSTRAINT_UNIQUE),
  CODE(SQLITE_CONSTRAINT_VTAB),
  CODE(SQLITE_CONSTRAINT_ROWID),
#ifdef SQLITE_CONSTRAINT_PINNED
  CODE(SQLITE_CONSTRAINT_PINNED),
#endif
#ifdef SQLITE_CONSTRAINT_DATATYPE
  CODE(SQLITE_CONSTRAINT_DATATYPE),
#endif
};
#undef CODE

/*
** The name of an (extended) result code. Extended codes without a name here
** fall back to their primary code's name, so a caller can always compare.
*/
static const char *code_name(int rc) {
  size_t i, n = sizeof code_names / sizeof code_names[0];
  for (i = 0; i < n; i++)
    if (code_names[i].code == rc) return code_names[i].name;
  for (i = 0; i < n; i++)
    if (code_names[i].code == (rc & 0xff)) return code_names[i].name;
  return "SQLITE_ERROR";
}

/*
** Push the failure triple nil, "<errmsg> (<CODE>)", "<CODE>" for the
** connection's last error. Called before the statement is reset, since a
** reset may replace the connection's message.
*/
static int push_failure(lua_State *L, sqlite3 *db, int rc) {
  const char *name = code_name(rc);
  const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  lua_pushnil(L);
  lua_pushfstring(L, "%s (%s)", msg, name);
  lua_pushstring(L, name);
  return 3;
}

/* ==================================================================== */
/* The path: a regular file, or one that can be created                 */
/* ==================================================================== */

/* What a file that is not a regular one is, in words. */
static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/*
** Push the refusal of a path: nil, "<reason> (SQLITE_CANTOPEN)", "SQLITE_CANTOPEN".
** The reason is built by the caller on the Lua stack top (popped here).
*/
static int push_path_refusal(lua_State *L) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s (SQLITE_CANTOPEN)", lua_tostring(L, -2));
  lua_pushliteral(L, "SQLITE_CANTOPEN");
  lua_remove(L, -4);
  return 3;
}

/*
** Refuse a database path SQLite must not open, before it does: anything but
** a regular file (a FIFO opened for reading and writing blocks its first
** read forever, so the open would hang), a sidecar SQLite opens beside it
** (-wal, -shm, -journal) that is not a regular file either, and a missing
** file that cannot be created (its directory missing or not one). Pushes
** the failure triple and returns 3, or returns 0 when the path may be opened.
** ":memory:", "" (a private temporary database) and file: URIs are SQLite's
** own names and are not checked.
*/
static int refuse_path(lua_State *L, const char *path, int create) {
  static const char *const sidecars[] = {"-wal", "-shm", "-journal"};
  char buf[PATH_MAX + 16];
  struct stat st;
  size_t len = strlen(path), i;
  char *slash;
  if (len == 0 || strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0 || len >= PATH_MAX)
    return 0;
  if (stat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      lua_pushfstring(L, "the database path names %s, not a regular file", file_kind(st.st_mode));
      return push_path_refusal(L);
    }
    for (i = 0; i < sizeof sidecars / sizeof sidecars[0]; i++) {
      memcpy(buf, path, len);
      strcpy(buf + len, sidecars[i]);
      if (stat(buf, &st) == 0 && !S_ISREG(st.st_mode)) {
        lua_pushfstring(L, "the database's %s file beside it is %s, not a regular file", sidecars[i] + 1,
                        file_kind(st.st_mode));
        return push_path_refusal(L);
      }
    }
    return 0;
  }
  if (errno != ENOENT) {
    lua_pushfstring(L, "the database path cannot be reached: %s", strerror(errno));
    return push_path_refusal(L);
  }
  if (!create) return 0; /* SQLite says it cannot open a missing file */
  memcpy(buf, path, len + 1);
  slash = strrchr(buf, '/');
  if (slash == NULL) return 0; /* the working directory exists */
  if (slash == buf) slash[1] = '\0';
  else *slash = '\0';
  if (stat(buf, &st) != 0) {
    lua_pushfstring(L,
                    "the database file does not exist and cannot be created: its directory is missing (%s)",
                    strerror(errno));
    return push_path_refusal(L);
  }
  if (!S_ISDIR(st.st_mode)) {
    lua_pushliteral(L, "the database file cannot be created: the path's directory part is not a directory");
    return push_path_refusal(L);
  }
  if (access(buf, W_OK | X_OK) != 0) {
    lua_pushfstring(L, "the database file does not exist and cannot be created in its directory: %s",
                    strerror(errno));
    return push_path_refusal(L);
  }
  return 0;
}

/*
** db.sqlite_path_state(path) -> "file" | "missing" | nil, message, code:
** what a database path names, told without opening it (opening a FIFO to
** look blocks), refused as sqlite_open would refuse it.
*/
static int l_path_state(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (refuse_path(L, path, 0)) return 3;
  lua_pushstring(L, stat(path, &st) == 0 ? "file" : "missing");
  return 1;
}

/* ==================================================================== */
/* Handles                                                              */
/* ==================================================================== */

/* The db at idx, raising when it is closed: using a closed handle is misuse. */
static Db *check_db(lua_State *L, int idx) {
  Db *d = (Db *)luaL_checkudata(L, idx, DB_MT);
  if (d->db == NULL) luaL_error(L, "attempt to use a closed database");
  return d;
}

/*
** Finalize a statement. Its result code repeats the last step's failure,
** which was already reported, so it is ignored here.
*/
static void stmt_finalize(Stmt *s) {
  if (s->stmt != NULL) {
    sqlite3_finalize(s->stmt);
    s->stmt = NULL;
  }
}

/*
** __gc of a statement: only finalize. A cached statement is collected only
** together with its database (the cache refers to it), so there is no cache
** left to keep in order; an uncached one was finalized right after its run.
*/
static int l_stmt_gc(lua_State *L) {
  stmt_finalize((Stmt *)luaL_checkudata(L, 1, STMT_MT));
  return 0;
}

/*
** db:close(): finalize every cached statement, then close the connection.
** sqlite3_close_v2 defers the real close while a statement the caller holds
** is unfinalized, so closing never fails. Idempotent; also __gc and __close
** (at state close the cache table is still reachable from here even when the
** statements are being collected in the same cycle).
*/
static int l_db_close(lua_State *L) {
  Db *d = (Db *)luaL_checkudata(L, 1, DB_MT);
  if (d->db == NULL) return 0;
  if (lua_getiuservalue(L, 1, 1) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      Stmt *s = (Stmt *)lua_touserdata(L, -1);
      if (s != NULL) {
        stmt_finalize(s);
        s->cached = 0;
      }
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  d->cached = 0;
  sqlite3_close_v2(d->db);
  d->db = NULL;
  /* drop the cache so the finalized statement objects can be collected */
  lua_pushnil(L);
  lua_setiuservalue(L, 1, 1);
  return 0;
}

/* __tostring of a database: type and state, never the path. */
static int l_db_tostring(lua_State *L) {
  Db *d = (Db *)luaL_checkudata(L, 1, DB_MT);
  lua_pushfstring(L, "sqlite db (%s)", d->db ? "open" : "closed");
  return 1;
}

/*
** db.sqlite_open(path [, flags]): the path is checked first (refuse_path:
** at once, never a hang), then the userdata is created closed and only then
** acquires the connection, so a raise in between leaks nothing. flags:
** readonly (default false), create (default true; ignored when readonly).
** Unknown flags raise.
*/
static int l_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int readonly = 0, create = 1, flags, rc;
  Db *d;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
      if (strcmp(key, "readonly") == 0) {
        if (!lua_isboolean(L, -1)) return luaL_error(L, "sqlite_open: readonly must be a boolean");
        readonly = lua_toboolean(L, -1);
      } else if (strcmp(key, "create") == 0) {
        if (!lua_isboolean(L, -1)) return luaL_error(L, "sqlite_open: create must be a boolean");
        create = lua_toboolean(L, -1);
      } else {
        return luaL_error(L, "sqlite_open: unknown flag \"%s\"", key);
      }
      lua_pop(L, 1);
    }
  }
  if (refuse_path(L, path, !readonly && create)) return 3;
  d = (Db *)lua_newuserdatauv(L, sizeof(Db), 1);
  d->db = NULL;
  d->cached = 0;
  luaL_setmetatable(L, DB_MT);
  lua_newtable(L);
  lua_setiuservalue(L, -2, 1);
  flags = readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0));
  /* one connection per Lua userdata, never shared between threads */
  flags |= SQLITE_OPEN_NOMUTEX;
  rc = sqlite3_open_v2(path, &d->db, flags, NULL);
  if (rc != SQLITE_OK) {
    int n = push_failure(L, d->db, d->db ? sqlite3_extended_errcode(d->db) : rc);
    sqlite3_close_v2(d->db);
    d->db = NULL;
    return n;
  }
  sqlite3_extended_result_codes(d->db, 1);
  return 1;
}

/* ==================================================================== */
/* Statements                                                           */
/* ==================================================================== */

/*
** Whether the tail after the first statement holds only whitespace and
** comments: preparing it yields no statement. Anything more is misuse
** (several statements belong in exec).
*/
static int tail_is_empty(sqlite3 *db, const char *tail) {
  sqlite3_stmt *extra = NULL;
  int rc;
  while (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r' || *tail == ';') tail++;
  if (*tail == '\0') return 1;
  rc = sqlite3_prepare_v2(db, tail, -1, &extra, NULL);
  if (extra != NULL) {
    sqlite3_finalize(extra);
    return 0;
  }
  return rc == SQLITE_OK;
}

/*
** Push the statement for the SQL text at stack index sqli: the cached one,
** or a newly prepared one (cached while the cache has room). On an SQL
** failure push nil, message, code instead and return NULL; *nret tells how
** many values were pushed.
*/
static Stmt *push_stmt(lua_State *L, int dbi, Db *d, int sqli, int *nret) {
  size_t len;
  const char *sql = luaL_checklstring(L, sqli, &len);
  const char *tail = NULL;
  Stmt *s;
  int rc;
  *nret = 1;
  lua_getiuservalue(L, dbi, 1);
  lua_pushvalue(L, sqli);
  if (lua_rawget(L, -2) == LUA_TUSERDATA) {
    lua_remove(L, -2);
    return (Stmt *)lua_touserdata(L, -1);
  }
  lua_pop(L, 1); /* cache stays below */
  if (len >= (size_t)INT_MAX) luaL_error(L, "SQL text too long");
  s = (Stmt *)lua_newuserdatauv(L, sizeof(Stmt), 1);
  s->stmt = NULL;
  s->owner = d;
  s->cached = 0;
  luaL_setmetatable(L, STMT_MT);
  lua_pushvalue(L, dbi);
  lua_setiuservalue(L, -2, 1);
  /* Lua strings end in NUL: passing len + 1 spares SQLite a copy */
  rc = sqlite3_prepare_v3(d->db, sql, (int)(len + 1), SQLITE_PREPARE_PERSISTENT, &s->stmt, &tail);
  if (rc != SQLITE_OK) {
    lua_pop(L, 2);
    *nret = push_failure(L, d->db, sqlite3_extended_errcode(d->db));
    return NULL;
  }
  if (s->stmt == NULL) luaL_error(L, "no SQL statement in the text");
  if (tail != NULL && !tail_is_empty(d->db, tail))
    luaL_error(L, "one statement at a time (use exec for a script)");
  if (d->cached < STMT_CACHE_MAX) {
    lua_pushvalue(L, sqli);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
    s->cached = 1;
    d->cached++;
  }
  lua_remove(L, -2); /* the cache */
  return s;
}

/*
** Bind the value at the stack top to parameter at. Returns an SQLite code,
** or -1 when the value's type cannot be bound (misuse).
*/
static int bind_one(lua_State *L, sqlite3_stmt *st, int at) {
  size_t len;
  const char *p;
  switch (lua_type(L, -1)) {
    case LUA_TNIL: return sqlite3_bind_null(st, at);
    case LUA_TNUMBER:
      if (lua_isinteger(L, -1)) return sqlite3_bind_int64(st, at, (sqlite3_int64)lua_tointeger(L, -1));
      return sqlite3_bind_double(st, at, (double)lua_tonumber(L, -1));
    case LUA_TSTRING:
      p = lua_tolstring(L, -1, &len);
      return sqlite3_bind_text64(st, at, p, (sqlite3_uint64)len, SQLITE_STATIC, SQLITE_UTF8);
    case LUA_TBOOLEAN: return sqlite3_bind_int(st, at, lua_toboolean(L, -1));
    case LUA_TLIGHTUSERDATA: return mcp_db_is_null(L, -1) ? sqlite3_bind_null(st, at) : -1;
    case LUA_TTABLE: {
      int rc = -1;
      lua_pushliteral(L, "blob");
      if (lua_rawget(L, -2) == LUA_TSTRING) {
        p = lua_tolstring(L, -1, &len);
        rc = sqlite3_bind_blob64(st, at, p, (sqlite3_uint64)len, SQLITE_STATIC);
      }
      lua_pop(L, 1);
      return rc;
    }
    default: return -1;
  }
}

/*
** Bind the array at stack index pi (absent: no parameters); params.n, when
** present, counts trailing nils. Raises on misuse after clearing what was
** bound, so no binding points at a string the caller may let go. Strings
** are bound SQLITE_STATIC: the parameter table keeps them alive for the
** whole run, and the bindings are cleared after it.
*/
static void bind_params(lua_State *L, sqlite3_stmt *st, int pi) {
  lua_Integer n, i;
  int count = sqlite3_bind_parameter_count(st);
  if (lua_isnoneornil(L, pi)) return;
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
  if (n > count) luaL_error(L, "%I parameters given, the statement takes %d", n, count);
  for (i = 1; i <= n; i++) {
    int rc;
    lua_rawgeti(L, pi, i);
    rc = bind_one(L, st, (int)i);
    if (rc != SQLITE_OK) {
      sqlite3_clear_bindings(st);
      if (rc < 0)
        luaL_error(L,
                   "parameter %I: a %s cannot be bound (use an integer, number, string, boolean, "
                   "json.null or {blob = string})",
                   i, luaL_typename(L, -1));
      /* SQLITE_TOOBIG or SQLITE_NOMEM: a limit of this build, not a database failure */
      luaL_error(L, "parameter %I could not be bound: %s", i, sqlite3_errstr(rc));
    }
    lua_pop(L, 1);
  }
}

/* Push column i of the current row; returns 0 (nothing pushed) for NULL. */
static int push_column(lua_State *L, sqlite3_stmt *st, int i) {
  switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER: lua_pushinteger(L, (lua_Integer)sqlite3_column_int64(st, i)); return 1;
    case SQLITE_FLOAT: lua_pushnumber(L, (lua_Number)sqlite3_column_double(st, i)); return 1;
    case SQLITE_TEXT: {
      const unsigned char *p = sqlite3_column_text(st, i);
      int len = sqlite3_column_bytes(st, i);
      lua_pushlstring(L, p ? (const char *)p : "", p ? (size_t)len : 0);
      return 1;
    }
    case SQLITE_BLOB: {
      const void *p = sqlite3_column_blob(st, i);
      int len = sqlite3_column_bytes(st, i);
      lua_pushlstring(L, p ? (const char *)p : "", p ? (size_t)len : 0);
      return 1;
    }
    default: return 0;
  }
}

/*
** Run a statement with the parameters at pi. The statement is reset and its
** bindings cleared before and after, on success and on failure alike, so no
** read transaction stays open and no binding outlives its string. (A raise
** while rows are being built can only be out-of-memory; the reset at the
** start of the next run covers it.)
*/
static int stmt_run(lua_State *L, Stmt *s, int pi, int mode) {
  sqlite3_stmt *st = s->stmt;
  sqlite3 *db = s->owner->db;
  int rc, ncols = 0, names = 0, rows = 0;
  lua_Integer nrows = 0;
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  bind_params(L, st, pi);
  if (mode == RUN_QUERY) {
    int i;
    ncols = sqlite3_column_count(st);
    lua_newtable(L);
    rows = lua_gettop(L);
    lua_createtable(L, ncols, 0);
    names = lua_gettop(L);
    for (i = 0; i < ncols; i++) {
      const char *name = sqlite3_column_name(st, i);
      if (name == NULL) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return luaL_error(L, "not enough memory for a column name");
      }
      lua_pushstring(L, name);
      lua_rawseti(L, names, i + 1);
    }
  }
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int i;
    if (mode != RUN_QUERY) continue;
    lua_createtable(L, 0, ncols);
    for (i = 0; i < ncols; i++) {
      lua_rawgeti(L, names, i + 1);
      if (push_column(L, st, i)) lua_rawset(L, -3);
      else lua_pop(L, 1);
    }
    lua_rawseti(L, rows, ++nrows);
  }
  if (rc != SQLITE_DONE) {
    int n = push_failure(L, db, sqlite3_extended_errcode(db));
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return n;
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  switch (mode) {
    case RUN_QUERY: lua_settop(L, rows); break;
    case RUN_INSERT: lua_pushinteger(L, (lua_Integer)sqlite3_last_insert_rowid(db)); break;
    default: lua_pushinteger(L, (lua_Integer)sqlite3_changes64(db)); break;
  }
  return 1;
}

/*
** db:execute/query/insert(sql [, params]): fetch or prepare the statement,
** run it, and finalize it at once when it could not be cached.
*/
static int db_run(lua_State *L, int mode) {
  Db *d = check_db(L, 1);
  int nret, n;
  Stmt *s;
  lua_settop(L, 3);
  s = push_stmt(L, 1, d, 2, &nret);
  if (s == NULL) return nret;
  n = stmt_run(L, s, 3, mode);
  if (!s->cached) stmt_finalize(s);
  return n;
}

/* The three db entry points differ only in what a successful run returns. */
static int l_db_execute(lua_State *L) {
  return db_run(L, RUN_EXECUTE);
}
static int l_db_query(lua_State *L) {
  return db_run(L, RUN_QUERY);
}
static int l_db_insert(lua_State *L) {
  return db_run(L, RUN_INSERT);
}

/* ==================================================================== */
/* Connection-level calls                                               */
/* ==================================================================== */

/*
** db:exec(sql): a script of any number of statements without parameters
** (migrations, BEGIN/COMMIT). Rows a statement yields are discarded.
*/
static int l_db_exec(lua_State *L) {
  Db *d = check_db(L, 1);
  const char *sql = luaL_checkstring(L, 2);
  int rc = sqlite3_exec(d->db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK) return push_failure(L, d->db, sqlite3_extended_errcode(d->db));
  lua_pushboolean(L, 1);
  return 1;
}

/* db:changes(): rows changed by the last INSERT, UPDATE or DELETE. */
static int l_db_changes(lua_State *L) {
  Db *d = check_db(L, 1);
  lua_pushinteger(L, (lua_Integer)sqlite3_changes64(d->db));
  return 1;
}

/* db:busy_timeout(ms): how long a locked database is retried before SQLITE_BUSY. */
static int l_db_busy_timeout(lua_State *L) {
  Db *d = check_db(L, 1);
  lua_Integer ms = luaL_checkinteger(L, 2);
  luaL_argcheck(L, ms >= 0 && ms <= 0x7fffffff, 2, "milliseconds out of range");
  sqlite3_busy_timeout(d->db, (int)ms);
  lua_pushboolean(L, 1);
  return 1;
}

/*
** Registrar: db.sqlite_open, db.sqlite_path_state and db.sqlite_version. Metatables are built
** only on the first opening of the module (busted reopens it per spec file).
*/
void mcp_register_sqlite(lua_State *L) {
  static const luaL_Reg db_methods[] = {{"exec", l_db_exec},       {"execute", l_db_execute},
                                        {"query", l_db_query},     {"insert", l_db_insert},
                                        {"changes", l_db_changes}, {"busy_timeout", l_db_busy_timeout},
                                        {"close", l_db_close},     {NULL, NULL}};
  static const luaL_Reg db_meta[] = {
    {"__gc", l_db_close}, {"__close", l_db_close}, {"__tostring", l_db_tostring}, {NULL, NULL}};
  static const luaL_Reg stmt_meta[] = {{"__gc", l_stmt_gc}, {NULL, NULL}};
  if (luaL_newmetatable(L, DB_MT)) {
    luaL_setfuncs(L, db_meta, 0);
    luaL_newlib(L, db_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, STMT_MT)) luaL_setfuncs(L, stmt_meta, 0);
  lua_pop(L, 1);
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "sqlite_open");
  lua_pushcfunction(L, l_path_state);
  lua_setfield(L, -2, "sqlite_path_state");
  lua_pushstring(L, sqlite3_libversion());
  lua_setfield(L, -2, "sqlite_version");
}
