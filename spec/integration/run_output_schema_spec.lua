-- Output validation in the agent host: an imported tool's outputSchema is kept by the import and
-- handed to every call a run makes (its connections never list), so a result that does not match
-- what the operator imported reaches the model as an error result naming the failure
-- (invalid_output, the place it failed), and the trail records the step as an error of that kind.
-- A matching result passes, a tool without a schema is unaffected, a schema that is not a JSON
-- object is skipped at import, and run.start's validate_output = false takes results unchecked.
local catalogue = require "mcpclient.agent.catalogue"
local json = require "mcpclient.json"
local run = require "mcpclient.agent.run"
local servers = require "support.servers"
local stdio = require "support.stdio"
local trail = require "support.trail"

local ADMIN = { name = "ops", uid = 7, admin = true }
local PROVIDERS = { ["p-local"] = { zone = "local" } }
local CONFIGURATION = { identifier = "cfg", provider = "p-local", model = "m" }

local function command(era)
  local root = assert(io.popen("pwd")):read("l")
  return { "lua5.4", root .. "/spec/support/output_server.lua", era }
end

local function import(store, era)
  local uid = servers.add(store, { identifier = "out", name = "Out", url = "", command = command(era),
    env = stdio.env(), data_class = "publicContent", requires_approval = "0", enabled = true })
  local report = catalogue.import(store, assert(store:server(uid)), { now = 1, log = function() end })
  assert.is_false(report.refused, report.skip_reasons[1])
  for _, name in ipairs { "count", "plain", "calls" } do assert(store:set_tool_enabled("mcp_out_" .. name, true)) end
  return uid, report
end

local function start(store, options)
  local o = { user = ADMIN, providers = PROVIDERS, log = function() end, configuration = CONFIGURATION }
  for k, v in pairs(options or {}) do o[k] = v end
  return assert(run.start(store, o))
end

local function payload(event)
  return json.decode(event.payload)
end

for _, era in ipairs { "legacy", "modern" } do
  describe("an imported tool's output schema in a run (" .. era .. ")", function()
    local store
    before_each(function() store = servers.open_store() end)
    after_each(function()
      store:close()
      collectgarbage()
      collectgarbage()
      assert.same({ zombies = 0, alive = 0 }, stdio.children())
    end)

    it("is kept by the import as the server declared it; a schema that is no object is skipped", function()
      local uid, report = import(store, era)
      assert.equal(3, report.imported)
      assert.same({ '"listy" has an output schema that is not a JSON object and was skipped.' }, report.skip_reasons)
      local by = {}
      for _, t in ipairs(assert(store:tools_of(uid))) do by[t.remote_name] = t.output_schema end
      assert.same({ type = "object", required = { "n" }, properties = { n = { type = "integer" } } },
        json.decode(by.count))
      assert.same({ plain = "", calls = "" }, { plain = by.plain, calls = by.calls })
    end)

    it("passes a result that matches, and one of a tool without a schema", function()
      import(store, era)
      local r = start(store)
      assert.same({ text = "count answered", is_error = false }, r:invoke("mcp_out_count", { give = "good" }))
      assert.same({ text = "plain answered", is_error = false }, r:invoke("mcp_out_plain", {}))
      assert.equal("completed", r:finish())
      for _, event in ipairs(trail.of_kind(r, "tool")) do
        local data = payload(event)
        assert.is_false(data.toolIsError)
        assert.is_nil(data.errorKind)
      end
    end)

    it("hands a mismatch to the model as an error result naming invalid_output and the path; audited", function()
      import(store, era)
      local r = start(store)
      local result = r:invoke("mcp_out_count", { give = "bad" })
      assert.is_true(result.is_error)
      assert.equal("invalid_output", result.err.kind)
      assert.equal("$.n", result.err.path)
      assert.equal("count", result.err.tool)
      assert.matches("output schema at $.n", result.text, 1, true)
      -- the server's value never reaches the model's text unmarked
      assert.is_nil(result.text:find("\27", 1, true))
      local missing = r:invoke("mcp_out_count", { give = "none" })
      assert.same({ "invalid_output", "$" }, { missing.err.kind, missing.err.path })
      assert.matches("no structuredContent", missing.text, 1, true)
      -- each call reached the server once: a refused result is not asked for again
      assert.same({ text = "3", is_error = false }, r:invoke("mcp_out_calls", {}))
      assert.equal("completed", r:finish())
      local steps = trail.of_kind(r, "tool")
      assert.equal(3, #steps)
      local bad, none = payload(steps[1]), payload(steps[2])
      assert.same({ "mcp_out_count", true, "invalid_output", result.text },
        { bad.toolName, bad.toolIsError, bad.errorKind, bad.toolResult })
      assert.same({ true, "invalid_output" }, { none.toolIsError, none.errorKind })
      assert.is_nil(payload(steps[3]).errorKind)
    end)

    it("takes results unchecked when the run opts out (validate_output = false)", function()
      import(store, era)
      local r = start(store, { validate_output = false })
      assert.same({ text = "count answered", is_error = false }, r:invoke("mcp_out_count", { give = "bad" }))
      assert.same({ text = "count answered", is_error = false }, r:invoke("mcp_out_count", { give = "none" }))
      assert.equal("completed", r:finish())
      assert.error_matches(function() run.start(store, { user = ADMIN, validate_output = "no" }) end,
        "validate_output", 1, true)
    end)
  end)
end
