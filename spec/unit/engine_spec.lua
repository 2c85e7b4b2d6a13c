-- mcp.gather and what an operation sends for progress and elicitation, over
-- the fake leg (which answers at once: the tasks never wait on the network).
local mcp = require "mcpclient"
local engine = require "mcpclient.engine"
local Fake = require "support.fake_server"

local function connect(fake, extra)
  local options = {
    url = "https://mcp.example.com/rpc", identifier = "srv",
    transport = fake, clock = fake.clock, health = mcp.health.discard,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return fake:hold(mcp.connect(options))
end

local function text_result(text)
  return { content = { { type = "text", text = text } } }
end

-- The decoded body of the fake's requests with this JSON-RPC method.
local function bodies(fake, method)
  local out = {}
  for _, req in ipairs(fake.requests) do
    if req.body and req.body.method == method then out[#out + 1] = req.body end
  end
  return out
end

describe("mcp.gather", function()
  it("returns each function's results packed, in order, and an error as pcall would show it", function()
    local results = mcp.gather {
      function() return 1, nil, 3 end,
      function() error("boom", 0) end,
      function() end,
      function() return engine.inside() end,
    }
    assert.same({ n = 3, 1, nil, 3 }, results[1])
    assert.same({ n = 0, error = "boom" }, results[2])
    assert.same({ n = 0 }, results[3])
    assert.same({ n = 1, true }, results[4])
    assert.is_false(engine.inside())
  end)

  it("nests: an inner gather's tasks run inside the outer one's task", function()
    local results = mcp.gather {
      function()
        local inner = mcp.gather { function() return "a" end, function() return engine.inside() end }
        return inner[1][1], inner[2][1]
      end,
    }
    assert.same({ n = 2, "a", true }, results[1])
  end)

  it("raises on misuse", function()
    assert.has_error(function() mcp.gather(42) end, "gather expects a table of functions")
    assert.has_error(function() mcp.gather { function() end, "no" } end, "gather: entry 2 is not a function")
  end)

  it("runs operations of one connection in tasks, the handshake once", function()
    local fake = Fake.new():will_handshake("s-1"):will_return(text_result("one")):will_return(text_result("two"))
    local conn = connect(fake)
    local results = mcp.gather {
      function() return conn:call_tool("a", {}) end,
      function() return conn:call_tool("b", {}) end,
    }
    assert.equal("one", results[1][1].text)
    assert.equal("two", results[2][1].text)
    assert.equal(1, #bodies(fake, "initialize"))
  end)
end)

describe("progress", function()
  it("asks for progress (a token in _meta) only when on_progress is given", function()
    local fake = Fake.new():will_handshake():will_return(text_result("plain"))
      :will_stream({
        'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
          .. '"params":{"progressToken":%ID%,"progress":1,"total":2,"message":"half\\u001b[2J"}}\n\n',
        'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
          .. '"params":{"progressToken":999,"progress":7}}\n\n',
        Fake.sse_result(text_result("done")),
      })
    local conn = connect(fake)
    assert.equal("plain", assert(conn:call_tool("t", { x = 1 })).text)
    local seen = {}
    local out = assert(conn:call_tool("t", { x = 1 }, { on_progress = function(...) seen[#seen + 1] = { ... } end }))
    assert.equal("done", out.text)
    local calls = bodies(fake, "tools/call")
    assert.is_nil(calls[1].params._meta)
    assert.equal(calls[2].id, calls[2].params._meta.progressToken)
    assert.equal(1, #seen, "only the notification carrying this request's token")
    assert.equal(1, seen[1][1])
    assert.equal(2, seen[1][2])
    assert.is_nil(seen[1][3]:find("\27", 1, true), "the server's message passes the text rule")
  end)

  it("raises when on_progress is not a function", function()
    local conn = connect(Fake.new())
    assert.has_error(function() conn:call_tool("t", {}, { on_progress = "yes" }) end)
  end)
end)

describe("elicitation", function()
  local request = 'event: message\ndata: {"jsonrpc":"2.0","id":"e1","method":"elicitation/create",'
    .. '"params":{"message":"Name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}}\n\n'

  it("declares the capability only with a handler", function()
    local plain = Fake.new():will_handshake():will_return(text_result("x"))
    assert(connect(plain):call_tool("t", {}))
    assert.same({}, bodies(plain, "initialize")[1].params.capabilities)
    local with = Fake.new():will_handshake():will_return(text_result("x"))
    assert(connect(with, { on_elicitation = function() return { action = "decline" } end }):call_tool("t", {}))
    assert.same({ elicitation = {} }, bodies(with, "initialize")[1].params.capabilities)
  end)

  it("answers a request on the POST stream with the handler's answer", function()
    local fake = Fake.new():will_handshake():will_stream({ request, Fake.sse_result(text_result("ok")) })
    local asked
    local conn = connect(fake, { on_elicitation = function(r)
      asked = r
      return { action = "accept", content = { name = "Ada" } }
    end })
    assert.equal("ok", assert(conn:call_tool("t", {})).text)
    assert.equal("Name?", asked.message)
    local answer
    for _, req in ipairs(fake.requests) do
      if req.body and req.body.id == "e1" then answer = req.body end
    end
    assert.same({ action = "accept", content = { name = "Ada" } }, answer.result)
  end)

  it("without a handler answers method not found, and the call goes on", function()
    local fake = Fake.new():will_handshake():will_stream({ request, Fake.sse_result(text_result("ok")) })
    assert.equal("ok", assert(connect(fake):call_tool("t", {})).text)
    local answer
    for _, req in ipairs(fake.requests) do
      if req.body and req.body.id == "e1" then answer = req.body end
    end
    assert.equal(-32601, answer.error.code)
  end)

  it("raises when the handler answers nonsense (a host bug)", function()
    local fake = Fake.new():will_handshake():will_stream({ request, Fake.sse_result(text_result("ok")) })
    local conn = connect(fake, { on_elicitation = function() return { action = "maybe" } end })
    assert.has_error(function() conn:call_tool("t", {}) end)
  end)
end)
