--- The tool gate (may a model be offered, or call, this tool?) and the
-- approval rule (must a human approve a call before it runs?).
--
-- Every tool a model is offered, and every call it makes, passes `decide`.
-- The gates are a plain AND; their order only decides which refusal is
-- reported, and it runs cheapest and least revealing first, so a caller who is
-- already refused for a simpler reason never learns that a trust-zone axis
-- exists. Everything unknown fails closed: an unknown data class is the most
-- sensitive one, an unknown trust zone is the least trusted one, an unreadable
-- mode enforces.
--
-- Shapes (plain tables; nothing here touches a store):
--
--   tool          { name, group, data_class, requires_admin, enabled_by_default,
--                   remote, effect, requires_approval }   (see mcpclient.agent.tool)
--   user          { uid = integer, admin = true|false, ... }   nil = nobody
--   configuration { identifier = "...", provider = "&lt;provider id&gt;", model = "...",
--                   fallbacks = { &lt;configuration&gt;, ... },
--                   allowed_groups = nil | { "&lt;group&gt;", ... } }
--   providers     { ["&lt;provider id&gt;"] = { zone = "local" | "privateHosted"
--                                               | "externalEu" | "externalGlobal" } }
--   context       { correlation_id, run_uid, provider, model, configuration_identifier }
--                 (what a governance row needs; every key optional)
local errors = require "mcpclient.errors"
local options_of = require "mcpclient.agent.options"

local policy = {}

-- The canonical tables live in locals: the copies published on `policy` may
-- be read or changed by callers without moving the gate.
local CLASSES = {
  "publicContent", "editorContent", "sourceCode",
  "internalConfiguration", "systemDiagnostics", "secretAdjacent",
}
local ZONES = { "local", "privateHosted", "externalEu", "externalGlobal" }
local CEILINGS = {
  ["local"] = "secretAdjacent",
  privateHosted = "systemDiagnostics",
  externalEu = "internalConfiguration",
  externalGlobal = "editorContent",
}
-- Builtins only: a group takes the class of its worst plausible member, so a
-- new tool in a known group is never under-classified by omission.
local GROUP_DEFAULTS = {
  content = "editorContent",
  editing = "editorContent",
  files = "editorContent",
  rag = "publicContent",
  structure = "internalConfiguration",
  configuration = "internalConfiguration",
  code = "sourceCode",
  system = "systemDiagnostics",
  accounts = "secretAdjacent",
}

local MOST_SENSITIVE = "secretAdjacent"
local LEAST_TRUSTED = "externalGlobal"

local CLASS_RANK, ZONE_RANK = {}, {}
for i, class in ipairs(CLASSES) do CLASS_RANK[class] = i - 1 end
for i, zone in ipairs(ZONES) do ZONE_RANK[zone] = i - 1 end

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

--- Data classes, least sensitive first; rank 0 = publicContent.
policy.DATA_CLASSES = copy(CLASSES)
policy.DATA_CLASS_RANK = copy(CLASS_RANK)
--- Trust zones, most trusted first; rank 0 = local.
policy.TRUST_ZONES = copy(ZONES)
policy.ZONE_RANK = copy(ZONE_RANK)
--- The most sensitive data class a provider in each zone may receive.
policy.ZONE_CEILING = copy(CEILINGS)
policy.GROUP_DEFAULTS = copy(GROUP_DEFAULTS)

policy.ENFORCE = "enforce"
policy.OBSERVE = "observe"

--- Denial reasons, as stored in a governance row's `reason`.
policy.REASONS = {
  NONE = "none",
  NOT_REGISTERED = "notRegistered",
  TOOL_DISABLED = "toolDisabled",
  REQUIRES_ADMIN = "requiresAdmin",
  CONFIGURATION_GROUP = "configurationGroup",
  TRUST_ZONE = "trustZone",
  STORE_UNAVAILABLE = "storeUnavailable",
  APPROVAL_DENIED = "approvalDenied",
  -- a server whose operator has not declared its data class: nothing of it is offered, called or read
  UNCLASSIFIED = "unclassified",
  -- a request that needs a person's approval and cannot wait for one (a server's sampling request, which
  -- arrives while the server waits inside a call): refused, never asked
  APPROVAL_UNAVAILABLE = "approvalUnavailable",
}
local R = copy(policy.REASONS)

--- The rank of a data class; an unknown one ranks as the most sensitive.
function policy.class_rank(class)
  return CLASS_RANK[class] or CLASS_RANK[MOST_SENSITIVE]
