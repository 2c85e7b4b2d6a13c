--- The PostgreSQL store adapter: one libpq connection through the C drivers (mcpclient.db),
-- for installations whose workers on several hosts share one store.
--
--   local adapter, message, code = require("mcpclient.agent.store.postgres").open(conninfo, options)
--
-- conninfo is a libpq URI ("postgresql://user@host:5432/db") or key=value
-- string; what it leaves out (the password above all) comes from the PG*
-- environment or ~/.pgpass, as for psql, or from a credential reference.
-- The string is kept only inside this adapter to reconnect: it never reaches
-- a message, a log or tostring().
--
-- options (unknown keys raise):
--   busy_timeout_ms     the bound of every statement, lock waits included (default 5000)
--   connect_timeout_ms  the bound of making the connection (default 5000)
--   password            a credential reference ("env:NAME", or a key for `resolver`),
--                       resolved afresh at every connect; the secret is never kept here
--   resolver            function(reference) -> secret | nil, for references that are not env:
--
-- It implements the adapter interface of mcpclient.agent.store.sqlite and
-- speaks the same SQL with `?` placeholders (rewritten here to $1, $2, ...).
-- A lost connection is made again once for a read outside a transaction
-- (a read repeated cannot act twice) and for a BEGIN (nothing done yet); a
-- write that loses its connection fails (its code kept: "08006", or the
-- server's own, see postgres.connection_lost) and is never sent again, since
-- the database may have applied it; the next statement outside a transaction
-- reconnects.
local check_options = require("mcpclient.agent.options").check
local credentials = require "mcpclient.credentials"
local dialect = require "mcpclient.agent.store.dialect"

local postgres = {}

local Adapter = {}
Adapter.__index = Adapter
Adapter.__tostring = function() return "postgresql store adapter" end

local option_types = {
  busy_timeout_ms = "integer", connect_timeout_ms = "integer", password = "string", resolver = "function",
}

-- The connection strings and password references, kept out of the adapter
-- table itself so that no dump of the adapter shows a password written into one.
local conninfo_of = setmetatable({}, { __mode = "k" })
local password_of = setmetatable({}, { __mode = "k" })

-- How long a cancelled statement may take to end before its connection is
-- given up: generous for ordinary statements (a busy server still answers,
-- and the connection is kept), short inside a caller's budget
-- (with_busy_timeout), which covers the statement and the grace together.
local CANCEL_GRACE_MS = 1000
local BUDGET_GRACE_MS = 100

local LOST = "08006"

-- The SQLSTATEs that mean the session is gone, whatever else they say: the
-- connection exception class (08000 and 08xxx: lost, never made, refused),
-- the server shutting down or ending the backend (57P01 admin shutdown, also
-- what pg_terminate_backend sends; 57P02 crash shutdown; 57P03 cannot connect
-- now; 57P05 idle session timeout) and 25P03 (idle in transaction too long).
local SESSION_ENDED = { ["57P01"] = true, ["57P02"] = true, ["57P03"] = true, ["57P05"] = true, ["25P03"] = true }

--- Whether an SQLSTATE means the connection was lost (see SESSION_ENDED).
function postgres.connection_lost(code)
  return type(code) == "string" and (code:sub(1, 2) == "08" or SESSION_ENDED[code] == true)
end
local connection_lost = postgres.connection_lost

-- How long a session may sit in an open transaction before the server ends
-- it: the store's transactions last milliseconds, so only a worker that
-- vanished mid-transaction ever reaches this.
local IDLE_IN_TRANSACTION_MS = 60000

-- The keywords a libpq key=value connection string starts with.
local conninfo_keys = {
  host = true, hostaddr = true, port = true, dbname = true, user = true, password = true, passfile = true,
  service = true, sslmode = true, connect_timeout = true, application_name = true, options = true,
}

--- Whether `location` names a PostgreSQL database rather than an SQLite file.
function postgres.is_conninfo(location)
  if type(location) ~= "string" then return false end
  if location:find("^postgres://") or location:find("^postgresql://") then return true end
  local key = location:match("^%s*([%a_]+)%s*=")
  return key ~= nil and conninfo_keys[key] == true
end

--- A location fit for a message: the password of a URI or key=value string
-- replaced by "***" (an SQLite path is returned as it is).
function postgres.redact(location)
  if not postgres.is_conninfo(location) then return location end
  if location:find("^postgres") and location:find("://", 1, true) then
    local redacted = location:gsub("^(postgres%a*://[^:/@?]*):[^@/?]*@", "%1:***@")
    return (redacted:gsub("([?&]password=)[^&]*", "%1***"))
  end
  local redacted = location:gsub("(password%s*=%s*)'[^']*'", "%1***")
  return (redacted:gsub("(password%s*=%s*)[^%s'*][^%s']*", "%1***"))
end

-- Connect with `password` ({ reference, resolver } or nil) within
-- connect_ms; the server bounds statements by the adapter's own bound
-- (busy_ms) plus the grace. The caller sets the client-side bounds.
-- → db | nil, message, code
local function connect(conninfo, password, connect_ms, busy_ms)
  local options = { connect_timeout_ms = connect_ms }
  if password then
    local secret, reason = credentials.resolve(password[1], password[2])
    if not secret then return nil, "the password reference did not resolve: " .. tostring(reason), "08001" end
    options.password = secret
  end
  -- the drivers load with the first open: a program that never opens a store maps no database library
  local db, message, code = require("mcpclient.db").pg_connect(conninfo, options)
  if not db then return nil, message, code end
  db:timeout(connect_ms)
  -- The server keeps the same bounds, for when this client can no longer
  -- tell it to stop (a cancel lost on the network, a worker that died): a
  -- statement ends by itself just after the client would have cancelled it,
  -- and a transaction left open by a vanished worker releases its locks.
  local ok
  ok, message, code = db:exec(string.format("SET statement_timeout = %d; SET idle_in_transaction_session_timeout = %d",
    busy_ms + CANCEL_GRACE_MS, IDLE_IN_TRANSACTION_MS))
  if not ok then
    db:close()
    return nil, message, code
  end
  return db
end

--- Connect and return the adapter, or nil, message, code.
function postgres.open(conninfo, options)
  if type(conninfo) ~= "string" then error("conninfo must be a string", 2) end
  options = check_options("postgres.open", options, option_types)
  local timeout = options.busy_timeout_ms or 5000
  local connect_ms = options.connect_timeout_ms or 5000
  if timeout <= 0 then error("busy_timeout_ms must be a positive integer", 2) end
  if connect_ms <= 0 then error("connect_timeout_ms must be a positive integer", 2) end
  if options.resolver and not options.password then error("resolver needs a password reference", 2) end
  local password = options.password and { options.password, options.resolver } or nil
  local db, message, code = connect(conninfo, password, connect_ms, timeout)
  if not db then return nil, message, code end
  db:timeout(timeout, CANCEL_GRACE_MS)
  local adapter = setmetatable({
    db = db, dialect = dialect.postgresql, busy_timeout_ms = timeout, bound_ms = timeout, grace_ms = CANCEL_GRACE_MS,
    connect_timeout_ms = connect_ms, in_transaction = false,
  }, Adapter)
  conninfo_of[adapter], password_of[adapter] = conninfo, password
  return adapter
end

---------------------------------------------------------------------------
-- The connection: made again when lost, never inside a transaction
---------------------------------------------------------------------------

-- Replace a lost connection. A caller with a budget (a liveness contact)
-- does not wait for a new one: the next statement outside it makes it.
local function reconnect(self)
  if self.budgeted then
    return nil, "the connection to the database was lost; a contact does not wait for a new one (" .. LOST .. ")", LOST
  end
  local db, message, code = connect(conninfo_of[self], password_of[self],
    math.min(self.connect_timeout_ms, self.bound_ms), self.busy_timeout_ms)
  if not db then return nil, message, code end
  db:timeout(self.bound_ms, self.grace_ms)
  self.db:close()
  self.db = db
  return true
end

-- Make sure a statement can be sent: a connection lost between statements
-- is made again, unless a transaction was open on it (its work is gone, and
-- going on in a fresh session would commit only the rest of it).
local function ready(self)
  if self.db:alive() then return true end
  if self.in_transaction then
    return nil, "the connection to the database was lost inside a transaction (" .. LOST .. ")", LOST
  end
  return reconnect(self)
end

-- The SQL with numbered placeholders, memoised (the store's SQL texts are a fixed set).
local translated, translated_count = {}, 0
local function numbered(sql)
  local out = translated[sql]
  if out then return out end
  out = dialect.numbered_placeholders(sql)
  if translated_count < 1024 then
    translated[sql], translated_count = out, translated_count + 1
  end
  return out
end

-- The parameters with every string as bytes: the text columns are bytea
-- (see store/dialect.lua), which keeps a string exactly, NUL bytes included.
local function as_bytes(params)
  if params == nil then return nil end
  local out = { n = params.n }
  for i = 1, params.n or #params do
    local v = params[i]
    if type(v) == "string" then v = { blob = v } end
    out[i] = v
  end
  return out
end

-- A write that lost its connection: say so, and that it is not repeated.
local function lost_write(message, code)
  if not connection_lost(code) then return nil, message, code end
  return nil, "the connection to the database was lost during a write, which may or may not have been "
    .. "applied and is not sent again: " .. message, code
end

-- Keep track of the transaction the store opens and closes with scripts.
local function track_transaction(self, sql, ok)
  if sql == dialect.postgresql.begin then
    self.in_transaction = ok == true
  elseif sql == "COMMIT" or sql == "ROLLBACK" then
    self.in_transaction = false
  end
end

---------------------------------------------------------------------------
-- The adapter interface
---------------------------------------------------------------------------

function Adapter:exec(sql, params)
  local ok, message, code = ready(self)
  if not ok then
    track_transaction(self, sql, false)
    return nil, message, code
  end
  if params == nil then
    ok, message, code = self.db:exec(sql)
    if not ok and connection_lost(code) and sql == dialect.postgresql.begin and not self.in_transaction then
      -- the connection died since the last statement; a BEGIN did nothing yet, so it may be sent again
      ok, message, code = reconnect(self)
      if ok then ok, message, code = self.db:exec(sql) end
    end
    track_transaction(self, sql, ok)
    if not ok then return lost_write(message, code) end
    return true
  end
  local changed
  changed, message, code = self.db:execute(numbered(sql), as_bytes(params))
  if not changed then return lost_write(message, code) end
  return true
end

function Adapter:rows(sql, params)
  local ok, message, code = ready(self)
  if not ok then return nil, message, code end
  local rows
  params = as_bytes(params)
  rows, message, code = self.db:query(numbered(sql), params)
  if rows or not connection_lost(code) or self.in_transaction then return rows, message, code end
  ok, message, code = reconnect(self)
  if not ok then return nil, message, code end
  return self.db:query(numbered(sql), params)
end

-- Every table of the store has a uid identity column: the insert returns it.
function Adapter:insert(sql, params)
  local ok, message, code = ready(self)
  if not ok then return nil, message, code end
  local rows
  rows, message, code = self.db:query(numbered(sql) .. " RETURNING uid", as_bytes(params))
  if not rows then return lost_write(message, code) end
  return rows[1] and rows[1].uid
end

function Adapter:changes()
  return self.db:changes()
end

-- Run fn with every statement bounded by ms in all, the grace a cancelled
-- statement gets included; a lost connection is not made again inside.
function Adapter:with_busy_timeout(ms, fn)
  local grace = math.min(BUDGET_GRACE_MS, ms // 2)
  local bound = math.max(1, math.min(ms, self.busy_timeout_ms) - grace)
  self.bound_ms, self.grace_ms, self.budgeted = bound, math.max(1, grace), true
  self.db:timeout(self.bound_ms, self.grace_ms)
  local results = table.pack(pcall(fn))
  self.bound_ms, self.grace_ms, self.budgeted = self.busy_timeout_ms, CANCEL_GRACE_MS, false
  self.db:timeout(self.bound_ms, self.grace_ms)
  if not results[1] then error(results[2], 0) end
  return table.unpack(results, 2, results.n)
end

function Adapter:close()
  self.db:close()
  conninfo_of[self], password_of[self] = nil, nil
end

return postgres
