--- Runs: the one path an agent loop takes to a tool.
--
--   local run = require "mcpclient.agent.run"
--   local r = assert(run.start(store, { user = { name = "ops", uid = 1, admin = true },
--                                       configuration = config, providers = zones }))
--   local specs  = r:tools()                                -- what the model may be offered
--   local result = r:invoke("mcp_docs_read_page", { uid = 3 })   -- { text, is_error [, err] }
--   r:finish()                                              -- completed
--
-- Every call takes the same road, in this order: registered → offered by the
-- gate → the write fence (a write needs a persisted row and a lease to fence
-- it with) → the remote-call budget → approval → the pending effect stamped
-- under the lease → execution with the run's persisted cancel flag as the
-- cancel hook → the result bounded → the TOOL event recorded (fail-closed for
-- writes) → the fence cleared and the lease renewed.
--
-- A turn's admitted calls execute at once (each a task of mcp.gather, each
-- with its own budget and the same cancel hook); their TOOL events are then
-- recorded in the model's order of calls, whatever order they finished in,
-- and the fence is cleared only once every write of the turn is recorded. A
-- call that was in flight when another ended the run is still recorded.
--
-- Results, one per call: { text, is_error [, err] [, suspended] [, stopped] }.
--   text, is_error  what the model reads.
--   err             the library's failure value (see mcpclient.errors), present
--                   exactly when something failed rather than answered: the
--                   call's own failure exactly as the connection returned it
--                   (result.err.kind == "cancelled" for a call cancelled in
--                   flight), or the failure that ended the run at this call
--                   (the same table as run.error). A refusal of the gate, an
--                   unknown tool, an exhausted budget, a denied approval and a
--                   server's isError answer are answers for the model, not
--                   failures of the API: they carry no err.
--   suspended       the call waits for approval (see below).
--   stopped         the run has ended (run.status); this call, and every later
--                   one, is not made. A call not made because the run had
--                   already failed carries run.error as err.
-- The three failures that end a run — a write with no lease
-- (write_without_durable_execution), a write whose record could not be
-- stored (audit_persistence_failed), a lost lease (run_lease_lost) — set
-- run.status to "failed" and run.error to their failure value (err.run_code is
-- the kind's fixed code).
--
-- Approval. An approval-bound call suspends the run before anything of its
-- model turn executes: run:turn{ calls... } admits every call of the turn
-- first and executes none of them when one needs approval; run:invoke(name,
-- args) is a turn of one call. run.status is then "waiting_approval" and
-- run:pending() lists the calls. The host calls run:approve() or run:deny()
-- and run:resume(), which starts a new segment (a fresh remote-call budget,
-- the lease renewed) and returns the whole turn's results: approved calls are
-- admitted again and executed, denied ones answer with an error result. A
-- resource read or prompt get from a server whose operator asked for
-- approval is the same kind of step: run:read_resource / run:get_prompt
-- suspend the run as a turn of that one read (pending kind "read" or
-- "prompt"), and resume() sends it once after approve(), or records the
-- denial in the governance log and sends nothing. The steps that wait are
-- kept on the run's row with its status, and a decision is recorded there
-- from any process (run.decide; the holder's approve/deny only while it holds
-- the lease): another process takes a waiting run over (run.take_over) once
-- its lease expired or its holder released it (run:release()), and resumes it.
--
-- The safe point. run:tools() is where the run imports again, before the
-- gate decides the next turn's tools, the catalogues a change notice made
-- stale on servers the operator set to re-import on their own (never inside
-- a turn; see catalogue.reimport_due), each an event "reimport".
--
-- The rest of a Run: run:tools() (the specs the gate offers the model now),
-- run:events() (the trail), run:cancel(), run:renew() (the lease, while a
-- person takes long), run:release() (hand a waiting run over), run:finish()
-- (→ final status),
-- run:close() (the connections of a provider the run opened itself); fields
-- run.uuid, run.uid (nil when unpersisted), run.persisted, run.owner,
-- run.status, run.error, run.round.
--
-- Cancellation. run.cancel(store, run_uid), from any process, sets the run's
-- persisted flag. The cancel hook of every call reads it (at most once per
-- 10 ms); the connection polls the hook during the transfer, aborts, tells the
-- server and returns kind "cancelled" (in_flight: the server may already have
-- acted). That step is recorded, never retried, and the run ends "cancelled".
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local agent_names = require "mcpclient.agent.names"
local policy = require "mcpclient.agent.policy"
local tool_module = require "mcpclient.agent.tool"

local json = core.json
local default_log = require("mcpclient.log").default
local check_options = require("mcpclient.agent.options").check
local audit_duration = require("mcpclient.agent.store").audit_duration
local error_result = tool_module.error_result

local run = {}

run.LEASE_SECONDS = 900
run.REMOTE_BUDGET = 20
run.CANCEL_POLL_SECONDS = 0.01
run.MAX_OWNER_LENGTH = 64
-- Seconds a remote call of a run with tasks may take, polling its task
-- included (the run's longer horizon), and a take-over's wait for one.
run.TASK_BUDGET = 600

run.RUNNING = "running"
run.WAITING = "waiting_approval"
run.COMPLETED = "completed"
run.FAILED = "failed"
run.CANCELLED = "cancelled"
-- The state of a Run object that handed its waiting run over (Run:release);
-- never a stored status.
run.RELEASED = "released"

local UNENCODABLE = "(the arguments could not be encoded)"
local FENCE_ORDER = { "tool", "arguments_sha256", "sequence", "task_id" }
local PAYLOAD_ORDER = { "kind", "round", "durationMs", "toolName", "toolArguments", "toolResult", "toolIsError",
  "taskId", "taskServer", "startedBy", "finishedBy" }

-- The states of one call of a turn (a record, see new_turn):
local ADMITTING = "admitting" -- not decided yet (new, or approved and to be admitted again)
local REFUSED = "refused"     -- answered without executing; its step is not recorded yet
local ADMITTED = "admitted"   -- passed every check before approval; executes next
local SUSPENDED = "suspended" -- admitted, waits for the host's approval
local DONE = "done"           -- final: result set, its step recorded (unless stopped)

local Run = {}
local task_started, safe_point
Run.__index = Run

local function warn_to(log, message)
  pcall(log, "warning", message)
end

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

-- The lease owner of a run started by this process: "interactive:<hostname>:<pid>",
-- at most 64 characters (the width of the row's claimed_by column).
local function default_owner()
  local segment = "interactive"
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

-- A registry (the shape policy.new takes) over builtins and other tools.
-- Builtins win a name, then the first tool that claims it; a dropped tool is
-- logged. Each tool needs a string `name` and an `execute(self, arguments,
-- context)` method.
-- Also returns fill(tools), which refills the same registry with the
-- builtins and another list (the gate keeps the registry object, so it sees
-- the new tools too).
local function registry_of(builtins, tools, log)
  local by_name, order = {}, {}
  local function add(t)
    if type(t) ~= "table" or type(t.name) ~= "string" or type(t.execute) ~= "function" then
      error("run.start: a tool must be a table with a string name and an execute method", 6)
    end
    if by_name[t.name] then
      warn_to(log, string.format('Tool "%s" is already registered; the later one was dropped.', t.name))
      return
    end
    by_name[t.name] = t
    order[#order + 1] = t.name
  end
  local function fill(list)
    by_name, order = {}, {}
    for _, t in ipairs(builtins or {}) do add(t) end
    for _, t in ipairs(list or {}) do add(t) end
  end
  fill(tools)
  return {
    get = function(name) return by_name[name] end,
    names = function() return table.move(order, 1, #order, 1, {}) end,
  }, fill
end

-- The local names of the host's builtin tools (an import skips a remote
-- tool whose local name one of them has).
local function builtin_names(builtins)
  local set = {}
  for _, t in ipairs(builtins or {}) do
    if type(t) == "table" and type(t.name) == "string" then set[t.name] = true end
  end
  return set
end

-- The gate a run uses when the host brings none: enablement from the
-- store's rows, and every refused or observed-only decision written to the
-- store as a governance event (denial-only: an executed call writes none).
-- A switch that cannot be read reaches the gate as the store's failure (the
-- gate then refuses the tool as unavailable), and a row that cannot be
-- written reaches it too (the run then stops closed).
local function default_gate(store, registry, options)
  return policy.new {
    registry = registry,
    state = {
      tool_enabled = function(name) return store:tool_enabled(name) end,
      group_enabled = function(group) return store:group_enabled(group) end,
    },
    mode = options.mode,
    providers = options.providers,
    on_decision = function(_, _, row) return store:insert_governance_event(row) end,
  }
end

---------------------------------------------------------------------------
-- Starting
---------------------------------------------------------------------------

local option_types = {
  user = "table", configuration = "table", gate = "table", registry = "table", provider = "table",
  tools = "table", builtins = "table", providers = "table", mode = "any", owner = "string", now = "function",
  clock = "function", lease_seconds = "number", remote_budget = "number", uuid = "string", log = "function",
  tasks = "boolean", task_budget = "number",
  connect = "function",
}

-- What the options must hold beyond their keys and types (checked first, by
-- the one option validator, in run.start).
local function validate(store, options)
  if type(store) ~= "table" then error("run.start: store must be a store", 3) end
  if options.registry and (options.provider or options.tools or options.builtins) then
    error("run.start: give either registry, or provider/tools/builtins", 3)
  end
  local budget = options.remote_budget
  if budget ~= nil and (math.type(budget) ~= "integer" or budget < 0) then
    error("run.start: remote_budget must be a non-negative integer", 3)
  end
  local horizon = options.task_budget
  if horizon ~= nil and (horizon ~= horizon or horizon <= 0 or horizon == math.huge) then
    error("run.start: task_budget must be a positive number of seconds", 3)
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

-- The tools of the run: the host's registry, or builtins + the provider's
-- tools + the host's list. → { registry, owned = the provider the run
-- opened itself (or nil), provider (the one listed, owned or the host's),
-- extra (the host's list), fill (see registry_of) } | nil, message, err
-- (the provider could not list its tools)
local function tools_of(store, options, log)
  if options.registry then return { registry = options.registry } end
  local provider, owned = options.provider, nil
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
  local registry, fill = registry_of(options.builtins, tools, log)
  return { registry = registry, owned = owned, provider = provider, extra = options.tools, fill = fill }
end

local function lease_until(self)
  return math.floor(self.now() + self.lease_seconds)
end

-- Insert the run's row RUNNING, claimed by `owner`. A run whose row could not
-- be inserted goes on unpersisted, holding no lease (the fence refuses its
-- writes), and says so in the log.
local function claim(self, owner)
  local user_name = type(self.user) == "table" and self.user.name or nil
  local configuration = type(self.configuration) == "table" and self.configuration.identifier or nil
  local uid, message = self.store:insert_run {
    uuid = self.uuid, status = run.RUNNING, claimed_by = owner, lease_expires = lease_until(self),
    user_name = type(user_name) == "string" and user_name or "",
    configuration = type(configuration) == "string" and configuration or "",
  }
  if uid then
    self.uid, self.owner, self.persisted, self.lease_expires = uid, owner, true, lease_until(self)
  else
    warn_to(self.log, string.format("Run %s has no persisted row and holds no lease: %s", self.uuid,
      tostring(message)))
  end
end

-- A Run on `store`, RUNNING, with its tools (tools_of) and what run.start
-- and run.take_over take alike from their options; `own` sets what differs
-- (a new run's uuid, a taken run's uid, whether tasks are on by default).
local function new_run(store, options, log, tools, own)
  local self = setmetatable({
    store = store, user = options.user, configuration = options.configuration, registry = tools.registry,
    gate = options.gate or default_gate(store, tools.registry, options),
    provider = tools.owned,
    now = options.now or os.time,
    clock = options.clock or core.now,
    lease_seconds = options.lease_seconds or run.LEASE_SECONDS,
    remote_budget = options.remote_budget or run.REMOTE_BUDGET,
    log = log,
    status = run.RUNNING, round = 0, segment = 1, remote_calls = 0,
    trail = {}, persisted = false, sequence = 0, fenced = {},
    task_budget = options.task_budget or run.TASK_BUDGET,
    -- the connections resource reads and prompt gets use (server uid -> connection), opened on first use
    offer_connect = options.connect, offer_connections = {},
    tool_source = tools, builtin_names = builtin_names(options.builtins),
  }, Run)
  for k, v in pairs(own) do self[k] = v end
  return self
end

--- Start a run: insert its row RUNNING, claimed by `owner` for lease_seconds.
-- A run whose row could not be inserted is still returned, with
-- persisted = false and no lease: it can call tools without a side effect,
-- and the fence refuses every write.
-- @param options {
--   user          = { name, uid, admin } (nil: nobody, which is not an administrator),
--   configuration = the policy configuration (see mcpclient.agent.policy),
--   gate          = a policy Gate (default: the store's switches, refusals recorded as governance events),
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
--   connect       = function(row) -> connection | nil, message, err: how read_resource,
--                   get_prompt and an automatic re-import reach a server (default
--                   catalogue.connect with the store's grants),
--   log           = function(level, message) (default: one line on stderr) }
-- @return Run | nil, message, err (the provider could not list its tools)
function run.start(store, options)
  options = validate(store, check_options("run.start", options, option_types))
  local log = options.log or default_log
  local tools, message, err = tools_of(store, options, log)
  if not tools then return nil, message, err end
  local self = new_run(store, options, log, tools,
    { uuid = options.uuid or new_uuid(), tasks = options.tasks == true })
  claim(self, options.owner or default_owner())
  return self
end

--- Ask run `run_uid` to stop, from any process: sets its persisted cancel
--- flag. → true | nil, message, err
function run.cancel(store, run_uid)
  return store:request_cancel(run_uid)
end

---------------------------------------------------------------------------
-- The write fence, as the store keeps it
---------------------------------------------------------------------------

--- The SHA-256 (lowercase hex) of a call's arguments as its audit step
--- records them (their JSON text; nil counts as {}). An audit step's
--- toolArguments, decoded and encoded again, give the same digest.
function run.digest(arguments)
  if arguments == nil then arguments = {} end
  local text = json.try_encode(arguments) or json.encode(UNENCODABLE)
  return (core.crypto.sha256(text):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

--- The calls a run's fence (its row's pending_effect) names: a list of
--- { tool, arguments_sha256, sequence, task_id }, each a write that may have
--- been sent and whose audit step was to take that sequence (task_id: the
--- call became that task, whose handle the store keeps); {} when the fence is clear.
--- A fence this library did not write (an older version's "non_idempotent_write")
--- is one entry { unnamed = true, text = <the text> }.
function run.fence(text)
  if type(text) ~= "string" then error("run.fence: text must be a string", 2) end
  if text == "" then return {} end
  local ok, list = pcall(json.decode, text)
  local entries = {}
  if ok and type(list) == "table" and json.is_array(list) then
    for i, e in ipairs(list) do
      if type(e) ~= "table" or type(e.tool) ~= "string" then entries = nil; break end
      entries[i] = { tool = e.tool, arguments_sha256 = tostring(e.arguments_sha256 or ""),
        sequence = math.tointeger(e.sequence), task_id = type(e.task_id) == "string" and e.task_id or nil }
    end
    if entries and #entries > 0 then return entries end
  end
  return { { unnamed = true, text = text } }
end

---------------------------------------------------------------------------
-- Lease and status writes
---------------------------------------------------------------------------

-- A write of the run's row under its lease: the store's guarded update, one
-- compare-and-set on the status the run is in (RUNNING, or WAITING for an
-- approval) and the owner, which holds across processes on any host.
-- → true | false, err (err: the store failed; none: the row is not ours any more)
local function under_lease(self, fields)
  local store, uid, owner = self.store, self.uid, self.owner
  if not (self.persisted and owner) then return false end
  local status = self.status == run.WAITING and run.WAITING or run.RUNNING
  local changed, _, err = store:guarded_update_run(uid, owner, fields, status)
  if changed == 1 and fields.lease_expires then self.lease_expires = fields.lease_expires end
  return changed == 1, err
end

-- The run stops for good: `kind` names why; run.error is its failure value.
-- `store_error` is the store's own failure behind it, when there was one.
local function fail(self, kind, detail, store_error)
  local _, _, err = errors.fail(kind, { detail = detail, run_uuid = self.uuid, store_error = store_error })
  self.error = err
  if kind ~= "run_lease_lost" then
    -- a lost lease means the row is someone else's now: leave it alone
    under_lease(self, { status = run.FAILED, lease_expires = math.floor(self.now()) })
  end
  self.status = run.FAILED
  warn_to(self.log, err.message)
  return err
end

-- The run stops because the store failed under a write of its row: run.error
-- is the store's own failure value, unchanged (kind "store"). The row is
-- marked failed if the store takes that write; if not, it stays running with
-- its fence, and the next process that opens the store once the lease has
-- expired marks it failed (see store:recover_runs).
local function store_failed(self, name, err)
  self.error = err
  under_lease(self, { status = run.FAILED, lease_expires = math.floor(self.now()) })
  self.status = run.FAILED
  warn_to(self.log, string.format("Run %s stops because its row could not be written; %s. %s", self.uuid,
    name and string.format('"%s" was not called', name) or "it stops here", err.message))
  return err
end

-- A lease write changed nothing (`err` nil: another owner holds the run) or
-- failed (`err`: the store's failure). Either way the run stops here.
local function lease_trouble(self, name, err)
  if err then return store_failed(self, name, err) end
  return fail(self, "run_lease_lost", string.format("Run %s lost its execution lease; %s.", self.uuid,
    name and string.format('"%s" was not called', name) or "it stops here"))
end

-- A refusal whose governance event could not be recorded: the run stops
-- closed, as for an executed write whose step could not be. → err
local function unrecorded_refusal(self, name, store_error)
  return fail(self, "audit_persistence_failed", string.format("The refusal of %s could not be recorded as a "
    .. "governance event in run %s; the run stops because a refusal must not go unrecorded.",
    name and string.format('tool "%s"', name) or "a tool", self.uuid), store_error)
end

-- The run ends as `status` (completed or cancelled), its fence cleared. A
-- store that fails that write fails the run (run.error: its failure value):
-- the row still says running, and only this process knows why.
local function conclude(self, status)
  local ok, err = under_lease(self, { status = status, pending_effect = "", lease_expires = math.floor(self.now()) })
  self.status = status
  if ok or not self.persisted then
    self.fenced = {}
  elseif err then
    self.error, self.status = err, run.FAILED
    warn_to(self.log, string.format("Run %s ended %s but its row could not be updated: %s", self.uuid, status,
      err.message))
  else
    warn_to(self.log, string.format("Run %s ended %s but its row could not be updated: the lease is held by "
      .. "another owner", self.uuid, status))
  end
end

-- Has someone asked this run to stop? Reads the persisted flag at most once
-- per 10 ms (the connection polls its cancel hook that often during a transfer).
-- A run that waits on a server (a slow call, a task followed for longer
-- than the lease) keeps its lease: the row read for the cancel flag also
-- renews the lease once half of it has passed, so no other process takes
-- over a run whose worker is alive. A renewal that fails changes nothing
-- here: the write after the call finds the lease lost or the store failing.
local function keep_lease(self)
  if self.status ~= run.RUNNING or not self.lease_expires then return end
  if self.now() < self.lease_expires - self.lease_seconds / 2 then return end
  under_lease(self, { lease_expires = lease_until(self) })
end

local function cancel_requested(self)
  if self.cancel_seen then return true end
  if not self.persisted then return false end
  local t = self.clock()
  if self.last_poll and t - self.last_poll < run.CANCEL_POLL_SECONDS then return false end
  self.last_poll = t
  local row = self.store:run(self.uid)
  if row and row.cancel_requested then self.cancel_seen = true end
  keep_lease(self)
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
-- The trail
---------------------------------------------------------------------------

-- A registered tool's effect is its declaration, else read-only.
-- Refusals of unknown names never execute, so their steps are fail-soft.
local function is_write(tool)
  return (tool.effect or "read_only") ~= "read_only"
end

-- JSON text of an event payload. Arguments a model wrote may not encode
-- (a function, a sparse list): the step is still recorded, without them.
local function encode_payload(payload, order)
  if order then json.set_key_order(payload, order) end
  local text = json.try_encode(payload)
  if text then return text end
  payload.toolArguments = UNENCODABLE
  if payload.calls then
    for _, call in ipairs(payload.calls) do call.toolArguments = nil end
  end
  return json.encode(payload)
end

-- The step of a call, and for a task-backed one the task closed (its last
-- status, who finished it) in the same transaction: a task is open exactly
-- while its step is missing, and only one owner records it. → sequence |
-- nil, message, err
local function append_step(self, event, task)
  if not (task and task.uid) then return self.store:append_event(self.uid, event) end
  return self.store:transaction(function()
    local closed, message, err = self.store:close_task(task.uid, self.owner or "", task.status or "")
    if not closed then return nil, message, err end
    if closed ~= 1 then
      return errors.fail("run_lease_lost", { run_uuid = self.uuid, detail = string.format("Run %s lost its "
        .. "execution lease: the step of task %s was recorded by another owner.", self.uuid, task.task_id) })
    end
    return self.store:append_event(self.uid, event)
  end)
end

-- Record one TOOL step. → true when it is in the store | false, err
local function record_step(self, step)
  local arguments = step.arguments
  if arguments == nil then arguments = {} end
  local duration = audit_duration(step.duration_ms or 0)
  -- names and texts reach JSON as valid UTF-8 whatever the model or the tool wrote
  local payload = encode_payload({
    kind = "tool", round = step.round, durationMs = duration, toolName = core.repair_utf8(step.name),
    toolArguments = arguments, toolResult = core.repair_utf8(step.text), toolIsError = step.is_error == true,
    taskId = step.task and core.repair_utf8(step.task.task_id) or nil,
    taskServer = step.task and core.repair_utf8(step.task.server) or nil,
    startedBy = step.task and core.repair_utf8(step.task.started_by) or nil,
    finishedBy = step.task and core.repair_utf8(self.owner or "") or nil,
  }, PAYLOAD_ORDER)
  local event = { kind = "tool", round = step.round, duration_ms = duration, payload = payload }
  if not self.persisted then
    self.trail[#self.trail + 1] = event
    return false
  end
  local sequence, message, err = append_step(self, event, step.task)
  if not sequence then
    warn_to(self.log, string.format('The step of tool "%s" in run %s could not be recorded: %s',
      step.name, self.uuid, tostring(message)))
    return false, err
  end
  self.sequence = sequence
  return true
end

-- Record an event that is not a tool step (approval): fail-soft.
local function note(self, kind, fields)
  fields.kind = kind
  local event = { kind = kind, round = fields.round or self.round, payload = encode_payload(fields) }
  if self.persisted then
    local sequence = self.store:append_event(self.uid, event)
    if sequence then self.sequence = sequence end
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

local function gate_context(self)
  return { correlation_id = self.uuid, run_uid = self.uid or 0 }
end

-- Why no remote tool is offered, when the reason is the user: remote tools
-- are for administrators only, whatever a server declares.
local function remote_withheld(self, offered)
  if type(self.user) == "table" and self.user.admin == true then return nil end
  for _, spec in ipairs(offered) do
    local t = self.registry.get(spec.name)
    if t and t.remote then return nil end
  end
  for _, name in ipairs(self.registry.names()) do
    local t = self.registry.get(name)
    if t and t.remote then
      return "No remote MCP tool is offered: remote tools are available to administrators only, and this "
        .. "run's user is not one."
    end
  end
  return nil
end

--- The tools the gate offers to the model now, as { name, description,
--- parameters } (every enabled tool is decided; refusals are recorded: one
--- that cannot be recorded stops the run closed, and nothing is offered).
--- This is the run's safe point: first, the catalogues due a re-import are
--- imported again and the run's tools listed again from its provider (see
--- safe_point below).
-- @return specs, why (a sentence when remote tools were withheld because the
--   run's user is not an administrator, or when the run stopped; nil otherwise)
function Run:tools()
  local offered = {}
  -- the safe point of the run: no turn is using the tools now
  safe_point(self)
  if self.status == run.FAILED then return offered, self.error.message end
  local names, unrecorded = self.gate:filter_offerable(nil, self.configuration, self.user, gate_context(self))
  if unrecorded then return offered, unrecorded_refusal(self, nil, unrecorded).message end
  for _, name in ipairs(names) do
    local t = self.registry.get(name)
    if t then
      offered[#offered + 1] = t.spec and t:spec()
        or { name = t.name, description = t.description, parameters = t.parameters }
    end
  end
  return offered, remote_withheld(self, offered)
end

---------------------------------------------------------------------------
-- Resources and prompts: what a read is to the gate, its server, its event
---------------------------------------------------------------------------

-- What a resource read or prompt get is to the gate: a remote tool of the
-- server, named for the governance log, carrying the server's operator-set
-- data class (nothing the server says). A read is not a write.
local function offer_entry(row, what)
  return { name = string.format("mcp_%s:%s", row.identifier, what), data_class = catalogue.data_class(row),
    group = agent_names.group(row.identifier), -- the server's group switch holds for its reads too
    remote = true, enabled_by_default = true, effect = "read_only" }
end

-- How a read is sent once its connection is open: (conn, opts) -> answer.
local function offer_fetch(kind, target, arguments)
  if kind == "resource" then return function(conn, opts) return conn:read_resource(target, opts) end end
  return function(conn, opts) return conn:get_prompt(target, arguments, opts) end
end

-- The enabled server named `identifier`, or nil.
local function offer_server(self, identifier)
  local rows, message, err = self.store:enabled_servers()
  if not rows then return nil, message, err end
  for _, row in ipairs(rows) do
    if row.identifier == identifier then return row end
  end
  return nil
end

-- The run's connection to `row`, opened on first use.
local function offer_connection(self, row)
  -- a run taken over from another process has no table of them yet
  self.offer_connections = self.offer_connections or {}
  local conn = self.offer_connections[row.uid]
  if conn then return conn end
  local message, err
  if self.offer_connect then
    conn, message, err = self.offer_connect(row)
  else
    conn, message, err = catalogue.connect(row, { store = self.store })
  end
  if not conn then return nil, message, err end
  self.offer_connections[row.uid] = conn
  return conn
end

-- Record one read as an event of the run (fail-soft: a read has no side
-- effect to fence), with its latency.
local function record_offer(self, kind, fields, duration_ms)
  local duration = audit_duration(duration_ms or 0)
  fields.kind, fields.round, fields.durationMs = kind, self.round, duration
  fields.result = core.repair_utf8(fields.result)
  local event = { kind = kind, round = self.round, duration_ms = duration, payload = encode_payload(fields) }
  if not self.persisted then
    self.trail[#self.trail + 1] = event
    return
  end
  local sequence, message = self.store:append_event(self.uid, event)
  if sequence then
    self.sequence = sequence -- the next call's fence names the sequence its step is to take
  else
    warn_to(self.log, string.format("A %s read in run %s could not be recorded: %s", kind, self.uuid,
      tostring(message)))
  end
end

---------------------------------------------------------------------------
-- Catalogues that changed: re-imported at the run's safe point
---------------------------------------------------------------------------

-- The run's tools again from its provider, after a re-import (a host that
-- gave its own registry keeps it as it is).
local function refresh_tools(self)
  local source = self.tool_source
  if not (source and source.provider and source.fill) then return end
  local listed, message = source.provider.tools()
  if not listed then
    warn_to(self.log, string.format("Run %s keeps its tools as they were: the provider could not list them "
      .. "again: %s", self.uuid, tostring(message)))
    return
  end
  for _, t in ipairs(source.extra or {}) do listed[#listed + 1] = t end
  source.fill(listed)
end

-- What the run's trail says of one automatic re-import.
local function reimport_text(report)
  if report.refused then
    return "The catalogue was not imported again and is still stale: "
      .. core.clip(tostring(report.skip_reasons[1]), 300)
  end
  return string.format("Imported %d tools, skipped %d, orphaned %d.", report.imported, report.skipped,
    report.orphaned)
end

-- The safe point: run:tools(), before the gate decides what the next model
-- turn is offered, never while a turn runs. Each server the operator set to
-- re-import on its own whose catalogue a change notice made stale is
-- imported again here (catalogue.reimport_due: the import's own rules, one
-- process per burst of notices) — only where this run's gate lets it reach
-- the server (as a read of it: its data class against the zone, remote for
-- administrators only, its group switch; a refusal is a governance row and
-- leaves the re-import due for a host that may). Each re-import is an event
-- of the run ("reimport", with its latency); the run's tools are then listed
-- again from its provider.
function safe_point(self)
  if self.status ~= run.RUNNING then return end
  local done, message = catalogue.reimport_due(self.store, {
    builtin_names = self.builtin_names, log = self.log, connect = self.offer_connect,
    admit = function(row)
      if self.status ~= run.RUNNING then return false end
      local d = self.gate:decide_offer(offer_entry(row, "catalogue"), self.configuration, self.user,
        gate_context(self))
      if d.unrecorded then
        unrecorded_refusal(self, offer_entry(row, "catalogue").name, d.unrecorded)
        return false
      end
      return d.allowed == true
    end,
  })
  if not done then
    warn_to(self.log, string.format("Run %s could not look for catalogues to import again: %s", self.uuid,
      tostring(message)))
    return
  end
  local changed = false
  for _, item in ipairs(done) do
    local report = item.report
    record_offer(self, "reimport", { server = item.row.identifier, imported = report.imported,
      skipped = report.skipped, orphaned = report.orphaned, refused = report.refused == true,
      result = reimport_text(report), isError = report.refused == true }, item.duration_ms)
    changed = changed or not report.refused
  end
  if changed then refresh_tools(self) end
end

---------------------------------------------------------------------------
-- A turn: one record per call
---------------------------------------------------------------------------

--[[
A turn is { round, records }; a record is one call of the model's turn:
  call     { name, arguments } as the model wrote it
  state    ADMITTING → REFUSED | ADMITTED → SUSPENDED → ADMITTING (approved)
           | REFUSED (denied); REFUSED | ADMITTED → DONE
  tool     the registered tool (admitted calls); for a read, its gate entry
  offer    a resource read or prompt get instead of a tool call: { kind
           ("resource" | "prompt"), server (the identifier asked for), target
           (uri | prompt name), arguments, fetch(conn, opts), row (the server's
           row, once found) }; needs_approval when the operator asked for it
  result   { text, is_error [, err] } once the call is answered
  stopped  the run ended before or at this call: nothing of it is recorded
The results a caller sees are built from the records at the end of the turn.
]]
local function new_turn(calls, round)
  local records = {}
  for i, call in ipairs(calls) do records[i] = { call = call, state = ADMITTING } end
  return { round = round, records = records }
end

-- The call is answered and needs no step of its own (the run has ended).
local function stop(rec, result)
  rec.state, rec.result, rec.stopped = DONE, result, true
end

local function refuse(rec, text)
  rec.state, rec.result = REFUSED, error_result(text)
end

local function not_called(self, rec)
  stop(rec, error_result(string.format('Error: run %s has ended (%s); "%s" was not called.', self.uuid,
    self.status, rec.call.name), self.error))
end

-- The write fence: a write needs a row to fence it and a lease to fence it with.
local function refuse_unfenced_write(self, rec)
  local err = fail(self, "write_without_durable_execution", string.format('Tool "%s" declares a side effect but '
    .. "run %s holds no execution lease; the write is refused because it cannot be fenced.", rec.call.name,
    self.persisted and self.uuid or "(unpersisted)"))
  stop(rec, error_result(err.message, err))
end

-- Decide one read, up to (not including) approval: the server's row (it
-- may have been disabled meanwhile), then the gate on its operator-set data
-- class. A refusal is REFUSED (its event recorded later); one whose
-- governance row could not be recorded stops the run closed.
local function admit_offer(self, rec)
  local offer = rec.offer
  local row, message, err = offer_server(self, offer.server)
  if not row then
    if err then
      rec.state, rec.result = REFUSED, error_result(message, err)
      return
    end
    return refuse(rec, string.format('Error: no enabled MCP server is named "%s".', core.clip(offer.server)))
  end
  local entry = offer_entry(row, offer.kind)
  offer.row, rec.tool = row, entry
  local decision = self.gate:decide_offer(entry, self.configuration, self.user, gate_context(self))
  if decision.unrecorded then  -- a refusal must not go unrecorded: the run stops closed
    local err_value = unrecorded_refusal(self, entry.name, decision.unrecorded)
    return stop(rec, error_result(err_value.message, err_value))
  end
  if decision.reason == policy.REASONS.STORE_UNAVAILABLE then
    rec.state, rec.result = REFUSED, error_result(string.format('Error: reading %s from "%s" is unavailable for '
      .. "now (its switch could not be read from the store); nothing was read.", offer.kind, row.identifier),
      decision.err)
    return
  end
  if not decision.allowed then
    return refuse(rec, string.format('Error: reading %s from "%s" is not permitted.', offer.kind, row.identifier))
  end
  rec.state = ADMITTED
  rec.needs_approval = tostring(row.requires_approval) ~= "0"  -- only the literal "0" waives it
end

-- Decide one call, up to (not including) approval, which is decided for the
-- whole turn.
local function admit(self, rec)
  if rec.offer then return admit_offer(self, rec) end
  local name = rec.call.name
  local tool = self.registry.get(name)
  if tool == nil then return refuse(rec, string.format('Error: unknown tool "%s"', name)) end
  local decision = self.gate:decide(name, self.configuration, self.user, gate_context(self))
  if decision.unrecorded then
    local err = unrecorded_refusal(self, name, decision.unrecorded)
    return stop(rec, error_result(err.message, err))
  end
  if decision.reason == policy.REASONS.STORE_UNAVAILABLE then
    -- not a verdict on the tool: the store that holds its switch could not be read
    rec.state, rec.result = REFUSED, error_result(string.format('Error: tool "%s" is unavailable for now (its '
      .. "switch could not be read from the store); it was not called.", name), decision.err)
    return
  end
  if not decision.allowed then return refuse(rec, string.format('Error: tool "%s" not permitted', name)) end
  if is_write(tool) and not (self.persisted and self.owner) then return refuse_unfenced_write(self, rec) end
  if tool.remote then
    if self.remote_calls >= self.remote_budget then
      return refuse(rec, string.format('Error: this run has used its budget of %d calls to external tools; '
        .. '"%s" was not called.', self.remote_budget, name))
    end
    self.remote_calls = self.remote_calls + 1
  end
  rec.state, rec.tool = ADMITTED, tool
end

local function admit_all(self, turn)
  for _, rec in ipairs(turn.records) do
    if rec.state == ADMITTING then
      if self.status ~= run.RUNNING then not_called(self, rec) else admit(self, rec) end
    end
  end
end

-- Does an admitted call of the turn need the host's approval first?
local function awaits_approval(self, turn)
  if self.status ~= run.RUNNING then return false end
  for _, rec in ipairs(turn.records) do
    if rec.state == ADMITTED and policy.requires_approval(rec.tool) then return true end
  end
  return false
end

-- A read's event (fail-soft: a read has no side effect to fence). A read
-- from no known server has none: there is nothing to name.
local function record_read(self, rec)
  local offer = rec.offer
  if not offer.row then return end
  record_offer(self, offer.kind, { server = offer.row.identifier, target = core.repair_utf8(offer.target),
    result = rec.result.text, isError = rec.result.is_error }, rec.duration_ms)
end

-- A refusal's step: nothing ran, so a record that fails is only logged.
local function settle_refusal(self, turn, rec)
  if rec.offer then
    record_read(self, rec)
    rec.state = DONE
    return
  end
  record_step(self, { round = turn.round, name = rec.call.name, arguments = rec.call.arguments,
    text = rec.result.text, is_error = true })
  rec.state = DONE
end

---------------------------------------------------------------------------
-- Execution of one admitted call
---------------------------------------------------------------------------

-- The fence's entry for one write: its local tool name, the digest of its
-- arguments (run.digest), and the audit sequence its step is to take.
local function fence_entry(rec, sequence)
  return json.set_key_order({ tool = core.repair_utf8(rec.call.name), arguments_sha256 = run.digest(rec.call.arguments),
    sequence = sequence }, FENCE_ORDER)
end

-- Before a byte leaves: a cancelled run sends nothing, and a write is named
-- in the fence under the lease (the fence lists every write of the turn that
-- may be on the wire; a lost lease or a failed store stops the run). `sequence`
-- is the audit sequence the call's step is to take. → true to go on
local function ready_to_send(self, rec, sequence)
  if cancel_requested(self) then
    conclude(self, run.CANCELLED)
    not_called(self, rec)
    return false
  end
  rec.sequence = sequence
  if is_write(rec.tool) then
    local fenced = self.fenced
    rec.fence_entry = fence_entry(rec, sequence)
    fenced[#fenced + 1] = rec.fence_entry
    local ok, err = under_lease(self, { pending_effect = json.encode(json.array(fenced)),
      lease_expires = lease_until(self) })
    if not ok then
      lease_trouble(self, rec.call.name, err)
      not_called(self, rec)
      return false
    end
  end
  return true
end

-- A remote call became a task: before anything else happens its handle is
-- stored, in the same transaction as the fence that now names the task, so
-- a process that takes the run over follows the task instead of calling
-- again. Later notices only update the stored status. A handle that cannot
-- be stored leaves the fence as it was: the run is then recovered as any
-- call that may have run (failed closed), never called twice.
function task_started(self, rec, handle)
  if rec.task then
    rec.task.status = handle.status
    if rec.task.uid then pcall(self.store.update_task, self.store, rec.task.uid, { status = handle.status }) end
    return
  end
  rec.task = { task_id = handle.id, server = handle.server, started_by = self.owner or "", status = handle.status }
  if not (self.persisted and self.owner) then return end
  local entry = rec.fence_entry
  if entry then entry.task_id = handle.id end
  local uid, message = self.store:insert_task({ run = self.uid, sequence = rec.sequence or 0,
    server = handle.server or "", task_id = handle.id, tool = core.repair_utf8(rec.call.name),
    arguments_sha256 = run.digest(rec.call.arguments), arguments = json.try_encode(rec.call.arguments or {}) or "",
    round = rec.round or self.round, handle = json.encode(handle), status = handle.status,
    started_by = self.owner }, self.owner, json.encode(json.array(self.fenced)))
  if uid then
    rec.task.uid = uid
  else
    if entry then entry.task_id = nil end
    warn_to(self.log, string.format('The handle of task %s (tool "%s", run %s) could not be stored: %s',
      core.clip(handle.id), rec.call.name, self.uuid, uid == false and "the lease is lost" or tostring(message)))
  end
end

-- A prompt's turns as a model may be handed them: { role, text } each, the
-- text inert (the connection's turns are; this holds whatever answered).
local function inert_turns(turns)
  if type(turns) ~= "table" then return nil end
  local out = {}
  for _, turn in ipairs(turns) do
    if type(turn) == "table" and type(turn.text) == "string" then
      out[#out + 1] = { role = turn.role, text = core.inert(turn.text), note = turn.note }
    end
  end
  return out
end

-- One read, sent once: the run's connection to the server, then the
-- request. → result (inert and bounded as a tool result; a prompt's turns
-- beside its text), duration in ms
local function fetch_offer(self, rec)
  local started = self.clock()
  local conn, message, err = offer_connection(self, rec.offer.row)
  local answer
  if conn then
    answer, message, err = rec.offer.fetch(conn, { cancel = function() return cancel_requested(self) end })
  end
  local result = answer and { text = core.inert(answer.text), is_error = false, turns = inert_turns(answer.turns) }
    or error_result(message, err)
  return result, (self.clock() - started) * 1000
end

-- What the tool answered, as a bounded ToolResult: a tool that raises or
-- answers with something else is an error result (and a log line), and an
-- err it carries is passed on unchanged. → result, duration in ms
local function call_tool(self, rec)
  if rec.offer then return fetch_offer(self, rec) end
  local name, tool = rec.call.name, rec.tool
  local started = self.clock()
  -- each round of input the server asked for is an event of its own: which inputs were answered
  -- and how (accept, decline, cancel), never what the person entered
  local function on_input(round)
    note(self, "input", { round = self.round, toolName = core.repair_utf8(name), inputRound = round.round,
      answers = round.answers })
  end
  local context = { cancel = function() return cancel_requested(self) end, on_input = on_input }
  if self.tasks and tool.remote then
    context.task, context.budget = true, self.task_budget
    context.on_task = function(handle) task_started(self, rec, handle) end
  end
  local ok, answer = pcall(tool.execute, tool, rec.call.arguments, context)
  local duration_ms = (self.clock() - started) * 1000
  if not ok then
    warn_to(self.log, string.format('Tool "%s" raised: %s', name, tostring(answer)))
    return error_result(string.format('Error: tool "%s" failed.', name)), duration_ms
  elseif type(answer) == "string" then
    return { text = core.bound(answer), is_error = false }, duration_ms
  elseif type(answer) ~= "table" or type(answer.text) ~= "string" then
    return error_result(string.format('Error: tool "%s" failed.', name)), duration_ms
  end
  local err = type(answer.err) == "table" and answer.err or nil
  return { text = core.bound(answer.text), is_error = answer.is_error == true or err ~= nil, err = err }, duration_ms
end

-- After the call: nothing with a side effect runs unrecorded (the fence stays
-- stamped: the effect happened and its record is missing), a cancellation
-- ends the run, and otherwise the lease is renewed and the fence cleared —
-- once no write of the turn is left unrecorded (`last_write`).
local function settle_call(self, rec, recorded, store_error, last_write)
  local write = is_write(rec.tool)
  if not recorded and write then
    local err = fail(self, "audit_persistence_failed", string.format('The step of tool "%s" could not be recorded '
      .. "in run %s; the run stops because a write must not go unrecorded.", rec.call.name, self.uuid), store_error)
    return stop(rec, error_result(err.message, err))
  end
  local err = rec.result.err
  if (err and err.kind == "cancelled") or cancel_requested(self) then
    conclude(self, run.CANCELLED)
    rec.stopped = true
    return
  end
  if not self.persisted then return end
  local fields = { lease_expires = lease_until(self) }
  local clears = write and last_write
  if clears then fields.pending_effect = "" end
  local ok, lease_err = under_lease(self, fields)
  if not ok then
    lease_trouble(self, nil, lease_err)
    rec.stopped = true
  elseif clears then
    self.fenced = {}
  end
end

-- Record an executed call's step, then settle it. A call that ran after the
-- run ended (it was in flight with others) is still recorded: it happened.
local function record_call(self, turn, rec, last_write)
  if rec.offer then
    record_read(self, rec)
    if self.status == run.RUNNING then settle_call(self, rec, true, nil, false) else rec.stopped = true end
    return
  end
  local result = rec.result
  local recorded, store_error = record_step(self, { round = turn.round, name = rec.call.name,
    arguments = rec.call.arguments, text = result.text, is_error = result.is_error, duration_ms = rec.duration_ms,
    task = rec.task })
  if self.status == run.RUNNING then
    settle_call(self, rec, recorded, store_error, last_write)
  else
    rec.stopped = true
  end
end

-- Run the calls that are ready, all at once (one of them blocks as before).
local function execute_all(self, ready)
  if #ready == 1 then
    ready[1].result, ready[1].duration_ms = call_tool(self, ready[1])
  else
    local tasks = {}
    for i, rec in ipairs(ready) do tasks[i] = function() return call_tool(self, rec) end end
    for i, answer in ipairs(engine.gather(tasks)) do ready[i].result, ready[i].duration_ms = answer[1], answer[2] end
  end
  for _, rec in ipairs(ready) do rec.state = DONE end
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

local function check_not_waiting(self)
  if self.status == run.WAITING then
    error("the run is waiting for approval: call approve() or deny(), then resume()", 3)
  end
end

-- The caller's view of the turn, built from its records.
local function results_of(turn)
  local out = {}
  for i, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED and rec.offer then
      out[i] = { suspended = true, is_error = false, text = string.format('The run is waiting for approval; %s '
        .. '"%s" of "%s" has not been read yet.', rec.offer.kind, core.clip(rec.offer.target),
        rec.offer.row.identifier) }
    elseif rec.state == SUSPENDED then
      out[i] = { suspended = true, is_error = false,
        text = string.format('The run is waiting for approval; "%s" has not been called yet.', rec.call.name) }
    else
      local r = rec.result
      out[i] = { text = r.text, is_error = r.is_error, err = r.err, stopped = rec.stopped }
    end
  end
  return out
end

-- A waiting record as a step: { kind = "call", name, arguments } | { kind =
-- "read", server, uri } | { kind = "prompt", server, name, arguments }.
local function step_of(rec)
  local offer = rec.offer
  if not offer then return { kind = "call", name = rec.call.name, arguments = rec.call.arguments } end
  if offer.kind == "resource" then return { kind = "read", server = offer.row.identifier, uri = offer.target } end
  return { kind = "prompt", server = offer.row.identifier, name = offer.target, arguments = offer.arguments }
end

-- What a waiting run keeps on its row so that another process can take it
-- over: the round and each step that waits, with its arguments, as JSON text
-- ({ round, steps = { { kind = "call", name, arguments } | { kind = "read",
-- server, uri } | { kind = "prompt", server, name, arguments } } }); "" when
-- the arguments cannot be encoded (such a run is resumed only by its process).
local function steps_text(turn)
  local steps = {}
  for _, rec in ipairs(turn.records) do
    if rec.state == ADMITTED then
      local step = step_of(rec)
      if step.kind ~= "read" then step.arguments = step.arguments or {} end
      steps[#steps + 1] = step
    end
  end
  return json.try_encode { round = turn.round, steps = json.array(steps) } or ""
end

-- Hold the whole turn for approval: its refusals are recorded now, its
-- admitted calls wait (or, when the lease is gone, are not made at all).
-- The steps that wait are kept on the run's row with its status, in one
-- guarded write, and any earlier decision is cleared.
local function suspend(self, turn)
  for _, rec in ipairs(turn.records) do
    if rec.state == REFUSED then settle_refusal(self, turn, rec) end
  end
  self.pending_steps = steps_text(turn)
  local ok, err = under_lease(self, { status = run.WAITING, lease_expires = lease_until(self),
    pending_steps = self.pending_steps, approval = "" })
  if self.persisted and not ok then
    lease_trouble(self, nil, err)
    for _, rec in ipairs(turn.records) do
      if rec.state == ADMITTED then not_called(self, rec) end
    end
    return results_of(turn)
  end
  self.status, self.waiting = run.WAITING, turn
  local listed = {}
  for _, rec in ipairs(turn.records) do
    if rec.state == ADMITTED then
      rec.state = SUSPENDED
      if rec.offer then
        listed[#listed + 1] = { offerKind = rec.offer.kind, server = rec.offer.row.identifier,
          target = core.repair_utf8(rec.offer.target) }
      else
        listed[#listed + 1] = { toolName = core.repair_utf8(rec.call.name), toolArguments = rec.call.arguments or {} }
      end
    end
  end
  note(self, "approval_required", { round = turn.round, calls = listed })
  return results_of(turn)
end

-- Ready every admitted call in the model's order (the cancel flag, the fence
-- stamped for writes); → the calls to execute, and the last write among them.
-- The turn's steps are recorded in the model's order after the calls (a
-- refusal's and an executed call's; a call not made has none), so each call's
-- audit sequence is known before it is sent.
local function ready_all(self, turn)
  local ready, last_write, sequence = {}, nil, self.sequence
  for _, rec in ipairs(turn.records) do
    if rec.state == REFUSED then
      sequence = sequence + 1
    elseif rec.state == ADMITTED then
      if self.status == run.RUNNING and ready_to_send(self, rec, sequence + 1) then
        sequence = sequence + 1
        ready[#ready + 1] = rec
        if is_write(rec.tool) then last_write = rec end
      elseif rec.state == ADMITTED then
        not_called(self, rec)
      end
    end
  end
  return ready, last_write
end

-- Admit every call of the turn — or suspend the whole turn when one admitted
-- call needs an approval it does not have — then execute the admitted calls
-- at once and record every step in the model's order, whatever order the
-- calls finished in.
local function play(self, turn, approved)
  admit_all(self, turn)
  if not approved and awaits_approval(self, turn) then return suspend(self, turn) end
  local ready, last_write = ready_all(self, turn)
  execute_all(self, ready)
  for _, rec in ipairs(turn.records) do
    if rec.state == REFUSED then
      settle_refusal(self, turn, rec)
    elseif rec.result and rec.duration_ms then
      record_call(self, turn, rec, rec == last_write)
    end
  end
  return results_of(turn)
end

--- One model turn: its tool calls, admitted together, then executed at once (the trail keeps their order).
-- @param calls { { name = "<tool>", arguments = { ... } }, ... }
-- @return results, one per call: { text, is_error [, err] [, suspended] [, stopped] }
function Run:turn(calls)
  check_calls(calls)
  check_not_waiting(self)
  self.round = self.round + 1
  if self.status == run.RUNNING and cancel_requested(self) then conclude(self, run.CANCELLED) end
  return play(self, new_turn(calls, self.round), false)
end

--- One tool call as a turn of its own. → result { text, is_error [, err] [, suspended] [, stopped] }
function Run:invoke(name, arguments)
  if type(name) ~= "string" then error("invoke: the tool name must be a string", 2) end
  if arguments ~= nil and type(arguments) ~= "table" then error("invoke: arguments must be a table", 2) end
  check_not_waiting(self)
  return self:turn { { name = name, arguments = arguments } }[1]
end

-- What the host is asked to approve for one suspended record.
local function pending_entry(rec)
  local step = step_of(rec)
  -- a uri may come from a resource_link a tool returned: far-side text, shown under the text rule
  if step.kind == "read" then step.uri = core.clip(step.uri) end
  if step.kind == "prompt" then step.name = core.clip(step.name) end
  return step
end

--- What a suspended run waits to have approved, in order: tool calls
--- { kind = "call", name, arguments }, resource reads { kind = "read",
--- server, uri } and prompt gets { kind = "prompt", server, name, arguments }
--- (uri and name under the text rule: control and bidi characters out, clipped).
function Run:pending()
  local out = {}
  if not self.waiting then return out end
  for _, rec in ipairs(self.waiting.records) do
    if rec.state == SUSPENDED then out[#out + 1] = pending_entry(rec) end
  end
  return out
end

-- The audit's last sequence, read again: another process may have appended
-- an event (a decision) since this one wrote its last, and a call's fence
-- names the sequence its step is to take.
local function sync_sequence(self)
  if not self.persisted then return end
  local events = self.store:events(self.uid)
  for _, e in ipairs(events or {}) do self.sequence = math.max(self.sequence, e.sequence) end
end

-- The decision as the "approval" event records it.
local function approval_event(round, approved, by)
  return { kind = "approval", round = round, payload = encode_payload({ kind = "approval", round = round,
    approved = approved, by = core.repair_utf8(by) }) }
end

-- Record the host's decision. A persisted run whose waiting steps are on its
-- row records it there (the first decision wins, from any process; see
-- run.decide), so a process that takes the run over resumes with it.
local function decide_approval(self, approved)
  if self.status ~= run.WAITING then error("the run is not waiting for approval", 3) end
  local round = self.waiting.round
  if self.persisted and (self.pending_steps or "") ~= "" then
    local decided, message = self.store:decide_run(self.uid, approved and "approved" or "denied", self.pending_steps,
      approval_event(round, approved, self.owner or ""), self.owner or "")
    if decided == 1 then
      self.approval = approved
      sync_sequence(self)
      return true
    elseif decided == 0 then
      local row = self.store:run(self.uid)
      if row and row.status == run.WAITING and row.claimed_by == self.owner and row.approval ~= "" then
        -- a person decided first, from another process: that decision holds
        self.approval = row.approval == "approved"
        return errors.fail("invalid", { field = "approval", detail = string.format("Run %s was %s already; that "
          .. "decision holds.", self.uuid, row.approval) })
      end
      self.waiting = nil
      local failure = lease_trouble(self, nil, nil)
      return nil, failure.message, failure
    end
    warn_to(self.log, string.format("The decision on run %s could not be stored, so it holds in this process "
      .. "only: %s", self.uuid, tostring(message)))
  end
  self.approval = approved
  note(self, "approval", { round = round, approved = approved, by = core.repair_utf8(self.owner or "") })
  return true
end

--- The host approves the suspended turn's calls (then resume()). A persisted
--- run records the decision on its row (an "approval" event in its trail).
-- @return true | nil, message, err (kind "invalid": a person decided first, from another process — that
--   decision holds and resume() applies it; kind "run_lease_lost": another process holds the run now)
function Run:approve() return decide_approval(self, true) end

--- The host refuses them (then resume(): each answers with an error result).
-- @return as approve()
function Run:deny() return decide_approval(self, false) end

--- Renew the run's lease for another lease_seconds, as each call does: for
--- a holder that waits for a person longer than its lease and means to keep
--- the run (once the lease has expired, another process may take it over).
-- @return true | nil, message, err (kind "run_lease_lost": another process holds it now, and this
--   object stops; "store": the row could not be written)
function Run:renew()
  if self.status ~= run.RUNNING and self.status ~= run.WAITING then
    error("renew: the run has ended (" .. tostring(self.status) .. ")", 2)
  end
  if not self.persisted then return true end
  local ok, err = under_lease(self, { lease_expires = lease_until(self) })
  if ok then return true end
  if err then return nil, err.message, err end
  self.waiting = nil
  local failure = lease_trouble(self, nil, nil)
  return nil, failure.message, failure
end

--- Hand a waiting run over: its lease ends now, so another process may take
--- it over at once (run.take_over) instead of after the lease expires, and
--- this object lets go of it (status "released": no more turns, reads or
--- resume here). Only a persisted run waiting for approval whose steps are on
--- its row can be released.
-- @return true | nil, message, err (kind "run_lease_lost": it was not this process's any more;
--   "store": the row could not be written, and the run stays this process's)
function Run:release()
  if self.status ~= run.WAITING then error("release: the run is not waiting for approval", 2) end
  if not self.persisted or (self.pending_steps or "") == "" then
    error("release: only a stored run whose waiting steps are on its row can be released", 2)
  end
  local ok, err = under_lease(self, { lease_expires = 0 })
  if not ok then
    if err then return nil, err.message, err end
    self.waiting = nil
    local failure = lease_trouble(self, nil, nil)
    return nil, failure.message, failure
  end
  self.status, self.owner, self.waiting, self.approval = run.RELEASED, nil, nil, nil
  self:close()
  return true
end

--- Continue a suspended run in a fresh segment: a new remote-call budget and
--- a renewed lease. Approved calls are admitted again (the gate may have
--- changed its mind meanwhile) and executed; denied ones are recorded as
--- refused.
-- @return the suspended turn's results, in call order
function Run:resume()
  if self.status ~= run.WAITING then error("the run is not waiting for approval", 2) end
  if self.approval == nil and self.persisted then
    -- a person may have decided from another process (run.decide, `mcpclient runs approve`)
    local row = self.store:run(self.uid)
    if row and row.approval ~= "" and row.pending_steps == self.pending_steps then
      self.approval = row.approval == "approved"
      sync_sequence(self)
    end
  end
  if self.approval == nil then error("resume: approve() or deny() first", 2) end
  local turn, approved = self.waiting, self.approval
  local ok, err = under_lease(self, { status = run.RUNNING, lease_expires = lease_until(self), pending_steps = "",
    approval = "" })
  self.pending_steps = nil
  self.waiting, self.approval = nil, nil
  if self.persisted and not ok then lease_trouble(self, nil, err) else self.status = run.RUNNING end
  self.segment, self.remote_calls = self.segment + 1, 0
  for _, rec in ipairs(turn.records) do
    if rec.state == SUSPENDED then
      if not approved and self.status == run.RUNNING and rec.offer then
        -- a denied read is a refusal of the gate's kind: it reaches the governance log
        local d = self.gate:deny_offer(rec.tool, self.configuration, self.user, gate_context(self))
        if d.unrecorded then
          local err_value = unrecorded_refusal(self, rec.tool.name, d.unrecorded)
          stop(rec, error_result(err_value.message, err_value))
        else
          refuse(rec, string.format('Error: reading %s from "%s" was not approved; nothing was read.',
            rec.offer.kind, rec.offer.row.identifier))
        end
      elseif not approved and self.status == run.RUNNING then
        refuse(rec, string.format('Error: the call to "%s" was not approved.', rec.call.name))
      else
        rec.state = ADMITTING
      end
    end
  end
  return play(self, turn, true)
end

---------------------------------------------------------------------------
-- Taking a run over: the tasks another process left
---------------------------------------------------------------------------

-- Follow one stored task to its end through its tool's connection, and
-- record its step (which closes it). → the call's result
local function follow_stored(self, row)
  local tool = self.registry.get(row.tool)
  local handle_ok, handle = pcall(json.decode, row.handle)
  if not tool or not tool.connection or not handle_ok or type(handle) ~= "table" then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: %s', core.clip(row.task_id),
      row.tool, tool and "its stored handle is unreadable" or "the tool is not offered to this run"),
      is_error = true, open = true }
  end
  -- a task id is its server's: the task is followed only through a connection to the server that
  -- made it (the row's), under the handle stored for that server and id
  local wrong = handle.id ~= row.task_id and "its stored handle names another task"
    or handle.server ~= nil and handle.server ~= row.server and "its stored handle names another server"
  if wrong then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: %s', core.clip(row.task_id),
      row.tool, wrong), is_error = true, open = true }
  end
  local got, conn = pcall(tool.connection)
  if got and (type(conn) ~= "table" or (row.server ~= "" and conn.identifier ~= row.server)) then
    return { text = string.format('Error: the task %s of "%s" cannot be followed here: it is a task of server "%s", '
      .. "and the tool is not of that server in this run", core.clip(row.task_id), row.tool, core.clip(row.server, 64)),
      is_error = true, open = true }
  end
  local started = self.clock()
  local ok, outcome, message, err = pcall(function()
    if not got then error(conn, 0) end
    return conn:task(handle):result { budget = self.task_budget,
      cancel = function() return cancel_requested(self) end,
      on_task = function(h) pcall(self.store.update_task, self.store, row.uid, { status = h.status }) end }
  end)
  local duration_ms = (self.clock() - started) * 1000
  if not ok then
    return { text = string.format('Error: the task %s of "%s" cannot be followed: %s', core.clip(row.task_id),
      row.tool, tostring(outcome)), is_error = true, open = true }
  end
  if not outcome and err and (err.kind == "timeout" or err.kind == "cancelled" or err.kind == "transport") then
    -- not ended yet, or not reachable: the task stays open, the fence names it
    return { text = message, is_error = true, err = err, open = true }
  end
  local result = outcome and { text = core.bound(outcome.text), is_error = outcome.is_error }
    or error_result(message, err)
  local arguments_ok, arguments = pcall(json.decode, row.arguments)
  local recorded, store_error = record_step(self, { round = row.round, name = row.tool,
    arguments = arguments_ok and arguments or nil, text = result.text, is_error = result.is_error,
    duration_ms = duration_ms, task = { uid = row.uid, task_id = row.task_id, server = row.server,
      started_by = row.started_by, status = outcome and (outcome.is_error and "failed" or "completed")
        or (err and err.status) or "failed" } })
  if not recorded then
    local failure = fail(self, "audit_persistence_failed", string.format('The step of task %s (tool "%s") could '
      .. "not be recorded in run %s; the run stops because a write must not go unrecorded.",
      core.clip(row.task_id), row.tool, self.uuid), store_error)
    return error_result(failure.message, failure)
  end
  return result
end

-- The waiting steps a row keeps (see steps_text), checked: { round, steps }
-- | nil when they are missing or unreadable.
local function parse_steps(text)
  if type(text) ~= "string" or text == "" then return nil end
  local ok, data = pcall(json.decode, text)
  if not ok or type(data) ~= "table" or type(data.steps) ~= "table" or #data.steps == 0 then return nil end
  for _, step in ipairs(data.steps) do
    if type(step) ~= "table" then return nil end
    local named = step.kind == "call" and step.name or step.kind == "read" and step.uri
      or step.kind == "prompt" and step.name
    if type(named) ~= "string" or (step.kind ~= "call" and type(step.server) ~= "string") then return nil end
    if step.arguments ~= nil and type(step.arguments) ~= "table" then return nil end
  end
  return { round = math.tointeger(data.round) or 0, steps = data.steps }
end

-- The suspended turn again, from the steps its row keeps: each step a
-- record that waits, as suspend() left it in the process that made it.
local function rebuild_turn(self, parsed)
  local records = {}
  for i, step in ipairs(parsed.steps) do
    if step.kind == "call" then
      records[i] = { call = { name = step.name, arguments = step.arguments }, state = SUSPENDED }
    else
      local kind = step.kind == "read" and "resource" or "prompt"
      local target = kind == "resource" and step.uri or step.name
      -- the server as it is now (a server disabled meanwhile is refused on resume, by name)
      local row = offer_server(self, step.server) or { identifier = step.server }
      records[i] = { call = { name = string.format("mcp_%s:%s", step.server, kind) }, state = SUSPENDED,
        tool = offer_entry(row, kind), offer = { kind = kind, server = step.server, target = target,
          arguments = step.arguments, fetch = offer_fetch(kind, target, step.arguments), row = row } }
    end
  end
  return { round = parsed.round, records = records }
end

--- A waiting run's row as a person decides on it: { round, steps (as
--- run:pending() lists them, under the text rule), approval ("approved",
--- "denied" or nil) } | nil when the row does not wait on steps it keeps.
function run.waiting(row)
  if type(row) ~= "table" then error("run.waiting: row must be a run's row", 2) end
  if row.status ~= run.WAITING then return nil end
  local parsed = parse_steps(row.pending_steps)
  if not parsed then return nil end
  local steps = {}
  for i, step in ipairs(parsed.steps) do
    if step.kind == "call" then
      steps[i] = { kind = "call", name = core.clip(step.name), arguments = step.arguments or {} }
    elseif step.kind == "read" then
      steps[i] = { kind = "read", server = core.clip(step.server), uri = core.clip(step.uri) }
    else
      steps[i] = { kind = "prompt", server = core.clip(step.server), name = core.clip(step.name),
        arguments = step.arguments or {} }
    end
  end
  return { round = parsed.round, steps = steps, approval = row.approval ~= "" and row.approval or nil }
end

--- A person's decision on a waiting run, from any process (the one that
--- holds the run, another, the operator's `mcpclient runs approve|deny`):
--- recorded on the run's row and as an "approval" event of its trail (`by`
--- names who decided). The first decision wins. The run's holder applies it
--- on resume(); a process that takes the run over finds it there.
-- @param options { by = who decided (default "operator"; under the text rule, clipped to 64), steps = the
--   pending_steps text the person was shown (default: the row's now) }
-- @return true | nil, message, err (kind "invalid": the run is not waiting on steps it keeps, or it
--   was decided already; "store")
function run.decide(store, run_uid, approved, options)
  if type(store) ~= "table" then error("run.decide: store must be a store", 2) end
  if math.type(run_uid) ~= "integer" or run_uid <= 0 then error("run.decide: run_uid must be a run's uid", 2) end
  if type(approved) ~= "boolean" then error("run.decide: approved must be a boolean", 2) end
  options = options or {}
  local by = options.by or "operator"
  if type(by) ~= "string" or by == "" then error("run.decide: by must be a non-empty string", 2) end
  by = core.clip(by, run.MAX_OWNER_LENGTH)
  local row, message, err = store:run(run_uid)
  if not row then
    if message then return nil, message, err end
    return errors.fail("invalid", { field = "run", detail = string.format("No run has the id %d.", run_uid) })
  end
  local parsed = row.status == run.WAITING and parse_steps(row.pending_steps)
  if not parsed then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d is not waiting for approval "
      .. "(it is %s)%s.", run_uid, row.status, row.status == run.WAITING and ", and its waiting steps are not "
      .. "kept on its row, so only the process that holds it can decide" or "") })
  end
  if row.approval ~= "" then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d was %s already; that decision "
      .. "holds.", run_uid, row.approval) })
  end
  local steps = options.steps or row.pending_steps
  local decided
  decided, message, err = store:decide_run(run_uid, approved and "approved" or "denied", steps,
    approval_event(parsed.round, approved, by))
  if decided == nil then return nil, message, err end
  if decided ~= 1 then
    return errors.fail("invalid", { field = "run", detail = string.format("Run %d changed before the decision "
      .. "was recorded (decided, resumed or finished meanwhile); nothing was recorded.", run_uid) })
  end
  return true
end

--- Take over a run whose worker is gone (its lease expired): claim its
--- lease, then follow each task-backed call it left open to its end — the
--- same task on the server, never a second call — recording each step
--- (with its task id, who started it and who finished it) and clearing the
--- fence. The run is then this process's: RUNNING, ready for more turns or
--- finish(). A run whose fence names a call that did not become a stored
--- task was marked failed instead (it may or may not have run).
---
--- A run waiting for approval is taken over the same way once its lease has
--- expired or its holder released it (Run:release): the claim is the same
--- compare-and-set, so its old holder's approve/resume changes nothing
--- after it (run_lease_lost, nothing sent). Nothing of its waiting turn was
--- sent, so nothing is followed: the run is rebuilt from the steps its row
--- keeps and comes back WAITING, run:pending() listing them as before, with
--- the decision a person recorded meanwhile (run.decide) if there is one;
--- then approve() or deny() as needed, and resume() sends the approved steps
--- once (admitted by this process's gate again) under this process's lease.
-- @param options as run.start's (the tools the run's tasks were called
--   through must be among them; task_budget bounds the wait for each task)
-- @return Run, results (one per followed task: { text, is_error, err, open },
--   open = still open, its fence kept) | nil, message, err
function run.take_over(store, run_uid, options)
  options = validate(store, check_options("run.take_over", options, option_types))
  if math.type(run_uid) ~= "integer" or run_uid <= 0 then error("run.take_over: run_uid must be a run's uid", 2) end
  local log = options.log or default_log
  local tools, message, err = tools_of(store, options, log)
  if not tools then return nil, message, err end
  local self = new_run(store, options, log, tools, { uid = run_uid, tasks = options.tasks ~= false })
  local owner = options.owner or default_owner()
  local claimed
  claimed, message, err = store:claim_run(run_uid, owner, lease_until(self), math.floor(self.now()))
  local row = claimed == 1 and store:run(run_uid) or nil
  if claimed == 1 and not row then claimed, message, err = nil, "the run's row could not be read again", nil end
  if claimed ~= 1 then
    self:close()
    if claimed == nil then return nil, message, err end
    return errors.fail("run_lease_lost", { detail = string.format("run %d could not be taken over: it is not "
      .. "running or waiting for approval with an expired lease (another owner holds it, or it was left behind "
      .. "and marked failed)", run_uid) })
  end
  self.uuid, self.owner, self.persisted, self.lease_expires = row.uuid, owner, true, row.lease_expires
  if row.status == run.WAITING then
    -- the claim took only a row whose steps parse (pending_steps non-empty; see parse_steps)
    local parsed = parse_steps(row.pending_steps)
    if parsed then
      self.status, self.waiting, self.pending_steps = run.WAITING, rebuild_turn(self, parsed), row.pending_steps
      if row.approval ~= "" then self.approval = row.approval == "approved" end
    else
      -- unreadable steps: the run cannot be resumed by anyone; it is let go of as it was
      self.status = run.WAITING
      under_lease(self, { lease_expires = 0 })
      self:close()
      return errors.fail("run_lease_lost", { detail = string.format("run %d waits for approval, but the steps it "
        .. "waits on are not readable on its row, so it cannot be taken over", run_uid) })
    end
  end
  local events = store:events(run_uid) or {}
  for _, e in ipairs(events) do
    self.sequence = math.max(self.sequence, e.sequence)
    self.round = math.max(self.round, e.round)
  end
  local open
  open, message, err = store:open_tasks(run_uid)
  if not open then
    store_failed(self, nil, err)
    self:close()
    return nil, message, err
  end
  local results, still_open = {}, {}
  local fence = run.fence(row.pending_effect)
  local function held() return self.status == run.RUNNING or self.status == run.WAITING end
  for _, task_row in ipairs(open) do
    local result = follow_stored(self, task_row)
    results[#results + 1] = result
    -- keyed by step and task id: two servers of one run may each name a task alike
    if result.open then still_open[task_row.sequence .. "\0" .. task_row.task_id] = true end
    if not held() then break end
  end
  if held() then
    for _, entry in ipairs(fence) do
      if entry.task_id and still_open[tostring(entry.sequence) .. "\0" .. entry.task_id] then
        self.fenced[#self.fenced + 1] = fence_entry({ call = { name = entry.tool, arguments = nil } }, entry.sequence)
        self.fenced[#self.fenced].arguments_sha256 = entry.arguments_sha256
        self.fenced[#self.fenced].task_id = entry.task_id
      end
    end
    local kept = #self.fenced > 0 and json.encode(json.array(self.fenced)) or ""
    local ok, lease_err = under_lease(self, { pending_effect = kept, lease_expires = lease_until(self) })
    if not ok then lease_trouble(self, nil, lease_err) end
  end
  return self, results
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
    conclude(self, run.COMPLETED)
    self.waiting, self.approval = nil, nil
  end
  self:close()
  return self.status
end

---------------------------------------------------------------------------
-- Resources and prompts: through the same gate as tools
---------------------------------------------------------------------------

-- One gated read: a record of its own (see new_turn), admitted by the gate;
-- where the operator asked for approval it suspends the run as a turn of one
-- read (run:resume() then executes it and returns its result), otherwise it
-- is sent at once and its event recorded. → { text, is_error [, err] [, suspended] }
local function gated_read(self, kind, identifier, target, arguments, fetch)
  if self.status ~= run.RUNNING then
    return error_result(string.format("Error: run %s has ended (%s); nothing was read.", self.uuid, self.status),
      self.error)
  end
  local rec = { call = { name = string.format("mcp_%s:%s", identifier, kind) }, state = ADMITTING,
    offer = { kind = kind, server = identifier, target = target, arguments = arguments, fetch = fetch } }
  local started = self.clock()
  admit_offer(self, rec)
  if rec.state == DONE then return rec.result end
  if rec.state == REFUSED then
    rec.duration_ms = (self.clock() - started) * 1000
    record_read(self, rec)
    return rec.result
  end
  if rec.needs_approval then return suspend(self, { round = self.round, records = { rec } })[1] end
  if cancel_requested(self) then
    conclude(self, run.CANCELLED)
    return error_result(string.format("Error: run %s was cancelled; nothing was read.", self.uuid))
  end
  rec.result, rec.duration_ms = fetch_offer(self, rec)
  record_read(self, rec)
  return rec.result
end

--- Read a resource of server `identifier` through the gate: the server's
--- operator-set data class against the configuration's ceiling and zone,
--- remote reads for administrators only, as for its tools. A read needs no
--- approval unless the operator asked for it on the server; then it suspends
--- the run as a tool call does (run.status "waiting_approval", the read in
--- run:pending() as { kind = "read", server, uri }) and run:resume() after
--- approve() sends it once and returns its result (after deny(), a refusal
--- in the governance log, nothing sent). A resource_link a tool returned is
--- read this way. Each read is an event of the run ("resource", its
--- latency); a refusal reaches the governance log.
-- @return { text (inert and bounded as a tool result), is_error [, err] [, suspended] }
function Run:read_resource(identifier, uri)
  if type(identifier) ~= "string" or type(uri) ~= "string" then
    error("read_resource: the server identifier and the uri must be strings", 2)
  end
  check_not_waiting(self)
  return gated_read(self, "resource", identifier, uri, nil, offer_fetch("resource", uri))
end

--- Get a prompt of server `identifier` through the gate, as read_resource
--- (pending as { kind = "prompt", server, name, arguments }).
-- @return { text (the messages as a model reads them, inert, bounded), turns ({ role, text, note } each,
--   inert: the roles kept as structure), is_error [, err] [, suspended] }
function Run:get_prompt(identifier, name, arguments)
  if type(identifier) ~= "string" or type(name) ~= "string" then
    error("get_prompt: the server identifier and the prompt name must be strings", 2)
  end
  check_not_waiting(self)
  return gated_read(self, "prompt", identifier, name, arguments, offer_fetch("prompt", name, arguments))
end

--- Close the connections the run opened itself (a provider's, and those of
--- its reads). Idempotent.
function Run:close()
  for uid, conn in pairs(self.offer_connections or {}) do
    self.offer_connections[uid] = nil
    pcall(conn.close, conn)
  end
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

return run
