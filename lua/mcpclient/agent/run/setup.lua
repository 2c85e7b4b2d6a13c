--- What a run is made of (mcpclient.agent.run): its options checked, its
-- tools (the host's registry, or builtins + a provider's tools + the host's
-- list), the gate that decides them, and the Run object run.start and
-- run.take_over both build.
--
-- Rules: builtins win a name, then the first tool that claims it (a dropped
-- tool is logged); the default gate reads the store's switches and records
-- every refusal as a governance event (a switch that cannot be read reaches
-- the gate as the store's failure; a row that cannot be written stops the
-- run closed).
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local policy = require "mcpclient.agent.policy"
local lease = require "mcpclient.agent.run.lease"
local sampling = require "mcpclient.agent.run.sampling"

local warn_to = lease.warn

local setup = {}

setup.REMOTE_BUDGET = 20
-- Seconds a remote call of a run with tasks may take, polling its task
-- included (the run's longer horizon), and a take-over's wait for one.
setup.TASK_BUDGET = 600

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
  connect = "function", on_sampling = "function", validate_output = "boolean",
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
  local seconds = options.lease_seconds
  if seconds ~= nil and (seconds ~= seconds or seconds <= 0) then
    error("run.start: lease_seconds must be positive", 3)
  end
  if options.owner ~= nil and (options.owner == "" or #options.owner > lease.MAX_OWNER_LENGTH) then
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
  -- the run's judge of a server's sampling requests, bound to the run once it exists (new_run)
  local holder = {}
  local sampling_for = options.on_sampling and sampling.for_run(holder) or nil
  if options.registry then return { registry = options.registry, holder = holder, sampling_for = sampling_for } end
  local provider, owned = options.provider, nil
  if provider == nil and options.tools == nil then
    -- the connections it opens tell the run's log hook, as the run itself does
    provider = catalogue.provider(store, { on_sampling_for = sampling_for, log = log,
      validate_output = options.validate_output })
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
  return { registry = registry, owned = owned, provider = provider, extra = options.tools, fill = fill,
    holder = holder, sampling_for = sampling_for }
end

-- A Run on `store`, RUNNING, with its tools (tools_of) and what run.start
-- and run.take_over take alike from their options; `own` sets what differs
-- (a new run's uuid, a taken run's uid, whether tasks are on by default).
local function new_run(store, options, log, tools, own, Run)
  local self = setmetatable({
    store = store, user = options.user, configuration = options.configuration, registry = tools.registry,
    gate = options.gate or default_gate(store, tools.registry, options),
    provider = tools.owned,
    now = options.now or os.time,
    clock = options.clock or core.now,
    lease_seconds = options.lease_seconds or lease.LEASE_SECONDS,
    remote_budget = options.remote_budget or setup.REMOTE_BUDGET,
    log = log,
    status = lease.RUNNING, round = 0, segment = 1, remote_calls = 0,
    trail = {}, persisted = false, sequence = 0, fenced = {},
    task_budget = options.task_budget or setup.TASK_BUDGET,
    -- the connections resource reads and prompt gets use (server uid -> connection), opened on first use
    offer_connect = options.connect, offer_connections = {},
    tool_source = tools, builtin_names = builtin_names(options.builtins),
    -- the host's model call for a server's sampling request, and the judge each connection the run opens
    -- itself takes for its server (sampling.lua)
    on_sampling = options.on_sampling, sampling_for = tools.sampling_for,
  }, Run)
  for k, v in pairs(own) do self[k] = v end
  if tools.holder then tools.holder.run = self end
  return self
end

setup.validate, setup.tools_of, setup.new_run = validate, tools_of, new_run
setup.option_types = option_types

return setup