end

--- The rank of a trust zone; an unknown one ranks as the least trusted.
function policy.zone_rank(zone)
  return ZONE_RANK[zone] or ZONE_RANK[LEAST_TRUSTED]
end

--- The ceiling of a zone (an unknown zone gets the least trusted zone's).
function policy.ceiling(zone)
  return CEILINGS[zone] or CEILINGS[LEAST_TRUSTED]
end

--- Is `class` no more sensitive than `ceiling`?
-- Fails closed on both sides: an unknown class counts as the most sensitive,
-- an unknown ceiling admits nothing.
function policy.is_at_most(class, ceiling)
  local ceiling_rank = CLASS_RANK[ceiling]
  if ceiling_rank == nil then return false end
  return policy.class_rank(class) <= ceiling_rank
end

--- May a provider in `zone` receive data of `class`?
function policy.permits(zone, class)
  return policy.is_at_most(class, policy.ceiling(zone))
end

--- The less trusted of two zones (unknown counts as externalGlobal).
function policy.least_trusted(a, b)
  local ra, rb = policy.zone_rank(a), policy.zone_rank(b)
  return ZONES[math.max(ra, rb) + 1]
end

--- The data class a tool returns.
-- Its declaration when that is one of the six; otherwise, for a builtin, its
-- group's default. A remote tool always declares (the operator's server row),
-- so a remote tool without a valid declaration, an unknown tool and an
-- unclassified group are all secretAdjacent.
function policy.class_of(tool)
  if type(tool) ~= "table" then return MOST_SENSITIVE end
  if CLASS_RANK[tool.data_class] then return tool.data_class end
  if tool.remote then return MOST_SENSITIVE end
  return GROUP_DEFAULTS[tool.group] or MOST_SENSITIVE
end

-- The zone of one configuration's own provider.
local function provider_zone(configuration, providers)
  if type(configuration) ~= "table" or type(providers) ~= "table" then return LEAST_TRUSTED end
  local id = configuration.provider
  local provider = id ~= nil and providers[id] or nil
  if type(provider) ~= "table" or ZONE_RANK[provider.zone] == nil then return LEAST_TRUSTED end
  return provider.zone
end

--- The trust zone a run against `configuration` can actually reach.
-- A failed call is retried against a fallback configuration, carrying the
-- tool output with it, so the run is as trusted as the least trusted provider
-- it may end up at. Fallback is one hop deep: a fallback's own fallbacks are
-- never walked, because that path cannot execute. Anything unknown — no
-- configuration, no provider, an unknown zone, a fallback entry that is not a
-- configuration, a `fallbacks` that is not a list — is externalGlobal.
function policy.effective_zone(configuration, providers)
  if type(configuration) ~= "table" then return LEAST_TRUSTED end
  local zone = provider_zone(configuration, providers)
  local fallbacks = configuration.fallbacks
  if fallbacks == nil then return zone end
  if type(fallbacks) ~= "table" then return LEAST_TRUSTED end
  for _, fallback in ipairs(fallbacks) do
    zone = policy.least_trusted(zone, provider_zone(fallback, providers))
  end
  return zone
end


--- The enforcement mode of the trust-zone gate for a raw setting value.
-- Only a deliberate "observe" observes; anything else — nil, a number, a
-- typo such as "observ", "off", "" — enforces, so a broken setting cannot
-- silently switch the gate off.
function policy.mode(value)
  -- trimmed: a setting copied from a file or a form must not turn "observe"
  -- into a typo that enforces
  if type(value) == "string" and options_of.trim(value):lower() == policy.OBSERVE then
    return policy.OBSERVE
  end
  return policy.ENFORCE
end

local MESSAGES = {
  [R.NONE] = "%s is available.",
  [R.NOT_REGISTERED] = "%s is not a registered tool.",
  [R.TOOL_DISABLED] = "%s is disabled globally or its group is switched off.",
  [R.REQUIRES_ADMIN] = "%s is available to administrators only.",
  [R.CONFIGURATION_GROUP] = "%s is outside the tool groups this configuration allows.",
  [R.STORE_UNAVAILABLE] = "%s is unavailable for now: its switch could not be read from the store.",
  [R.APPROVAL_DENIED] = "%s was not approved by a human.",
  [R.UNCLASSIFIED] = "%s is of a server whose data class the operator has not declared: it is not usable yet.",
  [R.APPROVAL_UNAVAILABLE] = "%s needs a person's approval, which this request cannot wait for: it was refused.",
}

