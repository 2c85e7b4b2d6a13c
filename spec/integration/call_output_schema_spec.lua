-- call_tool's output_schema option: a caller that keeps a tool's definition itself (the agent host's
-- imported catalogue) hands the call the tool's outputSchema, and the result is checked against it
-- even though the connection never listed the tool; the handed schema wins over the connection's
-- own listing; validate_output = false on connect still takes results unchecked; a schema that
-- cannot be one raises before anything is sent.
local mcp = require "mcpclient"
local stdio = require "support.stdio"

local COUNT = '{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}'

local function connect(era, extra)
  local root = assert(io.popen("pwd")):read("l")
  local options = { identifier = "out", command = { "lua5.4", root .. "/spec/support/output_server.lua", era },
    env = stdio.env(), health = function() end, budget = 10 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return assert(mcp.connect(options))
end

-- How many tools/call requests the server received.
local function calls(conn)
  return tonumber(assert(conn:call_tool("calls", {})).text)
end

for _, era in ipairs { "legacy", "modern" } do
  describe("call_tool with output_schema (" .. era .. ")", function()
    after_each(function()
      collectgarbage()
      collectgarbage()
      assert.same({ zombies = 0, alive = 0 }, stdio.children())
    end)

    it("checks a tool the connection never listed against the schema handed, as text or as a table", function()
      local conn <close> = connect(era)
      local outcome = assert(conn:call_tool("count", { give = "good" }, { output_schema = COUNT }))
      assert.same({ n = 1 }, outcome.structured)
      local none, message, err = conn:call_tool("count", { give = "bad" }, { output_schema = COUNT })
      assert.is_nil(none)
      assert.same({ "invalid_output", "$.n", "count", "out" }, { err.kind, err.path, err.tool, err.server })
      assert.matches("output schema at $.n", message, 1, true)
      none, message, err = conn:call_tool("count", { give = "none" },
        { output_schema = { type = "object", required = { "n" } } })
      assert.is_nil(none)
      assert.same({ "invalid_output", "$" }, { err.kind, err.path })
      assert.matches("no structuredContent", message, 1, true)
      -- a boolean schema is itself: false accepts nothing
      none, message, err = conn:call_tool("plain", {}, { output_schema = false })
      assert.is_nil(none)
      assert.equal("invalid_output", err.kind)
      assert.matches("output schema at $", message, 1, true)
      -- without the option and without a listing nothing is checked
      assert(conn:call_tool("count", { give = "bad" }))
      assert.equal(6, calls(conn))
    end)

    it("prefers the schema handed over the connection's own listing", function()
      local conn <close> = connect(era)
      assert(conn:list_tools())
      -- the listing's schema refuses this result; the handed one accepts everything
      assert.equal("invalid_output", select(3, conn:call_tool("count", { give = "bad" })).kind)
      assert(conn:call_tool("count", { give = "bad" }, { output_schema = true }))
      -- the listing declares none for plain; the handed one is checked
      assert.equal("$.anything", select(3, conn:call_tool("plain", {},
        { output_schema = { properties = { anything = { type = "integer" } } } })).path)
    end)

    it("takes results unchecked on a connection made with validate_output = false", function()
      local conn <close> = connect(era, { validate_output = false })
      assert.same({ n = "one\27[31m" }, assert(conn:call_tool("count", { give = "bad" }, { output_schema = COUNT }))
        .structured)
    end)

    it("raises for a schema that cannot be one, before anything is sent", function()
      local conn <close> = connect(era)
      assert.error_matches(function() conn:call_tool("count", {}, { output_schema = "{ not json" }) end,
        "call_tool: output_schema is not JSON text", 1, true)
      for _, bad in ipairs { "[1, 2]", "null", '"text"', 5, { 1, 2 } } do
        assert.error_matches(function() conn:call_tool("count", {}, { output_schema = bad }) end,
          "call_tool: output_schema must be a JSON Schema: an object, a boolean, or its JSON text", 1, true)
      end
      -- the other options are still checked as every operation's
      assert.error_matches(function() conn:call_tool("count", {}, { output_schema = COUNT, budgt = 1 }) end,
        "budgt", 1, true)
      -- no other operation takes it
      assert.error_matches(function() conn:list_tools { output_schema = COUNT } end, "output_schema", 1, true)
      assert.equal(1, calls(conn))
    end)
  end)
end
