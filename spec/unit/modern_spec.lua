-- The 2026-07-28 era over the fake leg: era negotiation (discover, the modern retry, the fallback to
-- initialize), the wire of a modern request (headers, envelope), resultType, the freshness hint,
-- error bodies, ping in both eras, cancellation without a notice, no resumption.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"
local modern = require("mcpclient.era.2026_07_28").wire
local era = require "mcpclient.era"
local core = require "mcpclient.core"

local function connect(fake, extra)
  local options = {
    url = "https://mcp.example.com/rpc", identifier = "srv",
    transport = fake, clock = fake.clock, health = mcp.health.memory(),
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return fake:hold(mcp.connect(options))
end

local META = {
  ["io.modelcontextprotocol/serverInfo"] = { name = "Modern Fake", version = "2.0" },
}

local function discovered(versions)
  return { supportedVersions = mcp.json.array(versions or { "2026-07-28" }), capabilities = { tools = {} },
    resultType = "complete", ttlMs = 60000, cacheScope = "public", _meta = META }
end

local function page(names, extra)
  local tools = mcp.json.array {}
  for i, name in ipairs(names) do tools[i] = { name = name, inputSchema = { type = "object" } } end
  local result = { tools = tools, resultType = "complete" }
  for k, v in pairs(extra or {}) do result[k] = v end
  return result
end

local function text_result(text)
  return { content = { { type = "text", text = text } }, resultType = "complete" }
end

-- A 4xx JSON-RPC error body, as the official v2 SDK sends it.
local function refusal(status, code, message, data)
  return mcp.json.encode { jsonrpc = "2.0", id = 1, error = { code = code, message = message, data = data } }, status
end

local function header(r, name) return Fake.header(r, name) end

describe("the 2026-07-28 era", function()
  describe("negotiation", function()
    it("discovers first, then speaks modern with no initialize, no session and no DELETE", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(page { "a" })
        :will_return(text_result("one"))
      local conn = connect(fake)
      assert.equal(1, #assert(conn:list_tools()))
      assert(conn:call_tool("a", {}))
      assert.same({ era = "modern", protocol_version = "2026-07-28", capabilities = { tools = {} },
        server_info = META["io.modelcontextprotocol/serverInfo"], transport = "http" }, conn:server())
      conn:close()
      assert.same({ "server/discover", "tools/list", "tools/call" }, fake:methods())
    end)

    it("falls back to initialize when the probe's 400 carries no modern error", function()
      local fake = Fake.new():will_handshake("s-1"):will_return { tools = mcp.json.array {} }
      local conn = connect(fake)
      local tools, listing = assert(conn:list_tools())
      assert.same({}, tools)
      assert.equal(1, fake.probes)
      assert.same({ "initialize", "notifications/initialized", "tools/list" }, fake:methods())
      assert.same({ era = "legacy", schemas = "tables" }, listing)
      assert.equal("legacy", conn:server().era)
    end)

    it("falls back on a JSON-RPC error that is no modern one (method not found, status 200)", function()
      local fake = Fake.new { modern = true }:will_return_rpc_error(-32601, "Method not found")
        :will_handshake():will_return { tools = mcp.json.array {} }
      assert(connect(fake):list_tools())
      assert.same({ "server/discover", "initialize", "notifications/initialized", "tools/list" }, fake:methods())
    end)

    it("finds the era once per connection", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("1"))
        :will_return(text_result("2"))
      local conn = connect(fake)
      assert(conn:call_tool("a"))
      assert(conn:call_tool("a"))
      assert.same({ "server/discover", "tools/call", "tools/call" }, fake:methods())
    end)

    it("a recognised modern error means modern: it is not taken for a 2025 server", function()
      local fake = Fake.new { modern = true }:will_return_raw(refusal(400, -32020, "Header mismatch"))
      local ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("http_status", err.kind)
      assert.equal(-32020, err.rpc_code)
      assert.equal("Header mismatch", err.detail)
      assert.truthy(message:find("JSON-RPC error -32020: Header mismatch", 1, true), message)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("an unsupported version naming a 2025 revision leads to initialize (auto)", function()
      local fake = Fake.new { modern = true }
        :will_return_raw(refusal(400, -32022, "Unsupported protocol version",
          { supported = mcp.json.array { "2025-11-25" }, requested = "2026-07-28" }))
        :will_handshake():will_return { tools = mcp.json.array {} }
      assert(connect(fake):list_tools())
      assert.same({ "server/discover", "initialize", "notifications/initialized", "tools/list" }, fake:methods())
    end)

    it("a supported list with nothing in common is a clear failure, nothing retried", function()
      local fake = Fake.new { modern = true }
        :will_return_raw(refusal(400, -32022, "Unsupported protocol version",
          { supported = mcp.json.array { "2030-01-01", "1999-01-01" }, requested = "2026-07-28" }))
      local ok, message, err = connect(fake):call_tool("a")
      assert.is_nil(ok)
      assert.equal("protocol_version", err.kind)
      assert.equal("2026-07-28", err.requested)
      assert.equal("2030-01-01, 1999-01-01", err.offered)
      assert.equal(-32022, err.rpc_code)
      assert.truthy(message:find('does not speak protocol revision "2026-07-28"; it names 2030-01-01, 1999-01-01',
        1, true), message)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("a refusal naming the very revision sent is answered by one more discovery with it, never a third", function()
      local function unsupported()
        return refusal(400, -32022, "Unsupported protocol version",
          { supported = mcp.json.array { "2026-07-28" }, requested = "2026-07-28" })
      end
      local fake = Fake.new { modern = true }:will_return_raw(unsupported())
        :will_return(discovered()):will_return(page { "a" })
      assert(connect(fake, { protocol = "2026-07-28" }):list_tools())
      assert.same({ "server/discover", "server/discover", "tools/list" }, fake:methods())
      fake = Fake.new { modern = true }:will_return_raw(unsupported()):will_return_raw(unsupported())
      local ok, _, err = connect(fake, { protocol = "2026-07-28" }):list_tools()
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.same({ "server/discover", "server/discover" }, fake:methods())
    end)

    it("strips control characters from the revisions a server names before they reach err or a message", function()
      local fake = Fake.new { modern = true }
        :will_return_raw(refusal(400, -32022, "Unsupported protocol version",
          { supported = mcp.json.array { "2030\27[31m-01-01" }, requested = "2026\27]0;x\7-07-28" }))
      local _, message, err = connect(fake):call_tool("a")
      assert.equal("protocol_version", err.kind)
      for _, text in ipairs { message, err.offered, err.requested, err.offered_list[1] } do
        assert.is_nil(text:find("[%c]"), text)
      end
    end)

    it("a discover result naming no revision in common is a clear failure", function()
      local fake = Fake.new { modern = true }:will_return(discovered { "2031-02-02" })
      local ok, _, err = connect(fake, { protocol = "2026-07-28" }):ping()
      assert.is_nil(ok)
      assert.equal("protocol_version", err.kind)
      assert.equal("2031-02-02", err.offered)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("pinned to 2026-07-28, a 2025 server is a failure, not a fallback", function()
      local fake = Fake.new { modern = true }:will_return_raw(refusal(400, -32000, "Server not initialized"))
      local ok, _, err = connect(fake, { protocol = "2026-07-28" }):list_tools()
      assert.is_nil(ok)
      assert.equal("http_status", err.kind)
      assert.equal(400, err.status)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("pinned to 2025-11-25, never probes", function()
      local fake = Fake.new { modern = true }:will_handshake():will_return { tools = mcp.json.array {} }
      assert(connect(fake, { protocol = "2025-11-25" }):list_tools())
      assert.same({ "initialize", "notifications/initialized", "tools/list" }, fake:methods())
    end)

    it("pinned to 2025-11-25 against a modern-only server: protocol_version naming what it supports", function()
      local fake = Fake.new { modern = true }:will_return_raw(refusal(400, -32022, "Unsupported protocol version",
        { supported = mcp.json.array { "2026-07-28" }, requested = "2025-11-25" }))
      local ok, message, err = connect(fake, { protocol = "2025-11-25" }):list_tools()
      assert.is_nil(ok)
      assert.equal("protocol_version", err.kind)
      assert.equal("2026-07-28", err.offered)
      assert.truthy(message:find('does not speak protocol revision "2025-11-25"; it names 2026-07-28', 1, true))
    end)

    it("does not take a network or credential failure of the probe for the 2025 era", function()
      local fake = Fake.new { modern = true }:will_fail("transport", "Connection refused")
      local ok, _, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("transport", err.kind)
      fake = Fake.new { modern = true }:will_return_raw('{"error":"no"}', 401)
      ok, _, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal(401, err.status)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("a probe lost on the wire is a failure to reach the server: discovery never acts", function()
      local fake = Fake.new { modern = true }:will_fail("interrupted", "closed after sending")
      local ok, _, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("transport", err.kind)
      assert.same({ "server/discover" }, fake:methods())
    end)

    it("refuses an unknown protocol option", function()
      assert.has_error(function() connect(Fake.new(), { protocol = "2024-11-05" }) end,
        'connect: protocol must be "auto", "2026-07-28" or "2025-11-25"')
    end)
  end)

  describe("the wire", function()
    it("mirrors revision, method and name into headers and carries the envelope in every body", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x"))
      assert(connect(fake):call_tool("get_weather", { city = "Graz" }))
      for _, r in ipairs(fake.requests) do
        assert.equal("2026-07-28", r.protocol)
        assert.equal(r.method, header(r, "Mcp-Method"))
        assert.equal("", r.session)
        local meta = r.body.params._meta
        assert.equal("2026-07-28", meta["io.modelcontextprotocol/protocolVersion"])
        assert.same({}, meta["io.modelcontextprotocol/clientCapabilities"])
        assert.equal("mcpclient", meta["io.modelcontextprotocol/clientInfo"].name)
        assert.equal(mcp.version, meta["io.modelcontextprotocol/clientInfo"].version)
      end
      assert.is_nil(header(fake.requests[1], "Mcp-Name"))
      assert.equal("get_weather", header(fake.requests[2], "Mcp-Name"))
      assert.same({ city = "Graz" }, fake.requests[2].body.params.arguments)
    end)

    it("declares exactly the capabilities of the host's handlers in every envelope, as the handshake does", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(page { "a" })
        :will_return(text_result("x"))
      local conn = connect(fake, { on_elicitation = function() return { action = "decline" } end })
      assert(conn:list_tools())
      assert(conn:call_tool("a", {}))
      assert.equal(3, #fake.requests)
      for _, r in ipairs(fake.requests) do
        assert.same({ elicitation = { form = {}, url = {} } },
          r.body.params._meta["io.modelcontextprotocol/clientCapabilities"])
      end
      -- the encoded envelope holds an object, never an array, for each capability
      local declared = '"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}}}'
      assert.truthy(fake.requests[3].raw:find(declared, 1, true))
      -- the 2025 handshake declares it too
      local old = Fake.new():will_handshake("s"):will_return {}
      assert(connect(old, { on_elicitation = function() return { action = "decline" } end }):ping())
      assert.same({ elicitation = {} }, old.requests[1].body.params.capabilities)
    end)

    it("carries a name outside plain ASCII as =?base64?...?=", function()
      assert.equal("get_weather", modern.header_value("get_weather"))
      assert.equal("=?base64?SGVsbG8sIOS4lueVjA==?=", modern.header_value("Hello, 世界"))
      assert.equal("=?base64?IHBhZGRlZCA=?=", modern.header_value(" padded "))
      assert.equal("=?base64?bGluZTEKbGluZTI=?=", modern.header_value("line1\nline2"))
      assert.equal("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", modern.header_value("=?base64?literal?="))
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x"))
      assert(connect(fake):call_tool("grüße"))
      assert.equal("=?base64?Z3LDvMOfZQ==?=", header(fake.requests[2], "Mcp-Name"))
    end)

    it("reads serverInfo from the result's _meta and reports the era in ping", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(discovered())
      local conn = connect(fake)
      local report = assert(conn:ping())
      assert.equal("modern", report.era)
      assert.equal("2026-07-28", report.protocol_version)
      assert.equal("Modern Fake", report.server_name)
      report = assert(conn:ping())
      assert.equal("modern", report.era)
      assert.same({ "server/discover", "server/discover" }, fake:methods())
    end)

    it("pings a 2025 server with ping and reports the legacy era", function()
      local fake = Fake.new():will_handshake("s"):will_return {}
      local conn = connect(fake)
      assert.equal("legacy", assert(conn:ping()).era)
      assert.equal("legacy", assert(conn:ping()).era)
      assert.same({ "initialize", "notifications/initialized", "ping" }, fake:methods())
    end)
  end)

  describe("results", function()
    it("keeps the smallest ttlMs of a listing's pages and its cache scope", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return(page({ "a" }, { nextCursor = "p2", ttlMs = 30000, cacheScope = "public" }))
        :will_return(page({ "b" }, { ttlMs = 5000, cacheScope = "public" }))
      local tools, listing = assert(connect(fake):list_tools())
      assert.equal(2, #tools)
      assert.same({ era = "modern", schemas = "tables", ttl_ms = 5000, cache_scope = "public" }, listing)
    end)

    it("keeps each input schema by this era's rule in the kept form, on the first listing too", function()
      local schemas = {
        { name = "local_ref", inputSchema = { type = "object", ["$defs"] = { s = { type = "string" } },
          properties = { q = { ["$ref"] = "#/$defs/s" } } } },
        { name = "remote_ref", inputSchema = { type = "object", properties = { q = { ["$ref"] = "https://x/s" } } } },
      }
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return { tools = mcp.json.array(schemas), resultType = "complete" }
      local tools, listing = assert(connect(fake):list_tools { schemas = "kept" })
      assert.equal("kept", listing.schemas)
      -- the whole schema is carried (the 2025 rule would refuse $defs)
      local kept = assert(mcp.json.decode(tools[1].inputSchema))
      assert.same(schemas[1].inputSchema, kept)
      assert.equal(select(2, modern.normalise_schema(schemas[2].inputSchema)), tools[2].inputSchema.refused)
      assert.truthy(tools[2].inputSchema.refused:find("points outside the schema", 1, true))
    end)

    it("reads a missing or negative ttlMs as 0 (stale at once)", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(page({}, { ttlMs = -5 }))
      local _, listing = assert(connect(fake):list_tools())
      assert.same({ era = "modern", schemas = "tables", ttl_ms = 0 }, listing)
    end)

    it("takes a missing resultType as complete", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return { content = { { type = "text", text = "ok" } } }
      assert.equal("ok", assert(connect(fake):call_tool("a")).text)
    end)

    it("refuses a garbage resultType, sending nothing again", function()
      for _, garbage in ipairs { "partial", 7 } do
        local fake = Fake.new { modern = true }:will_return(discovered())
          :will_return { resultType = garbage, content = mcp.json.array {} }
        local ok, message, err = connect(fake):call_tool("a")
        assert.is_nil(ok)
        assert.equal("malformed", err.kind)
        assert.truthy(message:find("resultType", 1, true), message)
        assert.same({ "server/discover", "tools/call" }, fake:methods())
      end
    end)

    it("fails clearly on input_required without a handler, sending nothing again", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return {
        resultType = "input_required",
        inputRequests = { login = { method = "elicitation/create", params = { message = "who?" } } },
      }
      local ok, message, err = connect(fake):call_tool("a")
      assert.is_nil(ok)
      assert.equal("input_required", err.kind)
      assert.equal("elicitation/create", err.asked)
      assert.equal("tools/call", err.method)
      assert.truthy(message:find("no handler", 1, true), message)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    describe("input the server asks for (input_required)", function()
      local STATE = '{"nonce":"a\\u00e9b","n":1.50}  '   -- JSON-looking, odd spacing: echoed, never parsed
      local function asks(extra)
        local result = { resultType = "input_required", inputRequests = {
          confirm = { method = "elicitation/create", params = { message = "Sure?\27[31m", requestedSchema = {
            type = "object", properties = { ok = { type = "boolean" } } } } } } }
        for k, v in pairs(extra or {}) do result[k] = v end
        return result
      end
      local function confirm(seen)
        return function(request)
          seen[#seen + 1] = request
          return { action = "accept", content = { ok = true } }
        end
      end

      it("answers through the handler and retries with a new id, the answers and the state echoed exactly", function()
        local seen = {}
        local fake = Fake.new { modern = true }:will_return(discovered())
          :will_return(asks { requestState = STATE }):will_return(text_result("done"))
        local out = assert(connect(fake, { on_elicitation = confirm(seen) }):call_tool("a", { x = 1 }))
        assert.equal("done", out.text)
        assert.same({ "server/discover", "tools/call", "tools/call" }, fake:methods())
        local first, retry = fake.requests[2].body, fake.requests[3].body
        assert.are_not.equal(first.id, retry.id)
        assert.equal("a", retry.params.name)
        assert.same({ x = 1 }, retry.params.arguments)
        assert.same({ confirm = { action = "accept", content = { ok = true } } }, retry.params.inputResponses)
        assert.equal(STATE, retry.params.requestState)
        local echoed = '"requestState":"{\\"nonce\\":\\"a\\\\u00e9b\\",\\"n\\":1.50}  "'
        assert.truthy(fake.requests[3].raw:find(echoed, 1, true), fake.requests[3].raw)
        assert.is_nil(first.params.inputResponses)
        assert.equal("Sure?", seen[1].message:sub(1, 5))
        assert.is_nil(seen[1].message:find("\27", 1, true))   -- the server's text under the text rule
        -- the handler's capability is declared in every request's envelope, both modes
        for i = 1, 3 do
          assert.same({ elicitation = { form = {}, url = {} } },
            fake.requests[i].body.params._meta["io.modelcontextprotocol/clientCapabilities"])
        end
      end)

      it("sends no requestState when the server sent none, and none to any other request", function()
        local fake = Fake.new { modern = true }:will_return(discovered())
          :will_return(asks()):will_return(text_result("done")):will_return(text_result("other"))
        local conn = connect(fake, { on_elicitation = confirm {} })
        assert(conn:call_tool("a"))
        assert(conn:call_tool("b"))
        assert.is_nil(fake.requests[3].body.params.requestState)
        assert.is_nil(fake.requests[3].raw:find("requestState", 1, true))
        assert.is_nil(fake.requests[4].body.params.inputResponses)
        assert.is_nil(fake.requests[4].body.params.requestState)
      end)

      it("a URL request reaches the handler whole, and accepting it sends no content", function()
        local seen = {}
        local fake = Fake.new { modern = true }:will_return(discovered()):will_return { resultType = "input_required",
          inputRequests = { link = { method = "elicitation/create",
            params = { mode = "url", message = "Sign in", url = "https://auth.example.com/x?y=1" } } },
          requestState = "s1" }
          :will_return(text_result("done"))
        assert(connect(fake, { on_elicitation = function(r) seen[#seen + 1] = r; return { action = "accept",
          content = { ignored = true } } end }):call_tool("a"))
        assert.equal("url", seen[1].mode)
        assert.equal("https://auth.example.com/x?y=1", seen[1].url)
        assert.same({ link = { action = "accept" } }, fake.requests[3].body.params.inputResponses)
      end)

      it("stops after max_input_rounds rounds with input_required, never answering again", function()
        local fake = Fake.new { modern = true }:will_return(discovered())
          :will_return(asks { requestState = "r1" }):will_return(asks { requestState = "r2" })
          :will_return(asks { requestState = "r3" })
        local ok, message, err = connect(fake, { on_elicitation = confirm {}, max_input_rounds = 2 }):call_tool("a")
        assert.is_nil(ok)
        assert.equal("input_required", err.kind)
        assert.equal(2, err.rounds)
        assert.truthy(message:find("after 2 rounds", 1, true), message)
        assert.same({ "server/discover", "tools/call", "tools/call", "tools/call" }, fake:methods())
        assert.equal("r2", fake.requests[4].body.params.requestState)
      end)

      it("does not answer what no handler gives (sampling), nor input on a request that may not ask", function()
        local fake = Fake.new { modern = true }:will_return(discovered()):will_return { resultType = "input_required",
          inputRequests = { s = { method = "sampling/createMessage", params = {} } } }
        local ok, _, err = connect(fake, { on_elicitation = confirm {} }):call_tool("a")
        assert.is_nil(ok)
        assert.equal("input_required", err.kind)
        assert.equal("sampling/createMessage", err.asked)
        assert.same({ "server/discover", "tools/call" }, fake:methods())
        fake = Fake.new { modern = true }:will_return(discovered()):will_return(asks())
        ok, _, err = connect(fake, { on_elicitation = confirm {} }):list_tools()
        assert.is_nil(ok)
        assert.equal("input_required", err.kind)
        assert.same({ "server/discover", "tools/list" }, fake:methods())
      end)

      it("refuses an input_required result with neither inputRequests nor requestState", function()
        local fake = Fake.new { modern = true }:will_return(discovered()):will_return { resultType = "input_required" }
        local ok, _, err = connect(fake, { on_elicitation = confirm {} }):call_tool("a")
        assert.is_nil(ok)
        assert.equal("malformed", err.kind)
        assert.same({ "server/discover", "tools/call" }, fake:methods())
      end)

      it("declares no capability without a handler, and refuses a bad max_input_rounds", function()
        local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x"))
        assert(connect(fake):call_tool("a"))
        assert.same({}, fake.requests[2].body.params._meta["io.modelcontextprotocol/clientCapabilities"])
        for _, bad in ipairs { -1, 1.5, 65, "4" } do
          assert.has_error(function() connect(Fake.new(), { max_input_rounds = bad }) end)
        end
      end)
    end)

    it("names the capability a -32021 refusal lists: missing_capability, not an HTTP status", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return_raw(refusal(400, -32021, "Cannot request input: missing capability",
          { requiredCapabilities = { elicitation = { form = {} }, ["ro\27ots"] = {} } }))
      local ok, message, err = connect(fake):call_tool("book", {})
      assert.is_nil(ok)
      assert.equal("missing_capability", err.kind)
      assert.equal(-32021, err.rpc_code)
      assert.equal(400, err.status)
      assert.equal("elicitation", err.capability)
      -- the parts asked for are spelled out; the text rule takes the control character out
      assert.equal("elicitation.form, ro ots", err.capabilities)
      assert.equal("Cannot request input: missing capability", err.detail)
      assert.truthy(message:find('"srv" refused the request because this client does not declare the "elicitation" '
        .. "capability it needs (elicitation.form, ro ots); the server did not act on it.", 1, true), message)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    it("classifies a -32021 answer inside a 200 (JSON or on the stream) the same way, naming what it lists", function()
      local error_text = '"error":{"code":-32021,"message":"Missing: sampling",'
        .. '"data":{"requiredCapabilities":{"sampling":{}}}}'
      -- a JSON body (discovery is request 1, the call request 2)
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return_raw('{"jsonrpc":"2.0","id":2,' .. error_text .. '}', 200)
      local ok, message, err = connect(fake):call_tool("a", {})
      assert.is_nil(ok)
      assert.equal("missing_capability", err.kind)
      assert.equal("sampling", err.capability)
      assert.is_nil(err.status)
      assert.equal("Missing: sampling", err.detail)
      assert.truthy(message:find('does not declare the "sampling" capability it needs;', 1, true), message)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
      -- on an event stream
      fake = Fake.new { modern = true }:will_return(discovered())
        :will_stream { 'event: message\ndata: {"jsonrpc":"2.0","id":%ID%,' .. error_text .. '}\n\n' }
      ok, message, err = connect(fake):call_tool("a", {})
      assert.is_nil(ok)
      assert.equal("missing_capability", err.kind)
      assert.equal("sampling", err.capability)
      assert.truthy(message:find("\"sampling\" capability", 1, true), message)
      -- a refusal that lists nothing names nothing
      fake = Fake.new { modern = true }:will_return(discovered())
        :will_return_rpc_error(-32021, "Missing required client capabilities")
      ok, message, err = connect(fake):list_tools()
      assert.is_nil(ok)
      assert.equal("missing_capability", err.kind)
      assert.is_nil(err.capability)
      assert.truthy(message:find("does not declare the client capability it needs;", 1, true), message)
    end)

    it("fails clearly when the server says the envelope is missing, sending nothing again", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return_raw(refusal(400, -32602, "Invalid params: missing _meta envelope"))
      local ok, _, err = connect(fake):call_tool("a")
      assert.is_nil(ok)
      assert.equal("http_status", err.kind)
      assert.equal(-32602, err.rpc_code)
      assert.equal("Invalid params: missing _meta envelope", err.detail)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    it("clips the error body's message and never copies other body bytes", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return_raw(refusal(400, -32602, "bad\27[31m " .. string.rep("x", 5000), { secret = "s3cr3t" }))
      local _, message, err = connect(fake):call_tool("a")
      assert.is_nil(err.detail:find("\27", 1, true))
      assert.is_true(#err.detail < 1000)
      assert.is_nil(message:find("s3cr3t", 1, true))
    end)
  end)

  describe("cancellation and streams", function()
    it("closes the stream to cancel and sends no notice", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_hang(0.01)
      local n = 0
      local ok, _, err = connect(fake):call_tool("slow", {}, { cancel = function() n = n + 1; return n > 3 end })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.is_true(err.in_flight)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    it("does not resume a stream that ended before the answer", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_stream { "id: e-1\nretry: 10\ndata: \n\n" }
      local ok, _, err = connect(fake):call_tool("a")
      assert.is_nil(ok)
      assert.equal("interrupted", err.kind)
      assert.truthy(err.detail:find("cannot be resumed", 1, true))
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    it("reads an event-stream answer", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_stream { Fake.sse_result(text_result("streamed")) }
      assert.equal("streamed", assert(connect(fake):call_tool("a")).text)
    end)
  end)
end)

describe("2026-07-28 schema rules", function()
  local function refused(schema, reason)
    local out, why = modern.normalise_schema(schema)
    assert.is_nil(out)
    assert.equal(reason, why)
  end

  it("carries every 2020-12 keyword whole: $defs, local $ref, conditionals, pattern keys", function()
    local text = '{"type":"object","$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"},'
      .. '"b":{"type":"string"}},"if":{"required":["a"]},"then":{"required":["b"]},'
      .. '"patternProperties":{"^x-":{"type":"string"}},"unevaluatedProperties":false,"additionalProperties":{}}'
    local schema = mcp.json.decode(text)
    assert.equal(schema, modern.normalise_schema(schema))
    -- the 2025 rules write the reference out, then refuse the first keyword they cannot carry
    local _, why = core.normalise_schema(schema)
    assert.truthy(why:find('"if"', 1, true), why)
  end)

  it("never dereferences a network $ref: the tool is refused, naming the key", function()
    refused(mcp.json.decode('{"type":"object","properties":{"a":{"$ref":"https://evil.example/s.json"}}}'),
      'its "$ref" points outside the schema (https://evil.example/s.json), and references are never fetched')
    refused(mcp.json.decode('{"type":"object","$dynamicRef":"other.json#meta"}'),
      'its "$dynamicRef" points outside the schema (other.json#meta), and references are never fetched')
  end)

  it("keeps the caps: top-level object, 12 levels, 16384 bytes", function()
    refused(mcp.json.decode('{"type":"string"}'), 'its top-level type is not "object"')
    refused(nil, "the server advertised no parameter schema")
    local deep = { type = "object" }
    local at = deep
    for _ = 1, 12 do at.properties = { x = {} }; at = at.properties.x end
    refused(deep, "it nests deeper than 12 levels")
    refused({ type = "object", description = string.rep("d", 17000) }, "it exceeds 16384 bytes once stored")
  end)

  it("picks the rule by the listing's era", function()
    assert.equal(modern.normalise_schema, era.schema_for("modern"))
    assert.equal(core.normalise_schema, era.schema_for("legacy"))
  end)
end)

describe("x-mcp-header: tool parameters mirrored into Mcp-Param-<Name> headers", function()
  local SCHEMA = '{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},'
    .. '"opts":{"type":"object","properties":{"shard":{"type":"integer","x-mcp-header":"Shard"},'
    .. '"dry":{"type":"boolean","x-mcp-header":"Dry-Run"}}},"query":{"type":"string"}}}'

  local function listing(schema_text)
    return { tools = mcp.json.array { { name = "sql", inputSchema = mcp.json.decode(schema_text or SCHEMA) } },
      resultType = "complete" }
  end

  local function params_of(r)
    local out = {}
    for _, line in ipairs(r.headers or {}) do
      if line:lower():find("^mcp%-param%-") then out[#out + 1] = line end
    end
    table.sort(out)
    return out
  end

  local function listed(schema_text)
    local fake = Fake.new { modern = true }:will_return(discovered()):will_return(listing(schema_text))
    local conn = connect(fake)
    assert(conn:list_tools())
    return fake, conn
  end

  it("mirrors string, integer and boolean arguments at their property paths, as the spec's example", function()
    local fake, conn = listed()
    fake:will_return(text_result("ok"))
    assert(conn:call_tool("sql", { region = "us-west1", query = "SELECT 1", opts = { shard = -7, dry = false } }))
    local call = fake.requests[3]
    assert.equal("tools/call", call.method)
    assert.same({ "Mcp-Param-Dry-Run: false", "Mcp-Param-Region: us-west1", "Mcp-Param-Shard: -7" }, params_of(call))
    assert.equal("sql", header(call, "Mcp-Name"))
  end)

  it("omits the header of an argument that is absent or null; an integral float goes as an integer", function()
    local fake, conn = listed()
    fake:will_return(text_result("ok"))
    assert(conn:call_tool("sql", { region = mcp.json.null, opts = { shard = 42.0 } }))
    assert.same({ "Mcp-Param-Shard: 42" }, params_of(fake.requests[3]))
  end)

  it("sends a value outside plain ASCII in the base64 form: no CR, LF or control reaches a header", function()
    local fake, conn = listed()
    fake:will_return(text_result("ok")):will_return(text_result("ok"))
    assert(conn:call_tool("sql", { region = "eu\r\nX-Injected: 1" }))
    assert(conn:call_tool("sql", { region = "Hello, 世界" }))
    assert.same({ "Mcp-Param-Region: =?base64?ZXUNClgtSW5qZWN0ZWQ6IDE=?=" }, params_of(fake.requests[3]))
    assert.same({ "Mcp-Param-Region: =?base64?SGVsbG8sIOS4lueVjA==?=" }, params_of(fake.requests[4]))
    for _, r in ipairs(fake.requests) do
      for _, line in ipairs(r.headers) do assert.is_nil(line:find("[%c\128-\255]"), line) end
      assert.is_nil(header(r, "X-Injected"))
    end
  end)

  it("refuses a value no header can carry before anything is sent", function()
    for _, case in ipairs {
      { { opts = { shard = 1.5 } }, "with a fraction" },
      { { opts = { shard = 9007199254740992 } }, "outside +-(2^53-1)" },
      { { region = { "a" } }, "an object or an array" },
    } do
      local fake, conn = listed()
      local ok, message, err = conn:call_tool("sql", case[1])
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(err.detail:find("the tool call was not sent", 1, true), err.detail)
      assert.truthy(err.detail:find(case[2], 1, true), err.detail)
      assert.truthy(message:find("Mcp-Param-", 1, true), message)
      assert.same({ "server/discover", "tools/list" }, fake:methods())
    end
  end)

  it("refuses to call a tool whose markings break the rules, sending nothing", function()
    local fake, conn = listed('{"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}')
    local ok, _, err = conn:call_tool("sql", { a = 1 })
    assert.is_nil(ok)
    assert.equal("malformed", err.kind)
    assert.truthy(err.detail:find('x-mcp-header on "a" marks a property whose type', 1, true), err.detail)
    assert.same({ "server/discover", "tools/list" }, fake:methods())
  end)

  it("called before any listing, relists on HeaderMismatch and sends the call once more with the headers", function()
    local fake = Fake.new { modern = true }:will_return(discovered())
      :will_return_raw(refusal(400, -32020, "Bad Request: the request headers and body disagree"))
      :will_return(listing()):will_return(text_result("ok"))
    local outcome = assert(connect(fake):call_tool("sql", { region = "us-west1" }))
    assert.equal("ok", outcome.text)
    assert.same({ "server/discover", "tools/call", "tools/list", "tools/call" }, fake:methods())
    assert.same({}, params_of(fake.requests[2]))
    assert.same({ "Mcp-Param-Region: us-west1" }, params_of(fake.requests[4]))
  end)

  it("does not send again when the new listing marks the tool as before, nor relists twice", function()
    local fake = Fake.new { modern = true }:will_return(discovered())
      :will_return_raw(refusal(400, -32020, "headers and body disagree"))
      :will_return(listing('{"type":"object"}'))
    local ok, _, err = connect(fake):call_tool("sql", { region = "us-west1" })
    assert.is_nil(ok)
    assert.equal(-32020, err.rpc_code)
    assert.same({ "server/discover", "tools/call", "tools/list" }, fake:methods())

    fake = Fake.new { modern = true }:will_return(discovered())
      :will_return_raw(refusal(400, -32020, "disagree")):will_return(listing())
      :will_return_raw(refusal(400, -32020, "disagree again"))
    ok, _, err = connect(fake):call_tool("sql", { region = "us-west1" })
    assert.is_nil(ok)
    assert.equal("disagree again", err.detail)
    assert.same({ "server/discover", "tools/call", "tools/list", "tools/call" }, fake:methods())
  end)

  it("copes with a listed tool that has no schema: no header, and a -32020 relist compares safely", function()
    local bare = { tools = mcp.json.array { { name = "sql" } }, resultType = "complete" }
    local fake = Fake.new { modern = true }:will_return(discovered()):will_return(bare)
      :will_return_raw(refusal(400, -32020, "disagree")):will_return(bare)
    local conn = connect(fake)
    assert(conn:list_tools())
    local ok, _, err = conn:call_tool("sql", { region = "x" })
    assert.is_nil(ok)
    assert.equal(-32020, err.rpc_code)
    assert.same({}, params_of(fake.requests[3]))
    assert.same({ "server/discover", "tools/list", "tools/call", "tools/list" }, fake:methods())
  end)

  it("leaves other refusals alone: a 400 without -32020 is not relisted", function()
    local fake = Fake.new { modern = true }:will_return(discovered())
      :will_return_raw(refusal(400, -32602, "Invalid params"))
    assert.is_nil(connect(fake):call_tool("sql", { region = "x" }))
    assert.same({ "server/discover", "tools/call" }, fake:methods())
  end)

  it("sends no Mcp-Param header in the 2025 era", function()
    local fake = Fake.new():will_handshake("s-1"):will_return(listing()):will_return(text_result("ok"))
    local conn = connect(fake)
    assert(conn:list_tools())
    assert(conn:call_tool("sql", { region = "us-west1" }))
    for _, r in ipairs(fake.requests) do assert.same({}, params_of(r)) end
  end)

  describe("the markings a schema may carry", function()
    local function reason(text)
      local out, why = modern.normalise_schema(mcp.json.decode(text))
      assert.is_nil(out)
      return why
    end

    it("reads markings through nested properties only, in a stable order", function()
      local params = assert(modern.header_params(mcp.json.decode(SCHEMA)))
      assert.same({
        { name = "Dry-Run", path = { "opts", "dry" }, type = "boolean" },
        { name = "Shard", path = { "opts", "shard" }, type = "integer" },
        { name = "Region", path = { "region" }, type = "string" },
      }, params)
      -- objects in data keywords are values, not schemas: they mark nothing
      local data = '{"type":"object","properties":{"a":{"type":"string","enum":[{"x-mcp-header":"X"}],'
        .. '"default":{"x-mcp-header":"Y"}}}}'
      assert.same({}, modern.header_params(mcp.json.decode(data)))
      assert.truthy(modern.normalise_schema(mcp.json.decode(data)))
    end)

    it("refuses a marking off the properties chain, naming where it is", function()
      assert.equal('its x-mcp-header on "the schema root" is not reachable from the root through properties alone',
        reason('{"type":"object","x-mcp-header":"A"}'))
      assert.equal('its x-mcp-header on "l.<items>" is not reachable from the root through properties alone',
        reason('{"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}'))
      assert.truthy(reason('{"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}')
        :find('"<anyOf>.a" is not reachable', 1, true))
      assert.truthy(reason('{"type":"object","$defs":{"d":{"type":"string","x-mcp-header":"A"}}}')
        :find('"<$defs>.d" is not reachable', 1, true))
    end)

    it("refuses a header name that is no token, empty, not a string, or repeated case-insensitively", function()
      local function named(value)
        return reason('{"type":"object","properties":{"a":{"type":"string","x-mcp-header":' .. value .. '}}}')
      end
      for _, bad in ipairs { '"A\\r\\nB"', '""', '"a b"', '"a:b"', "7", '"Ä"' } do
        assert.equal('its x-mcp-header on "a" is not an HTTP header name token', named(bad), bad)
      end
      assert.equal('its x-mcp-header on "b" repeats the header name "a"', reason('{"type":"object","properties":'
        .. '{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}'))
    end)

    it("refuses a marked property of type number, object, array or none", function()
      for _, t in ipairs { '"number"', '"object"', '"array"', '["string","null"]' } do
        assert.equal('its x-mcp-header on "a" marks a property whose type is not "string", "integer" or "boolean"',
          reason('{"type":"object","properties":{"a":{"type":' .. t .. ',"x-mcp-header":"A"}}}'), t)
      end
      assert.truthy(reason('{"type":"object","properties":{"a":{"x-mcp-header":"A"}}}'))
    end)
  end)
end)