--- The operator's sentence for a decision.
-- Policy facts only: never a tool's arguments or output.
function policy.message(decision)
  if decision.reason == R.TRUST_ZONE then
    return string.format(
      '%s returns %s data, which exceeds what a provider in the "%s" trust zone may receive (ceiling: %s).%s',
      decision.tool, decision.data_class, decision.zone, decision.ceiling,
      decision.observed_only and " Enforcement is in observe mode, so the tool was still offered." or "")
  end
  return string.format(MESSAGES[decision.reason], decision.tool)
end

local function decision(name, allowed, reason, data_class, zone, ceiling, observed_only, err)
  local d = {
    tool = name, allowed = allowed, observed_only = observed_only or false, reason = reason,
    data_class = data_class, zone = zone, ceiling = ceiling, err = err,
  }
  d.message = policy.message(d)
  return d
end

local function integer_or_zero(v)
  return math.tointeger(v) or 0
end

local function string_or_empty(v)
  if v == nil then return "" end
  return tostring(v)
end

--- The governance row (the store's governance_event table) for one gate decision.
-- Denial-only: the caller writes it for a refused or observed-only decision,
-- never for an executed call. It carries policy facts only — never a tool's
-- arguments or output.
-- @param context { correlation_id, run_uid, provider, model, configuration_identifier } or nil
-- @param user the acting user or nil (user_uid 0)
function policy.governance_row(d, context, user)
  context = context or {}
  return {
    decision = "tool_denied",
    reason = d.reason,
    provider = string_or_empty(context.provider),
    model = string_or_empty(context.model),
    configuration_identifier = string_or_empty(context.configuration_identifier),
    user_uid = type(user) == "table" and integer_or_zero(user.uid) or 0,
    tool_name = d.tool,
    agentrun_uid = integer_or_zero(context.run_uid),
    guardrail = "",
    correlation_id = string_or_empty(context.correlation_id),
    detail = string.format("zone=%s;ceiling=%s;observedOnly=%d", d.zone, d.ceiling, d.observed_only and 1 or 0),
  }
end

--- Must a human approve a call of this tool before it runs?
-- In order: an explicit marker (requires_approval == true) → yes; a remote
-- tool → its operator's declaration, and no declaration → no (its effect is a
-- fail-closed assumption about an unknown body, not a statement, and judging
-- it would suspend every remote call); otherwise yes iff the tool declares an
-- effect that is a write (anything but "read_only"). A builtin that declares
-- no effect needs no approval: the host wrote it and vouches for it.
function policy.requires_approval(tool)
  if type(tool) ~= "table" then return false end
  if tool.requires_approval == true then return true end
  if tool.remote then return false end
  return tool.effect ~= nil and tool.effect ~= "read_only"
end

local Gate = {}
Gate.__index = Gate

-- The keys policy.new takes; what each must hold beyond its type is checked below.
local OPTIONS = { registry = "table", state = "any", mode = "any", providers = "any", on_decision = "any" }

-- Misuse raises: what each option must hold (the keys and types are checked
-- by the one option validator first).
local function check_options(options)
  local registry = options.registry
  if type(registry) ~= "table" or type(registry.get) ~= "function" or type(registry.names) ~= "function" then
    error("policy.new: registry must have get(name) and names() functions", 3)
  end
  local state = options.state
  if state ~= nil and (type(state) ~= "table"
      or (state.tool_enabled ~= nil and type(state.tool_enabled) ~= "function")
      or (state.group_enabled ~= nil and type(state.group_enabled) ~= "function")) then
    error("policy.new: state must be a table of tool_enabled/group_enabled functions", 3)
  end
  if options.providers ~= nil and type(options.providers) ~= "table" then
    error("policy.new: providers must be a table", 3)
  end
  if options.on_decision ~= nil and type(options.on_decision) ~= "function" then
    error("policy.new: on_decision must be a function", 3)
  end
end

--- A gate over one registry.
-- @param options {
--   registry    = { get = function(name) -> tool|nil, names = function() -> { name, ... } } (required),
--   state       = { tool_enabled = function(name) -> true|false|nil,
--                   group_enabled = function(group) -> true|false|nil } or nil (no rows at all);
--                 nil (no row) | nil, message, err (the read failed: the tool is refused with
--                 reason "storeUnavailable" and decision.err = err, whatever the switch held),
--   mode        = the raw `dataClassEnforcement` setting, or a function returning it, read at every
--                 decision (one that raises enforces); see policy.mode,
--   providers   = { [provider id] = { zone = ... } } (see policy.effective_zone),
--   on_decision = function(decision, context, row) or nil: called after a decision that is refused
--                 or observed-only, with its governance row; what it raises propagates; it returns
--                 nil, message[, err] when the row could not be recorded (decision.unrecorded = err) }
function policy.new(options)
  if options == nil then error("policy.new: options must be a table", 2) end
  options_of.check("policy.new", options, OPTIONS)
  check_options(options)
  local registry, state = options.registry, options.state
  return setmetatable({
    registry = registry,
    state = state or {},
    raw_mode = options.mode,
    providers = options.providers or {},
    on_decision = options.on_decision,
  }, Gate)
