-- Roots and sampling over the fake leg, in both eras: the connect option and set_roots (file://
-- URIs only, refused before anything is sent), the capabilities declared only when given (the
-- initialize request in 2025-11-25, every request's envelope in 2026-07-28), roots/list and
-- sampling/createMessage answered (a server request on the response stream; an inputRequests
-- entry), the sampling handler's answer checked, a refusal, a raising handler or a bad answer an
-- error to the server with inert wording, a request without maxTokens refused unasked, and the
-- change notice (2025-11-25 only: a 2026-07-28 server gets the roots in its next roots/list).
local mcp = require "mcpclient"
local Fake = require "support.fake_server"
local json = mcp.json

local CAPS = "io.modelcontextprotocol/clientCapabilities"

local function connect(fake, extra)
  local options = { url = "https://mcp.example.com/rpc", identifier = "srv", transport = fake, clock = fake.clock,
    health = mcp.health.discard, log = function() end }
  for k, v in pairs(extra or {}) do options[k] = v end
  return fake:hold(mcp.connect(options))
end

local function text_result(text, modern)
  return { content = { { type = "text", text = text } }, resultType = modern and "complete" or nil }
end

local function discovered()
  return { supportedVersions = json.array { "2026-07-28" }, capabilities = { tools = {} }, resultType = "complete",
    _meta = { ["io.modelcontextprotocol/serverInfo"] = { name = "Modern Fake", version = "2" } } }
end

local function bodies(fake, method)
  local out = {}
  for _, req in ipairs(fake.requests) do
    if req.body and req.body.method == method then out[#out + 1] = req.body end
  end
  return out
end

-- The client's answer to the server request with id `id`.
local function answer_to(fake, id)
  for _, req in ipairs(fake.requests) do
    if req.body and req.body.id == id and req.body.method == nil then return req.body end
  end
end

-- A server request on the response stream (2025-11-25), then the call's result.
local function asking(method, params)
  local message = json.encode { jsonrpc = "2.0", id = "s1", method = method, params = params }
  return Fake.new():will_handshake():will_stream({ "event: message\ndata: " .. message .. "\n\n",
    Fake.sse_result(text_result("ok")) })
end

local ROOTS = { { uri = "file:///srv/notes", name = "notes" }, { uri = "file:///home/ada/project" } }
local SAMPLE = { messages = { { role = "user", content = { type = "text", text = "Capital of France?" } } },
  maxTokens = 50, systemPrompt = "Be brief.", temperature = 0.2 }
local function reply(text)
  return function() return { role = "assistant", model = "test-model", content = { type = "text", text = text },
    stopReason = "endTurn" } end
end

describe("roots and sampling", function()
  describe("the roots option", function()
    local function refused(roots, pattern)
      assert.has_error(function() connect(Fake.new(), { roots = roots }) end)
      local ok, why = pcall(connect, Fake.new(), { roots = roots })
      assert.is_false(ok)
      assert.truthy(tostring(why):find(pattern, 1, true), why)
    end

    it("takes file:// URIs with optional names, and refuses anything else clearly", function()
      assert(connect(Fake.new(), { roots = ROOTS }))
      assert(connect(Fake.new(), { roots = {} }))
      refused({ { uri = "https://example.com/x" } }, "connect: root 1 has the uri \"https://example.com/x\", which "
        .. "is not a file:// URI")
      refused({ ROOTS[1], { uri = "/srv/notes" } }, "root 2 has the uri \"/srv/notes\", which is not a file:// URI")
      refused({ { name = "n" } }, "root 1 has no uri string")
      refused({ { uri = "file:///a", name = 7 } }, "root 1 has a name that is a number, not a string")
      refused({ { uri = "file:///a b" } }, "root 1 has a uri holding a space or control character")
      refused({ { uri = "file:///a", path = "/a" } }, "root 1 has the key path (a root has uri and name)")
      refused({ uri = "file:///a" }, "connect: roots must be an array of")
      refused({ "file:///a" }, "root 1 is a string, not a table { uri, name }")
      assert.has_error(function() connect(Fake.new(), { roots = "file:///a" }) end,
        "roots must be a table, not a string")
      assert.has_error(function() connect(Fake.new(), { on_sampling = {} }) end,
        "on_sampling must be a function, not a table")
    end)

    it("set_roots checks the same way, keeps the old roots on a refusal, and needs roots at connect", function()
      local fake = Fake.new():will_handshake():will_return(text_result("x"))
      local conn = connect(fake, { roots = ROOTS })
      assert.has_error(function() conn:set_roots { { uri = "ftp://x/y" } } end,
        'set_roots: root 1 has the uri "ftp://x/y", which is not a file:// URI (the only kind a root may be)')
      assert.same(ROOTS[1].uri, conn.session.answers.roots[1].uri)
      local without = connect(Fake.new())
      assert.has_error(function() without:set_roots { { uri = "file:///a" } } end,
        "set_roots: this connection was made without roots (the capability was not declared); give roots = {} "
        .. "to connect to set them later")
    end)
  end)

  describe("in the 2025-11-25 era", function()
    it("declares roots (listChanged) and sampling only when given", function()
      local cases = {
        { {}, {} },
        { { roots = ROOTS }, { roots = { listChanged = true } } },
        { { on_sampling = reply("x") }, { sampling = {} } },
        { { roots = {}, on_sampling = reply("x"), on_elicitation = function() return { action = "decline" } end },
          { roots = { listChanged = true }, sampling = {}, elicitation = {} } },
      }
      for _, case in ipairs(cases) do
        local fake = Fake.new():will_handshake():will_return(text_result("x"))
        assert(connect(fake, case[1]):call_tool("t", {}))
        assert.same(case[2], bodies(fake, "initialize")[1].params.capabilities)
      end
    end)

    it("answers roots/list on the response stream with the roots as given", function()
      local fake = asking("roots/list")
      assert.equal("ok", assert(connect(fake, { roots = ROOTS }):call_tool("t", {})).text)
      assert.same({ roots = { { uri = "file:///srv/notes", name = "notes" }, { uri = "file:///home/ada/project" } } },
        answer_to(fake, "s1").result)
    end)

    it("answers roots/list and sampling with method not found when not given", function()
      for _, method in ipairs { "roots/list", "sampling/createMessage" } do
        local fake = asking(method, SAMPLE)
        assert.equal("ok", assert(connect(fake):call_tool("t", {})).text)
        assert.equal(-32601, answer_to(fake, "s1").error.code)
      end
    end)

    it("hands the server's request to the handler and sends its checked answer", function()
      local fake = asking("sampling/createMessage", SAMPLE)
      local seen
      local conn = connect(fake, { on_sampling = function(request)
        seen = request
        return { role = "assistant", model = "test-model", content = { type = "text", text = "Paris." },
          stopReason = "endTurn", extra = "not sent" }
      end })
      assert.equal("ok", assert(conn:call_tool("t", {})).text)
      assert.equal("srv", seen.server)
      assert.equal(50, seen.maxTokens)
      assert.equal("Be brief.", seen.systemPrompt)
      assert.equal("Capital of France?", seen.messages[1].content.text)
      assert.same({ role = "assistant", model = "test-model", content = { type = "text", text = "Paris." },
        stopReason = "endTurn" }, answer_to(fake, "s1").result)
    end)

    it("takes image, audio and lists of blocks; refuses every other shape with an inert error", function()
      local good = {
        { type = "image", data = "aGk=", mimeType = "image/png" },
        { type = "audio", data = "aGk=", mimeType = "audio/wav" },
        { { type = "text", text = "a" }, { type = "image", data = "aGk=", mimeType = "image/png" } },
      }
      for _, content in ipairs(good) do
        local fake = asking("sampling/createMessage", SAMPLE)
        assert(connect(fake, { on_sampling = function() return { role = "assistant", model = "m",
          content = content } end }):call_tool("t", {}))
        assert.same(content, answer_to(fake, "s1").result.content)
      end
      local bad = {
        { role = "user", model = "m", content = { type = "text", text = "x" } },
        { role = "assistant", content = { type = "text", text = "x" } },
        { role = "assistant", model = "m", content = { type = "text" } },
        { role = "assistant", model = "m", content = { type = "video", data = "x" } },
        { role = "assistant", model = "m", content = { type = "image", data = "x" } },
        { role = "assistant", model = "m", content = { type = "text", text = "x" }, stopReason = 3 },
        { role = "assistant", model = "m", content = {} },
        "Paris.",
      }
      for _, answer in ipairs(bad) do
        local fake = asking("sampling/createMessage", SAMPLE)
        local warned = {}
        local conn = connect(fake, { on_sampling = function() return answer end,
          log = function(_, text) warned[#warned + 1] = text end })
        assert.equal("ok", assert(conn:call_tool("t", {})).text)   -- the call goes on
        local err = answer_to(fake, "s1").error
        assert.equal(-32603, err.code)
        assert.equal("the client's sampling handler gave no valid answer", err.message)
        -- what was wrong goes to the host's log, not to the server
        assert.equal(1, #warned)
        assert.truthy(warned[1]:find("the on_sampling handler's answer was refused: ", 1, true), warned[1])
      end
    end)

    it("a refusal is error -1 with the reason made inert; a raising handler -32603 naming nothing of it", function()
      local fake = asking("sampling/createMessage", SAMPLE)
      assert(connect(fake, { on_sampling = function() return nil, "not now\27[31m\n" .. ("x"):rep(500) end })
        :call_tool("t", {}))
      local err = answer_to(fake, "s1").error
      assert.equal(-1, err.code)
      assert.truthy(err.message:find("^the client refused the sampling request: not now"), err.message)
      assert.is_nil(err.message:find("[%c]"), err.message)
      assert.is_true(#err.message < 300)
      fake = asking("sampling/createMessage", SAMPLE)
      local warned = {}
      assert(connect(fake, { on_sampling = function() error("db password is hunter2") end,
        log = function(_, text) warned[#warned + 1] = text end }):call_tool("t", {}))
      err = answer_to(fake, "s1").error
      assert.same({ code = -32603, message = "the client's sampling handler failed" }, err)
      assert.is_nil(answer_to(fake, "s1").error.message:find("hunter2", 1, true))
      assert.equal(1, #warned)
      assert.truthy(warned[1]:find("the on_sampling handler raised: ", 1, true), warned[1])
      assert.truthy(warned[1]:find("db password is hunter2", 1, true), warned[1])
    end)

    it("refuses a request without a positive maxTokens or messages, never asking the handler", function()
      local bads = {
        { messages = SAMPLE.messages },
        { messages = SAMPLE.messages, maxTokens = 0 },
        { messages = SAMPLE.messages, maxTokens = 1.5 },
        { messages = SAMPLE.messages, maxTokens = "10" },
        { messages = json.array {}, maxTokens = 10 },
        { messages = { { role = "system", content = { type = "text", text = "x" } } }, maxTokens = 10 },
      }
      for _, params in ipairs(bads) do
        local fake = asking("sampling/createMessage", params)
        local asked = false
        assert(connect(fake, { on_sampling = function() asked = true end }):call_tool("t", {}))
        local err = answer_to(fake, "s1").error
        assert.equal(-32602, err.code)
        assert.truthy(err.message:find("^Invalid params: "), err.message)
        assert.is_false(asked)
      end
    end)

    it("set_roots sends notifications/roots/list_changed once the session is open, and nothing before", function()
      local fake = Fake.new():will_handshake():will_return(text_result("x"))
      local conn = connect(fake, { roots = ROOTS })
      assert(conn:set_roots { { uri = "file:///before" } })
      assert.equal(0, #fake.requests)     -- nothing open yet: the opening declares, the server asks
      assert(conn:call_tool("t", {}))
      assert(conn:set_roots { { uri = "file:///after", name = "after" } })
      assert.equal(1, #bodies(fake, "notifications/roots/list_changed"))
      assert.same({ { uri = "file:///after", name = "after" } }, conn.session.answers.roots)
    end)
  end)

  describe("in the 2026-07-28 era", function()
    local function asks(requests, state)
      return { resultType = "input_required", inputRequests = requests, requestState = state }
    end

    it("declares roots and sampling in every request's envelope only when given", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x", true))
      assert(connect(fake):call_tool("t", {}))
      assert.is_nil(next(fake.requests[2].body.params._meta[CAPS]))
      fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x", true))
      assert(connect(fake, { roots = ROOTS, on_sampling = reply("x") }):call_tool("t", {}))
      for i = 1, 2 do
        assert.same({ roots = {}, sampling = {} }, fake.requests[i].body.params._meta[CAPS])
      end
    end)

    it("answers roots/list and sampling input requests and retries once with both answers", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return(asks({ r = { method = "roots/list" }, s = { method = "sampling/createMessage", params = SAMPLE } },
          "st"))
        :will_return(text_result("done", true))
      local rounds = {}
      local conn = connect(fake, { roots = ROOTS, on_sampling = reply("Paris.") })
      assert.equal("done", assert(conn:call_tool("t", {}, { on_input = function(r) rounds[#rounds + 1] = r end })).text)
      local retry = fake.requests[3].body.params
      assert.equal("st", retry.requestState)
      assert.same({ roots = ROOTS }, retry.inputResponses.r)
      assert.same({ role = "assistant", model = "test-model", content = { type = "text", text = "Paris." },
        stopReason = "endTurn" }, retry.inputResponses.s)
      assert.same({ { round = 1, answers = { r = "roots", s = "sampled" }, state = true } }, rounds)
    end)

    it("a refused sampling input fails input_required naming the refusal, and sends nothing again", function()
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return(asks { s = { method = "sampling/createMessage", params = SAMPLE } })
      local ok, message, err = connect(fake, { on_sampling = function() return nil, "over budget" end })
        :call_tool("t", {})
      assert.is_nil(ok)
      assert.equal("input_required", err.kind)
      assert.equal("sampling/createMessage", err.asked)
      assert.equal("the client refused the sampling request: over budget", err.refused)
      assert.truthy(message:find("the client refused it", 1, true), message)
      assert.same({ "server/discover", "tools/call" }, fake:methods())
    end)

    it("a task waiting for roots and a sampled message gets both once with tasks/update", function()
      local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
      local function task(result_type, status, extra)
        local t = { resultType = result_type, taskId = "t-1", status = status, ttlMs = 60000, pollIntervalMs = 0,
          createdAt = now, lastUpdatedAt = now }
        for k, v in pairs(extra or {}) do t[k] = v end
        return t
      end
      local waiting = { inputRequests = { r = { method = "roots/list" },
        s = { method = "sampling/createMessage", params = SAMPLE } } }
      local fake = Fake.new { modern = true }:will_return(discovered())
        :will_return(task("task", "working")):will_return(task("complete", "input_required", waiting))
        :will_return { resultType = "complete" }
        :will_return(task("complete", "completed", { result = text_result("built", true) }))
      local seen = {}
      local conn = connect(fake, { roots = ROOTS, on_sampling = function(request)
        seen[#seen + 1] = request
        return reply("Paris.")()
      end })
      assert.equal("built", assert(conn:call_tool("t", {}, { task = true })).text)
      assert.same({ "server/discover", "tools/call", "tasks/get", "tasks/update", "tasks/get" }, fake:methods())
      local update = fake.requests[4].body.params
      assert.same({ roots = ROOTS }, update.inputResponses.r)
      assert.equal("Paris.", update.inputResponses.s.content.text)
      assert.equal(1, #seen)
      assert.same({ roots = {}, sampling = {}, extensions = { ["io.modelcontextprotocol/tasks"] = {} } },
        fake.requests[2].body.params._meta[CAPS])
    end)

    it("set_roots sends no notice (the revision has none): the next roots/list gets the new roots", function()
      local fake = Fake.new { modern = true }:will_return(discovered()):will_return(text_result("x", true))
        :will_return(asks { r = { method = "roots/list" } }):will_return(text_result("done", true))
      local conn = connect(fake, { roots = ROOTS })
      assert(conn:call_tool("t", {}))
      assert(conn:set_roots { { uri = "file:///new" } })
      assert(conn:call_tool("t", {}))
      assert.same({ "server/discover", "tools/call", "tools/call", "tools/call" }, fake:methods())
      assert.same({ roots = { { uri = "file:///new" } } }, fake.requests[4].body.params.inputResponses.r)
    end)
  end)
end)
