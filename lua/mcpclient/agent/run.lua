--- Runs: the one path an agent loop takes to a tool (REFERENCE §6.4, §6.5,
-- §7.6, §8; DESIGN D5).
--
--   local run = require "mcpclient.agent.run"
--   local r = assert(run.start(store, { user = { name = "ops", uid = 1, admin = true },
--                                       configuration = config, providers = zones }))
--   local specs  = r:tools()                                -- what the model may be offered
--   local result = r:invoke("mcp_docs_read_page", { uid = 3 })   -- { text, is_error }
--   r:finish()                                              -- completed
--
-- Every call takes the same road, in this order: registered → offered by the
-- gate → the write fence (ADR-141) → the remote-call budget → approval →
-- the pending effect stamped under the lease → execution with the run's
-- persisted cancel flag as the cancel hook → the result bounded → the TOOL
-- event recorded (fail-closed for writes) → the fence cleared and the lease
-- renewed. Any refusal on that road is an error ToolResult the model reads;
-- the three that end the run (a write with no lease, a write whose record
-- could not be stored, a lost lease) set run.status to "failed" and run.error
-- to { kind, code, message }.
--
-- Approval. An approval-bound call suspends the run before anything of its
-- model turn executes: run:turn{ calls... } admits every call of the turn
-- first and executes none of them when one needs approval; run:invoke(name,
-- args) is a turn of one call. The suspended results carry suspended = true;
-- run.status is "waiting_approval" and run:pending() lists the calls. The host
-- then calls run:approve() or run:deny() and run:resume(), which starts a new
-- segment (a fresh remote-call budget, the lease renewed) and returns the
-- whole turn's results: approved calls are admitted again and executed,
-- denied ones answer with an error result.
--
-- The rest of a Run: run:tools() (the specs the gate offers the model now),
-- run:events() (the trail), run:cancel(), run:finish() (→ final status),
-- run:close() (the connections of a provider the run opened itself); fields
-- run.uuid, run.uid (nil when unpersisted), run.persisted, run.owner,
-- run.status, run.error, run.round.
--
-- Cancellation (D5). run.cancel(store, run_uid), from any process, sets the
-- run's persisted flag. The cancel hook of every call reads it (at most once
-- per 10 ms); the client polls the hook during the transfer, aborts, sends
-- notifications/cancelled and answers with an error that says the server may
-- already have acted. That step is recorded, never retried, and the run ends
-- "cancelled".
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local policy = require "mcpclient.agent.policy"

local json = core.json

local run = {}

run.LEASE_SECONDS = 900
run.REMOTE_BUDGET = 20
run.CANCEL_POLL_SECONDS = 0.01
run.MAX_OWNER_LENGTH = 64

run.RUNNING = "running"
run.WAITING = "waiting_approval"
run.COMPLETED = "completed"
run.FAILED = "failed"
run.CANCELLED = "cancelled"

--- The failures that end a run: run.error.kind, with the reference's codes.
run.ERRORS = {
  write_without_durable_execution = 1786665601,
  audit_persistence_failed = 1785000001,
  run_lease_lost = 0,
}

local PENDING_WRITE = "non_idempotent_write"
local PAYLOAD_ORDER = { "kind", "round", "durationMs", "toolName", "toolArguments", "toolResult", "toolIsError" }

local Run = {}
Run.__index = Run

---------------------------------------------------------------------------
-- Identity: uuid and lease owner
---------------------------------------------------------------------------

local function read_file(path, bytes)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read(bytes or "l")
  f:close()
  return data
end

-- A random (version 4) UUID; /dev/urandom, else Lua's generator.
local function new_uuid()
  local raw = read_file("/dev/urandom", 16)
  local bytes = {}
  for i = 1, 16 do
    bytes[i] = raw and #raw == 16 and raw:byte(i) or math.random(0, 255)
  end
  bytes[7] = (bytes[7] & 0x0f) | 0x40
  bytes[9] = (bytes[9] & 0x3f) | 0x80
  local hex = string.format(string.rep("%02x", 16), table.unpack(bytes))
  return string.format("%s-%s-%s-%s-%s", hex:sub(1, 8), hex:sub(9, 12), hex:sub(13, 16), hex:sub(17, 20),
    hex:sub(21, 32))
