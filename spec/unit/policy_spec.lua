-- The tool gate (classes, zones, the order of its checks, modes, messages,
-- governance rows) and the approval rule.
local policy = require "mcpclient.agent.policy"
local tool = require "mcpclient.agent.tool"

local CLASSES = {
  "publicContent", "editorContent", "sourceCode",
  "internalConfiguration", "systemDiagnostics", "secretAdjacent",
}
local ZONES = { "local", "privateHosted", "externalEu", "externalGlobal" }

local ADMIN = { uid = 7, admin = true }
local EDITOR = { uid = 8, admin = false }

-- One provider per zone, named after it.
local PROVIDERS = {
  ["p-local"] = { zone = "local" },
  ["p-privateHosted"] = { zone = "privateHosted" },
  ["p-externalEu"] = { zone = "externalEu" },
  ["p-externalGlobal"] = { zone = "externalGlobal" },
}

local function config_in(zone, extra)
  local c = { identifier = "cfg-" .. zone, provider = "p-" .. zone, model = "m-1" }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

-- A remote tool exactly as the MCP layer builds it.
local function remote(identifier, remote_name, data_class, approval)
  return tool.new {
    server = { identifier = identifier, name = identifier, data_class = data_class,
      requires_approval = approval == nil and "1" or approval },
    local_name = "mcp_" .. identifier .. "_" .. remote_name, remote_name = remote_name,
    parameters = {}, connection = function() error("no network in policy specs") end,
  }
end

local function builtin(name, fields)
  local t = { name = name, group = "content", requires_admin = false, enabled_by_default = true,
    effect = "read_only" }
  for k, v in pairs(fields or {}) do t[k] = v end
  return t
end

