--- mcpclient.agent.store: the catalogue, enablement, run and governance repositories
-- over one adapter.
--
--   local store = require "mcpclient.agent.store"
--   local s <close> = assert(store.open("mcp.db"))
--   local uid = assert(s:add_server{ identifier = "docs", name = "Docs", url = "https://..." })
--
-- Every repository method returns its value, or nil, message, err on a
-- database failure (errors.fail("store"): err.operation says what was being
-- done, err.sql_code is the database's own code); it never raises for one. Misuse
-- (wrong argument types, unknown fields, a closed store) raises. Every value
-- reaches the database as a bound parameter; the only names spliced into SQL
-- text are column names from the fixed lists below.
--
-- The repositories speak only to an adapter (see mcpclient.agent.store.sqlite for
-- the interface); SQLite is the default one, PostgreSQL (store.open with a
-- "postgresql://" URI or a libpq key=value string) the shared one, and
-- store.open_adapter takes a host's. What differs between the databases'
-- SQL lives in mcpclient.agent.store.dialect.
local command = require "mcpclient.command"
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local check_options = require("mcpclient.agent.options").check
local dialect = require "mcpclient.agent.store.dialect"
local migrations = require "mcpclient.agent.store.migrations"
local postgres = require "mcpclient.agent.store.postgres"
local sqlite = require "mcpclient.agent.store.sqlite"

local json = core.json

local store = {
  migrations = migrations,
  SCHEMA_VERSION = #migrations,
  DEFAULT_BUSY_TIMEOUT_MS = 5000,
}

local Store = {}
Store.__index = Store

--- The one rounding of an audited duration: milliseconds to two decimals,
--- a hundredth of a millisecond (the store applies it to every event; a
--- run's TOOL payload states the same value).
function store.audit_duration(ms)
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

-- The operator's re-import setting: "auto" only when stored so; anything
-- else (a store from before the column, a typo) is "manual".
local function as_reimport(v)
  if v == "auto" then return "auto" end
  return "manual"
end

local hydrate_as = { integer = as_integer, string = as_string, boolean = as_boolean, number = as_number,
  command = as_command, env = as_env, reimport = as_reimport }

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

local hydrate_server = hydrator {
  uid = "integer", pid = "integer", identifier = "string", name = "string", description = "string",
  url = "string", auth_credential = "string", auth_placement = "string", auth_header_name = "string",
  data_class = "string", requires_approval = "string", enabled = "boolean", import_status = "string",
  import_error = "string", last_imported = "integer", tool_count = "integer", last_contact = "integer",
  last_latency_ms = "integer", tstamp = "integer", crdate = "integer", deleted = "boolean",
  catalogue_stale = "boolean",
  command = "command", env = "env", cwd = "string", reimport = "reimport", reimport_pending = "integer",
}

local hydrate_tool = hydrator {
  uid = "integer", pid = "integer", server = "integer", tool_name = "string", remote_name = "string",
  description = "string", input_schema = "string", remote_annotations = "string", orphaned = "boolean",
  tstamp = "integer", crdate = "integer",
}

local hydrate_run = hydrator {
  uid = "integer", uuid = "string", status = "string", claimed_by = "string", lease_expires = "integer",
  pending_effect = "string", cancel_requested = "boolean", user_name = "string", configuration = "string",
  crdate = "integer", tstamp = "integer", pending_steps = "string", approval = "string",
}

local hydrate_event = hydrator {
  uid = "integer", run = "integer", sequence = "integer", kind = "string", round = "integer",
  duration_ms = "number", payload = "string", crdate = "integer",
}

local hydrate_task = hydrator {
  uid = "integer", run = "integer", sequence = "integer", server = "string", task_id = "string", tool = "string",
  arguments_sha256 = "string", arguments = "string", round = "integer", handle = "string", status = "string",
  started_by = "string", finished_by = "string", closed = "boolean", crdate = "integer", tstamp = "integer",
}

local hydrate_governance = hydrator {
  uid = "integer", pid = "integer", crdate = "integer", correlation_id = "string", decision = "string",
  reason = "string", provider = "string", model = "string", configuration_identifier = "string",
  be_user = "integer", tool_name = "string", agentrun_uid = "integer", guardrail = "string", detail = "string",
}

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
-- @return Store | nil, message, err
function store.open_adapter(adapter, options)
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
local function open_postgres(conninfo, options)
  if options.journal_mode ~= nil then error("store.open: journal_mode is an SQLite option", 3) end
  local adapter, message, code = postgres.open(conninfo, {
    busy_timeout_ms = options.busy_timeout_ms or store.DEFAULT_BUSY_TIMEOUT_MS,
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
  return store.open_adapter(adapter, { migrate_to = options.migrate_to, migrate = not options.readonly })
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
-- open_adapter).
-- @return Store | nil, message, err
function store.open(path, options)
  if type(path) ~= "string" then error("store.open: path must be a string", 2) end
  options = check_options("store.open", options, open_keys)
  if postgres.is_conninfo(path) then return open_postgres(path, options) end
  for _, key in ipairs { "connect_timeout_ms", "password", "resolver" } do
    if options[key] ~= nil then error("store.open: " .. key .. " is a PostgreSQL option", 2) end
  end
  local adapter, message, code = sqlite.open(path, {
    busy_timeout_ms = options.busy_timeout_ms or store.DEFAULT_BUSY_TIMEOUT_MS,
    readonly = options.readonly, journal_mode = options.journal_mode,
  })
  if not adapter then return fail("open the database", message, code) end
  return store.open_adapter(adapter, { migrate_to = options.migrate_to, migrate = not options.readonly })
end

--- What an SQLite location names, told without opening it: "file" (a
-- regular file), "missing" (nothing yet), or nil, message, err (kind
-- "store") for a path store.open would refuse at once: a FIFO, a directory,
-- a device, a socket, one that cannot be reached. A PostgreSQL location is
-- "database" (its existence is the server's to tell).
function store.file_status(location)
  if type(location) ~= "string" then error("store.file_status: location must be a string", 2) end
  if postgres.is_conninfo(location) then return "database" end
  local state, message, code = require("mcpclient.db").sqlite_path_state(location)
  if not state then return fail("open the database", message, code) end
  return state
end

--- Whether `location` names a PostgreSQL store (a postgresql:// URI or a
--- libpq key=value string) rather than an SQLite file.
function store.is_postgres(location)
  return postgres.is_conninfo(location)
end

--- `location` as a message may show it: a PostgreSQL connection string
-- with its password replaced by "***"; an SQLite path as it is.
function store.describe(location)
  if type(location) ~= "string" then error("store.describe: location must be a string", 2) end
  return postgres.redact(location)
end

--- Close the adapter. Idempotent; also __gc and __close.
function Store:close()
  local adapter = rawget(self, "adapter")
  if adapter ~= nil then
    self.adapter = nil
    adapter:close()
  end
end

Store.__gc = Store.close
Store.__close = Store.close

--- The highest migration applied to this store.
function Store:schema_version()
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
function Store:transaction(fn)
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

---------------------------------------------------------------------------
-- OAuth grants (mcpclient.agent.grants speaks for them)
---------------------------------------------------------------------------

local hydrate_grant = hydrator {
  uid = "integer", server = "string", resource = "string", issuer = "string", record = "string", tstamp = "integer",
}

local function check_text(value, name)
  if type(value) ~= "string" then error(name .. " must be a string", 3) end
  return value
end

--- A server's grant rows { uid, server, resource, issuer, record (JSON), tstamp }, newest first.
function Store:grants(server)
  check_text(server, "server")
  return select_rows(self, "read the authorization grants of " .. server,
    "SELECT * FROM mcp_oauth_grant WHERE server = ? ORDER BY tstamp DESC, uid DESC", { server }, hydrate_grant)
end

--- Keep a grant of `server` for (resource, issuer): it replaces the grant
-- held for the same resource, whichever authorization server issued that one
-- (a resource trusts one issuer at a time). → true
function Store:save_grant(server, resource, issuer, record)
  check_text(server, "server")
  check_text(resource, "resource")
  check_text(issuer, "issuer")
  check_text(record, "record")
  return self:transaction(function()
    local ok, message, err = exec(self, "replace an authorization grant of " .. server,
      "DELETE FROM mcp_oauth_grant WHERE server = ? AND resource = ?", { server, resource })
    if not ok then return nil, message, err end
    ok, message, err = insert(self, "save an authorization grant of " .. server,
      insert_sql("mcp_oauth_grant", { "server", "resource", "issuer", "record", "tstamp" }),
      { server, resource, issuer, record, os.time() })
    if not ok then return nil, message, err end
    return true
  end)
end

--- Forget every grant of `server`. → the number forgotten
function Store:forget_grants(server)
  check_text(server, "server")
  local ok, message, err = exec(self, "forget the authorization grants of " .. server,
    "DELETE FROM mcp_oauth_grant WHERE server = ?", { server })
  if not ok then return nil, message, err end
  return adapter_of(self):changes()
end

--- Server changes that concern its grants, in the transaction of the change:
-- a new URL forgets them (they were issued for the old one), a new
-- identifier carries them along. → the number forgotten
local function grants_follow(self, row, fields)
  if fields.url ~= nil and fields.url ~= row.url then return self:forget_grants(row.identifier) end
  if fields.identifier ~= nil and fields.identifier ~= row.identifier then
    local ok, message, err = exec(self, "move the authorization grants of " .. row.identifier,
      "UPDATE mcp_oauth_grant SET server = ? WHERE server = ?", { fields.identifier, row.identifier })
    if not ok then return nil, message, err end
  end
  return 0
end

---------------------------------------------------------------------------
-- Servers
---------------------------------------------------------------------------

local server_fields = {
  identifier = "string", name = "string", description = "string", url = "string", auth_credential = "string",
  auth_placement = "string", auth_header_name = "string", data_class = "string", requires_approval = "approval",
  enabled = "flag", command = "command", env = "env", cwd = "string", reimport = "string",
}

--- Add a server; unset fields take the table defaults. → uid
function Store:add_server(fields)
  local columns, values = encode_fields(fields, server_fields, "add_server")
  local now = os.time()
  append(columns, values, "crdate", now)
  append(columns, values, "tstamp", now)
  return insert(self, "add a server", insert_sql("mcp_server", columns), values)
end

--- Change editable fields of a live server and stamp tstamp. A new URL
--- forgets the server's OAuth grants (they were issued for the old one); a
--- new identifier carries them along. → true, the number of grants forgotten
function Store:update_server(uid, fields)
  check_uid(uid)
  local columns, values = encode_fields(fields, server_fields, "update_server")
  append(columns, values, "tstamp", os.time())
  values[#values + 1] = uid
  local sql = update_sql("mcp_server", columns, "uid = ? AND deleted = 0")
  if fields.url == nil and fields.identifier == nil then
    -- nothing that concerns the grants: the one statement, as it always was
    local ok, message, err = exec(self, "update server " .. uid, sql, values)
    if not ok then return nil, message, err end
    return true, 0
  end
  return self:transaction(function()
    local row, message, err = select_one(self, "read server " .. uid,
      "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0", { uid }, hydrate_server)
    if err then return nil, message, err end
    local ok
    ok, message, err = exec(self, "update server " .. uid, sql, values)
    if not ok then return nil, message, err end
    local forgotten = 0
    if row then
      forgotten, message, err = grants_follow(self, row, fields)
      if not forgotten then return nil, message, err end
    end
    return true, forgotten
  end)
end

--- Soft delete (deleted = 1); the server's OAuth grants are forgotten with
--- it, so a server added later under its identifier never inherits them.
--- → true, the number of grants forgotten
function Store:remove_server(uid)
  check_uid(uid)
  return self:transaction(function()
    local row, message, err = select_one(self, "read server " .. uid,
      "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0", { uid }, hydrate_server)
    if err then return nil, message, err end
    local ok
    ok, message, err = exec(self, "remove server " .. uid,
      "UPDATE mcp_server SET deleted = 1, tstamp = ? WHERE uid = ?", { os.time(), uid })
    if not ok then return nil, message, err end
    local forgotten = 0
    if row then
      forgotten, message, err = self:forget_grants(row.identifier)
      if not forgotten then return nil, message, err end
    end
    return true, forgotten
  end)
end

--- A live server's row, or nil (deleted or absent).
function Store:server(uid)
  check_uid(uid)
  return select_one(self, "read server " .. uid, "SELECT * FROM mcp_server WHERE uid = ? AND deleted = 0",
    { uid }, hydrate_server)
end

--- Every live server, any enabled state, by identifier.
function Store:servers()
  return select_rows(self, "list the servers",
    "SELECT * FROM mcp_server WHERE deleted = 0 ORDER BY identifier ASC, uid ASC", {}, hydrate_server)
end

--- Live servers switched on (hidden is ignored, as in the reference), by identifier.
function Store:enabled_servers()
  return select_rows(self, "list the enabled servers",
    "SELECT * FROM mcp_server WHERE deleted = 0 AND enabled = 1 ORDER BY identifier ASC, uid ASC", {}, hydrate_server)
end

-- A contact is a stale timestamp at worst: it never holds a tool's answer
-- back for the whole busy timeout of a locked database.
store.CONTACT_BUSY_TIMEOUT_MS = 200

--- Liveness: touches only last_contact and last_latency_ms, so a contact
--- never overwrites what an operator or an import wrote. → true
-- @param latency_ms whole milliseconds (the connection rounds once, before it
--   calls its recorder)
function Store:record_contact(uid, at, latency_ms)
  check_uid(uid)
  at = check_time(at, "at")
  if math.type(latency_ms) ~= "integer" or latency_ms < 0 then
    error("latency_ms must be a non-negative integer", 2)
  end
  local function stamp()
    return exec(self, "record a contact with server " .. uid,
      "UPDATE mcp_server SET last_contact = ?, last_latency_ms = ? WHERE uid = ?", { at, latency_ms, uid })
  end
  local adapter = adapter_of(self)
  if adapter.with_busy_timeout then return adapter:with_busy_timeout(store.CONTACT_BUSY_TIMEOUT_MS, stamp) end
  return stamp()
end

local import_statuses = { never_imported = true, ok = true, partial = true, error = true }

--- An import's outcome, a refusal included (status "error"). → true
function Store:record_import(uid, outcome)
  check_uid(uid)
  if type(outcome) ~= "table" then error("record_import: outcome must be a table", 2) end
  if not import_statuses[outcome.status] then
    error(string.format("record_import: unknown status %q", tostring(outcome.status)), 2)
  end
  local message = outcome.error or ""
  if type(message) ~= "string" then error("record_import: error must be a string", 2) end
  local count = outcome.tool_count or 0
  if math.type(count) ~= "integer" then error("record_import: tool_count must be an integer", 2) end
  local at = check_time(outcome.at, "at")
  return exec(self, "record the import of server " .. uid,
    "UPDATE mcp_server SET import_status = ?, import_error = ?, tool_count = ?, last_imported = ?, tstamp = ? "
      .. "WHERE uid = ?", { outcome.status, message, count, at, at, uid })
end

--- A recorder for mcp.connect{ health = ... }: stamps the contact and
-- raises when that fails, so the client logs its warning and the operation
-- still returns. `log`, when given, is told first as log("warning", message)
-- (a host that keeps its own log). A uid <= 0 records nothing.
function Store:health_recorder(server_uid, log)
  check_uid(server_uid, "server_uid")
  if log ~= nil and type(log) ~= "function" then error("log must be a function", 2) end
  if server_uid <= 0 then return function() end end
  return function(identifier, latency_ms)
    local ok, message = self:record_contact(server_uid, os.time(), latency_ms)
    if not ok then
      local text = string.format('An MCP liveness observation for "%s" could not be stored: %s',
        tostring(identifier), message)
      if log then pcall(log, "warning", text) end
      error(message, 0)
    end
  end
end

---------------------------------------------------------------------------
-- Tools
---------------------------------------------------------------------------

--- All tools of a server, live first, by tool_name.
function Store:tools_of(server_uid)
  check_uid(server_uid, "server_uid")
  return select_rows(self, "list the tools of server " .. server_uid,
    "SELECT * FROM mcp_tool WHERE server = ? ORDER BY orphaned ASC, tool_name ASC", { server_uid }, hydrate_tool)
end

--- A server's live (not orphaned) tools by tool_name.
function Store:live_tools_of(server_uid)
  check_uid(server_uid, "server_uid")
  return select_rows(self, "list the live tools of server " .. server_uid,
    "SELECT * FROM mcp_tool WHERE server = ? AND orphaned = 0 ORDER BY tool_name ASC", { server_uid }, hydrate_tool)
end

--- The uid of the server owning a local tool name (orphaned rows count: the name stays taken), or nil.
function Store:tool_owner(tool_name)
  if type(tool_name) ~= "string" then error("tool_name must be a string", 2) end
  local rows, message, code = adapter_of(self):rows("SELECT server FROM mcp_tool WHERE tool_name = ?", { tool_name })
  if not rows then return fail("look up the owner of a tool", message, code) end
  if rows[1] == nil then return nil end
  return as_integer(rows[1].server)
end

local accepted_fields = { "tool_name", "remote_name", "description", "input_schema", "remote_annotations" }

-- The accepted tools as rows of values in accepted_fields order (misuse raises).
local function accepted_values(accepted)
  if type(accepted) ~= "table" then error("reconcile: accepted must be an array", 3) end
  local values = {}
  for i, tool in ipairs(accepted) do
    if type(tool) ~= "table" then error(string.format("reconcile: accepted[%d] must be a table", i), 3) end
    local row = {}
    for j, key in ipairs(accepted_fields) do
      local value = tool[key]
      if value == nil and key ~= "tool_name" then value = "" end
      if type(value) ~= "string" then error(string.format("reconcile: accepted[%d].%s must be a string", i, key), 3) end
      row[j] = value
    end
    values[i] = row
  end
  return values
end

-- Update the row of a tool the server had.
local function update_tool(adapter, row, server, v, now)
  return adapter:exec("UPDATE mcp_tool SET server = ?, pid = ?, remote_name = ?, description = ?, "
    .. "input_schema = ?, remote_annotations = ?, orphaned = 0, tstamp = ? WHERE uid = ?",
    { server.uid, server.pid, v[2], v[3], v[4], v[5], now, row.uid })
end

-- How many new tools one INSERT carries: 100 rows of 9 parameters stay far
-- below every database's parameter limit, and a large catalogue then costs a
-- hundredth of the round trips, which count when the database is across a
-- network.
local INSERT_BATCH = 100

-- Insert the new tools (values rows, in order) in batches of INSERT_BATCH.
local function insert_tools(adapter, fresh, server, now)
  for first = 1, #fresh, INSERT_BATCH do
    local groups, params = {}, {}
    for i = first, math.min(first + INSERT_BATCH - 1, #fresh) do
      local v = fresh[i]
      groups[#groups + 1] = "(?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
      for _, value in ipairs { server.uid, server.pid, v[1], v[2], v[3], v[4], v[5], now, now } do
        params[#params + 1] = value
      end
    end
    local ok, message, code = adapter:exec("INSERT INTO mcp_tool (server, pid, tool_name, remote_name, description, "
      .. "input_schema, remote_annotations, orphaned, tstamp, crdate) VALUES " .. table.concat(groups, ", "), params)
    if not ok then return nil, message, code end
  end
  return true
end

-- Write the accepted tools: update the rows the server had, insert the
-- others (a name listed twice is written once, with its last values, as
-- an insert followed by an update would leave it). → seen names | nil, message, code
local function write_tools(adapter, existing, server, values, now)
  local seen, fresh, at = {}, {}, {}
  for _, v in ipairs(values) do
    local name = v[1]
    if existing[name] then
      local ok, message, code = update_tool(adapter, existing[name], server, v, now)
      if not ok then return nil, message, code end
    elseif at[name] then
      fresh[at[name]] = v
    else
      fresh[#fresh + 1] = v
      at[name] = #fresh
    end
    seen[name] = true
  end
  local ok, message, code = insert_tools(adapter, fresh, server, now)
  if not ok then return nil, message, code end
  return seen
end

-- Mark the rows of `uids` orphaned, INSERT_BATCH at a time.
local function mark_orphaned(adapter, uids, now)
  for first = 1, #uids, INSERT_BATCH do
    local params, marks = { now }, {}
    for i = first, math.min(first + INSERT_BATCH - 1, #uids) do
      params[#params + 1] = uids[i]
      marks[#marks + 1] = "?"
    end
    local ok, message, code = adapter:exec("UPDATE mcp_tool SET orphaned = 1, tstamp = ? WHERE uid IN ("
      .. table.concat(marks, ", ") .. ")", params)
    if not ok then return nil, message, code end
  end
  return true
end

-- Mark every row the catalogue no longer lists as orphaned (rows stay: a
-- run's audit may name them). → how many are orphaned now, or nil, message, code
local function sweep_orphans(adapter, existing, seen, now)
  local orphaned, newly = 0, {}
  for name, row in pairs(existing) do
    if not seen[name] then
      orphaned = orphaned + 1
      if not as_boolean(row.orphaned) then newly[#newly + 1] = row.uid end
    end
  end
  local ok, message, code = mark_orphaned(adapter, newly, now)
  if not ok then return nil, message, code end
  return orphaned
end

-- The server's tool rows by tool_name.
local function existing_tools(adapter, server_uid)
  local rows, message, code = adapter:rows("SELECT uid, tool_name, orphaned FROM mcp_tool WHERE server = ?",
    { server_uid })
  if not rows then return nil, message, code end
  local existing = {}
  for _, row in ipairs(rows) do existing[row.tool_name] = row end
  return existing
end

--- Upsert the accepted catalogue and sweep the rest into orphans, in one
-- transaction. → orphaned count (already-orphaned rows included)
function Store:reconcile(server_row, accepted, now)
  if type(server_row) ~= "table" then error("reconcile: server_row must be a table", 2) end
  local server = { uid = check_uid(server_row.uid, "server_row.uid"), pid = check_uid(server_row.pid or 0,
    "server_row.pid") }
  local values = accepted_values(accepted)
  now = check_time(now, "now")
  local adapter = adapter_of(self)
  local what = "reconcile the tools of server " .. server.uid
  return self:transaction(function()
    local turn, turn_message, turn_err = take_turn(self, dialect.IMPORTS, server.uid, what)
    if not turn then return nil, turn_message, turn_err end
    local existing, message, code = existing_tools(adapter, server.uid)
    if not existing then return fail(what, message, code) end
    local seen
    seen, message, code = write_tools(adapter, existing, server, values, now)
    if not seen then return fail(what, message, code) end
    local orphaned
    orphaned, message, code = sweep_orphans(adapter, existing, seen, now)
    if not orphaned then return fail(what, message, code) end
    return orphaned
  end)
end

---------------------------------------------------------------------------
-- Enablement: per-tool and per-group override rows the gate reads
---------------------------------------------------------------------------

local function set_flag(self, tbl, key_column, key, enabled, what)
  if type(key) ~= "string" then error(key_column .. " must be a string", 3) end
  if type(enabled) ~= "boolean" then error("enabled must be a boolean", 3) end
  return exec(self, what, string.format("INSERT INTO %s (%s, enabled, tstamp) VALUES (?, ?, ?) "
    .. "ON CONFLICT (%s) DO UPDATE SET enabled = excluded.enabled, tstamp = excluded.tstamp",
    tbl, key_column, key_column), { key, enabled and 1 or 0, os.time() })
end

local function get_flag(self, tbl, key_column, key, what)
  if type(key) ~= "string" then error(key_column .. " must be a string", 3) end
  local rows, message, code = adapter_of(self):rows(
    string.format("SELECT enabled FROM %s WHERE %s = ?", tbl, key_column), { key })
  if not rows then return fail(what, message, code) end
  if rows[1] == nil then return nil end
  return as_boolean(rows[1].enabled)
end

--- Switch a local tool on or off (the override row). → true
function Store:set_tool_enabled(tool_name, enabled)
  return set_flag(self, "tool_state", "tool_name", tool_name, enabled, "switch a tool")
end

--- true | false | nil (no override row)
function Store:tool_enabled(tool_name)
  return get_flag(self, "tool_state", "tool_name", tool_name, "read a tool's switch")
end

--- Switch a tool group on or off. → true
function Store:set_group_enabled(group, enabled)
  return set_flag(self, "tool_group_state", "group_name", group, enabled, "switch a tool group")
end

--- true | false | nil (no override row: the group is on)
function Store:group_enabled(group)
  return get_flag(self, "tool_group_state", "group_name", group, "read a tool group's switch")
end

---------------------------------------------------------------------------
-- Runs and events: the run record, its lease, and its audit stream
---------------------------------------------------------------------------

local run_fields = {
  uuid = "string", status = "string", claimed_by = "string", lease_expires = "integer", pending_effect = "string",
  user_name = "string", configuration = "string", cancel_requested = "flag", pending_steps = "string",
  approval = "string",
}

--- Insert a run; unset fields take the table defaults. → run uid
function Store:insert_run(fields)
  local columns, values = encode_fields(fields, run_fields, "insert_run")
  local now = os.time()
  append(columns, values, "crdate", now)
  append(columns, values, "tstamp", now)
  return insert(self, "insert a run", insert_sql("agent_run", columns), values)
end

-- Change one row's fields by its uid and stamp tstamp (a run's, a task's). → true
local function update_by_uid(self, what, tbl, allowed, uid, fields)
  check_uid(uid, nil, 3)
  local columns, values = encode_fields(fields, allowed, "update_" .. what)
  append(columns, values, "tstamp", os.time())
  values[#values + 1] = uid
  return exec(self, "update " .. what .. " " .. uid, update_sql(tbl, columns, "uid = ?"), values)
end

--- A run's row, or nil.
function Store:run(uid)
  check_uid(uid)
  return select_one(self, "read run " .. uid, "SELECT * FROM agent_run WHERE uid = ?", { uid }, hydrate_run)
end

--- Change a run's fields and stamp tstamp. → true
function Store:update_run(uid, fields)
  return update_by_uid(self, "run", "agent_run", run_fields, uid, fields)
end

--- The lease-fenced write: changes the run only while it is in `status`
-- (default "running") and claimed by owner, so a worker that lost its lease
-- cannot overwrite the run another worker now owns. The check and the write
-- are one UPDATE (a compare-and-set): on PostgreSQL a concurrent writer of
-- the row waits for it, and the condition is judged again on the row it
-- committed, so of two workers only the one still named in claimed_by writes.
-- → rows changed (0: the lease is lost)
function Store:guarded_update_run(uid, owner, fields, status)
  check_uid(uid)
  if type(owner) ~= "string" then error("owner must be a string", 2) end
  if status ~= nil and type(status) ~= "string" then error("status must be a string", 2) end
  local columns, values = encode_fields(fields, run_fields, "guarded_update_run")
  append(columns, values, "tstamp", os.time())
  values[#values + 1] = uid
  values[#values + 1] = status or "running"
  values[#values + 1] = owner
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec(
    update_sql("agent_run", columns, "uid = ? AND status = ? AND claimed_by = ?"), values)
  if not ok then return fail("update run " .. uid .. " under its lease", message, code) end
  return adapter:changes()
end

-- A run left behind: still running, its lease expired, and its fence set
-- (a write may have run whose step is not in the audit). Nobody may take it
-- over and go on as if nothing happened.
local LEFT_BEHIND = "status = 'running' AND lease_expires < ? AND pending_effect <> ''"
local RECOVERED_ORDER = { "kind", "reason", "owner", "leaseExpires", "fence" }

-- Mark one run left behind failed (one compare-and-set: of several
-- processes that find it, one marks it) and append a "recovered" event that
-- says why and repeats the fence. → true marked | false (not left behind any
-- more) | nil, message, err
local function fail_closed(self, row, now)
  local what = "mark run " .. row.uid .. " failed"
  return self:transaction(function()
    local adapter = adapter_of(self)
    local ok, message, code = adapter:exec("UPDATE agent_run SET status = 'failed', tstamp = ? WHERE uid = ? AND "
      .. "claimed_by = ? AND " .. LEFT_BEHIND, { now, row.uid, row.claimed_by, now })
    if not ok then return fail(what, message, code) end
    if adapter:changes() ~= 1 then return false end
    local payload = json.set_key_order({ kind = "recovered", reason = "the lease expired while a fenced write "
      .. "was unrecorded: the call may or may not have run", owner = core.repair_utf8(row.claimed_by),
      leaseExpires = row.lease_expires, fence = core.repair_utf8(row.pending_effect) }, RECOVERED_ORDER)
    local sequence, event_message, err = self:append_event(row.uid, { kind = "recovered",
      payload = json.encode(payload) })
    if not sequence then return nil, event_message, err end
    return true
  end)
end

--- Is a fence one a new owner may take over: every call it names became a
--- task whose handle is stored (the entry carries its task_id), so the
--- outcome can be read from the server instead of guessed.
function store.followable(fence)
  local ok, list = pcall(json.decode, fence)
  if not ok or type(list) ~= "table" or not json.is_array(list) or #list == 0 then return false end
  for _, entry in ipairs(list) do
    if type(entry) ~= "table" or type(entry.task_id) ~= "string" or entry.task_id == "" then return false end
  end
  return true
end

--- Mark every run left behind failed: still running, its lease expired
-- before `now` (default: now), its fence set. Each gets a "recovered" event
-- naming its owner, its lease and its fence, which stays on the row so the
-- operator can tell which call may have run (see `mcpclient runs`). The store
-- does this itself when it is opened for writing and when a run is claimed.
-- → the uids marked (a list) | nil, message, err
function Store:recover_runs(now)
  now = check_time(now, "now")
  local rows, message, err = select_rows(self, "find the runs left behind", "SELECT * FROM agent_run WHERE "
    .. LEFT_BEHIND .. " ORDER BY uid ASC", { now }, hydrate_run)
  if not rows then return nil, message, err end
  local marked = {}
  for _, row in ipairs(rows) do
    local done, done_message, done_err = false, nil, nil
    if not store.followable(row.pending_effect) then done, done_message, done_err = fail_closed(self, row, now) end
    if done == nil then return nil, done_message, done_err end
    if done then marked[#marked + 1] = row.uid end
  end
  return marked
end

--- Take over a running run whose lease has expired (lease_expires < now),
-- or renew one's own: one compare-and-set, so of several workers that see
-- the same expired lease exactly one gets it, and the old owner's next
-- fenced write changes nothing. A run waiting for approval is taken over the
-- same way once its lease has expired (or its owner released it), provided
-- it kept what it waits on (pending_steps); its status stays waiting. A run
-- left behind with its fence set is not taken over: it is marked failed (see
-- recover_runs). → 1 claimed, 0 not (someone holds it, or it was left behind)
function Store:claim_run(uid, owner, lease_expires, now)
  check_uid(uid)
  if type(owner) ~= "string" then error("owner must be a string", 2) end
  check_uid(lease_expires, "lease_expires")
  now = check_time(now, "now")
  local row, message, err = self:run(uid)
  if row == nil and message ~= nil then return nil, message, err end
  if row and row.claimed_by ~= owner and row.status == "running" and row.lease_expires < now
      and row.pending_effect ~= "" and not store.followable(row.pending_effect) then
    local marked
    marked, message, err = fail_closed(self, row, now)
    if marked == nil then return nil, message, err end
  end
  local adapter = adapter_of(self)
  local ok, code
  ok, message, code = adapter:exec("UPDATE agent_run SET claimed_by = ?, lease_expires = ?, tstamp = ? "
    .. "WHERE uid = ? AND (status = 'running' OR (status = 'waiting_approval' AND pending_steps <> '')) "
    .. "AND (claimed_by = ? OR lease_expires < ?)",
    { owner, lease_expires, now, uid, owner, now })
  if not ok then return fail("claim run " .. uid, message, code) end
  return adapter:changes()
end

--- Record a person's decision on what a waiting run waits for, from any
--- process: `approval` is "approved" or "denied"; `pending_steps` is the text
--- the decider was shown (the row's), so a decision never lands on a later
--- suspension. One compare-and-set (the first decision wins), and the
--- `event` (an "approval" event) appended in the same transaction. With
--- `owner`, only while that owner holds the run (the holder's own decision).
--- → 1 recorded, 0 not (the run is not waiting on those steps, was decided
--- already, or is held by another owner) | nil, message, err
function Store:decide_run(uid, approval, pending_steps, event, owner)
  check_uid(uid)
  if approval ~= "approved" and approval ~= "denied" then
    error('decide_run: approval must be "approved" or "denied"', 2)
  end
  if type(pending_steps) ~= "string" or pending_steps == "" then
    error("decide_run: pending_steps must be the waiting run's steps", 2)
  end
  if type(event) ~= "table" then error("decide_run: event must be a table", 2) end
  if owner ~= nil and type(owner) ~= "string" then error("decide_run: owner must be a string", 2) end
  local sql = "UPDATE agent_run SET approval = ?, tstamp = ? WHERE uid = ? AND status = 'waiting_approval' AND "
    .. "approval = '' AND pending_steps = ?"
  local params = { approval, os.time(), uid, pending_steps }
  if owner then
    sql = sql .. " AND claimed_by = ?"
    params[#params + 1] = owner
  end
  return self:transaction(function()
    local adapter = adapter_of(self)
    local ok, message, code = adapter:exec(sql, params)
    if not ok then return fail("record the decision on run " .. uid, message, code) end
    if adapter:changes() ~= 1 then return 0 end
    local sequence, event_message, err = self:append_event(uid, event)
    if not sequence then return nil, event_message, err end
    return 1
  end)
end

--- The runs, newest first: every one, or (open = true) those an operator
-- may have to act on: still running or waiting for approval, or with their
-- fence set. → rows (as Store:run gives them)
function Store:runs(open)
  if open ~= nil and type(open) ~= "boolean" then error("runs: open must be a boolean", 2) end
  local where = open and " WHERE status IN ('running', 'waiting_approval') OR pending_effect <> ''" or ""
  return select_rows(self, "list the runs", "SELECT * FROM agent_run" .. where .. " ORDER BY uid DESC", {},
    hydrate_run)
end

--- Ask a run to stop (a run's cancel hook polls this flag). → true
function Store:request_cancel(uid)
  check_uid(uid)
  return exec(self, "request the cancellation of run " .. uid,
    "UPDATE agent_run SET cancel_requested = 1, tstamp = ? WHERE uid = ?", { os.time(), uid })
end

-- Write one event row taking the next sequence number of its run. → sequence
local function write_event(self, run_uid, row)
  local what = "append an event to run " .. run_uid
  local adapter = adapter_of(self)
  local uid, message, code = adapter:insert("INSERT INTO agent_run_event (run, sequence, kind, round, duration_ms, "
    .. "payload, crdate) VALUES (?, (SELECT COALESCE(MAX(sequence), 0) + 1 FROM agent_run_event WHERE run = ?), "
    .. "?, ?, ?, ?, ?)", row)
  if not uid then return fail(what, message, code) end
  local rows
  rows, message, code = adapter:rows("SELECT sequence FROM agent_run_event WHERE uid = ?", { uid })
  if not rows then return fail(what, message, code) end
  return as_integer(rows[1] and rows[1].sequence)
end

--- Append an event to a run's stream; the sequence is taken and written in
-- one statement, and on a database whose transactions do not serialise
-- writers (PostgreSQL) under a lock on the run's stream, so concurrent
-- writers on any host never share a number nor leave a gap. → sequence
function Store:append_event(run_uid, event)
  check_uid(run_uid, "run_uid")
  if type(event) ~= "table" then error("append_event: event must be a table", 2) end
  if type(event.kind) ~= "string" then error("append_event: kind must be a string", 2) end
  local round = event.round or 0
  if math.type(round) ~= "integer" then error("append_event: round must be an integer", 2) end
  local duration = event.duration_ms or 0
  if type(duration) ~= "number" then error("append_event: duration_ms must be a number", 2) end
  local payload = event.payload or ""
  if type(payload) ~= "string" then error("append_event: payload must be JSON text", 2) end
  duration = store.audit_duration(duration)
  local row = { run_uid, run_uid, event.kind, round, duration, payload, os.time() }
  if not dialect.of(adapter_of(self)).turn_lock then return write_event(self, run_uid, row) end
  return self:transaction(function()
    local ok, message, err = take_turn(self, dialect.EVENTS, run_uid, "append an event to run " .. run_uid)
    if not ok then return nil, message, err end
    return write_event(self, run_uid, row)
  end)
end

--- A run's events by sequence.
function Store:events(run_uid)
  check_uid(run_uid, "run_uid")
  return select_rows(self, "read the events of run " .. run_uid,
    "SELECT * FROM agent_run_event WHERE run = ? ORDER BY sequence ASC", { run_uid }, hydrate_event)
end

---------------------------------------------------------------------------
-- Tasks: the handles of a run's task-backed calls
---------------------------------------------------------------------------

local task_fields = {
  run = "integer", sequence = "integer", server = "string", task_id = "string", tool = "string",
  arguments_sha256 = "string", arguments = "string", round = "integer", handle = "string", status = "string",
  started_by = "string", finished_by = "string", closed = "flag",
}

--- Store a task's handle and, in the same transaction, the run's fence
--- naming it (`fence`: the fence's new text) under the run's lease. Either
--- both are written or neither. → task uid | nil, message, err (false when
--- the lease is lost: nothing written)
function Store:insert_task(fields, owner, fence)
  if type(owner) ~= "string" or type(fence) ~= "string" then error("insert_task: owner and fence are text", 2) end
  local columns, values = encode_fields(fields, task_fields, "insert_task")
  local now = os.time()
  append(columns, values, "crdate", now)
  append(columns, values, "tstamp", now)
  return self:transaction(function()
    local changed, message, err = self:guarded_update_run(fields.run, owner, { pending_effect = fence })
    if changed == nil then return nil, message, err end
    if changed ~= 1 then return false end
    return insert(self, "store the handle of task " .. tostring(fields.task_id), insert_sql("agent_task", columns),
      values)
  end)
end

--- Change a stored task's fields (its last status; closed and finished_by
--- once its step is recorded). → true
function Store:update_task(uid, fields)
  return update_by_uid(self, "task", "agent_task", task_fields, uid, fields)
end

--- Close a task once its step is recorded: who finished it and its last
--- status. Only an open task is closed, so of two owners that followed the
--- same task (a lease taken over while the first still waited) one records
--- its step. → 1 closed | 0 (closed already)
function Store:close_task(uid, finished_by, status)
  check_uid(uid)
  if type(finished_by) ~= "string" or type(status) ~= "string" then
    error("close_task: finished_by and status are text", 2)
  end
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec("UPDATE agent_task SET closed = 1, finished_by = ?, status = ?, tstamp = ? "
    .. "WHERE uid = ? AND closed = 0", { finished_by, status, os.time(), uid })
  if not ok then return fail("close task " .. uid, message, code) end
  return adapter:changes()
end

--- The tasks not closed yet: of one run (`run_uid`), or every run's (nil),
--- optionally of one server; oldest first. → rows
function Store:open_tasks(run_uid, server)
  local where, params = { "closed = 0" }, {}
  if run_uid ~= nil then
    check_uid(run_uid, "run_uid")
    where[#where + 1] = "run = ?"
    params[#params + 1] = run_uid
  end
  if server ~= nil then
    if type(server) ~= "string" then error("open_tasks: server must be a string", 2) end
    where[#where + 1] = "server = ?"
    params[#params + 1] = server
  end
  return select_rows(self, "list the open tasks", "SELECT * FROM agent_task WHERE " .. table.concat(where, " AND ")
    .. " ORDER BY uid ASC", params, hydrate_task)
end

--- The stored tasks a server's task id names. A task id is the server's,
--- unique only per server (and, for a 2025-11-25 task, per session), so
--- two servers, or two runs, may each have a task of the same id: every
--- row is returned, of one server (`server`, its identifier) and of one run
--- (`run_uid`) when given, the open ones first (oldest first), then the
--- closed ones (newest first). The caller picks, or asks which. → rows
function Store:tasks_by_id(task_id, server, run_uid)
  if type(task_id) ~= "string" then error("tasks_by_id: task_id must be a string", 2) end
  local where, params = { "task_id = ?" }, { task_id }
  if server ~= nil then
    if type(server) ~= "string" then error("tasks_by_id: server must be a string", 2) end
    where[#where + 1] = "server = ?"
    params[#params + 1] = server
  end
  if run_uid ~= nil then
    check_uid(run_uid, "run_uid")
    where[#where + 1] = "run = ?"
    params[#params + 1] = run_uid
  end
  -- open (closed = 0) before closed; open oldest first, closed newest first
  return select_rows(self, "read the tasks of id " .. core.clip(task_id, 80), "SELECT * FROM agent_task WHERE "
    .. table.concat(where, " AND ") .. " ORDER BY closed ASC, CASE WHEN closed = 0 THEN uid ELSE -uid END ASC",
    params, hydrate_task)
end

---------------------------------------------------------------------------
-- Governance events: append-only, one row per denial
---------------------------------------------------------------------------

local governance_fields = {
  pid = "integer", crdate = "integer", correlation_id = "string", decision = "string", reason = "string",
  provider = "string", model = "string", configuration_identifier = "string", be_user = "integer",
  tool_name = "string", agentrun_uid = "integer", guardrail = "string", detail = "string",
}

--- Append a governance event (crdate defaults to now). → uid
function Store:insert_governance_event(fields)
  local columns, values = encode_fields(fields, governance_fields, "insert_governance_event")
  if fields.crdate == nil then
    append(columns, values, "crdate", os.time())
  end
  return insert(self, "record a governance event", insert_sql("governance_event", columns), values)
end

--- Every governance event by uid.
function Store:governance_events()
  return select_rows(self, "read the governance events", "SELECT * FROM governance_event ORDER BY uid ASC", {},
    hydrate_governance)
end

---------------------------------------------------------------------------
-- What a server offers beside its tools: resources, templates, prompts
---------------------------------------------------------------------------

--- The kinds of offer an import keeps.
store.OFFER_KINDS = { resource = true, template = true, prompt = true }
local OFFER_FIELDS = { "name", "title", "description", "mime_type", "detail" }

local hydrate_offer = hydrator {
  uid = "integer", server = "integer", kind = "string", ident = "string", name = "string", title = "string",
  description = "string", mime_type = "string", detail = "string", orphaned = "boolean", tstamp = "integer",
  crdate = "integer",
}

-- The entries as rows of values (misuse raises): ident first, then OFFER_FIELDS.
local function offer_values(entries)
  if type(entries) ~= "table" then error("reconcile_offers: entries must be an array", 3) end
  local values = {}
  for i, entry in ipairs(entries) do
    if type(entry) ~= "table" or type(entry.ident) ~= "string" then
      error(string.format("reconcile_offers: entries[%d] must be a table with a string ident", i), 3)
    end
    local row = { entry.ident }
    for j, key in ipairs(OFFER_FIELDS) do
      local value = entry[key]
      if value == nil then value = "" end
      if type(value) ~= "string" then
        error(string.format("reconcile_offers: entries[%d].%s must be a string", i, key), 3)
      end
      row[j + 1] = value
    end
    values[i] = row
  end
  return values
end

-- Upsert each entry live, after every row of the kind was marked orphaned:
-- what the server still lists comes back, the rest stays orphaned.
local function write_offers(adapter, server_uid, kind, values, now)
  local ok, message, code = adapter:exec("UPDATE mcp_offer SET orphaned = 1, tstamp = ? WHERE server = ? AND kind = ? "
    .. "AND orphaned = 0", { now, server_uid, kind })
  if not ok then return nil, message, code end
  for _, v in ipairs(values) do
    ok, message, code = adapter:exec("INSERT INTO mcp_offer (server, kind, ident, name, title, description, "
      .. "mime_type, detail, orphaned, tstamp, crdate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?) "
      .. "ON CONFLICT (server, kind, ident) DO UPDATE SET name = excluded.name, title = excluded.title, "
      .. "description = excluded.description, mime_type = excluded.mime_type, detail = excluded.detail, "
      .. "orphaned = 0, tstamp = excluded.tstamp",
      { server_uid, kind, v[1], v[2], v[3], v[4], v[5], v[6], now, now })
    if not ok then return nil, message, code end
  end
  local rows
  rows, message, code = adapter:rows("SELECT COUNT(*) AS n FROM mcp_offer WHERE server = ? AND kind = ? "
    .. "AND orphaned = 1", { server_uid, kind })
  if not rows then return nil, message, code end
  return as_integer(rows[1] and rows[1].n)
end

--- Keep what a server lists of one kind ("resource", "template", "prompt"):
--- each entry { ident (uri, uriTemplate or prompt name), name, title,
--- description, mime_type, detail (JSON text: a prompt's arguments) } live,
--- every other row of that kind orphaned, in one transaction taken in turn
--- with the server's imports. → how many rows of the kind are orphaned
function Store:reconcile_offers(server_uid, kind, entries, now)
  check_uid(server_uid, "server_uid")
  if not store.OFFER_KINDS[kind] then error(string.format("reconcile_offers: unknown kind %q", tostring(kind)), 2) end
  local values = offer_values(entries)
  now = check_time(now, "now")
  local adapter = adapter_of(self)
  local what = string.format("reconcile the %ss of server %d", kind, server_uid)
  return self:transaction(function()
    local turn, turn_message, turn_err = take_turn(self, dialect.IMPORTS, server_uid, what)
    if not turn then return nil, turn_message, turn_err end
    local orphaned, message, code = write_offers(adapter, server_uid, kind, values, now)
    if not orphaned then return fail(what, message, code) end
    return orphaned
  end)
end

--- The offers of one kind a server lists now (orphans left out), by ident;
--- with `all`, the orphans too. → rows | nil, message, err
function Store:offers_of(server_uid, kind, all)
  check_uid(server_uid, "server_uid")
  if not store.OFFER_KINDS[kind] then error(string.format("offers_of: unknown kind %q", tostring(kind)), 2) end
  return select_rows(self, "read the offers of server " .. server_uid, "SELECT * FROM mcp_offer WHERE server = ? "
    .. "AND kind = ?" .. (all and "" or " AND orphaned = 0") .. " ORDER BY ident ASC", { server_uid, kind },
    hydrate_offer)
end

--- Mark a server's stored catalogue stale (its server said its tools,
--- resources or prompts changed) or current again. A stale mark also makes
--- a re-import due (reimport_pending 1), which a server set to re-import on
--- its own gets at the host's next safe point; with `due` false (a notice
--- heard on an import's own connection) the catalogue is stale and nothing
--- is due unless it was already (reimport_pending 2). Current again clears
--- both. → true | nil, message, err
function Store:set_catalogue_stale(uid, stale, due)
  check_uid(uid)
  if type(stale) ~= "boolean" then error("set_catalogue_stale: stale must be a boolean", 2) end
  if due ~= nil and type(due) ~= "boolean" then error("set_catalogue_stale: due must be a boolean", 2) end
  local what = "mark the catalogue of server " .. uid
  if not stale then
    return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 0, reimport_pending = 0 WHERE uid = ?", { uid })
  end
  if due == false then
    return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 1, reimport_pending = CASE WHEN "
      .. "reimport_pending = 1 THEN 1 ELSE 2 END WHERE uid = ?", { uid })
  end
  return exec(self, what, "UPDATE mcp_server SET catalogue_stale = 1, reimport_pending = 1 WHERE uid = ?", { uid })
end

--- An import of server `uid` begins: it answers the notices heard so far
--- (reimport_pending back to 0). With `due_only`, only a due re-import is
--- taken (pending 1 → 0, one compare-and-set: of several processes that see
--- it due, exactly one gets it). → 1 taken, 0 not | nil, message, err
function Store:begin_import(uid, due_only)
  check_uid(uid)
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec("UPDATE mcp_server SET reimport_pending = 0 WHERE uid = ? AND "
    .. (due_only and "reimport_pending = 1" or "reimport_pending <> 0"), { uid })
  if not ok then return fail("begin the import of server " .. uid, message, code) end
  return adapter:changes()
end

--- An import of server `uid` ended well: its catalogue is current again,
--- unless a notice came after the import began (the listing may predate the
--- change): then it stays stale. → true | nil, message, err
function Store:settle_catalogue(uid)
  check_uid(uid)
  return exec(self, "mark the catalogue of server " .. uid .. " current",
    "UPDATE mcp_server SET catalogue_stale = 0 WHERE uid = ? AND reimport_pending = 0", { uid })
end

--- The live, enabled servers set to re-import on their own whose re-import
--- is due (a change notice since the last import), by identifier.
--- → rows | nil, message, err
function Store:reimports_due()
  return select_rows(self, "list the servers due a re-import", "SELECT * FROM mcp_server WHERE deleted = 0 AND "
    .. "enabled = 1 AND reimport = 'auto' AND reimport_pending = 1 ORDER BY identifier ASC, uid ASC", {},
    hydrate_server)
end

return store