end

--- The mode the trust-zone gate applies right now ("enforce" or "observe").
function Gate:mode()
  local raw = self.raw_mode
  if type(raw) == "function" then
    local ok, value = pcall(raw)
    if not ok then return policy.ENFORCE end
    raw = value
  end
  return policy.mode(raw)
end

-- One switch as the state function reads it: true | false | nil (no row),
-- or, when the read failed (the function returned nil, message[, err]),
-- nil and the failure value (a store failure unchanged; anything else made one).
local function read_switch(fn, key)
  local value, message, err = fn(key)
  if value ~= nil or message == nil then return value end
  if type(err) == "table" and err.kind then return nil, err end
  local _, _, made = errors.fail("store", { operation = "read a tool switch", detail = tostring(message) })
  return nil, made
end

-- Is the tool switched on? Its group must be on (no row = on) and the tool
-- itself on (its row, else its default). A row that is not a boolean counts
-- as "off", and a switch that cannot be read is off too, its failure
-- returned beside: the switch fails closed, never open.
-- → on [, err]
local function enabled(self, tool)
  local state = self.state
  if state.group_enabled then
    local group, err = read_switch(state.group_enabled, tool.group)
    if err then return false, err end
    if group ~= nil and group ~= true then return false end
  end
  local row, err
  if state.tool_enabled then row, err = read_switch(state.tool_enabled, tool.name) end
  if err then return false, err end
  if row == nil then return tool.enabled_by_default == true end
  return row == true
end

-- The registry's names whose tools are switched on, in registry order, and
-- those whose switch could not be read: their refusal is decided (and
-- recorded) like any other, never skipped in silence.
local function enabled_names(self)
  local out = {}
  for _, name in ipairs(self.registry.names()) do
    local tool = self.registry.get(name)
    if tool ~= nil then
      local on, err = enabled(self, tool)
      if on or err then out[#out + 1] = name end
    end
  end
  return out
end

-- The context a governance row is built from: the caller's, with what the
-- configuration itself knows filling the gaps.
local function row_context(context, configuration)
  local merged = {}
  if type(context) == "table" then merged = copy(context) end
  if type(configuration) == "table" then
    if merged.provider == nil then merged.provider = configuration.provider end
    if merged.model == nil then merged.model = configuration.model end
    if merged.configuration_identifier == nil then merged.configuration_identifier = configuration.identifier end
  end
  return merged
end

local function allowed_by_configuration(configuration, group)
  if type(configuration) ~= "table" or configuration.allowed_groups == nil then return true end
  local allowed = configuration.allowed_groups
  if type(allowed) ~= "table" then return false end
  for _, g in ipairs(allowed) do
    if g == group then return true end
  end
  return false
end

-- The checks before the trust zone, cheapest and least revealing first.
-- → the refusal's reason (and the store's failure when a switch could not
-- be read), or nil when the tool passes them
local function switch_and_role(self, tool, configuration, user)
  local on, err = enabled(self, tool)
  if err then return R.STORE_UNAVAILABLE, err end
  if not on then return R.TOOL_DISABLED end
  -- No user is not an administrator. A remote tool is admin-only whatever it says.
  if (tool.requires_admin == true or tool.remote) and (type(user) ~= "table" or user.admin ~= true) then
    return R.REQUIRES_ADMIN
  end
  if not allowed_by_configuration(configuration, tool.group) then return R.CONFIGURATION_GROUP end
  return nil
end