end

--- The lease owner of a run started by this process: "<segment>:<hostname>:<pid>",
--- at most 64 characters (REFERENCE §8).
function run.owner(segment)
  segment = segment or "interactive"
  local host = read_file("/proc/sys/kernel/hostname") or read_file("/etc/hostname") or "localhost"
  host = host:gsub("%s", "")
  if host == "" then host = "localhost" end
  local pid = (read_file("/proc/self/stat") or ""):match("^(%d+)") or "0"
  -- the pid is what tells two processes apart: keep it, shorten the host
  local keep = run.MAX_OWNER_LENGTH - #segment - #pid - 2
  return string.format("%s:%s:%s", segment, host:sub(1, keep), pid)
end

---------------------------------------------------------------------------
-- Registry and gate
---------------------------------------------------------------------------

local function default_log(_, message) warn(message) end

--- A registry (the shape policy.new takes) over builtins and other tools.
-- Builtins win a name, then the first tool that claims it; a dropped tool is
-- logged. Each tool needs a string `name` and an `execute(self, arguments,
-- context)` method.
function run.registry(builtins, tools, log)
  log = log or default_log
  local by_name, order = {}, {}
  local function add(t)
    if type(t) ~= "table" or type(t.name) ~= "string" or type(t.execute) ~= "function" then
      error("a tool must be a table with a string name and an execute method", 3)
    end
    if by_name[t.name] then
      pcall(log, "warning", string.format('Tool "%s" is already registered; the later one was dropped.', t.name))
      return
    end
    by_name[t.name] = t
    order[#order + 1] = t.name
  end
  for _, t in ipairs(builtins or {}) do add(t) end
  for _, t in ipairs(tools or {}) do add(t) end
  return {
    get = function(name) return by_name[name] end,
    names = function() return table.move(order, 1, #order, 1, {}) end,
  }
end

--- The gate a run uses when the host brings none: enablement from the
--- store's rows, and every refused or observed-only decision written to the
--- store as a governance event (REFERENCE §7.6: denial-only).
-- @param options { mode, providers, log }
function run.gate(store, registry, options)
  options = options or {}
  local log = options.log or default_log
  return policy.new {
    registry = registry,
    state = {
      tool_enabled = function(name) return (store:tool_enabled(name)) end,
      group_enabled = function(group) return (store:group_enabled(group)) end,
    },
    mode = options.mode,
    providers = options.providers,
    on_decision = function(_, _, row)
      local ok, message = store:insert_governance_event(row)
      if not ok then
        pcall(log, "warning", "A tool gate decision could not be recorded as a governance event: "
          .. tostring(message))
      end
    end,
  }
end

---------------------------------------------------------------------------
-- Starting
---------------------------------------------------------------------------

local option_types = {
  user = "table", configuration = "table", gate = "table", registry = "table", provider = "table",
  tools = "table", builtins = "table", providers = "table", mode = "any", owner = "string", now = "function",
  clock = "function", lease_seconds = "number", remote_budget = "number", uuid = "string", log = "function",
}

local function validate(store, options)
  if type(store) ~= "table" then error("run.start: store must be a store", 3) end
  if options ~= nil and type(options) ~= "table" then error("run.start: options must be a table", 3) end
  options = options or {}
  for key, value in pairs(options) do
    local expected = option_types[key]
    if not expected then error(string.format("run.start: unknown option %q", tostring(key)), 3) end
    if expected ~= "any" and type(value) ~= expected then
      error(string.format("run.start: %s must be a %s, not a %s", key, expected, type(value)), 3)
    end
  end
  if options.registry and (options.provider or options.tools or options.builtins) then
    error("run.start: give either registry, or provider/tools/builtins", 3)
  end
  local budget = options.remote_budget
  if budget ~= nil and (math.type(budget) ~= "integer" or budget < 0) then
    error("run.start: remote_budget must be a non-negative integer", 3)
  end
  local lease = options.lease_seconds
  if lease ~= nil and (lease ~= lease or lease <= 0) then
    error("run.start: lease_seconds must be positive", 3)
  end
  if options.owner ~= nil and (options.owner == "" or #options.owner > run.MAX_OWNER_LENGTH) then
    error("run.start: owner must be 1 to 64 characters", 3)
  end
  return options
end

--- Start a run: insert its row RUNNING, claimed by `owner` for lease_seconds.
-- A run whose row could not be inserted is still returned, with
-- persisted = false and no lease: it can call tools without a side effect,
-- and the fence refuses every write (REFERENCE §8).
-- @param options {
--   user          = { name, uid, admin } (nil: nobody, which is not an administrator),
--   configuration = the policy configuration (see mcpclient.agent.policy),
--   gate          = a policy Gate (default: run.gate(store, registry, options)),
--   providers, mode = for the default gate (provider zones; the dataClassEnforcement setting),
--   registry      = { get, names } — or the tools from:
--   provider      = a tool provider ({ tools = function() }, e.g. catalogue.provider(store, ...));
--                   default catalogue.provider(store), owned by the run and closed by finish/close,
--   tools         = a list of tools, added after the provider's,
--   builtins      = a list of the host's own tools (they win a name),
--   owner         = lease owner (default "interactive:<hostname>:<pid>", ≤ 64 characters),
--   now           = function() -> unix seconds (default os.time),
--   clock         = function() -> monotonic seconds (default core.now; durations, cancel polling),
--   lease_seconds = 900, remote_budget = 20 (remote calls per run segment),
--   uuid          = the run's uuid (default: a random one),
--   log           = function(level, message) (default: warn) }
-- @return Run | nil, message, err (the provider could not list its tools)
function run.start(store, options)
  options = validate(store, options)
  local log = options.log or default_log
  local registry, owned = options.registry, nil
  if not registry then
    local provider = options.provider
    if provider == nil and options.tools == nil then
      provider = catalogue.provider(store)
      owned = provider
    end
    local tools = {}
    if provider then
      local listed, message, err = provider.tools()
      if not listed then
        if owned then owned.close() end
        return nil, message, err
      end
      tools = listed
    end
    for _, t in ipairs(options.tools or {}) do tools[#tools + 1] = t end
    registry = run.registry(options.builtins, tools, log)
  end
  local now = options.now or os.time
  local self = setmetatable({
    store = store,
    uuid = options.uuid or new_uuid(),
    user = options.user,
    configuration = options.configuration,
    registry = registry,
    gate = options.gate or run.gate(store, registry, { mode = options.mode, providers = options.providers, log = log }),
    provider = owned,
    now = now,
    clock = options.clock or core.now,
    lease_seconds = options.lease_seconds or run.LEASE_SECONDS,
    remote_budget = options.remote_budget or run.REMOTE_BUDGET,
    log = log,
    status = run.RUNNING,
    round = 0,
    segment = 1,
    remote_calls = 0,
    trail = {},
    persisted = false,
  }, Run)
  local owner = options.owner or run.owner("interactive")
  local user_name = type(self.user) == "table" and self.user.name or nil
  local configuration = type(self.configuration) == "table" and self.configuration.identifier or nil
  local uid, message, err = store:insert_run {
    uuid = self.uuid, status = run.RUNNING, claimed_by = owner, lease_expires = self:lease_until(),
    user_name = type(user_name) == "string" and user_name or "",
    configuration = type(configuration) == "string" and configuration or "",
  }
  if uid then
    self.uid, self.owner, self.persisted = uid, owner, true
  else
    self.start_error = err or { kind = "store", message = message }
    pcall(log, "warning", string.format("Run %s has no persisted row and holds no lease: %s", self.uuid,
      tostring(message)))
  end
  return self
end

--- Ask run `run_uid` to stop, from any process: sets its persisted cancel
--- flag. → true | nil, message, err
function run.cancel(store, run_uid)
  return store:request_cancel(run_uid)
end

---------------------------------------------------------------------------
-- Lease and status writes
---------------------------------------------------------------------------

function Run:lease_until()
  return math.floor(self.now() + self.lease_seconds)
end

-- A write of the run's row under its lease: while RUNNING, the store's
-- guarded update; while waiting for approval (which that update does not
-- match), a check and an update inside one transaction.
-- @return rows changed (0: not ours any more) | nil, message, err
function Run:guarded(fields)
  local store, uid, owner = self.store, self.uid, self.owner
  if not (self.persisted and owner) then return 0 end
  if self.status ~= run.WAITING then return store:guarded_update_run(uid, owner, fields) end
  return store:transaction(function()
    local row, message, err = store:run(uid)
    if not row then
      if message then return nil, message, err end
      return 0
    end
    if row.status ~= run.WAITING or row.claimed_by ~= owner then return 0 end
    local ok
    ok, message, err = store:update_run(uid, fields)
    if not ok then return nil, message, err end
    return 1
  end)
end

-- The run stops for good: `kind` names why (run.ERRORS).
function Run:fail(kind, message, fields)
  self.error = { kind = kind, code = run.ERRORS[kind], message = message }
  if kind ~= "run_lease_lost" then
    -- a lost lease means the row is someone else's now: leave it alone
    local update = fields or {}
    update.status = run.FAILED
    update.lease_expires = math.floor(self.now())
    self:guarded(update)
  end
  self.status = run.FAILED
  pcall(self.log, "warning", message)
end

function Run:lease_lost(name, detail)
  self:fail("run_lease_lost", string.format("Run %s lost its execution lease%s; %s.", self.uuid,
    detail and (" (" .. tostring(detail) .. ")") or "",
    name and string.format('"%s" was not called', name) or "it stops here"))
end

-- The run ends as `status` (completed or cancelled), its fence cleared.
function Run:conclude(status)
  local changed, message = self:guarded { status = status, pending_effect = "", lease_expires = math.floor(self.now()) }
  self.status = status
  if changed ~= 1 and self.persisted then
    pcall(self.log, "warning", string.format("Run %s ended %s but its row could not be updated: %s", self.uuid,
      status, tostring(message or "the lease is held by another owner")))
  end
end

--- Has someone asked this run to stop? Reads the persisted flag at most once
--- per 10 ms (the client polls its cancel hook that often during a transfer).
function Run:cancel_requested()
  if self.cancel_seen then return true end
  if not self.persisted then return false end
  local t = self.clock()
  if self.last_poll and t - self.last_poll < run.CANCEL_POLL_SECONDS then return false end
  self.last_poll = t
  local row = self.store:run(self.uid)
  if row and row.cancel_requested then self.cancel_seen = true end
  return self.cancel_seen == true
end

--- Stop this run: the persisted flag when the run has a row, and this
--- object's own flag (an unpersisted run has only that one).
function Run:cancel()
  self.cancel_seen = true
  if self.persisted then return self.store:request_cancel(self.uid) end
  return true
end

---------------------------------------------------------------------------
-- Results and the trail
---------------------------------------------------------------------------

local error_result = require("mcpclient.agent.tool").error_result

-- A registered tool's effect is its declaration, else read-only (REFERENCE §8).
-- Refusals of unknown names never execute, so their steps are fail-soft.
local function is_write(tool)
  return (tool.effect or "read_only") ~= "read_only"
end

function Run:not_called(name)
  local r = error_result(string.format('Error: run %s has ended (%s); "%s" was not called.', self.uuid,
    self.status, name))
  r.stopped = true
  return r
end

-- JSON text of an event payload. Arguments a model wrote may not encode
-- (a function, a sparse list): the step is still recorded, without them.
local function encode_payload(payload, order)
  if order then json.set_key_order(payload, order) end
  local text = json.try_encode(payload)
  if text then return text end
  payload.toolArguments = "(the arguments could not be encoded)"
  if payload.calls then
    for _, call in ipairs(payload.calls) do call.toolArguments = nil end
  end
  return json.encode(payload)
end

-- Record one TOOL step. → true when it is in the store.
function Run:record(step)
  local arguments = step.arguments
  if arguments == nil then arguments = {} end
  local duration = math.floor((step.duration_ms or 0) * 100 + 0.5) / 100
  -- names and texts reach JSON as valid UTF-8 whatever the model or the tool wrote
  local payload = encode_payload({
    kind = "tool", round = step.round, durationMs = duration, toolName = core.repair_utf8(step.name),
    toolArguments = arguments, toolResult = core.repair_utf8(step.text), toolIsError = step.is_error == true,
  }, PAYLOAD_ORDER)
  local event = { kind = "tool", round = step.round, duration_ms = duration, payload = payload }
  if not self.persisted then
    self.trail[#self.trail + 1] = event
    return false
  end
  local sequence, message = self.store:append_event(self.uid, event)
  if not sequence then
    pcall(self.log, "warning", string.format('The step of tool "%s" in run %s could not be recorded: %s',
      step.name, self.uuid, tostring(message)))
    return false
  end
  event.sequence = sequence
  return true
end

-- Record an event that is not a tool step (approval): fail-soft.
function Run:note(kind, fields)
  fields.kind = kind
  local event = { kind = kind, round = fields.round or self.round, payload = encode_payload(fields) }
  if self.persisted then
    self.store:append_event(self.uid, event)
  else
    self.trail[#self.trail + 1] = event
  end
end

--- The run's events in order: { sequence, kind, round, duration_ms, payload
--- (JSON text), data (payload decoded) }. A persisted run reads the store; an
--- unpersisted one answers with what it kept in memory (nothing else keeps it).
-- @return list | nil, message, err
function Run:events()
  local list = self.trail
  if self.persisted then
    local rows, message, err = self.store:events(self.uid)
    if not rows then return nil, message, err end
    list = rows
  end
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { sequence = e.sequence or i, kind = e.kind, round = e.round, duration_ms = e.duration_ms or 0,
      payload = e.payload, data = json.decode(e.payload) }
  end
  return out
end

---------------------------------------------------------------------------
-- Offering
---------------------------------------------------------------------------

function Run:context()
  return { correlation_id = self.uuid, run_uid = self.uid or 0 }
end

--- The tools the gate offers to the model now, as { name, description,
--- parameters } (every enabled tool is decided; refusals are recorded).
function Run:tools()
  local offered = {}
  for _, name in ipairs(self.gate:filter_offerable(nil, self.configuration, self.user, self:context())) do
    local t = self.registry.get(name)
    if t then
      offered[#offered + 1] = t.spec and t:spec()
        or { name = t.name, description = t.description, parameters = t.parameters }
    end
  end
  return offered
end

---------------------------------------------------------------------------
-- Admission: everything before a byte can leave
---------------------------------------------------------------------------

-- Decide one call, up to (not including) approval, which is decided for the
-- whole turn. → a final result (the call will not execute), or nil and the tool.
function Run:admit(call)
  local name = call.name
  local tool = self.registry.get(name)
  if tool == nil then return error_result(string.format('Error: unknown tool "%s"', name)) end
  local decision = self.gate:decide(name, self.configuration, self.user, self:context())
  if not decision.allowed then return error_result(string.format('Error: tool "%s" not permitted', name)) end
  -- ADR-141: a write needs a row to fence it and a lease to fence it with.
  if is_write(tool) and not (self.persisted and self.owner) then
    local message = string.format('Tool "%s" declares a side effect but run %s holds no execution lease; '
      .. "the write is refused because it cannot be fenced.", name, self.persisted and self.uuid or "(unpersisted)")
    self:fail("write_without_durable_execution", message)
    local r = error_result(message)
    r.stopped = true
    return r
  end
  if tool.remote then
    if self.remote_calls >= self.remote_budget then
      return error_result(string.format('Error: this run has used its budget of %d calls to external tools; '
        .. '"%s" was not called.', self.remote_budget, name))
    end
    self.remote_calls = self.remote_calls + 1
  end
  return nil, tool
end

---------------------------------------------------------------------------
-- Execution
---------------------------------------------------------------------------

-- Run one admitted call, record it, release the fence. → result
function Run:execute(call, tool, round)
  local name, write = call.name, is_write(tool)
  if self:cancel_requested() then
    self:conclude(run.CANCELLED)
    return self:not_called(name)
  end
  if write then
    local changed, message = self:guarded { pending_effect = PENDING_WRITE, lease_expires = self:lease_until() }
    if changed ~= 1 then
      self:lease_lost(name, message)
      return self:not_called(name)
    end
  end

  local fired = false
  local function hook()
    if self:cancel_requested() then fired = true end
    return fired
  end
  local started = self.clock()
  local ok, result = pcall(tool.execute, tool, call.arguments, { cancel = hook })
  local duration_ms = (self.clock() - started) * 1000
  if not ok then
    pcall(self.log, "warning", string.format('Tool "%s" raised: %s', name, tostring(result)))
    result = error_result(string.format('Error: tool "%s" failed.', name))
  elseif type(result) == "string" then
    result = { text = result, is_error = false }
  elseif type(result) ~= "table" or type(result.text) ~= "string" then
    result = error_result(string.format('Error: tool "%s" failed.', name))
  end
  local text = core.bound(result.text)
  local answer = { text = text, is_error = result.is_error == true }

  local recorded = self:record { round = round, name = name, arguments = call.arguments, text = text,
    is_error = answer.is_error, duration_ms = duration_ms }
  if not recorded and write then
    -- ADR-111: nothing with a side effect runs unrecorded. The fence stays
    -- stamped: the effect happened and its record is missing.
    local message = string.format('The step of tool "%s" could not be recorded in run %s; the run stops because '
      .. "a write must not go unrecorded.", name, self.uuid)
    self:fail("audit_persistence_failed", message)
    local r = error_result(message)
    r.stopped = true
    return r
  end
  if fired or self:cancel_requested() then
    self:conclude(run.CANCELLED)
    answer.stopped = true
    return answer
  end
  local fields = { lease_expires = self:lease_until() }
  if write then fields.pending_effect = "" end
  if self.persisted then
    local changed, message = self:guarded(fields)
    if changed ~= 1 then
      self:lease_lost(nil, message)
      answer.stopped = true
    end
  end
  return answer
end

---------------------------------------------------------------------------
-- Turns
---------------------------------------------------------------------------

local function check_calls(calls)
  if type(calls) ~= "table" then error("turn: calls must be a list of { name, arguments }", 3) end
  for i, call in ipairs(calls) do
    if type(call) ~= "table" or type(call.name) ~= "string" then
      error(string.format("turn: call %d must be a table with a string name", i), 3)
    end
    if call.arguments ~= nil and type(call.arguments) ~= "table" then
      error(string.format("turn: the arguments of call %d must be a table", i), 3)
    end
  end
end

-- Admit every call of the turn, then execute — or suspend the whole turn
-- when one admitted call needs an approval it does not have.
function Run:play(calls, round, results, approved)
  local admitted = {}
  for i, call in ipairs(calls) do
    if results[i] == nil then
      if self.status ~= run.RUNNING then
        results[i] = self:not_called(call.name)
      else
        local final, tool = self:admit(call)
        results[i] = final
        if tool then admitted[#admitted + 1] = { index = i, call = call, tool = tool } end
      end
    end
  end
  local waits = false
  if not approved and self.status == run.RUNNING then
    for _, a in ipairs(admitted) do
      if policy.requires_approval(a.tool) then waits = true end
    end
  end
  -- The step of a refusal: nothing ran, so a record that fails is only logged.
  local function record_refused(call, r)
    r.recorded = true
    self:record { round = round, name = call.name, arguments = call.arguments, text = r.text, is_error = true }
  end
  if waits then
    for i, call in ipairs(calls) do
      local r = results[i]
      if r and not r.recorded and not r.suspended and not r.stopped then record_refused(call, r) end
    end
    return self:suspend(calls, round, results, admitted)
  end
  local by_index = {}
  for _, a in ipairs(admitted) do by_index[a.index] = a end
  for i, call in ipairs(calls) do
    local r = results[i]
    if r and not r.recorded and not r.stopped then
      record_refused(call, r)
    elseif by_index[i] then
      if self.status == run.RUNNING then
        results[i] = self:execute(call, by_index[i].tool, round)
      else
        results[i] = self:not_called(call.name)
      end
    end
  end
  for _, r in ipairs(results) do r.recorded = nil end
  return results
end

function Run:suspend(calls, round, results, admitted)
  local changed, message = self:guarded { status = run.WAITING, lease_expires = self:lease_until() }
  if self.persisted and changed ~= 1 then
    self:lease_lost(nil, message)
    for _, a in ipairs(admitted) do results[a.index] = self:not_called(a.call.name) end
    return results
  end
  self.status = run.WAITING
  local listed = {}
  for _, a in ipairs(admitted) do
    results[a.index] = { suspended = true, is_error = false,
      text = string.format('The run is waiting for approval; "%s" has not been called yet.', a.call.name) }
    listed[#listed + 1] = { toolName = core.repair_utf8(a.call.name), toolArguments = a.call.arguments or {} }
  end
  self.suspended = { calls = calls, round = round, results = results }
  self:note("approval_required", { round = round, calls = listed })
  for _, r in ipairs(results) do r.recorded = nil end
  return results
end

--- One model turn: its tool calls, admitted together, then executed in order.
-- @param calls { { name = "<tool>", arguments = { ... } }, ... }
-- @return results, one per call: { text, is_error [, suspended] [, stopped] }
function Run:turn(calls)
  check_calls(calls)
  if self.status == run.WAITING then
    error("the run is waiting for approval: call approve() or deny(), then resume()", 2)
  end
  self.round = self.round + 1
  local results = {}
  if self.status == run.RUNNING and self:cancel_requested() then self:conclude(run.CANCELLED) end
  return self:play(calls, self.round, results, false)
end

--- One tool call as a turn of its own. → result { text, is_error [, suspended] [, stopped] }
function Run:invoke(name, arguments)
  if type(name) ~= "string" then error("invoke: the tool name must be a string", 2) end
  if arguments ~= nil and type(arguments) ~= "table" then error("invoke: arguments must be a table", 2) end
  if self.status == run.WAITING then
    error("the run is waiting for approval: call approve() or deny(), then resume()", 2)
  end
  return self:turn { { name = name, arguments = arguments } }[1]
end

--- The calls a suspended run waits to have approved: { { name, arguments }, ... }.
function Run:pending()
  local out = {}
  if not self.suspended then return out end
  for i, r in ipairs(self.suspended.results) do
    if r.suspended then
      local call = self.suspended.calls[i]
      out[#out + 1] = { name = call.name, arguments = call.arguments }
    end
  end
  return out
end

local function decide_approval(self, approved)
  if self.status ~= run.WAITING then error("the run is not waiting for approval", 3) end
  self.approval = approved
  self:note("approval", { round = self.suspended.round, approved = approved })
  return true
end

--- The host approves the suspended turn's calls (then resume()).
function Run:approve() return decide_approval(self, true) end

--- The host refuses them (then resume(): each answers with an error result).
function Run:deny() return decide_approval(self, false) end

--- Continue a suspended run in a fresh segment: a new remote-call budget and
--- a renewed lease. Approved calls are admitted again (the gate may have
--- changed its mind meanwhile) and executed; denied ones are recorded as
--- refused.
-- @return the suspended turn's results, in call order
function Run:resume()
  if self.status ~= run.WAITING then error("the run is not waiting for approval", 2) end
  if self.approval == nil then error("resume: approve() or deny() first", 2) end
  local suspended, approved = self.suspended, self.approval
  local changed, message = self:guarded { status = run.RUNNING, lease_expires = self:lease_until() }
  self.suspended, self.approval = nil, nil
  if self.persisted and changed ~= 1 then
    self:lease_lost(nil, message)
  else
    self.status = run.RUNNING
  end
  self.segment = self.segment + 1
  self.remote_calls = 0
  local results = suspended.results
  for i, r in ipairs(results) do
    if r.suspended then
      if not approved and self.status == run.RUNNING then
        results[i] = error_result(string.format('Error: the call to "%s" was not approved.', suspended.calls[i].name))
      else
        results[i] = nil
      end
    else
      r.recorded = true -- recorded when the turn was suspended
    end
  end
  return self:play(suspended.calls, suspended.round, results, true)
end

---------------------------------------------------------------------------
-- Ending
---------------------------------------------------------------------------

--- End the run: COMPLETED unless it already failed or was cancelled (a tool
--- that answered with an error, a server that was down, is not a failed run).
--- A run waiting for approval completes without its pending calls.
-- @return the final status
function Run:finish()
  if self.status == run.RUNNING or self.status == run.WAITING then
    self:conclude(run.COMPLETED)
    self.suspended, self.approval = nil, nil
  end
  self:close()
  return self.status
end

--- Close the connections of a provider the run opened itself. Idempotent.
function Run:close()
  local provider = self.provider
  if provider then
    self.provider = nil
    provider.close()
  end
  return true
end

Run.__close = Run.close

function Run:__tostring()
  return string.format("run %s (%s)", self.uuid, self.status)
end

run.Run = Run
return run
