-- The seam between the session and the HTTP channel, over the scripted leg: what a channel
-- reports (written or not), what the session does with it (a cancel notice only for a request
-- that was written, never twice, never for the opening), and a budget that runs out while a
-- stream is read.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"

local function connect(fake, extra)
  local options = { url = "https://mcp.example.com/rpc", identifier = "seam", health = mcp.health.discard,
    transport = fake, clock = fake.clock }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function of_method(fake, method)
  local list = {}
  for _, r in ipairs(fake.requests) do
    if r.method == method then list[#list + 1] = r end
  end
  return list
end

describe("the channel seam", function()
  it("a cancel flag already up: nothing written, no notice", function()
    local fake = Fake.new():will_handshake("s-1")
    local conn <close> = connect(fake)
    assert(conn:ping())
    local out, _, err = conn:call_tool("slow", {}, { cancel = function() return true end })
    assert.is_nil(out)
    assert.equal("cancelled", err.kind)
    assert.is_false(err.in_flight)
    assert.equal(0, #of_method(fake, "tools/call"))
    assert.equal(0, #of_method(fake, "notifications/cancelled"))
  end)

  it("a written call cancelled: one notice for its id, bounded to 250 ms, carrying the session", function()
    local fake = Fake.new():will_handshake("s-1"):will_hang(0.01)
    local conn <close> = connect(fake)
    -- the flag goes up once the call reached the server
    local reached = function() return #of_method(fake, "tools/call") > 0 end
    local out, _, err = conn:call_tool("slow", {}, { cancel = reached })
    assert.is_nil(out)
    assert.equal("cancelled", err.kind)
    assert.is_true(err.in_flight)
    local call = of_method(fake, "tools/call")[1]
    local notices = of_method(fake, "notifications/cancelled")
    assert.equal(1, #notices)
    assert.equal(call.id, notices[1].body.params.requestId)
    assert.equal(250, notices[1].timeout_ms)
    assert.equal("s-1", notices[1].session)
  end)

  it("the opening is never cancelled on the wire", function()
    local fake = Fake.new():will_hang(0.01)
    local conn <close> = connect(fake, { protocol = "2025-11-25" })
    local _, _, err = conn:ping { cancel = function() return #of_method(fake, "initialize") > 0 end }
    assert.equal("cancelled", err.kind)
    assert.equal(0, #of_method(fake, "notifications/cancelled"))
  end)

  it("a budget spent before the write: deadline, nothing written, no notice", function()
    local fake = Fake.new():will_handshake():take(0, 2)  -- notifications/initialized takes 2 s
    local conn <close> = connect(fake, { budget = 1 })
    local _, _, err = conn:call_tool("x", {})
    assert.equal("deadline", err.kind)
    assert.equal(0, #of_method(fake, "tools/call"))
    assert.equal(0, #of_method(fake, "notifications/cancelled"))
  end)

  it("a stream flooded with pings past the budget ends timeout, and the rest goes unanswered", function()
    local fake = Fake.new():will_handshake("s-1")
    fake:will(function(req)
      -- 3 000 pings, each its own chunk, each costing 1 ms of the connection's clock; then the
      -- stream ends without an answer
      local stopped = false
      for i = 1, 3000 do
        fake:advance(0.001)
        if req.on_stream('event: message\ndata: {"jsonrpc":"2.0","id":"flood-' .. i .. '","method":"ping"}\n\n') then
          stopped = true
          break
        end
      end
      return { status = 200, headers = { ["content-type"] = "text/event-stream" }, body = "", duration_ms = 3000,
        media_type = "text/event-stream", streamed = true, stopped = stopped, truncated = false }
    end)
    local conn <close> = connect(fake, { budget = 1 })
    local out, message, err = conn:call_tool("flooded", {})
    assert.is_nil(out)
    assert.equal("timeout", err.kind, message)
    -- the pings inside the budget were answered, none after it
    local answers = 0
    for _, r in ipairs(fake.requests) do
      if r.method == nil and r.body and r.body.result then answers = answers + 1 end
    end
    assert.is_true(answers > 0 and answers < 1000, "answers: " .. answers)
  end)

  it("hands every message that is not the answer to the session: progress reaches on_progress", function()
    local fake = Fake.new():will_handshake("s-1")
    fake:will_stream {
      function(id)
        return 'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":' .. id
          .. ',"progress":1,"total":2,"message":"half\\u001b[31m"}}\n\n'
      end,
      function(id) return 'data: {"jsonrpc":"2.0","id":' .. id .. ',"result":{"content":[]}}\n\n' end,
    }
    local conn <close> = connect(fake)
    local seen = {}
    assert(conn:call_tool("t", {}, { on_progress = function(p, t, m) seen[#seen + 1] = { p, t, m } end }))
    assert.same({ { 1, 2, "half [31m" } }, seen)  -- the server's text under the text rule
  end)

  it("a channel whose server was replaced: the session opens the era again and sends once more", function()
    -- a hand-made channel (the contract's six methods): its server is replaced after the first
    -- call, so the next request that is no opening is refused unwritten with session_lost
    local errors = require "mcpclient.errors"
    local log, opened = {}, false
    local discover = { supportedVersions = mcp.json.array { "2026-07-28" }, capabilities = {}, resultType = "complete" }
    local channel = {
      request = function(_, _, call)
        log[#log + 1] = call.method
        if call.method == "server/discover" then
          opened = true
          return { result = discover, duration_ms = 1, bytes = 0 }
        end
        if not opened then
          local _, message, err = errors.fail("transport", { server = "seam", detail = "a new server" })
          err.session_lost = true
          return nil, message, err
        end
        call.written = true
        opened = call.method ~= "tools/call" or #log > 3  -- the first call's server is then replaced
        return { result = { content = { { type = "text", text = "ok" } } }, duration_ms = 1, bytes = 0 }
      end,
      notify = function() return true end, cancel = function() end, drain = function() return true end,
      end_session = function() return true end, close = function() return true end,
    }
    local conn <close> = mcp.connect { url = "https://mcp.example.com/rpc", identifier = "seam",
      health = mcp.health.discard, channel = channel }
    assert.equal("ok", assert(conn:call_tool("a", {})).text)
    assert.equal("ok", assert(conn:call_tool("b", {})).text)
    -- discover, call a; call b refused unwritten; discover again; call b once more
    assert.same({ "server/discover", "tools/call", "tools/call", "server/discover", "tools/call" }, log)
  end)
end)
