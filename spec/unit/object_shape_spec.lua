-- A public object offers exactly its documented methods: a connection those docs/API.md's
-- "Operations" lists (connection.METHODS), a channel those of the channel contract
-- (docs/ARCHITECTURE.md; http.CONTRACT), the session those the connection uses. Everything else
-- is a local; a function stored on the object (a hook, a config value) counts as a method too.
local mcp = require "mcpclient"
local client = require "mcpclient.connection"
local http = require "mcpclient.channel.http"
local session = require "mcpclient.session"
local Fake = require "support.fake_server"

local function set(list)
  local out = {}
  for _, name in ipairs(list) do out[name] = true end
  return out
end

-- Every name a caller can call as obj:name(): the functions on the object and up its __index chain,
-- metamethods aside.
local function callable(obj)
  local names, seen = {}, {}
  local t = obj
  while type(t) == "table" and not seen[t] do
    seen[t] = true
    for k, v in pairs(t) do
      if type(k) == "string" and type(v) == "function" and not k:match("^__") then names[k] = true end
    end
    local mt = getmetatable(t)
    t = mt and mt.__index
  end
  return names
end

local function sorted(names)
  local list = {}
  for k in pairs(names) do list[#list + 1] = k end
  table.sort(list)
  return list
end

local function connect(extra)
  local fake = Fake.new():will_handshake():will_return({ tools = mcp.json.array {} })
  local options = { url = "https://mcp.example.com/rpc", identifier = "shape", health = mcp.health.discard,
    transport = fake, clock = fake.clock }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options), fake
end

-- The contract as docs/ARCHITECTURE.md states it: the method column of its table.
local function documented_contract()
  local file = assert(io.open("docs/ARCHITECTURE.md", "r"))
  local text = file:read("a")
  file:close()
  local section = assert(text:match("## The channel contract\n(.-)\n## "), "no channel contract section")
  local names = {}
  for name in section:gmatch("\n| `channel:([%w_]+)%(") do names[#names + 1] = name end
  return names
end

describe("object shapes", function()
  it("a connection offers exactly its documented operations, before and after use", function()
    local conn <close> = connect()
    assert.same(sorted(set(client.METHODS)), sorted(callable(conn)))
    assert(conn:list_tools())
    assert.same(sorted(set(client.METHODS)), sorted(callable(conn)))
  end)

  it("docs/API.md documents exactly those operations", function()
    local file = assert(io.open("docs/API.md", "r"))
    local text = file:read("a")
    file:close()
    local ops = assert(text:match("\n## Operations\n(.-)\n## "))
    local named = {}
    for name in ops:gmatch("`conn:([%w_]+)%(") do named[name] = true end
    assert.same(sorted(set(client.METHODS)), sorted(named))
  end)

  it("the HTTP channel offers exactly the channel contract, and the contract is the documented one", function()
    assert.same(sorted(set(documented_contract())), sorted(set(http.CONTRACT)))
    local conn <close> = connect()
    local channel = conn.session.channel
    assert.same(sorted(set(http.CONTRACT)), sorted(callable(channel)))
    -- traced: the wrapped methods are still the contract's
    local traced <close> = connect { trace = true }
    assert.same(sorted(set(http.CONTRACT)), sorted(callable(traced.session.channel)))
  end)

  it("the conformance suite's channel that is not HTTP offers exactly the contract too", function()
    local FakeChannel = require "support.fake_channel"
    assert.same(sorted(set(http.CONTRACT)), sorted(callable(FakeChannel.new(Fake.new()))))
  end)

  it("connect takes an injected channel only when it offers the whole contract", function()
    local FakeChannel = require "support.fake_channel"
    local partial = { request = function() end }
    assert.has_error(function()
      mcp.connect { url = "https://mcp.example.com/rpc", identifier = "x", health = mcp.health.discard,
        channel = partial }
    end, "connect: channel must offer the channel contract (it lacks notify)")
    local conn <close> = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "x",
      health = mcp.health.discard, channel = FakeChannel.new(Fake.new()) }
    assert.same(sorted(set(client.METHODS)), sorted(callable(conn)))
  end)

  it("the session offers open, request, listen, drain, ping, close, set_roots and input_answer", function()
    local conn <close> = connect()
    assert.same({ "close", "drain", "input_answer", "listen", "open", "ping", "request", "set_log_level",
      "set_roots" }, sorted(callable(conn.session)))
    -- and its module the constructor and the one answer to an elicitation both eras give (a task's
    -- input requests are answered by the same rule as a server request)
    assert.same({ "elicited", "new" }, sorted(callable(session)))
  end)

  it("a task offers exactly status, result, cancel and update, as docs/API.md documents them", function()
    local conn <close> = connect()
    local t = conn:task("t-1")
    assert.same({ "cancel", "result", "status", "update" }, sorted(callable(t)))
    local file = assert(io.open("docs/API.md", "r"))
    local text = file:read("a")
    file:close()
    local named = {}
    for name in text:match("`conn:task%(handle_or_id%)`(.-)\n%- "):gmatch("`:([%w_]+)%(") do named[name] = true end
    assert.same({ "cancel", "result", "status", "update" }, sorted(named))
  end)

  it("the module of a channel offers only its constructor", function()
    assert.same({ "new" }, sorted(callable(http)))
  end)
end)
