-- Input the server asks for (2026-07-28: input_required), against the official TypeScript SDK v2
-- (@modelcontextprotocol/server 2.4.0, spec/peers/sdk2-server.mjs), started by this spec on
-- 127.0.0.1 and stopped by its PID: its `deploy` tool asks for a form confirmation with a
-- requestState, its `signin` tool for a URL to open.
local mcp = require "mcpclient"
local peers = require "support.peers"

describe("input the SDK v2 server asks for #integration", function()
  local peer
  setup(function() peer = peers.start("sdk2-modern", { log = true }) end)
  teardown(function() if peer then peer.stop() end end)

  local function connect(extra)
    local options = { url = peer.url, identifier = "peer", health = mcp.health.discard }
    for k, v in pairs(extra or {}) do options[k] = v end
    return mcp.connect(options)
  end

  local function calls_of(tool)
    local n = 0
    for _, line in ipairs(peer.log_lines()) do
      if line:match("^POST tools/call %S+ tools/call " .. tool .. " ") then n = n + 1 end
    end
    return n
  end

  local function logged_state()
    for _, line in ipairs(peer.log_lines()) do
      local state = line:match("^deploy state (.*)$")
      if state then return state end
    end
  end

  it("answers a form confirmation through the handler; the SDK gets its requestState back exactly", function()
    local asked = {}
    local conn <close> = connect { on_elicitation = function(request)
      asked[#asked + 1] = request
      return { action = "accept", content = { confirm = true } }
    end }
    local before = calls_of("deploy")
    local out = assert(conn:call_tool("deploy", { env = "prod" }))
    assert.equal("deployed prod", out.text)
    assert.equal(1, #asked)
    assert.equal("Deploy to prod?", asked[1].message)
    assert.equal("boolean", asked[1].requestedSchema.properties.confirm.type)
    assert.equal(before + 2, calls_of("deploy"))           -- the call, then its one retry
    assert.equal('{"env":"prod","asked":1}', logged_state())
  end)

  it("hands a URL request to the handler without opening it; accepting it completes the call", function()
    local asked = {}
    local conn <close> = connect { on_elicitation = function(request)
      asked[#asked + 1] = request
      return { action = "accept" }
    end }
    assert.equal("signed in", assert(conn:call_tool("signin", {})).text)
    assert.equal("url", asked[1].mode)
    assert.equal("https://auth.example.com/start?x=1", asked[1].url)
  end)

  it("a declined confirmation is asked again by the server, up to max_input_rounds, then input_required", function()
    local conn <close> = connect { max_input_rounds = 2,
      on_elicitation = function() return { action = "decline" } end }
    local before = calls_of("deploy")
    local ok, message, err = conn:call_tool("deploy", { env = "staging" })
    assert.is_nil(ok)
    assert.equal("input_required", err.kind)
    assert.equal(2, err.rounds)
    assert.truthy(message:find("after 2 rounds", 1, true), message)
    assert.equal(before + 3, calls_of("deploy"))
  end)

  it("without a handler declares no elicitation, and the SDK refuses to ask (-32021)", function()
    local conn <close> = connect()
    local ok, _, err = conn:call_tool("deploy", { env = "prod" })
    assert.is_nil(ok)
    assert.equal(-32021, err.rpc_code)
  end)
end)
