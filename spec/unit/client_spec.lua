-- The connection over the fake leg: handshake, session reuse, operations,
-- budgets, failures of the far side, cancellation, credentials, host gate.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"
local core = require "mcpclient.core"

local function connect(fake, extra)
  local options = {
    url = "https://mcp.example.com/rpc", identifier = "srv",
    transport = fake, clock = fake.clock, health = mcp.health.memory(),
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return fake:hold(mcp.connect(options)), options.health
end

local function page(names, cursor)
  local tools = mcp.json.array {}
  for i, name in ipairs(names) do
    tools[i] = { name = name, inputSchema = { type = "object", properties = {} } }
  end
  return { tools = tools, nextCursor = cursor }
end

local function text_result(text, is_error)
  return { content = { { type = "text", text = text } }, isError = is_error }
end

describe("a connection", function()
  describe("handshake and session", function()
    it("sends initialize, initialized, then the operation; a warm call is one round trip", function()
      local fake = Fake.new():will_handshake("s-1"):will_return(page {}):will_return(text_result("one"))
      local conn = connect(fake)
      assert.same({}, assert(conn:list_tools()))
      assert.same({ "initialize", "notifications/initialized", "tools/list" }, fake:methods())
      assert(conn:call_tool("t", {}))
      assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call" }, fake:methods())
    end)

    it("offers 2025-11-25 with empty capabilities and names itself", function()
      local fake = Fake.new():will_handshake():will_return(page {})
      assert(connect(fake):list_tools())
      local init = fake.requests[1]
      assert.equal("2025-11-25", init.body.params.protocolVersion)
      assert.truthy(init.raw:find('"capabilities":{}', 1, true))
      assert.equal("mcpclient", init.body.params.clientInfo.name)
      assert.equal(mcp.version, init.body.params.clientInfo.version)
      assert.equal("application/json, text/event-stream", init.accept)
    end)

    it("carries the session id and protocol version on every leg after initialize, never on initialize", function()
      local fake = Fake.new():will_handshake("sess-7", "2025-03-26"):will_return(page {})
        :will_return(text_result("x"))
      local conn = connect(fake)
      assert(conn:list_tools())
      assert(conn:call_tool("t"))
      assert.equal("", fake.requests[1].session)
      assert.is_nil(fake.requests[1].protocol)
      for i = 2, 4 do
        assert.equal("sess-7", fake.requests[i].session)
        assert.equal("2025-03-26", fake.requests[i].protocol)
      end
    end)

    it("sends no session header to a server that issued none", function()
      local fake = Fake.new():will_handshake(nil):will_return(page {})
      assert(connect(fake):list_tools())
      for _, r in ipairs(fake.requests) do assert.equal("", r.session) end
    end)

    it("accepts every listed revision and refuses any other, naming it", function()
      for _, v in ipairs { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" } do
        local fake = Fake.new():will_handshake(nil, v):will_return(page {})
        assert(connect(fake):list_tools())
      end
      local fake = Fake.new():will_handshake(nil, "2099-01-01")
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("protocol_version", err.kind)
      assert.truthy(message:find('"2099-01-01"', 1, true))
      assert.truthy(message:find('"srv"', 1, true))
      assert.same({ "initialize" }, fake:methods())
    end)

    it("uses unique request ids and refuses a response for another id", function()
      local fake = Fake.new():will_handshake():will_return(page {})
        :will_return_raw('{"jsonrpc":"2.0","id":999,"result":{"content":[]}}')
      local conn = connect(fake)
      assert(conn:list_tools())
      local ids = {}
      for _, r in ipairs(fake.requests) do
        if r.id then assert.is_nil(ids[r.id]); ids[r.id] = true end
      end
      local ok, _, err = conn:call_tool("t")
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
    end)

    it("re-initializes once when the server answers 404 to a request carrying its session", function()
      local fake = Fake.new():will_handshake("old"):will_return(page {})
        :will_return_raw('{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}', 404)
        :will_handshake("new"):will_return(text_result("after"))
      local conn = connect(fake)
      assert(conn:list_tools())
      local out = assert(conn:call_tool("t"))
      assert.equal("after", out.text)
      assert.same({ "initialize", "notifications/initialized", "tools/list", "tools/call",
        "initialize", "notifications/initialized", "tools/call" }, fake:methods())
      assert.equal("new", fake.requests[7].session)
    end)

    it("treats a 400 that names the session like a 404", function()
      local fake = Fake.new():will_handshake("old"):will_return(page {})
        :will_return_raw('{"jsonrpc":"2.0","error":{"code":-32000,'
          .. '"message":"Bad Request: No valid session ID provided"},"id":null}', 400)
        :will_handshake("new"):will_return(text_result("after"))
      local conn = connect(fake)
      assert(conn:list_tools())
      assert.equal("after", assert(conn:call_tool("t")).text)
    end)

    it("retries a lost session only once per operation", function()
      local gone = '{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}'
      local fake = Fake.new():will_handshake("a"):will_return(page {})
        :will_return_raw(gone, 404):will_handshake("b"):will_return_raw(gone, 404)
      local conn = connect(fake)
      assert(conn:list_tools())
      local ok, message, err = conn:call_tool("t")
      assert.is_nil(ok)
      assert.equal("http_status", err.kind)
      assert.truthy(message:find("404", 1, true))
      assert.equal(2, #(function() local n = {} for _, m in ipairs(fake:methods()) do
        if m == "tools/call" then n[#n + 1] = m end end return n end)())
    end)

    it("does not re-initialize on a 404 when it carried no session", function()
      local fake = Fake.new():will_handshake(nil):will_return(page {}):will_return_raw("{}", 404)
      local conn = connect(fake)
      assert(conn:list_tools())
      local ok, _, err = conn:call_tool("t")
      assert.is_nil(ok)
      assert.equal(404, err.status)
      assert.equal(4, #fake.requests)
    end)

    it("sends DELETE with the session on close, once, and refuses use after close", function()
      local fake = Fake.new():will_handshake("s"):will_return(page {})
      local conn = connect(fake)
      assert(conn:list_tools())
      conn:close()
      conn:close()
      local last = fake.requests[#fake.requests]
      assert.equal("DELETE", last.http_method)
      assert.equal("s", last.session)
      assert.equal(4, #fake.requests)
      assert.is_true(fake.closed)
      assert.has_error(function() conn:list_tools() end, "the connection is closed")
    end)

    it("closes through <close>", function()
      local fake = Fake.new():will_handshake("s"):will_return(page {})
      do
        local conn <close> = connect(fake)
        assert(conn:list_tools())
      end
      assert.equal("DELETE", fake.requests[#fake.requests].http_method)
    end)
  end)

  describe("list_tools", function()
    it("walks pages in order, without a cursor on the first", function()
      local fake = Fake.new():will_handshake():will_return(page({ "alpha" }, "p2")):will_return(page { "beta" })
      local tools = assert(connect(fake):list_tools())
      assert.same({ "alpha", "beta" }, { tools[1].name, tools[2].name })
      assert.is_nil(fake.requests[3].body.params.cursor)
      assert.equal("p2", fake.requests[4].body.params.cursor)
    end)

    it("stops at the 50-page ceiling", function()
      local fake = Fake.new():will_handshake()
      for _ = 1, 60 do fake:will_return(page({ "x" }, "forever")) end
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("did not end within 50 pages", 1, true))
      assert.equal(52, #fake.requests)
    end)

    it("refuses a listing with no tools array and drops entries that are not objects", function()
      local fake = Fake.new():will_handshake():will_return({ ["no tools key"] = true })
      local ok, message = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.truthy(message:find('carries no "tools" array', 1, true))
      fake = Fake.new():will_handshake()
        :will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[{"name":"a"},7,"x",[],{"name":"b"}]}}')
      local tools = assert(connect(fake):list_tools())
      assert.equal(2, #tools)
    end)

    it("keeps the server's key order in schemas", function()
      local fake = Fake.new():will_handshake():will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":'
        .. '[{"name":"a","inputSchema":{"type":"object","properties":{"zeta":{},"alpha":{}}}}]}}')
      local tools = assert(connect(fake):list_tools())
      assert.equal('{"type":"object","properties":{"zeta":{},"alpha":{}}}', mcp.json.encode(tools[1].inputSchema))
    end)
  end)

  describe("list_tools' schema forms and each_tool_page", function()
    -- A page whose schemas are written the way no encoder writes them: blanks, escapes, "-0", 1E2.
    local ODD = '{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[{"name":"a","annotations":{"readOnlyHint":true},'
      .. '"inputSchema": { "type" : "object", "description":"caf\\u00e9 \\/ \\u200b", "properties":'
      .. '{"n":{"minimum":-0,"maximum":1E2}}, "examples":[{}] , "additionalProperties": {} },'
      .. '"outputSchema":{"type":"object","zeta":[],"alpha":{}}}]}}'
    local AS_SENT = '{"type":"object","description":"café / \\u200b","properties":{"n":{"minimum":0,'
      .. '"maximum":100.0}},"examples":[{}],"additionalProperties":{}}'

    it("gives schemas as the compact text of what the server sent with schemas = \"text\"", function()
      local fake = Fake.new():will_handshake():will_return_raw(ODD)
      local tools, listing = assert(connect(fake):list_tools { schemas = "text" })
      assert.equal(AS_SENT, tools[1].inputSchema)
      assert.equal('{"type":"object","zeta":[],"alpha":{}}', tools[1].outputSchema)
      assert.same({ readOnlyHint = true }, tools[1].annotations)
      assert.equal("text", listing.schemas)
      assert.equal(mcp.json.encode(mcp.json.decode(AS_SENT, true)), tools[1].inputSchema)
    end)

    it("gives each input schema as the import keeps it with schemas = \"kept\"", function()
      local fake = Fake.new():will_handshake():will_return_raw(ODD)
      local tools, listing = assert(connect(fake):list_tools { schemas = "kept" })
      -- the retained keys in their order, additionalProperties {} carried as true, "examples" dropped
      assert.equal('{"type":"object","description":"café / \\u200b","properties":{"n":{"minimum":0,'
        .. '"maximum":100.0}},"additionalProperties":true}', tools[1].inputSchema)
      assert.equal(tools[1].inputSchema, mcp.json.encode(core.normalise_schema(mcp.json.decode(AS_SENT, true))))
      assert.equal('{"type":"object","zeta":[],"alpha":{}}', tools[1].outputSchema)
      assert.equal("kept", listing.schemas)
    end)

    it("gives a refused input schema as { refused = reason } and leaves a missing one out", function()
      local fake = Fake.new():will_handshake():will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":['
        .. '{"name":"ref","inputSchema":{"type":"object","properties":{"a":{"$ref":"#/x"}}}},'
        .. '{"name":"str","inputSchema":"{\\"type\\":\\"object\\"}"},{"name":"none"}]}}')
      local tools = assert(connect(fake):list_tools { schemas = "kept" })
      assert.same({ refused = select(2, core.normalise_schema(mcp.json.decode(
        '{"type":"object","properties":{"a":{"$ref":"#/x"}}}'))) }, tools[1].inputSchema)
      assert.truthy(tools[1].inputSchema.refused:find('"$ref"', 1, true))
      -- a string is no schema, even one holding JSON text
      assert.same({ refused = "the server advertised no parameter schema" }, tools[2].inputSchema)
      assert.is_nil(tools[3].inputSchema)
    end)

    it("refuses a schema form it does not know", function()
      local conn = connect(Fake.new():will_handshake())
      assert.has_error(function() conn:list_tools { schemas = "json" } end,
        'schemas must be "tables", "text" or "kept"')
      assert.has_error(function() conn:each_tool_page(function() end, { schemas = 1 }) end,
        'schemas must be "tables", "text" or "kept"')
      assert.has_error(function() conn:each_tool_page("f") end, "each_tool_page: fn must be a function")
      assert.has_error(function() conn:list_tools { schemas = "text", budget = "1" } end, "budget must be a number")
    end)

    it("hands each_tool_page's fn every page in order, and returns the listing", function()
      local fake = Fake.new():will_handshake():will_return(page({ "a", "b" }, "p2")):will_return(page({ "c" }, "p3"))
        :will_return(page {})
      local pages = {}
      local listing = assert(connect(fake):each_tool_page(function(tools)
        local names = {}
        for i, t in ipairs(tools) do names[i] = t.name end
        pages[#pages + 1] = names
      end, { schemas = "text" }))
      assert.same({ { "a", "b" }, { "c" }, {} }, pages)
      assert.same({ era = "legacy", schemas = "text" }, listing)
    end)

    it("bounds each_tool_page's walk across its pages, as list_tools'", function()
      local client = require "mcpclient.connection"
      local saved = client.MAX_LISTED_TOOLS
      client.MAX_LISTED_TOOLS = 3
      local fake = Fake.new():will_handshake():will_return(page({ "a", "b" }, "p2")):will_return(page({ "c", "d" }))
      local handed = 0
      local ok, message, err = connect(fake):each_tool_page(function(tools) handed = handed + #tools end)
      client.MAX_LISTED_TOOLS = saved
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("exceeds 3 tools", 1, true))
      assert.equal(2, handed)
    end)

    it("passes on what fn raises, and the connection stays usable", function()
      local fake = Fake.new():will_handshake():will_return(page({ "a" }, "p2")):will_return(page { "b" })
      local conn = connect(fake)
      assert.has_error(function() conn:each_tool_page(function() error("stop here", 0) end) end, "stop here")
      assert.equal(1, #assert(conn:list_tools()))
    end)
  end)

  describe("call_tool", function()
    it("sends the name and arguments exactly, {} for none", function()
      local fake = Fake.new():will_handshake():will_return(text_result("page 3 reads: hello"))
        :will_return(text_result("ok"))
      local conn = connect(fake)
      local out = assert(conn:call_tool("read_page", { uid = 3, big = 1234567890123456789, list = mcp.json.array {} }))
      assert.equal("page 3 reads: hello", out.text)
      assert.is_false(out.is_error)
      local call = fake.requests[3]
      assert.equal("read_page", call.body.params.name)
      assert.truthy(call.raw:find('"big":1234567890123456789', 1, true))
      assert.truthy(call.raw:find('"list":[]', 1, true))
      assert(conn:call_tool("noargs"))
      assert.truthy(fake.requests[4].raw:find('"arguments":{}', 1, true))
    end)

    it("counts isError only when it is exactly true", function()
      for value, expected in pairs { [true] = true, ["true"] = false, [1] = false } do
        local fake = Fake.new():will_handshake():will_return { content = {}, isError = value }
        local out = assert(connect(fake):call_tool("t"))
        assert.equal(expected, out.is_error)
      end
    end)

    it("words empty and error answers", function()
      local fake = Fake.new():will_handshake():will_return { content = {} }
        :will_return { content = {}, isError = true }
        :will_return(text_result("page 3 does not exist", true))
      local conn = connect(fake)
      assert.equal("The remote tool returned no textual content.", conn:call_tool("t").text)
      assert.equal("The remote tool reported an error: no detail given.", conn:call_tool("t").text)
      assert.equal("The remote tool reported an error: page 3 does not exist", conn:call_tool("t").text)
    end)

    it("puts the dropped-block note first", function()
      local fake = Fake.new():will_handshake():will_return { content = {
        { type = "text", text = "first" }, { type = "image", data = "AA==" }, { type = "text", text = "second" } } }
      local out = assert(connect(fake):call_tool("t"))
      assert.equal("[mcpclient reads text only and dropped 1 non-text content block (image).]\nfirst\nsecond",
        out.text)
    end)

    it("reads an event-stream answer, skipping priming events and notifications", function()
      local fake = Fake.new():will_handshake()
        :will_stream({ "id: prime-1\ndata:\n\n",
          'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n',
          Fake.sse_result(text_result("framed: hello"), "e1") })
      local out = assert(connect(fake):call_tool("t"))
      assert.equal("framed: hello", out.text)
    end)

    it("reads the same stream split at every byte boundary", function()
      local events = { "id: prime-1\ndata:\n\n", ": comment\r\n",
        'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\r\n\r\n',
        'event: message\rid: e1\rdata: {"jsonrpc":"2.0","id":%ID%,\rdata: "result":{"content":'
          .. '[{"type":"text","text":"caf\xc3\xa9 \xf0\x9f\x98\x80"}]}}\r\r' }
      for size = 1, 40 do
        local fake = Fake.new():will_handshake():will_stream(events, { chunk = size })
        local out = assert(connect(fake):call_tool("t"))
        assert.equal("caf\xc3\xa9 \xf0\x9f\x98\x80", out.text)
      end
    end)
  end)

  describe("ping", function()
    it("reports the handshake: revision and server, labelled", function()
      local fake = Fake.new():will_handshake(nil, "2025-03-26", { name = "Conformance MCP", version = "9.9" })
      local report = assert(connect(fake):ping())
      assert.is_true(report.reachable)
      assert.equal("2025-03-26", report.protocol_version)
      assert.equal("Conformance MCP", report.server_name)
      assert.equal("9.9", report.server_version)
      assert.same({ "initialize", "notifications/initialized" }, fake:methods())
    end)

    it("clips and control-strips what the server says about itself", function()
      local fake = Fake.new():will_handshake(nil, nil,
        { name = string.rep("a", 500), version = "1.0\nX-Injected: yes\27[31m" })
      local report = assert(connect(fake):ping())
      assert.equal(101, utf8.len(report.server_name))
      assert.equal("1.0 X-Injected: yes [31m", report.server_version)
    end)

    it("pings an existing session with the MCP ping request", function()
      local fake = Fake.new():will_handshake("s"):will_return(page {}):will_return {}
      local conn = connect(fake)
      assert(conn:list_tools())
      assert(conn:ping())
      assert.equal("ping", fake:methods()[4])
    end)
  end)

  describe("one budget per operation", function()
    local function granted(durations, op)
      local fake = Fake.new():will_handshake():will_return(text_result("x")):will_return(page {})
      fake:take(table.unpack(durations))
      local conn = connect(fake)
      local result = table.pack((op or conn.call_tool)(conn, "t"))
      return fake:granted_timeouts(), fake, result
    end

    it("grants each leg what is left, in milliseconds", function()
      assert.same({ 20000, 20000, 20000 }, (granted {}))
      assert.same({ 20000, 16000, 14000 }, (granted { 4, 2, 1 }))
      assert.same({ 20000, 15000, 14000 }, (granted { 5, 1, 2 }))
      assert.same({ 20000, 1500, 300 }, (granted { 18.5, 1.2 }))
      assert.same({ 20000, 1000, 300 }, (granted { 19.0, 0.7 }))
    end)

    it("never grants 0 milliseconds", function()
      local timeouts = granted { 19.9999, 0.00005 }
      for _, t in ipairs(timeouts) do assert.is_true(t >= 1) end
    end)

    it("refuses a leg once the budget is spent, as its own outcome", function()
      local timeouts, fake, result = granted { 11, 10 }
      assert.same({ 20000, 9000 }, timeouts)
      assert.same({ "initialize", "notifications/initialized" }, fake:methods())
      local message, err = result[2], result[3]
      assert.equal("deadline", err.kind)
      assert.truthy(message:find("20-second operation budget", 1, true))
      assert.truthy(message:find('"srv"', 1, true))
      assert.truthy(message:find("the server was not asked", 1, true))
      assert.truthy(message:find("not a server that did not answer", 1, true))
      assert.falsy(message:lower():find("cancel", 1, true))
    end)

    it("gives the next operation a fresh budget", function()
      local fake = Fake.new():will_handshake():will_return(text_result("a")):will_return(text_result("b"))
      fake:take(8, 0, 9)
      local conn = connect(fake)
      assert(conn:call_tool("t"))
      assert(conn:call_tool("t"))
      assert.same({ 20000, 12000, 12000, 20000 }, fake:granted_timeouts())
    end)

    it("accepts a per-call budget in seconds, fractions allowed", function()
      local fake = Fake.new():will_handshake():will_return(text_result("a"))
      assert(connect(fake):call_tool("t", nil, { budget = 2.5 }))
      assert.same({ 2500, 2500, 2500 }, fake:granted_timeouts())
    end)

    it("never lets the connect timeout outlive the budget", function()
      local fake = Fake.new():will_handshake():will_return(text_result("a"))
      fake:take(0, 17)
      assert(connect(fake):call_tool("t"))
      assert.same({ 10000, 10000, 3000 }, (function()
        local l = {} for i, r in ipairs(fake.requests) do l[i] = r.connect_timeout_ms end return l end)())
    end)
  end)

  describe("health", function()
    it("records one contact per completed operation with the completing leg's latency", function()
      local fake = Fake.new():will_handshake():will_return(page({ "a" }, "p2")):will_return(page { "b" })
      fake:take(0.010, 0.001, 0.030, 0.042)
      local conn, contacts = connect(fake)
      assert(conn:list_tools())
      assert.same({ { identifier = "srv", latency_ms = 42 } }, contacts)
    end)

    it("records nothing for a failed operation", function()
      local fake = Fake.new():will_handshake():will_return(page({ "a" }, "p2")):will_return({ ["no tools"] = true })
      local conn, contacts = connect(fake)
      assert.is_nil(conn:list_tools())
      assert.same({}, contacts)
    end)

    it("records an isError answer: the tool failed, not the server", function()
      local fake = Fake.new():will_handshake():will_return(text_result("nope", true))
      local conn, contacts = connect(fake)
      assert(conn:call_tool("t"))
      assert.equal(1, #contacts)
    end)

    it("still answers when the recorder raises, and logs a warning", function()
      local fake = Fake.new():will_handshake():will_return(text_result("still answered"))
      local logged = {}
      local conn = connect(fake, {
        health = function() error("database is locked") end,
        log = function(level, message) logged[#logged + 1] = level .. ": " .. message end,
      })
      assert.equal("still answered", assert(conn:call_tool("t")).text)
      assert.equal(1, #logged)
      assert.truthy(logged[1]:find("liveness observation", 1, true))
    end)

    it("is required, and must be said explicitly", function()
      assert.has_error(function()
        mcp.connect { url = "https://x.example/rpc", identifier = "x" }
      end)
    end)
  end)

  describe("failures of the far side", function()
    local shapes = {
      { "500 JSON", function(f) f:will_return_raw("{}", 500) end, "http_status", "500" },
      { "302 JSON", function(f) f:will_return_raw("{}", 302) end, "http_status", "302" },
      { "401 JSON", function(f) f:will_return_raw("{}", 401) end, "http_status", "401" },
      { "RPC error", function(f) f:will_return_rpc_error(-32601, "Method not found") end, "rpc_error",
        "JSON-RPC error -32601: Method not found" },
      { "maintenance page", function(f) f:will_return_raw("<html>maintenance</html>", 200, "text/html") end,
        "content_type", '"text/html"' },
      { "stream with no message", function(f) f:will_return_raw(": ping\n\n", 200, "text/event-stream") end,
        "malformed", "carried no message" },
      { "stream with only a notification", function(f)
          f:will_return_raw('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n',
            200, "text/event-stream")
        end, "malformed", "carried no response" },
      { "neither result nor error", function(f) f:will_return_raw('{"jsonrpc":"2.0","id":%ID%}') end,
        "malformed", "neither a result nor an error" },
      { "empty body", function(f) f:will_return_raw("") end, "malformed", "empty body with status 200" },
      { "202 to a request", function(f) f:will_return_raw("", 202) end, "malformed", "empty body with status 202" },
      { "blanks only", function(f) f:will_return_raw(" \t\r\n ") end, "malformed", "empty body with status 200" },
      { "blanks JSON does not know", function(f) f:will_return_raw("\v\f ") end, "malformed",
        "empty body with status 200" },
      { "blanks before a broken value", function(f) f:will_return_raw("  \v{") end, "malformed", "invalid JSON" },
      { "dead connection", function(f) f:will_fail("transport", "cURL error 28: Operation timed out") end,
        "transport", "could not be reached: cURL error 28" },
      { "invalid JSON", function(f) f:will_return_raw("{ broken") end, "malformed", "invalid JSON" },
      { "duplicate keys", function(f) f:will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{},"result":{}}') end,
        "malformed", "duplicate" },
      { "a JSON scalar", function(f) f:will_return_raw("42") end, "malformed", "not a JSON object" },
    }
    for _, shape in ipairs(shapes) do
      local label, script, kind, fragment = shape[1], shape[2], shape[3], shape[4]
      it(label .. " -> " .. kind .. ", naming the server, no contact", function()
        local fake = Fake.new():will_handshake()
        script(fake)
        local conn, contacts = connect(fake)
        local ok, message, err = conn:call_tool("t")
        assert.is_nil(ok)
        assert.equal(kind, err.kind)
        assert.equal("srv", err.server)
        assert.truthy(message:find('"srv"', 1, true), message)
        assert.truthy(message:find(fragment, 1, true), message)
        assert.same({}, contacts)
      end)
    end

    it("never repeats a response body and clips remote text", function()
      local secret_body = '{"jsonrpc":"2.0","id":%ID%,"error":{"code":1,"message":"first line\\nsecond line '
        .. string.rep("z", 5000) .. '"},"data":"BODY-ONLY-TEXT"}'
      local fake = Fake.new():will_handshake():will_return_raw(secret_body)
      local _, message = connect(fake):call_tool("t")
      assert.truthy(message:find("first line second line", 1, true))
      assert.falsy(message:find("\n", 1, true))
      assert.falsy(message:find("BODY-ONLY-TEXT", 1, true))
      assert.is_true(utf8.len(message) < 500)
    end)

    it("refuses a response larger than the read cap with a short message", function()
      local huge = '{"jsonrpc":"2.0","id":%ID%,"result":{"content":[{"type":"text","text":"'
        .. string.rep("x", 3 * 1024 * 1024) .. '"}]}}'
      local fake = Fake.new():will_handshake():will_return_raw(huge)
      local ok, message, err = connect(fake):call_tool("t")
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find('"srv"', 1, true))
      assert.is_true(#message < 1000)
    end)

    it("reports a leg that ran out of time as a timeout that names the budget", function()
      local fake = Fake.new():will_handshake():will_hang(0.5)
      local ok, message, err = connect(fake):call_tool("t", nil, { budget = 3 })
      assert.is_nil(ok)
      assert.equal("timeout", err.kind)
      assert.truthy(message:find("3-second operation budget", 1, true))
    end)

    it("fails the handshake when initialized is refused, and initializes afresh next time", function()
      local fake = Fake.new():will_handshake("s"):will_handshake("s2"):will_return(page {})
      local refuse = true
      local send = fake.send
      fake.send = function(self, req)
        if refuse and req.body and req.body:find("notifications/initialized", 1, true) then
          refuse = false
          return { status = 500, headers = {}, body = "", duration_ms = 1 }
        end
        return send(self, req)
      end
      local conn = connect(fake)
      local ok, _, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal(500, err.status)
      assert(conn:list_tools())
      -- the refused notification never reached the fake (the override answered it)
      assert.same({ "initialize", "initialize", "notifications/initialized", "tools/list" }, fake:methods())
      assert.equal("s2", fake.requests[4].session)
    end)
  end)

  describe("cancellation", function()
    it("aborts a call in flight, tells the server, and says the server may have acted", function()
      local fake = Fake.new():will_handshake("s"):will_hang(0.01)
      local polls = 0
      local cancel = function() polls = polls + 1; return polls > 5 end
      local conn, contacts = connect(fake)
      local ok, message, err = conn:call_tool("slow", { n = 1 }, { cancel = cancel })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.truthy(message:find("may already have acted", 1, true))
      local notice = fake.requests[#fake.requests]
      assert.equal("notifications/cancelled", notice.method)
      assert.equal(fake.requests[3].id, notice.body.params.requestId)
      assert.equal("s", notice.session)
      assert.same({}, contacts)
      assert.equal(1, #(function() local l = {} for _, m in ipairs(fake:methods()) do
        if m == "tools/call" then l[#l + 1] = m end end return l end)())
    end)

    it("never sends notifications/cancelled for initialize", function()
      local fake = Fake.new():will_hang(0.01)
      local ok, _, err = connect(fake):call_tool("t", nil, { cancel = function() return true end })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.same({}, fake:methods())
      fake = Fake.new():will_hang(0.01)
      local n = 0
      ok, _, err = connect(fake):call_tool("t", nil, { cancel = function() n = n + 1; return n > 2 end })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.same({ "initialize" }, fake:methods())
    end)

    it("passes the hook to the leg so it is polled during the transfer", function()
      local seen
      local fake = Fake.new():will_handshake():will(function(req, record)
        seen = req.cancel
        return { status = 200, headers = { ["content-type"] = "application/json" }, duration_ms = 1,
          body = '{"jsonrpc":"2.0","id":' .. record.id .. ',"result":{"content":[]}}' }
      end)
      local polls = 0
      local hook = function() polls = polls + 1; return false end
      assert(connect(fake):call_tool("t", nil, { cancel = hook }))
      -- the leg's hook asks the operation's (and fires by itself once the connection closes)
      local before = polls
      assert.is_false(seen())
      assert.equal(before + 1, polls)
    end)
  end)

  describe("event-stream resumption", function()
    it("resumes with GET and Last-Event-ID after the retry interval, and takes the answer there", function()
      local fake = Fake.new():will_handshake("s")
        :will_stream { "id: event-1\nretry: 50\ndata:\n\n" }
        :will_stream { Fake.sse_result(text_result("resumed"), "event-2") }
      local conn = connect(fake)
      local out = assert(conn:call_tool("test_reconnection"))
      assert.equal("resumed", out.text)
      local get = fake.requests[4]
      assert.equal("GET", get.http_method)
      assert.equal("event-1", get.last_event_id)
      assert.equal("s", get.session)
      assert.equal("text/event-stream", get.accept)
    end)

    it("resumes a stream whose connection broke after an event id", function()
      local fake = Fake.new():will_handshake("s")
        :will(function(req)
          req.on_stream("id: e-7\nretry: 10\ndata:\n\n")
          return nil, "interrupted", "Connection reset by peer"
        end)
        :will_stream { Fake.sse_result(text_result("after the reset"), "e-8") }
      local out = assert(connect(fake):call_tool("t"))
      assert.equal("after the reset", out.text)
      assert.equal("e-7", fake.requests[4].last_event_id)
    end)

    -- Any byte of an event stream means the server accepted the request: a
    -- loss after it is "interrupted" (the server may have acted), never sent again.
    it("reports a connection that broke before any event id as interrupted, and sends nothing again", function()
      local fake = Fake.new():will_handshake("s"):will(function(req)
        req.on_stream(": just a comment\n\n")
        return nil, "transport", "Connection reset by peer"
      end)
      local ok, message, err = connect(fake):call_tool("t")
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
      assert.truthy(message:find("may have acted on it", 1, true), message)
      assert.equal(3, #fake.requests)
    end)

    it("gives up after two resumptions: interrupted", function()
      local fake = Fake.new():will_handshake("s")
      for i = 1, 4 do fake:will_stream { "id: e" .. i .. "\nretry: 1\ndata:\n\n" } end
      local ok, _, err = connect(fake):call_tool("t")
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
      assert.same({ "initialize", "notifications/initialized", "tools/call", "GET", "GET" }, fake:methods())
    end)

    it("does not wait past the budget for a retry interval: interrupted, not 'the server was not asked'", function()
      local fake = Fake.new():will_handshake("s"):will_stream { "id: e1\nretry: 60000\ndata:\n\n" }
      local ok, _, err = connect(fake):call_tool("t", nil, { budget = 5 })
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
    end)
  end)

  describe("credentials", function()
    it("resolves env: references per leg and places them as a bearer token", function()
      local fake = Fake.new():will_handshake():will_return(text_result("x"))
      local resolved = 0
      local conn = connect(fake, { auth = { credential = "vault:docs" },
        resolver = function(ref) resolved = resolved + 1; return ref == "vault:docs" and "s3cr3t" or nil end })
      assert(conn:call_tool("t"))
      assert.equal(3 + fake.probes, resolved) -- once per leg, the era probe included
      for _, r in ipairs(fake.requests) do
        assert.equal("Authorization: Bearer s3cr3t", r.secret_header)
        for _, h in ipairs(r.headers) do assert.falsy(h:find("s3cr3t", 1, true)) end
      end
    end)

    it("places a secret in a named header", function()
      local fake = Fake.new():will_handshake():will_return(text_result("x"))
      local conn = connect(fake, { auth = { placement = "header", header_name = "X-Api-Key", credential = "k" },
        resolver = function() return "abc" end })
      assert(conn:call_tool("t"))
      assert.equal("X-Api-Key: abc", fake.requests[1].secret_header)
    end)

    it("fails closed when the reference does not resolve: nothing is sent", function()
      local fake = Fake.new():will_handshake():will_return(text_result("x"))
      local conn = connect(fake, { auth = { credential = "env:MCPCLIENT_SURELY_UNSET_VARIABLE" } })
      local ok, message, err = conn:call_tool("t")
      assert.is_nil(ok)
      assert.equal("credential", err.kind)
      assert.truthy(message:find('"srv"', 1, true))
      assert.same({}, fake.requests)
    end)

    it("never puts the secret in a failure message", function()
      local fake = Fake.new():will_handshake():will_return_rpc_error(1, "token s3cr3t rejected")
      local conn = connect(fake, { auth = { credential = "k" }, resolver = function() return "s3cr3t" end })
      local _, message, err = conn:call_tool("t")
      assert.equal("rpc_error", err.kind)
      -- the server echoed it: that text is remote and is shown clipped, but our own
      -- messages never add the secret; check a transport failure too
      assert.truthy(message)
      fake = Fake.new():will_fail("transport", "connection reset")
      conn = connect(fake, { auth = { credential = "k" }, resolver = function() return "s3cr3t" end })
      _, message = conn:call_tool("t")
      assert.falsy(message:find("s3cr3t", 1, true))
    end)

    it("refuses unknown placements as misuse", function()
      assert.has_error(function()
        connect(Fake.new(), { auth = { placement = "query", credential = "k" } })
      end)
    end)
  end)

  describe("host gate", function()
    it("checks the host before any credential is resolved and pins the checked address", function()
      local fake = Fake.new { address = "169.254.169.254" }
      local resolved = 0
      local conn = connect(fake, { auth = { credential = "k" },
        resolver = function() resolved = resolved + 1; return "x" end })
      local ok, message, err = conn:call_tool("t")
      assert.is_nil(ok)
      assert.equal("refused_host", err.kind)
      assert.equal('MCP server "srv" points at host "mcp.example.com", which outbound requests are not '
        .. "allowed to reach.", message)
      assert.equal(0, resolved)
      assert.same({}, fake.requests)

      fake = Fake.new():will_handshake():will_return(text_result("x"))
      assert(connect(fake):call_tool("t"))
      assert.equal("mcp.example.com:443:203.0.113.10", fake.requests[1].pin)
      assert.same({ "mcp.example.com" }, fake.resolved)
    end)

    it("pins every address the gate allows, in the resolver's order, and only those", function()
      local fake = Fake.new { addresses = { "169.254.169.254", "2001:db8::7", "203.0.113.10", "fe80::1" } }
      fake:will_handshake():will_return(text_result("x"))
      assert(connect(fake):call_tool("t"))
      for _, r in ipairs(fake.requests) do
        assert.equal("mcp.example.com:443:[2001:db8::7],203.0.113.10", r.pin)
      end

      local asked = {}
      fake = Fake.new { addresses = { "203.0.113.10", "203.0.113.11" } }:will_handshake()
      connect(fake, { host_gate = function(host, address)
        asked[#asked + 1] = host .. " " .. address
        return address == "203.0.113.11"
      end }):ping()
      assert.same({ "mcp.example.com 203.0.113.10", "mcp.example.com 203.0.113.11" }, asked)
      assert.equal("mcp.example.com:443:203.0.113.11", fake.requests[1].pin)
    end)

    it("asks the predicate about an IP literal too, and pins nothing for it", function()
      local fake = Fake.new():will_handshake()
      local asked
      assert(connect(fake, { url = "http://[2001:db8::9]:8080/mcp",
        host_gate = function(host, address) asked = host .. " " .. address; return true end }):ping())
      assert.equal("2001:db8::9 2001:db8::9", asked)
      assert.is_nil(fake.requests[1].pin)
      assert.same({}, fake.resolved)
      local _, _, err = connect(Fake.new(), { url = "http://169.254.169.254/mcp" }):ping()
      assert.equal("refused_host", err.kind)
    end)

    it("refuses private and loopback ranges when asked to", function()
      local fake = Fake.new { address = "10.1.2.3" }
      local _, _, err = connect(fake, { refuse_private = true }):call_tool("t")
      assert.equal("refused_host", err.kind)
      fake = Fake.new { address = "10.1.2.3" }:will_handshake():will_return(text_result("x"))
      assert(connect(fake):call_tool("t"))
    end)

    it("takes a predicate of the host's own", function()
      local fake = Fake.new()
      local _, _, err = connect(fake, { host_gate = function() return false end }):call_tool("t")
      assert.equal("refused_host", err.kind)
    end)

    it("accepts only http and https URLs, without user information", function()
      for _, url in ipairs { "ftp://x.example/", "file:///etc/passwd", "https://user:pw@x.example/", "nonsense" } do
        assert.has_error(function() connect(Fake.new(), { url = url }) end)
      end
    end)
  end)

  describe("misuse raises", function()
    it("rejects unknown options and wrong types", function()
      assert.has_error(function() connect(Fake.new(), { bogus = 1 }) end, 'connect: unknown option "bogus"')
      assert.has_error(function() connect(Fake.new(), { budget = "20" }) end)
      assert.has_error(function() connect(Fake.new(), { budget = 0 }) end)
      assert.has_error(function() connect(Fake.new(), { identifier = "has space" }) end)
      local conn = connect(Fake.new())
      assert.has_error(function() conn:call_tool(42) end)
      assert.has_error(function() conn:call_tool("t", "args") end)
      assert.has_error(function() conn:call_tool("t", mcp.json.array { 1 }) end)
      assert.has_error(function() conn:call_tool("t", {}, { timeout = 1 }) end)
    end)

    it("raises for a list given as a call's arguments, and sends nothing", function()
      local fake = Fake.new()
      local conn = connect(fake)
      local lists = { mcp.json.array {}, mcp.json.array { 1 }, { 1, 2 }, { "a", b = 1 }, { [3] = true } }
      for _, args in ipairs(lists) do
        assert.has_error(function() conn:call_tool("t", args) end,
          "call_tool: arguments must be a table of named arguments (a JSON object), not a list")
      end
      assert.equal(0, #fake.requests)
    end)

    it("turns unencodable arguments into a clear failure, not a crash", function()
      local fake = Fake.new():will_handshake()
      local ok, message, err = connect(fake):call_tool("t", { x = 0 / 0 })
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("could not be encoded", 1, true))
    end)
  end)

  describe("one failure value", function()
    -- Record every err of `kind` errors.fail makes while fn runs (it hands
    -- each new err to its kind's message builder).
    local function made_during(kind, fn)
      local spec = require("mcpclient.errors").KINDS[kind]
      local original, made = spec.message, {}
      spec.message = function(err)
        made[#made + 1] = err
        return original(err)
      end
      local ok, results = pcall(function() return table.pack(fn()) end)
      spec.message = original
      assert(ok, results)
      return made, results
    end

    it("hands the cancellation made below to the caller of call_tool: the same table, made once", function()
      local fake = Fake.new():will_handshake("s"):will_hang(0.01)
      local n = 0
      local conn = connect(fake)
      local made, r = made_during("cancelled", function()
        -- polled before the era probe, initialize, initialized and the call, then while it hangs
        return conn:call_tool("t", {}, { cancel = function() n = n + 1; return n > 4 end })
      end)
      assert.is_nil(r[1])
      assert.equal(1, #made)
      assert.equal(made[1], r[3])
      assert.same({ kind = "cancelled", server = "srv", in_flight = true, message = r[2] }, r[3])
      assert.equal("notifications/cancelled", fake.requests[#fake.requests].method)
    end)

    it("hands a remote failure to the caller unchanged", function()
      local fake = Fake.new():will_handshake():will_return_rpc_error(-32000, "no such page")
      local conn = connect(fake)
      local made, r = made_during("rpc_error", function() return conn:call_tool("t") end)
      assert.equal(1, #made)
      assert.equal(made[1], r[3])
      assert.equal("rpc_error", r[3].kind)
      assert.equal(-32000, r[3].rpc_code)
    end)

    it("gives latencies in whole milliseconds everywhere", function()
      local fake = Fake.new():take(0.0104, 0, 0.0126, 0.0031):will_handshake("s")
        :will_return(text_result("x")):will_return({})
      local conn = connect(fake)
      assert.equal(13, assert(conn:call_tool("t")).latency_ms)
      assert.equal(3, assert(conn:ping()).latency_ms)
      assert.equal("integer", math.type(assert(conn:ping() or { latency_ms = 0 }).latency_ms))
    end)
  end)

  describe("nothing is sent twice once the server may have acted", function()
    it("ends with interrupted when the resumption GET finds the session gone (404): one tools/call", function()
      local fake = Fake.new():will_handshake("s")
        :will_stream { "id: prime-1\nretry: 50\ndata:\n\n" }
        :will_return_raw('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}', 404)
      local ok, message, err = connect(fake):call_tool("write")
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
      assert.truthy(message:find("may have acted on it", 1, true), message)
      assert.same({ "initialize", "notifications/initialized", "tools/call", "GET" }, fake:methods())
    end)

    it("ends with interrupted when the leg lost the connection after the request left", function()
      local fake = Fake.new():will_handshake("s"):will_fail("interrupted", "Empty reply from server")
      local ok, message, err = connect(fake):call_tool("write")
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
      assert.is_nil(message:find("could not be reached", 1, true), message)
      assert.same({ "initialize", "notifications/initialized", "tools/call" }, fake:methods())
    end)

    it("still re-initializes and resends when the server refused the POST itself (404)", function()
      local fake = Fake.new():will_handshake("s")
        :will_return_raw('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}', 404)
        :will_handshake("t"):will_return(text_result("ran once"))
      assert.equal("ran once", assert(connect(fake):call_tool("write")).text)
      assert.same({ "initialize", "notifications/initialized", "tools/call", "initialize",
        "notifications/initialized", "tools/call" }, fake:methods())
    end)
  end)

  describe("server requests on a response stream", function()
    it("answers a ping with {} and any other request with method not found, at once; notifications pass", function()
      local fake = Fake.new():will_handshake("s"):will_stream {
        'data: {"jsonrpc":"2.0","id":"p-1","method":"ping"}\n\n',
        'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n',
        'data: {"jsonrpc":"2.0","id":9,"method":"roots/list"}\n\n',
        Fake.sse_result(text_result("done")),
      }
      local conn = connect(fake)
      assert.equal("done", assert(conn:call_tool("t")).text)
      local answers = {}
      for _, r in ipairs(fake.requests) do
        if r.body and r.body.method == nil and r.body.id ~= nil then answers[#answers + 1] = r end
      end
      assert.equal(2, #answers)
      assert.equal("p-1", answers[1].body.id)
      assert.truthy(answers[1].raw:find('"result":{}', 1, true), answers[1].raw)
      assert.equal("s", answers[1].session)
      assert.equal(9, answers[2].body.id)
      assert.equal(-32601, answers[2].body.error.code)
    end)
  end)

  describe("log notices (on_log)", function()
    local function notice(params)
      local message = { jsonrpc = "2.0", method = "notifications/message", params = params }
      return "data: " .. mcp.json.encode(message) .. "\n\n"
    end

    it("hands each notifications/message on the call's stream to on_log, in order, under the text rule", function()
      local deep = { a = { b = { c = { d = { e = { f = { g = { h = { i = "too deep" } } } } } } } } }
      local wide = {}
      for i = 1, 100 do wide[string.format("k%03d", i)] = i end
      local fake = Fake.new():will_handshake("s"):will_stream {
        notice { level = "info", logger = "db\27]0;x\7", data = "connected\27[2J" },
        notice { level = "warning", data = { text = "slow\226\128\174 query", ms = 1200, ok = false,
          list = mcp.json.array { "a\n", 2 } } },
        notice { level = "trace\27", data = deep },
        notice { data = wide },
        notice "not an object",
        Fake.sse_result(text_result("done")),
        notice { level = "debug", data = "after the answer is never read" },
      }
      local seen = {}
      local conn = connect(fake, { on_log = function(level, logger, data)
        seen[#seen + 1] = { level = level, logger = logger, data = data }
      end })
      assert.equal("done", assert(conn:call_tool("t")).text)
      assert.equal(4, #seen)
      assert.same({ level = "info", logger = "db ]0;x", data = "connected [2J" }, seen[1])
      assert.equal("warning", seen[2].level)
      assert.same({ text = "slow  query", ms = 1200, ok = false, list = { "a", 2 } }, seen[2].data)
      assert.is_true(mcp.json.is_array(seen[2].data.list))
      -- a level no server should send arrives as clipped text; nesting past 8 levels is cut
      assert.equal("trace", seen[3].level)
      assert.equal("…", seen[3].data.a.b.c.d.e.f.g.h)
      -- no level: nil; at most 64 entries of an object, the first by name
      assert.is_nil(seen[4].level)
      local n = 0
      for _ in pairs(seen[4].data) do n = n + 1 end
      assert.equal(64, n)
      assert.equal(1, seen[4].data.k001)
      assert.is_nil(seen[4].data.k065)
    end)

    it("drops log notices when no on_log is given, and checks the option's type", function()
      local fake = Fake.new():will_handshake("s"):will_stream {
        notice { level = "info", data = "x" }, Fake.sse_result(text_result("done")) }
      assert.equal("done", assert(connect(fake):call_tool("t")).text)
      assert.has_error(function() connect(Fake.new(), { on_log = "yes" }) end,
        "on_log must be a function, not a string")
    end)

    it("lets a raise of on_log reach the caller (a host bug, never swallowed)", function()
      local fake = Fake.new():will_handshake("s"):will_stream {
        notice { level = "info", data = "x" }, Fake.sse_result(text_result("done")) }
      local conn = connect(fake, { on_log = function() error("host bug", 0) end })
      assert.has_error(function() conn:call_tool("t") end, "host bug")
    end)
  end)

  describe("messages carry no raw operator input", function()
    it("never repeats an env: reference that is not a variable name", function()
      local fake = Fake.new()
      local conn = connect(fake, { auth = { credential = "env:X\n\27[31mY" } })
      local ok, message, err = conn:ping()
      assert.is_nil(ok)
      assert.equal("credential", err.kind)
      assert.is_nil(message:find("[%c\127]"), message)
      assert.is_nil(message:find("31mY", 1, true), message)
      assert.same({}, fake:methods())
    end)
  end)

  describe("what a server sends never raises", function()
    for name, id in pairs { cr = "abc\rdef", lf = "abc\nX-Injected: 1", ctl = "a\1b", del = "a\127b", space = "a b" } do
      it("refuses a session id holding " .. name .. " at the handshake (malformed)", function()
        local fake = Fake.new():will_handshake(id):will_handshake(id)
        local conn = connect(fake)
        for _ = 1, 2 do
          local ok, out, message, err = pcall(conn.ping, conn)
          assert.is_true(ok, tostring(out))
          assert.is_nil(out)
          assert.equal("malformed", err.kind)
          assert.is_nil(message:find(id, 1, true))
        end
        assert.same({ "initialize", "initialize" }, fake:methods())
      end)
    end
  end)

  describe("an event id that cannot go back in a header", function()
    for name, id in pairs { control = "e\1x", del = "e\127", utf8 = "é", long = string.rep("e", 1025) } do
      it("is not resumed (" .. name .. "): interrupted, no GET, no raise", function()
        local fake = Fake.new():will_handshake("s"):will_stream { "id: " .. id .. "\nretry: 1\ndata:\n\n" }
        -- held until the wire is read: a connection the collector takes ends its session (DELETE)
        local conn = connect(fake)
        local ok, out, _, err = pcall(function() return conn:call_tool("t") end)
        assert.is_true(ok, tostring(out))
        assert.is_nil(out)
        assert.equal("interrupted", err.kind)
        assert.same({ "initialize", "notifications/initialized", "tools/call" }, fake:methods())
        conn:close()
      end)
    end
  end)

  describe("the tools/list walk is bounded as a whole", function()
    local function pages_of(n_pages, per_page)
      local fake = Fake.new():will_handshake()
      local names = {}
      for i = 1, per_page do names[i] = "t" .. i end
      for p = 1, n_pages do fake:will_return(page(names, p < n_pages and ("c" .. p) or nil)) end
      return fake
    end

    it("fails once the pages together carry more than MAX_LISTED_TOOLS entries", function()
      local per_page = 2600
      local fake = pages_of(4, per_page)
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("10000 tools", 1, true), message)
      assert.equal(10000, require("mcpclient.connection").MAX_LISTED_TOOLS)
    end)

    it("fails once the pages together carry more than MAX_LISTED_BYTES", function()
      local fake = Fake.new():will_handshake()
      local description = string.rep("d", 1900 * 1024)
      for p = 1, 6 do
        fake:will_return({ tools = mcp.json.array { { name = "t" .. p, description = description } },
          nextCursor = "c" .. p })
      end
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("8388608 bytes", 1, true), message)
      local lists = 0
      for _, m in ipairs(fake:methods()) do if m == "tools/list" then lists = lists + 1 end end
      assert.equal(5, lists) -- 5 x 1.9 MiB is the first sum over 8 MiB
    end)

    it("fails once the pages together open more than MAX_LISTED_CONTAINERS objects and arrays", function()
      local fake = Fake.new():will_handshake()
      local nested = mcp.json.array {}
      for i = 1, 40000 do nested[i] = {} end
      for p = 1, 5 do
        fake:will_return({ tools = mcp.json.array { { name = "t" .. p, x = nested } }, nextCursor = "c" .. p })
      end
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find("objects and arrays across its pages", 1, true), message)
      local lists = 0
      for _, m in ipairs(fake:methods()) do if m == "tools/list" then lists = lists + 1 end end
      assert.equal(4, lists) -- 4 x 40 004 is the first sum over 131 072
    end)

    it("lists 4 900 tools in 49 pages", function()
      local tools = assert(connect(pages_of(49, 100)):list_tools())
      assert.equal(4900, #tools)
    end)
  end)
end)
