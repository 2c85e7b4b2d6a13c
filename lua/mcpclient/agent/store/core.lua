--- The store's SQL core (mcpclient.agent.store): what every repository of
-- store/ shares. Opening and migrating a database through its adapter, the
-- Store's transactions, the statement helpers, the field codecs and row
-- hydration, and the one failure value of a database failure.
--
-- Rules every repository keeps through these helpers: a database failure is
-- returned (nil, message, err with errors.fail("store"): err.operation says
-- what was being done, err.sql_code is the database's own code), never
-- raised; misuse (wrong argument types, unknown fields, a closed store)
-- raises; every value is a bound parameter, and the only names spliced into
-- SQL text are column names from the repositories' fixed lists.
local command = require "mcpclient.command"
local mcp_core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local check_options = require("mcpclient.agent.options").check
local dialect = require "mcpclient.agent.store.dialect"
local migrations = require "mcpclient.agent.store.migrations"
local postgres = require "mcpclient.agent.store.postgres"
local sqlite = require "mcpclient.agent.store.sqlite"

local json = mcp_core.json

local core = {
  DEFAULT_BUSY_TIMEOUT_MS = 5000,
}

--- The one rounding of an audited duration: milliseconds to two decimals,
--- a hundredth of a millisecond (the store applies it to every event; a
--- run's TOOL payload states the same value).
function core.audit_duration(ms)
  return math.floor(ms * 100 + 0.5) / 100
end

---------------------------------------------------------------------------
-- Failures and argument checks
---------------------------------------------------------------------------

-- The failure value for a database failure while trying to `what`; `code` is
-- the adapter's code (SQLite's result code name, e.g. "SQLITE_BUSY";
-- PostgreSQL's SQLSTATE, e.g. "57014"), kept as err.sql_code for callers that
-- tell a locked database from a broken one.
local function fail(what, detail, code)
  return errors.fail("store", { operation = what, detail = detail, sql_code = code })
end

local function check_uid(value, name, level)
  if math.type(value) ~= "integer" then
    error(string.format("%s must be an integer, got %s", name or "uid", math.type(value) or type(value)),
      (level or 2) + 1)
  end
  return value
end

local function check_time(value, name)
  if value == nil then return os.time() end
  if type(value) ~= "number" then error(string.format("%s must be a number of unix seconds", name), 3) end
  return math.tointeger(value) or math.floor(value)
end

-- The adapter of an open store; a closed store raises.
local function adapter_of(self)
  local adapter = self.adapter
  if adapter == nil then error("attempt to use a closed store", 3) end
  return adapter
end

---------------------------------------------------------------------------
-- Field codecs: Lua value -> bound value, for the writable columns
---------------------------------------------------------------------------

local encode = {}

function encode.string(value, name)
  if type(value) ~= "string" then error(string.format("%s must be a string", name), 4) end
  return value
end

function encode.integer(value, name)
  if math.type(value) ~= "integer" then
    if type(value) == "number" and value == math.floor(value) and value >= math.mininteger and value < 2^63 then
      return math.tointeger(value)
    end
    error(string.format("%s must be an integer", name), 4)
  end
  return value
end

function encode.flag(value, name)
  if value == true or value == 1 then return 1 end
  if value == false or value == 0 then return 0 end
  error(string.format("%s must be a boolean", name), 4)
end

-- requires_approval keeps its string form: only the literal "0" waives
-- approval, so any other stored value (a typo, "no", "false") fails safe.
function encode.approval(value, name)
  if value == true then return "1" end
  if value == false then return "0" end
  if math.type(value) == "integer" then return string.format("%d", value) end
  if type(value) ~= "string" then error(string.format("%s must be a string or a boolean", name), 4) end
  return value
end

-- A stdio server's argv: a list of strings, stored as a JSON array ("" for
-- none: the server is reached by url). Its rule is connect's.
function encode.command(value, name)
  if type(value) ~= "table" then error(string.format("%s must be a list of strings", name), 4) end
  if next(value) == nil then return "" end
  local problem = command.problem(value)
  if problem then error(problem, 4) end
  return json.encode(json.array(table.move(value, 1, #value, 1, {})))
end

-- A stdio server's environment: NAME -> value or "env:VAR", stored as a
-- JSON object ("" for none).
function encode.env(value, name)
  if type(value) ~= "table" then error(string.format("%s must be a table of NAME = value", name), 4) end
  if next(value) == nil then return "" end
  local problem = command.problem({ "x" }, value)
  if problem then error(problem, 4) end
  return json.encode(value)
end

-- A server's plain request headers: NAME -> value, stored as a JSON object
-- ("" for none). Which names and values an operator may give is the
-- operator's check (agent/server_options.lua); here only the shape.
function encode.headers(value, name)
  if type(value) ~= "table" then error(string.format("%s must be a table of NAME = value", name), 4) end
  if next(value) == nil then return "" end
  for k, v in pairs(value) do
    if type(k) ~= "string" or type(v) ~= "string" then
      error(string.format("%s must be a table of NAME = value (strings)", name), 4)
    end
  end
  return json.encode(value)
end

-- A server's roots: a list of { uri, name }, stored as a JSON array ("" for none).
function encode.roots(value, name)
  if type(value) ~= "table" then error(string.format("%s must be a list of { uri, name }", name), 4) end
  if next(value) == nil then return "" end
  local count = 0
  for _ in pairs(value) do count = count + 1 end
  if count ~= #value then error(string.format("%s must be a list of { uri, name }", name), 4) end
  local list = {}
  for i = 1, #value do
    local root = value[i]
    if type(root) ~= "table" or type(root.uri) ~= "string" or (root.name ~= nil and type(root.name) ~= "string") then
      error(string.format("%s[%d] must be { uri = string, name = string or nil }", name, i), 4)
    end
    list[i] = { uri = root.uri, name = root.name }
  end
  return json.encode(json.array(list))
end

-- Add one more column and its value.
local function append(columns, values, column, value)
  local n = #columns + 1
  columns[n], values[n] = column, value
end

-- Check `fields` against the column -> codec map `allowed`; return the sorted
-- column names and the encoded values. Unknown keys raise.
local function encode_fields(fields, allowed, what)
  if type(fields) ~= "table" then error(string.format("%s: fields must be a table", what), 3) end
  local columns = {}
  for key in pairs(fields) do
    if not allowed[key] then error(string.format("%s: unknown or read-only field %q", what, tostring(key)), 3) end
    columns[#columns + 1] = key
  end
  table.sort(columns)
  local values = {}
  for i, column in ipairs(columns) do
    values[i] = encode[allowed[column]](fields[column], column)
  end
  return columns, values
end

---------------------------------------------------------------------------
-- Hydration: database row -> Lua row (a missing column reads as 0, "" or
-- false, so a host schema without a column still yields a usable row)
---------------------------------------------------------------------------

local function as_integer(v)
  if v == true then return 1 end
  local n = tonumber(v)
  if n == nil then return 0 end
  return math.tointeger(n) or math.floor(n)
end

local function as_string(v)
  if type(v) == "string" then return v end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if type(v) == "number" then return tostring(v) end
  return ""
end

local function as_boolean(v)
  return v == true or tonumber(v) == 1
end

local function as_number(v)
  return tonumber(v) or 0
end

-- A stored argv (JSON array of strings), or nil when there is none or it
-- cannot be read as one (a connection then refuses the row as unusable).
local function as_command(v)
  v = as_string(v)
  if v == "" then return nil end
  local list = json.decode(v)
  if type(list) ~= "table" or not json.is_array(list) or command.problem(list) then return nil end
  return list
end

-- A stored environment (JSON object), {} when none or unreadable.
local function as_env(v)
  v = as_string(v)
  local map = v ~= "" and json.decode(v) or nil
  if type(map) ~= "table" or json.is_array(map) or command.problem({ "x" }, map) then return {} end
  return map
end

-- Stored headers (JSON object of strings), {} when none or unreadable.
local function as_headers(v)
  v = as_string(v)
  local map = v ~= "" and json.decode(v) or nil
  if type(map) ~= "table" or json.is_array(map) then return {} end
  for k, value in pairs(map) do
    if type(k) ~= "string" or type(value) ~= "string" then return {} end
  end
  return map
end

-- Stored roots (JSON array of { uri, name }), {} when none or unreadable.
local function as_roots(v)
  v = as_string(v)
  local list = v ~= "" and json.decode(v) or nil
  if type(list) ~= "table" or not json.is_array(list) then return {} end
  local out = {}
  for i, root in ipairs(list) do
    if type(root) ~= "table" or type(root.uri) ~= "string" then return {} end
    out[i] = { uri = root.uri, name = type(root.name) == "string" and root.name or nil }
  end
  return out
end

-- The operator's re-import setting: "auto" only when stored so; anything
-- else (a store from before the column, a typo) is "manual".
local function as_reimport(v)
  if v == "auto" then return "auto" end
  return "manual"
end

local hydrate_as = { integer = as_integer, string = as_string, boolean = as_boolean, number = as_number,
  command = as_command, env = as_env, reimport = as_reimport, headers = as_headers, roots = as_roots }

local function hydrator(spec)
  return function(row)
    local out = {}
    for column, kind in pairs(spec) do out[column] = hydrate_as[kind](row[column]) end
    return out
  end
end

local function hydrate_all(rows, hydrate)
  for i, row in ipairs(rows) do rows[i] = hydrate(row) end
  return rows
end

---------------------------------------------------------------------------
-- SQL helpers (text built from fixed column names only; memoised per shape)
---------------------------------------------------------------------------

local sql_cache = {}

local function insert_sql(tbl, columns)
  local key = "I" .. tbl .. ":" .. table.concat(columns, ",")
  local sql = sql_cache[key]
  if not sql then
    sql = string.format("INSERT INTO %s (%s) VALUES (%s)", tbl, table.concat(columns, ", "),
      string.rep("?", #columns, ", "))
    sql_cache[key] = sql
  end
  return sql
end

local function update_sql(tbl, columns, where)
  local key = "U" .. tbl .. ":" .. table.concat(columns, ",") .. ":" .. where
  local sql = sql_cache[key]
  if not sql then
    local sets = {}
    for i, column in ipairs(columns) do sets[i] = column .. " = ?" end
    sql = string.format("UPDATE %s SET %s WHERE %s", tbl, table.concat(sets, ", "), where)
    sql_cache[key] = sql
  end
  return sql
end

-- Rows of a query, hydrated, or the failure triple.
local function select_rows(self, what, sql, params, hydrate)
  local rows, message, code = adapter_of(self):rows(sql, params)
  if not rows then return fail(what, message, code) end
  return hydrate_all(rows, hydrate)
end

-- The first hydrated row of a query, nil when there is none, or the failure triple.
local function select_one(self, what, sql, params, hydrate)
  local rows, message, err = select_rows(self, what, sql, params, hydrate)
  if not rows then return nil, message, err end
  return rows[1]
end

local function exec(self, what, sql, params)
  local ok, message, code = adapter_of(self):exec(sql, params)
  if not ok then return fail(what, message, code) end
  return true
end

local function insert(self, what, sql, params)
  local id, message, code = adapter_of(self):insert(sql, params)
  if not id then return fail(what, message, code) end
  return id
end

---------------------------------------------------------------------------
-- Opening, migrations, closing
---------------------------------------------------------------------------

local function schema_version(adapter)
  local rows, message, code = adapter:rows("SELECT MAX(version) AS version FROM schema_version", {})
  if not rows then return nil, message, code end
  return as_integer(rows[1] and rows[1].version)
end

-- Apply one migration inside its own transaction. The version is read again
-- inside the transaction, so of two processes opening a fresh store at once
-- only the first applies it. → true | nil, message, code
local function apply_migration(adapter, entry, version)
  local sql = dialect.of(adapter)
  local ok, message, code = adapter:exec(sql.begin)
  if not ok then return nil, message, code end
  local now
  now, message, code = schema_version(adapter)
  ok = now ~= nil
  if now and now < version then
    ok, message, code = adapter:exec(sql.schema(entry.sql))
    if ok then
      ok, message, code = adapter:exec("INSERT INTO schema_version (version, applied, description) VALUES (?, ?, ?)",
        { version, os.time(), entry.description or "" })
    end
  end
  if ok then ok, message, code = adapter:exec("COMMIT") end
  if not ok then
    adapter:exec("ROLLBACK")
    return nil, message, code
  end
  return true
end

-- Apply migrations[current+1 .. target], each in its own transaction.
local function migrate_locked(adapter, list, target)
  local ok, message, code = adapter:exec(dialect.of(adapter).schema("CREATE TABLE IF NOT EXISTS schema_version ("
    .. "version INTEGER PRIMARY KEY, applied INTEGER NOT NULL DEFAULT 0, description TEXT NOT NULL DEFAULT '')"))
  if not ok then return fail("create the schema_version table", message, code) end
  local current
  current, message, code = schema_version(adapter)
  if not current then return fail("read the schema version", message, code) end
  for version = current + 1, target do
    ok, message, code = apply_migration(adapter, list[version], version)
    if not ok then return fail(string.format("apply migration %d", version), message, code) end
  end
  return true
end

-- Migrate under the dialect's schema lock, when it has one: several
-- processes opening one shared database at once then migrate in turn (even
-- the schema_version table is created by only one of them).
local function migrate(adapter, list, target)
  local lock = dialect.of(adapter).schema_lock
  if not lock then return migrate_locked(adapter, list, target) end
  local ok, message, code = adapter:exec(lock[1])
  if not ok then return fail("lock the schema for migration", message, code) end
  local results = table.pack(pcall(migrate_locked, adapter, list, target))
  adapter:exec(lock[2])
  if not results[1] then error(results[2], 0) end
  return table.unpack(results, 2, results.n)
end

local adapter_keys = { migrate_to = "integer", migrate = "boolean", migrations = "table" }
local open_keys = {
  migrate_to = "integer", busy_timeout_ms = "integer", readonly = "boolean", journal_mode = "string",
  connect_timeout_ms = "integer", password = "string", resolver = "function",
}

--- Wrap a host adapter (see mcpclient.agent.store.sqlite for the interface).
-- options: migrate (default true; false when the host owns the schema),
-- migrations (default store.migrations), migrate_to (apply only the first N
-- migrations: for tests and tools that need a store from before a migration).
-- `Store` is the metatable of the store it returns.
-- @return Store | nil, message, err
function core.open_adapter(adapter, options, Store)
  if type(adapter) ~= "table" and type(adapter) ~= "userdata" then error("adapter must be an object", 2) end
  options = check_options("store.open_adapter", options, adapter_keys)
  local list = options.migrations or migrations
  local target = options.migrate_to or #list
  if target < 0 or target > #list then
    error(string.format("migrate_to must be an integer between 0 and %d", #list), 2)
  end
  if options.migrate ~= false then
    local ok, message, err = migrate(adapter, list, target)
    if not ok then
      pcall(adapter.close, adapter)
      return nil, message, err
    end
  end
  local opened = setmetatable({ adapter = adapter, depth = 0 }, Store)
  if options.migrate ~= false and list == migrations and target >= 1 then
    -- runs whose worker vanished mid-write are marked failed by the next
    -- opener; a store that cannot do it now still opens (a later opener or
    -- a claim does it, and `mcpclient runs` shows such a run meanwhile)
    opened:recover_runs()
  end
  return opened
end

-- Open the PostgreSQL store at conninfo (see mcpclient.agent.store.postgres).
local function open_postgres(conninfo, options, Store)
  if options.journal_mode ~= nil then error("store.open: journal_mode is an SQLite option", 3) end
  local adapter, message, code = postgres.open(conninfo, {
    busy_timeout_ms = options.busy_timeout_ms or core.DEFAULT_BUSY_TIMEOUT_MS,
    connect_timeout_ms = options.connect_timeout_ms, password = options.password, resolver = options.resolver,
  })
  if not adapter then return fail("open the database", message, code) end
  if options.readonly then
    -- the session refuses every write, as a read-only SQLite file does
    local ok, set_message, set_code = adapter:exec("SET default_transaction_read_only = on")
    if not ok then
      adapter:close()
      return fail("open the database read-only", set_message, set_code)
    end
  end
  return core.open_adapter(adapter, { migrate_to = options.migrate_to, migrate = not options.readonly }, Store)
end

--- Open (creating and migrating) the store at `location`: an SQLite file
-- path (":memory:" works), or a PostgreSQL database given as a
-- "postgresql://" URI or a libpq key=value string (the password from the
-- PG* environment or ~/.pgpass; the string is never put in a message).
-- options: busy_timeout_ms (default 5000: the longest a statement, lock
-- waits included, may take), readonly (no migrations then), journal_mode
-- (SQLite: "wal" default), connect_timeout_ms (PostgreSQL, default 5000),
-- password and resolver (PostgreSQL: a credential reference such as
-- "env:NAME", resolved at every connect), migrate_to (tests and tools, see
-- open_adapter). `Store` is the metatable of the store it returns.
-- @return Store | nil, message, err
function core.open(path, options, Store)
  if type(path) ~= "string" then error("store.open: path must be a string", 2) end
  options = check_options("store.open", options, open_keys)
  if postgres.is_conninfo(path) then return open_postgres(path, options, Store) end
  for _, key in ipairs { "connect_timeout_ms", "password", "resolver" } do
    if options[key] ~= nil then error("store.open: " .. key .. " is a PostgreSQL option", 2) end
  end
  local adapter, message, code = sqlite.open(path, {
    busy_timeout_ms = options.busy_timeout_ms or core.DEFAULT_BUSY_TIMEOUT_MS,
    readonly = options.readonly, journal_mode = options.journal_mode,
  })
  if not adapter then return fail("open the database", message, code) end
  return core.open_adapter(adapter, { migrate_to = options.migrate_to, migrate = not options.readonly }, Store)
end

--- What an SQLite location names, told without opening it: "file" (a
-- regular file), "missing" (nothing yet), or nil, message, err (kind
-- "store") for a path store.open would refuse at once: a FIFO, a directory,
-- a device, a socket, one that cannot be reached. A PostgreSQL location is
-- "database" (its existence is the server's to tell).
function core.file_status(location)
  if type(location) ~= "string" then error("store.file_status: location must be a string", 2) end
  if postgres.is_conninfo(location) then return "database" end
  local state, message, code = require("mcpclient.db").sqlite_path_state(location)
  if not state then return fail("open the database", message, code) end
  return state
end

--- Whether `location` names a PostgreSQL store (a postgresql:// URI or a
--- libpq key=value string) rather than an SQLite file.
function core.is_postgres(location)
  return postgres.is_conninfo(location)
end

--- `location` as a message may show it: a PostgreSQL connection string
-- with its password replaced by "***"; an SQLite path as it is.
function core.describe(location)
  if type(location) ~= "string" then error("store.describe: location must be a string", 2) end
  return postgres.redact(location)
end

--- Close the adapter. Idempotent; also __gc and __close.
function core.close(self)
  local adapter = rawget(self, "adapter")
  if adapter ~= nil then
    self.adapter = nil
    adapter:close()
  end
end

--- The highest migration applied to this store.
function core.schema_version(self)
  local version, message, code = schema_version(adapter_of(self))
  if not version then return fail("read the schema version", message, code) end
  return version
end

---------------------------------------------------------------------------
-- Transactions
---------------------------------------------------------------------------

-- The statements that open, close and undo a transaction at `depth`: the
-- outermost is a real transaction, an inner one a savepoint.
local function transaction_sql(adapter, depth)
  if depth == 0 then return dialect.of(adapter).begin, "COMMIT", { "ROLLBACK" } end
  local name = "mcpclient_" .. depth
  return "SAVEPOINT " .. name, "RELEASE " .. name, { "ROLLBACK TO " .. name, "RELEASE " .. name }
end

-- End a transaction by what fn did (results: pcall's, packed): commit its
-- results, or undo it and raise fn's error again or return its failure.
local function settle(adapter, results, commit, rollback)
  local function undo()
    for _, sql in ipairs(rollback) do pcall(adapter.exec, adapter, sql) end
  end
  if not results[1] then
    undo()
    error(results[2], 0)
  end
  if results.n >= 3 and results[2] == nil and results[3] ~= nil then
    undo()
    return nil, results[3], results[4]
  end
  local ok, message, code = adapter:exec(commit)
  if not ok then
    undo()
    return fail("commit a transaction", message, code)
  end
  if results.n == 1 then return true end
  return table.unpack(results, 2, results.n)
end

--- Run fn() inside a write transaction (a SAVEPOINT when nested): on SQLite
-- BEGIN IMMEDIATE takes the write lock at once; on PostgreSQL it is a READ
-- COMMITTED transaction whose writers serialise on the rows they change.
-- Rolls back when fn raises (the error is raised again) or returns
-- nil, message[, err] (returned as is). Returns fn's results, or true when
-- fn returned nothing.
function core.transaction(self, fn)
  if type(fn) ~= "function" then error("transaction: fn must be a function", 2) end
  local adapter = adapter_of(self)
  local depth = self.depth
  local begin, commit, rollback = transaction_sql(adapter, depth)
  local ok, message, code = adapter:exec(begin)
  if not ok then return fail("begin a transaction", message, code) end
  self.depth = depth + 1
  local results = table.pack(pcall(fn))
  self.depth = depth
  return settle(adapter, results, commit, rollback)
end

-- Inside a write transaction: wait for the other writers of (class, uid)
-- to commit, where the dialect needs it (see store/dialect.lua). → true
local function take_turn(self, class, uid, what)
  local lock = dialect.of(adapter_of(self)).turn_lock
  if not lock then return true end
  local ok, message, code = adapter_of(self):exec(lock, { class, uid })
  if not ok then return fail(what, message, code) end
  return true
end

core.fail, core.check_uid, core.check_time, core.adapter_of = fail, check_uid, check_time, adapter_of
core.encode_fields, core.append = encode_fields, append
core.hydrator, core.hydrate_all, core.as_integer, core.as_boolean = hydrator, hydrate_all, as_integer, as_boolean
core.insert_sql, core.update_sql = insert_sql, update_sql
core.select_rows, core.select_one, core.exec, core.insert = select_rows, select_one, exec, insert
core.take_turn = take_turn

return core