-- The gate itself, without the governance side effect.
local function evaluate(self, name, configuration, user, given)
  local zone = policy.effective_zone(configuration, self.providers)
  local ceiling = CEILINGS[zone]
  local tool = given or self.registry.get(name)
  if tool == nil then
    return decision(name, false, R.NOT_REGISTERED, MOST_SENSITIVE, zone, ceiling)
  end
  local class = policy.class_of(tool)
  local refused, err = switch_and_role(self, tool, configuration, user)
  if refused then return decision(name, false, refused, class, zone, ceiling, false, err) end
  if not policy.is_at_most(class, ceiling) then
    -- Observe mode exists so an upgrade does not silently drop tools that
    -- already worked. No remote tool worked before the gate, so none
    -- benefits: an upgraded install must not be looser than a fresh one.
    local enforcing = self:mode() == policy.ENFORCE or tool.remote
    return decision(name, not enforcing, R.TRUST_ZONE, class, zone, ceiling, not enforcing)
  end
  return decision(name, true, R.NONE, class, zone, ceiling)
end

--- Decide whether `name` may be offered to / called by a model.
-- @return decision { tool, allowed, observed_only, reason, data_class, zone, ceiling, message
--   [, err] [, unrecorded] }
--   err         the failure value when a switch could not be read (reason "storeUnavailable")
--   unrecorded  the failure value on_decision returned: the decision's governance row was not recorded
-- A refused or observed-only decision is reported to on_decision with its
-- governance row; an allowed one reports nothing.
local report

function Gate:decide(name, configuration, user, context)
  if type(name) ~= "string" then error("decide: the tool name must be a string", 2) end
  return report(self, evaluate(self, name, configuration, user), configuration, user, context)
end

-- A decision reported to on_decision when it is refused or observed-only;
-- d.unrecorded is set when its governance row could not be recorded.
function report(self, d, configuration, user, context)
  if self.on_decision and (not d.allowed or d.observed_only) then
    local merged = row_context(context, configuration)
    local recorded, message, err = self.on_decision(d, merged, policy.governance_row(d, merged, user))
    if recorded == nil and message ~= nil then
      if type(err) ~= "table" or not err.kind then
        err = select(3, errors.fail("store", { operation = "record a governance event", detail = tostring(message) }))
      end
      d.unrecorded = err
    end
  end
  return d
end

local function candidates(self, requested)
  if requested == nil then return enabled_names(self) end
  if type(requested) ~= "table" then error("requested must be a list of tool names or nil", 3) end
  return requested
end

--- The candidates (the requested names, or every enabled tool) the gate
-- allows, in candidate order. Each decision is reported as by decide; the
-- first decision whose governance row could not be recorded ends the walk.
-- @return names [, unrecorded] (the failure value of that record)
function Gate:filter_offerable(requested, configuration, user, context)
  local out = {}
  for _, name in ipairs(candidates(self, requested)) do
    local d = self:decide(name, configuration, user, context)
    if d.unrecorded then return out, d.unrecorded end
    if d.allowed then out[#out + 1] = name end
  end
  return out
end

--- Decide a server's offer that is not a tool (a resource read, a prompt
--- get): `entry` is shaped like a remote tool — `name` naming the read in
--- the governance log, `data_class` the server's operator-set class,
--- `remote = true`, `enabled_by_default = true` — and passes the same
--- checks (switch, administrators only, configuration group, trust zone);
--- a refused or observed-only decision is reported as decide reports it
--- (d.unrecorded when its governance row could not be recorded).
function Gate:decide_offer(entry, configuration, user, context)
  if type(entry) ~= "table" or type(entry.name) ~= "string" then
    error("decide_offer: the entry must be a table with a string name", 2)
  end
  return report(self, evaluate(self, entry.name, configuration, user, entry), configuration, user, context)
end

--- Record a refusal decided outside the gate's own checks: by default that
--- a human denied the approval a call or read needed (reason
--- "approvalDenied"); `reason` names another (one of policy.REASONS: an
--- unknown or switched-off server's read, a server with no data class). A
--- governance row for `entry` (as decide_offer takes it), reported as decide
--- reports a refusal (d.unrecorded when the row could not be recorded). The
--- zone and ceiling are the configuration's.
function Gate:deny_offer(entry, configuration, user, context, reason)
  if type(entry) ~= "table" or type(entry.name) ~= "string" then
    error("deny_offer: the entry must be a table with a string name", 2)
  end
  reason = reason or R.APPROVAL_DENIED
  local known = false
  for _, r in pairs(R) do
    if r == reason and r ~= R.NONE then known = true end
  end
  if not known then error("deny_offer: reason must be one of policy.REASONS (not none)", 2) end
  local zone = policy.effective_zone(configuration, self.providers)
  local d = decision(entry.name, false, reason, policy.class_of(entry), zone, CEILINGS[zone])
  return report(self, d, configuration, user, context)
end

policy.Gate = Gate
return policy