-- A registry in insertion order, plus a state whose rows the spec sets.
local function world(tools, rows)
  rows = rows or {}
  local by_name, order = {}, {}
  for _, t in ipairs(tools) do
    by_name[t.name] = t
    order[#order + 1] = t.name
  end
  return {
    registry = {
      get = function(name) return by_name[name] end,
      names = function() return order end,
    },
    state = {
      tool_enabled = function(name) return (rows.tools or {})[name] end,
      group_enabled = function(group) return (rows.groups or {})[group] end,
    },
  }
end

local function gate_over(tools, options)
  options = options or {}
  local w = world(tools, options.rows)
  return policy.new {
    registry = w.registry, state = w.state, mode = options.mode,
    providers = options.providers or PROVIDERS, on_decision = options.on_decision,
  }
end

describe("data classes and zones", function()
  it("orders the six classes, publicContent lowest, secretAdjacent highest", function()
    assert.same(CLASSES, policy.DATA_CLASSES)
    for i, class in ipairs(CLASSES) do
      assert.equal(i - 1, policy.DATA_CLASS_RANK[class])
      assert.equal(i - 1, policy.class_rank(class))
    end
    assert.equal(5, policy.class_rank("noSuchClass"))
  end)

  it("ranks the four zones most trusted first, each with its ceiling", function()
    assert.same(ZONES, policy.TRUST_ZONES)
    assert.same({ ["local"] = 0, privateHosted = 1, externalEu = 2, externalGlobal = 3 }, policy.ZONE_RANK)
    assert.same({
      ["local"] = "secretAdjacent", privateHosted = "systemDiagnostics",
      externalEu = "internalConfiguration", externalGlobal = "editorContent",
    }, policy.ZONE_CEILING)
    assert.equal("editorContent", policy.ceiling("moon"))
  end)

  it("is_at_most compares ranks and fails closed on unknown names", function()
    assert.is_true(policy.is_at_most("sourceCode", "sourceCode"))
    assert.is_true(policy.is_at_most("publicContent", "editorContent"))
    assert.is_false(policy.is_at_most("internalConfiguration", "sourceCode"))
    assert.is_false(policy.is_at_most("bogus", "systemDiagnostics"))
    assert.is_true(policy.is_at_most("bogus", "secretAdjacent"))
    assert.is_false(policy.is_at_most("publicContent", "bogus"))
  end)

  it("changing the published tables does not move the gate", function()
    local saved = policy.ZONE_CEILING.externalGlobal
    policy.ZONE_CEILING.externalGlobal = "secretAdjacent"
    policy.DATA_CLASS_RANK.secretAdjacent = 0
    local ok, err = pcall(function()
      assert.equal("editorContent", policy.ceiling("externalGlobal"))
      assert.is_false(policy.permits("externalGlobal", "secretAdjacent"))
    end)
    policy.ZONE_CEILING.externalGlobal = saved
    policy.DATA_CLASS_RANK.secretAdjacent = 5
    assert(ok, err)
  end)

  it("class_of: a valid declaration, else the group default (builtins), else secretAdjacent", function()
    assert.equal("systemDiagnostics", policy.class_of({ data_class = "systemDiagnostics", group = "rag" }))
    local defaults = {
      content = "editorContent", editing = "editorContent", files = "editorContent",
      rag = "publicContent", structure = "internalConfiguration", configuration = "internalConfiguration",
      code = "sourceCode", system = "systemDiagnostics", accounts = "secretAdjacent",
      weather = "secretAdjacent",
    }
    for group, class in pairs(defaults) do
      assert.equal(class, policy.class_of({ group = group }), group)
    end
    assert.equal("publicContent", policy.class_of({ group = "rag", data_class = "notAClass" }))
    assert.equal("secretAdjacent", policy.class_of(nil))
  end)

  it("class_of never gives a remote tool a group default", function()
    assert.equal("secretAdjacent", policy.class_of({ remote = true, group = "rag" }))
    assert.equal("secretAdjacent", policy.class_of({ remote = true, group = "rag", data_class = "public" }))
    assert.equal("sourceCode", policy.class_of(remote("docs", "read", "sourceCode")))
  end)
end)

describe("effective_zone", function()
  it("is the own provider's zone when there are no fallbacks", function()
    for _, zone in ipairs(ZONES) do
      assert.equal(zone, policy.effective_zone(config_in(zone), PROVIDERS))
    end
  end)

  it("takes the least trusted of the own provider and each fallback", function()
    local c = config_in("local", { fallbacks = { config_in("externalEu"), config_in("privateHosted") } })
    assert.equal("externalEu", policy.effective_zone(c, PROVIDERS))
    c = config_in("externalEu", { fallbacks = { config_in("local") } })
    assert.equal("externalEu", policy.effective_zone(c, PROVIDERS))
  end)

  it("walks one hop only: a fallback's own fallback is ignored", function()
    local deep = config_in("privateHosted", { fallbacks = { config_in("externalGlobal") } })
    local c = config_in("local", { fallbacks = { deep } })
    assert.equal("privateHosted", policy.effective_zone(c, PROVIDERS))
  end)

  it("fails closed to externalGlobal on anything unknown", function()
    assert.equal("externalGlobal", policy.effective_zone(nil, PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone({ identifier = "x" }, PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone({ provider = "" }, PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone({ provider = "nobody" }, PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone(config_in("local"), nil))
    local odd = { weird = { zone = "onPrem" }, empty = { zone = "" }, bare = "local" }
    for id in pairs(odd) do
      assert.equal("externalGlobal", policy.effective_zone({ provider = id }, odd), id)
    end
    -- an unresolvable fallback entry drags a local configuration down
    assert.equal("externalGlobal", policy.effective_zone(config_in("local", { fallbacks = { "cfg-other" } }),
      PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone(config_in("local", { fallbacks = { {} } }), PROVIDERS))
    assert.equal("externalGlobal", policy.effective_zone(config_in("local", { fallbacks = "cfg-other" }),
      PROVIDERS))
    assert.equal("local", policy.effective_zone(config_in("local", { fallbacks = {} }), PROVIDERS))
  end)
end)

describe("mode", function()
  it("observes only on a deliberate observe, after trim and lowercase", function()
    assert.equal("observe", policy.mode("observe"))
    assert.equal("observe", policy.mode(" OBSERVE "))
    assert.equal("observe", policy.mode("\tObserve\n"))
  end)

  it("enforces on everything else", function()
    for _, v in ipairs({ "observ", "off", "", "enforce", "yes", "observe mode", 42, true, {} }) do
      assert.equal("enforce", policy.mode(v), tostring(v))
    end
    assert.equal("enforce", policy.mode(nil))
  end)
end)

describe("gate:decide", function()
  local hot = builtin("read_secrets", { group = "accounts", requires_admin = true })
  local mcp_hot = remote("vault", "dump", "secretAdjacent")

  it("allows a tool that passes every gate", function()
    local gate = gate_over({ builtin("edit") })
    local d = gate:decide("edit", config_in("externalGlobal"), EDITOR)
    assert.same({
      tool = "edit", allowed = true, observed_only = false, reason = "none",
      data_class = "editorContent", zone = "externalGlobal", ceiling = "editorContent",
      message = "edit is available.",
    }, d)
  end)

  describe("each gate refuses on its own", function()
    it("notRegistered, reporting secretAdjacent", function()
      local d = gate_over({}):decide("ghost", config_in("local"), ADMIN)
      assert.is_false(d.allowed)
      assert.equal("notRegistered", d.reason)
      assert.equal("secretAdjacent", d.data_class)
      assert.equal("local", d.zone)
      assert.equal("ghost is not a registered tool.", d.message)
    end)

    it("toolDisabled by the tool's row", function()
      local gate = gate_over({ builtin("edit") }, { rows = { tools = { edit = false } } })
      local d = gate:decide("edit", config_in("local"), ADMIN)
      assert.is_false(d.allowed)
      assert.equal("toolDisabled", d.reason)
      assert.equal("edit is disabled globally or its group is switched off.", d.message)
    end)

    it("toolDisabled by the group's row, even when the tool's row is on", function()
      local gate = gate_over({ builtin("edit") }, { rows = { groups = { content = false }, tools = { edit = true } } })
      assert.equal("toolDisabled", gate:decide("edit", config_in("local"), ADMIN).reason)
    end)

    it("toolDisabled by default for an imported tool with no row", function()
      local t = remote("docs", "read", "publicContent")
      assert.equal("toolDisabled", gate_over({ t }):decide(t.name, config_in("local"), ADMIN).reason)
      local on = gate_over({ t }, { rows = { tools = { [t.name] = true } } })
      assert.equal("none", on:decide(t.name, config_in("local"), ADMIN).reason)
    end)

    it("a row that is not a boolean switches the tool off", function()
      local gate = gate_over({ builtin("edit") }, { rows = { tools = { edit = 1 } } })
      assert.equal("toolDisabled", gate:decide("edit", config_in("local"), ADMIN).reason)
      gate = gate_over({ builtin("edit") }, { rows = { groups = { content = "1" } } })
      assert.equal("toolDisabled", gate:decide("edit", config_in("local"), ADMIN).reason)
    end)

    it("requiresAdmin for a non-admin and for no user at all", function()
      local gate = gate_over({ builtin("edit", { requires_admin = true }) })
      for _, user in ipairs({ EDITOR, { uid = 9 }, { admin = "yes" }, "admin" }) do
        local d = gate:decide("edit", config_in("local"), user)
        assert.equal("requiresAdmin", d.reason)
        assert.equal("edit is available to administrators only.", d.message)
      end
      local d = gate:decide("edit", config_in("local"), nil)
      assert.is_false(d.allowed)
      assert.equal("requiresAdmin", d.reason)
      assert.is_true(gate:decide("edit", config_in("local"), ADMIN).allowed)
    end)

    it("requiresAdmin for a remote tool even if it claims otherwise", function()
      local t = remote("docs", "read", "publicContent")
      t.requires_admin = false
      local gate = gate_over({ t }, { rows = { tools = { [t.name] = true } } })
      assert.equal("requiresAdmin", gate:decide(t.name, config_in("local"), EDITOR).reason)
    end)

    it("configurationGroup when the configuration's groups leave the tool out", function()
      local gate = gate_over({ builtin("edit") })
      local d = gate:decide("edit", config_in("local", { allowed_groups = { "rag", "code" } }), ADMIN)
      assert.is_false(d.allowed)
      assert.equal("configurationGroup", d.reason)
      assert.equal("edit is outside the tool groups this configuration allows.", d.message)
      assert.equal("configurationGroup",
        gate:decide("edit", config_in("local", { allowed_groups = {} }), ADMIN).reason)
      assert.is_true(gate:decide("edit", config_in("local", { allowed_groups = { "content" } }), ADMIN).allowed)
      -- an allow-list that is not a list restricts to nothing
      assert.equal("configurationGroup",
        gate:decide("edit", config_in("local", { allowed_groups = "content" }), ADMIN).reason)
    end)

    it("trustZone when the class exceeds the ceiling", function()
      local d = gate_over({ hot }):decide("read_secrets", config_in("externalEu"), ADMIN)
      assert.is_false(d.allowed)
      assert.is_false(d.observed_only)
      assert.equal("trustZone", d.reason)
      assert.equal('read_secrets returns secretAdjacent data, which exceeds what a provider in the "externalEu" '
        .. "trust zone may receive (ceiling: internalConfiguration).", d.message)
    end)
  end)

  describe("order: a cheaper refusal is reported and never mentions the trust zone", function()
    local config = config_in("externalGlobal", { allowed_groups = { "rag" } })

    it("disabled beats admin, group and zone", function()
      local gate = gate_over({ hot }, { rows = { tools = { read_secrets = false } } })
      local d = gate:decide("read_secrets", config, nil)
      assert.equal("toolDisabled", d.reason)
      assert.equal("secretAdjacent", d.data_class)
      assert.is_nil(d.message:find("trust zone", 1, true))
      assert.is_nil(d.message:find("secretAdjacent", 1, true))
    end)

    it("admin beats group and zone", function()
      local d = gate_over({ hot }):decide("read_secrets", config, EDITOR)
      assert.equal("requiresAdmin", d.reason)
      assert.is_nil(d.message:find("trust zone", 1, true))
    end)

    it("configuration group beats zone", function()
      local d = gate_over({ hot }):decide("read_secrets", config, ADMIN)
      assert.equal("configurationGroup", d.reason)
      assert.is_nil(d.message:find("trust zone", 1, true))
    end)

    it("the zone is still computed first and reported on a cheap refusal", function()
      local d = gate_over({}):decide("ghost", config_in("privateHosted"), ADMIN)
      assert.equal("privateHosted", d.zone)
      assert.equal("systemDiagnostics", d.ceiling)
    end)
  end)

  describe("observe mode", function()
    it("offers a builtin above the ceiling, flagged observed_only", function()
      local gate = gate_over({ hot }, { mode = " OBSERVE " })
      local d = gate:decide("read_secrets", config_in("externalGlobal"), ADMIN)
      assert.is_true(d.allowed)
      assert.is_true(d.observed_only)
      assert.equal("trustZone", d.reason)
      assert.equal('read_secrets returns secretAdjacent data, which exceeds what a provider in the "externalGlobal" '
        .. "trust zone may receive (ceiling: editorContent). Enforcement is in observe mode, so the tool was "
        .. "still offered.", d.message)
    end)

    it("never lets a remote tool through above the ceiling", function()
      local gate = gate_over({ mcp_hot }, { mode = "observe", rows = { tools = { [mcp_hot.name] = true } } })
      local d = gate:decide(mcp_hot.name, config_in("externalGlobal"), ADMIN)
      assert.is_false(d.allowed)
      assert.is_false(d.observed_only)
      assert.equal("trustZone", d.reason)
      assert.is_nil(d.message:find("observe mode", 1, true))
      -- under a permitting ceiling the same remote tool is offered
      assert.is_true(gate:decide(mcp_hot.name, config_in("local"), ADMIN).allowed)
    end)

    it("does not loosen the other gates", function()
      local gate = gate_over({ hot }, { mode = "observe" })
      assert.equal("requiresAdmin", gate:decide("read_secrets", config_in("externalGlobal"), nil).reason)
      assert.is_false(gate:decide("read_secrets", config_in("externalGlobal"), nil).allowed)
    end)

    for _, word in ipairs({ "observ", "off", "", 42 }) do
      it("a mode of " .. string.format("%q", word) .. " enforces", function()
        local d = gate_over({ hot }, { mode = word }):decide("read_secrets", config_in("externalGlobal"), ADMIN)
        assert.is_false(d.allowed)
      end)
    end

    it("a missing mode enforces", function()
      assert.is_false(gate_over({ hot }):decide("read_secrets", config_in("externalGlobal"), ADMIN).allowed)
    end)

    it("reads a mode function at each decision; one that raises enforces", function()
      local setting = "observe"
      local gate = gate_over({ hot }, { mode = function() return setting end })
      assert.is_true(gate:decide("read_secrets", config_in("externalGlobal"), ADMIN).observed_only)
      setting = "enforce"
      assert.is_false(gate:decide("read_secrets", config_in("externalGlobal"), ADMIN).allowed)
      local broken = gate_over({ hot }, { mode = function() error("configuration unreadable") end })
      assert.equal("enforce", broken:mode())
      assert.is_false(broken:decide("read_secrets", config_in("externalGlobal"), ADMIN).allowed)
    end)
  end)

  describe("every zone × class boundary", function()
    local ceiling_rank = { ["local"] = 5, privateHosted = 4, externalEu = 3, externalGlobal = 1 }
    for _, zone in ipairs(ZONES) do
      for rank, class in ipairs(CLASSES) do
        local permitted = rank - 1 <= ceiling_rank[zone]
        it(string.format("%s in %s is %s", class, zone, permitted and "offered" or "refused"), function()
          local b = builtin("b", { data_class = class })
          local r = remote("srv", "r", class)
          local gate = gate_over({ b, r }, { rows = { tools = { [r.name] = true } } })
          for _, name in ipairs({ "b", r.name }) do
            local d = gate:decide(name, config_in(zone), ADMIN)
            assert.equal(permitted, d.allowed, name)
            assert.equal(permitted and "none" or "trustZone", d.reason, name)
            assert.equal(class, d.data_class)
            assert.equal(zone, d.zone)
            assert.equal(CLASSES[ceiling_rank[zone] + 1], d.ceiling)
          end
          assert.equal(permitted, policy.permits(zone, class))
        end)
      end
    end
  end)

  it("a fallback in a worse zone lowers the ceiling for the whole run", function()
    local gate = gate_over({ builtin("cfg", { group = "configuration" }) })
    assert.is_true(gate:decide("cfg", config_in("privateHosted"), ADMIN).allowed)
    local d = gate:decide("cfg", config_in("privateHosted", { fallbacks = { config_in("externalGlobal") } }), ADMIN)
    assert.is_false(d.allowed)
    assert.equal("externalGlobal", d.zone)
  end)

  it("raises on a tool name that is not a string", function()
    assert.has_error(function() gate_over({}):decide(42, config_in("local"), ADMIN) end)
  end)
end)

-- Every decision for `names`, refused ones included, in order.
local function decisions_for(gate, names, configuration, user, context)
  local out = {}
  for i, name in ipairs(names) do out[i] = gate:decide(name, configuration, user, context) end
  return out
end

describe("filter_offerable", function()
  local tools = {
    builtin("z_first", { group = "rag" }),
    builtin("off_by_default", { enabled_by_default = false }),
    builtin("secrets", { group = "accounts" }),
    builtin("a_last", { group = "code" }),
  }
  local config = config_in("externalEu")

  it("filter_offerable(nil) keeps the enabled, allowed names in registry order", function()
    assert.same({ "z_first", "a_last" }, gate_over(tools):filter_offerable(nil, config, ADMIN))
  end)

  it("filter_offerable(list) decides exactly the requested names, in their order", function()
    local gate = gate_over(tools)
    assert.same({ "a_last", "z_first" },
      gate:filter_offerable({ "a_last", "ghost", "secrets", "off_by_default", "z_first" }, config, ADMIN))
    assert.same({}, gate:filter_offerable({}, config, ADMIN))
  end)

  it("filter_offerable(nil) decides every enabled tool, and only those", function()
    local decided = {}
    local gate = gate_over(tools, { on_decision = function(d) decided[#decided + 1] = d.tool .. ":" .. d.reason end })
    assert.same({ "z_first", "a_last" }, gate:filter_offerable(nil, config, ADMIN))
    assert.same({ "secrets:trustZone" }, decided) -- off_by_default is no candidate
  end)

  it("decide gives each requested name its reason", function()
    local decisions = decisions_for(gate_over(tools), { "ghost", "off_by_default", "z_first" }, config, nil)
    assert.equal(3, #decisions)
    assert.equal("notRegistered", decisions[1].reason)
    assert.equal("toolDisabled", decisions[2].reason)
    assert.equal("none", decisions[3].reason)
  end)
end)

describe("governance events", function()
  local function recording_gate(tools, options)
    local calls = {}
    options = options or {}
    options.on_decision = function(d, context, row)
      calls[#calls + 1] = { decision = d, context = context, row = row }
    end
    return gate_over(tools, options), calls
  end

  it("an allowed decision records nothing", function()
    local gate, calls = recording_gate({ builtin("edit") })
    assert.is_true(gate:decide("edit", config_in("local"), ADMIN).allowed)
    gate:filter_offerable(nil, config_in("local"), ADMIN)
    assert.equal(0, #calls)
  end)

  it("a refusal records one row with the policy facts and nothing else", function()
    local gate, calls = recording_gate({ builtin("secrets", { group = "accounts" }) })
    local context = { correlation_id = "0f8c2c4e-9a57-4d4e-8d0e-3b1b1f6c2a11", run_uid = 41,
      provider = "openai", model = "gpt-x", configuration_identifier = "support" }
    local d = gate:decide("secrets", config_in("externalEu"), ADMIN, context)
    assert.equal(1, #calls)
    assert.equal(d, calls[1].decision)
    assert.same({
      decision = "tool_denied", reason = "trustZone", provider = "openai", model = "gpt-x",
      configuration_identifier = "support", user_uid = 7, tool_name = "secrets", agentrun_uid = 41,
      guardrail = "", correlation_id = "0f8c2c4e-9a57-4d4e-8d0e-3b1b1f6c2a11",
      detail = "zone=externalEu;ceiling=internalConfiguration;observedOnly=0",
    }, calls[1].row)
  end)

  it("a human's denial of a read records one row, approvalDenied, even in observe mode", function()
    local gate, calls = recording_gate({}, { mode = "observe" })
    local entry = { name = "mcp_docs:resource", data_class = "publicContent", remote = true, effect = "read_only" }
    local d = gate:deny_offer(entry, config_in("local"), ADMIN, { run_uid = 5, correlation_id = "c-1" })
    assert.is_false(d.allowed)
    assert.equal("approvalDenied", d.reason)
    assert.equal("mcp_docs:resource was not approved by a human.", d.message)
    assert.equal(1, #calls)
    assert.equal("approvalDenied", calls[1].row.reason)
    assert.equal("mcp_docs:resource", calls[1].row.tool_name)
    assert.equal(5, calls[1].row.agentrun_uid)
    assert.equal("zone=local;ceiling=secretAdjacent;observedOnly=0", calls[1].row.detail)
    assert.has_error(function() gate:deny_offer("mcp_docs:resource", config_in("local"), ADMIN) end)
  end)

  it("an observed-only decision records a row flagged observedOnly=1", function()
    local gate, calls = recording_gate({ builtin("secrets", { group = "accounts" }) }, { mode = "observe" })
    local d = gate:decide("secrets", config_in("externalGlobal"), ADMIN)
    assert.is_true(d.allowed)
    assert.equal(1, #calls)
    assert.equal("zone=externalGlobal;ceiling=editorContent;observedOnly=1", calls[1].row.detail)
    assert.equal("trustZone", calls[1].row.reason)
  end)

  it("outside a run: no user, no run, the configuration fills provider, model and identifier", function()
    local gate, calls = recording_gate({})
    gate:decide("ghost", config_in("local"), nil)
    assert.same({
      decision = "tool_denied", reason = "notRegistered", provider = "p-local", model = "m-1",
      configuration_identifier = "cfg-local", user_uid = 0, tool_name = "ghost", agentrun_uid = 0,
      guardrail = "", correlation_id = "",
      detail = "zone=local;ceiling=secretAdjacent;observedOnly=0",
    }, calls[1].row)
  end)

  it("filter_offerable records each refused candidate, with the caller's context", function()
    local gate, calls = recording_gate({ builtin("edit"), builtin("off", { enabled_by_default = false }) })
    gate:filter_offerable({ "edit", "off", "ghost" }, config_in("local"), ADMIN, { run_uid = 3 })
    assert.equal(2, #calls)
    assert.equal("off", calls[1].row.tool_name)
    assert.equal("toolDisabled", calls[1].row.reason)
    assert.equal(3, calls[1].row.agentrun_uid)
    assert.equal(3, calls[1].context.run_uid)
    assert.equal("ghost", calls[2].row.tool_name)
    gate:filter_offerable(nil, config_in("local"), ADMIN)
    assert.equal(2, #calls)
  end)

  it("governance_row never carries arguments or output", function()
    local d = { tool = "t", reason = "toolDisabled", zone = "local", ceiling = "secretAdjacent",
      observed_only = false, arguments = { secret = 1 }, output = "secret" }
    local row = policy.governance_row(d, { arguments = "x" }, { uid = "not a number" })
    local keys = {}
    for k in pairs(row) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({ "agentrun_uid", "configuration_identifier", "correlation_id", "decision", "detail",
      "guardrail", "model", "provider", "reason", "tool_name", "user_uid" }, keys)
    assert.equal(0, row.user_uid)
  end)
end)

describe("a switch that cannot be read, a decision that cannot be recorded", function()
  local errors = require "mcpclient.errors"
  local _, _, read_failure = errors.fail("store", { operation = "read a switch", detail = "gone", sql_code = "X" })

  -- A gate whose switches come from `state` (a table of tool_enabled / group_enabled functions).
  local function gate_with(tools, state, on_decision)
    local w = world(tools)
    return policy.new { registry = w.registry, state = state, providers = PROVIDERS, on_decision = on_decision }
  end

  it("a group switch that cannot be read is off, never on: the tool is refused as unavailable", function()
    local gate = gate_with({ builtin("edit") }, {
      group_enabled = function() return nil, read_failure.message, read_failure end,
      tool_enabled = function() return true end,
    })
    local d = gate:decide("edit", config_in("local"), ADMIN)
    assert.is_false(d.allowed)
    assert.equal("storeUnavailable", d.reason)
    assert.equal(read_failure, d.err) -- the store's failure, unchanged
    assert.equal("edit is unavailable for now: its switch could not be read from the store.", d.message)
    -- and it is still decided (and so recorded) when the gate lists what to offer, never skipped in silence
    local decided = {}
    gate = gate_with({ builtin("edit") }, { group_enabled = function() return nil, "gone" end },
      function(decision) decided[#decided + 1] = decision.reason end)
    assert.same({}, gate:filter_offerable(nil, config_in("local"), ADMIN))
    assert.same({ "storeUnavailable" }, decided)
  end)

  it("a tool switch that cannot be read is off, even for a tool on by default; a plain message is made a failure",
    function()
      local gate = gate_with({ builtin("edit", { enabled_by_default = true }) },
        { tool_enabled = function() return nil, "the database is gone" end })
      local d = gate:decide("edit", config_in("local"), ADMIN)
      assert.is_false(d.allowed)
      assert.equal("storeUnavailable", d.reason)
      assert.equal("store", d.err.kind)
      assert.truthy(d.err.message:find("the database is gone", 1, true))
    end)

  it("a governance row that cannot be recorded is on the decision; filter_offerable stops there", function()
    local gate = gate_with({ builtin("a", { enabled_by_default = false }), builtin("b", { requires_admin = true }) },
      { tool_enabled = function() return true end },
      function() return nil, read_failure.message, read_failure end)
    local d = gate:decide("b", config_in("local"), EDITOR)
    assert.equal("requiresAdmin", d.reason)
    assert.equal(read_failure, d.unrecorded)
    local names, unrecorded = gate:filter_offerable({ "a", "b", "a" }, config_in("local"), EDITOR)
    assert.same({ "a" }, names)
    assert.equal(read_failure, unrecorded)
    -- an on_decision that returns nothing (the old contract) records nothing as lost
    gate = gate_with({ builtin("b", { requires_admin = true }) }, nil, function() end)
    assert.is_nil(gate:decide("b", config_in("local"), EDITOR).unrecorded)
  end)
end)

describe("requires_approval", function()
  it("an explicit marker always requires approval", function()
    assert.is_true(policy.requires_approval({ requires_approval = true, effect = "read_only" }))
  end)

  it("a remote tool follows its server's declaration, not its write effect", function()
    local yes = remote("a", "t", "publicContent", "1")
    local no = remote("a", "t", "publicContent", "0")
    assert.equal("non_idempotent_write", no.effect)
    assert.is_true(policy.requires_approval(yes))
    assert.is_false(policy.requires_approval(no))
  end)

  it("a remote tool without a declaration needs no approval", function()
    assert.is_false(policy.requires_approval({ remote = true, effect = "non_idempotent_write" }))
  end)

  it("a builtin needs approval iff it declares a write effect", function()
    assert.is_true(policy.requires_approval({ effect = "non_idempotent_write" }))
    assert.is_true(policy.requires_approval({ effect = "idempotent_write" }))
    assert.is_false(policy.requires_approval({ effect = "read_only" }))
    assert.is_false(policy.requires_approval({ effect = "read_only", requires_approval = false }))
    assert.is_false(policy.requires_approval({}))
  end)
end)

describe("policy.new", function()
  it("raises on misuse", function()
    local w = world({})
    assert.has_error(function() policy.new() end)
    assert.has_error(function() policy.new { registry = {} } end)
    assert.has_error(function() policy.new { registry = w.registry, colour = "red" } end)
    assert.has_error(function() policy.new { registry = w.registry, on_decision = "log" } end)
    assert.has_error(function() policy.new { registry = w.registry, state = { tool_enabled = true } } end)
  end)

  it("works without state: no rows, defaults decide", function()
    local w = world({ builtin("on"), builtin("off", { enabled_by_default = false }) })
    local gate = policy.new { registry = w.registry, providers = PROVIDERS }
    assert.same({ "on" }, gate:filter_offerable(nil, config_in("local"), ADMIN))
  end)
end)
