-- log_level against server-everything (the 2025-era SDK, over stdio and Streamable HTTP): its
-- toggle-simulated-logging tool sends one log notice of a random level each time it is switched
-- on, through the SDK's sendLoggingMessage, which drops what is below the level the client set
-- with logging/setLevel. At "debug" every notice arrives; at "emergency" only emergency ones.
-- Notices that come after the tool's answer are handed out by mcp.engine.step (stdio) or by the
-- next operation (HTTP, the session's GET stream).
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local peers = require "support.peers"
local stdio = require "support.stdio"

local EVERYTHING = peers.node_modules .. "/@modelcontextprotocol/server-everything/dist/index.js"
local TOGGLE = "toggle-simulated-logging"

-- Switch the simulated logging on and off `times` times; the levels of the notices on_log got.
local function toggled(conn, got, times)
  for _ = 1, times do
    assert(conn:call_tool(TOGGLE, {}))  -- on: one notice at once
    -- the notice may come just after the answer: hand out what arrives for a moment
    local until_s = core.now() + 0.3
    while core.now() < until_s do mcp.engine.step(0.05) end
    assert(conn:call_tool(TOGGLE, {}))  -- off
  end
  return got
end

local function collect()
  local got = {}
  return got, function(level) got[#got + 1] = level end
end

describe("log_level against server-everything #integration", function()
  setup(function() peers.require_available() end)
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("over stdio: at debug every notice arrives, at emergency only emergency ones", function()
    for _, level in ipairs { "debug", "emergency" } do
      local got, on_log = collect()
      local conn <close> = mcp.connect { identifier = "every", command = { "node", EVERYTHING, "stdio" },
        health = mcp.health.discard, budget = 30, log_level = level, on_log = on_log }
      toggled(conn, got, 8)
      if level == "debug" then
        assert.equal(8, #got)  -- one per switch-on, none dropped
      else
        for _, l in ipairs(got) do assert.equal("emergency", l) end
        assert.is_true(#got < 8)  -- 8 random levels all emergency: 1 in 8^8
      end
    end
  end)

  it("2026-07-28 over HTTP (the SDK v2): mcp.engine.step holds a listen for the notices between operations",
    function()
      local p = peers.start("sdk2-modern")
      local ok, err = pcall(function()
        local kinds = {}
        local conn <close> = mcp.connect { identifier = "modern", url = p.url, health = mcp.health.discard,
          budget = 10, on_change = function(kind, uri) kinds[#kinds + 1] = kind .. (uri and (" " .. uri) or "") end }
        assert(conn:list_resources())
        assert.equal("modern", conn:server().era)
        -- another process asks the server to publish its changes while this one waits between operations
        local env = stdio.env()
        local later = assert(io.popen(string.format("env LUA_CPATH='%s' LUA_PATH='%s' lua5.4 "
          .. "spec/support/call_later.lua '%s' 0.5 touch", env.LUA_CPATH, env.LUA_PATH, p.url)))
        local until_s = core.now() + 8
        while #kinds == 0 and core.now() < until_s do mcp.engine.step(0.5) end
        assert.equal("touched", later:read("l"))
        later:close()
        assert.equal("resources", kinds[1])
      end)
      p:stop()
      assert(ok, err)
    end)

  it("over Streamable HTTP: set_log_level on the open session, the notices on the GET stream", function()
    local p = peers.start("everything")
    local ok, err = pcall(function()
      local got, on_log = collect()
      local conn <close> = mcp.connect { identifier = "every", url = p.url, health = mcp.health.discard,
        budget = 30, on_log = on_log }
      assert(conn:ping())
      local function eight()
        for _ = 1, 8 do
          assert(conn:call_tool(TOGGLE, {}))
          assert(conn:call_tool("echo", { message = "meanwhile" }))  -- the GET stream is read during it
          assert(conn:call_tool(TOGGLE, {}))
        end
      end
      assert.is_true(conn:set_log_level("debug"))
      eight()
      assert.equal(8, #got)
      for i = #got, 1, -1 do got[i] = nil end
      assert.is_true(conn:set_log_level("emergency"))
      eight()
      for _, l in ipairs(got) do assert.equal("emergency", l) end
      assert.is_true(#got < 8)
    end)
    p:stop()
    assert(ok, err)
  end)
end)
