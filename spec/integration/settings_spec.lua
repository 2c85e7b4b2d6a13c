-- The host's settings and the raw and paged operations over stdio, in both eras, against
-- spec/support/settings_server.lua: log_level and set_log_level (2025: logging/setLevel after the
-- handshake; 2026-07-28: the request's _meta), client_info, on_stderr, conn:request and
-- conn:notify, the listings page by page, and what mcp.engine.step hands out between operations.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local stdio = require "support.stdio"

local json = core.json

local function connect(era, extra, flag)
  local options = { identifier = "set", command = { "lua5.4", "spec/support/settings_server.lua", era, flag },
    env = stdio.env(), health = mcp.health.discard, budget = 10 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

-- What the server saw (its tool "seen").
local function seen(conn)
  return json.decode(assert(conn:call_tool("seen", {})).text)
end

-- Log notices collected by level.
local function collector()
  local got = {}
  return got, function(level, logger, data) got[#got + 1] = { level = level, logger = logger, data = data } end
end

local function levels(got)
  local list = {}
  for i, entry in ipairs(got) do list[i] = entry.level end
  return list
end

describe("settings, raw requests and pages over stdio", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  describe("log_level", function()
    it("2025: logging/setLevel after the handshake; on_log gets the levels at or above it, inert", function()
      local got, on_log = collector()
      local conn <close> = connect("legacy", { log_level = "error", on_log = on_log })
      assert.equal("logged 4", assert(conn:call_tool("log", {})).text)
      assert.same({ "error", "critical", "alert", "emergency" }, levels(got))
      assert.equal("fake", got[1].logger)
      assert.is_nil(got[1].data.text:find("\27", 1, true))
      assert.same({ "error" }, seen(conn).levels)
    end)

    it("2025: set_log_level sends logging/setLevel at once on an open session", function()
      local got, on_log = collector()
      local conn <close> = connect("legacy", { on_log = on_log })
      assert.equal("logged 8", assert(conn:call_tool("log", {})).text)  -- no level asked: the server's own
      assert.is_true(conn:set_log_level("alert"))
      for i = #got, 1, -1 do got[i] = nil end
      assert.equal("logged 2", assert(conn:call_tool("log", {})).text)
      assert.same({ "alert", "emergency" }, levels(got))
      assert.same({ "alert" }, seen(conn).levels)
    end)

    it("2025: a server without logging gets no setLevel; set_log_level says not_offered", function()
      local warnings = {}
      local conn <close> = connect("legacy", { log_level = "info",
        log = function(_, text) warnings[#warnings + 1] = text end }, "nolog")
      assert.same({}, seen(conn).levels)
      local ok, message, err = conn:set_log_level("debug")
      assert.is_nil(ok)
      assert.equal("not_offered", err.kind)
      assert.equal("logging/setLevel", err.method)
      assert.truthy(message:find("nothing was sent", 1, true))
      assert.same({}, seen(conn).levels)
      assert.same({}, warnings)
    end)

    it("2025: a refused setLevel is told through the log and the connection goes on", function()
      local warnings = {}
      local conn <close> = connect("legacy", { log_level = "info",
        log = function(_, text) warnings[#warnings + 1] = text end }, "refuse_level")
      assert.equal("written", assert(conn:call_tool("stderr", { text = "" })).text)
      assert.equal(1, #warnings)
      assert.truthy(warnings[1]:find("logging/setLevel was refused", 1, true))
      assert.truthy(warnings[1]:find("no levels here", 1, true))
    end)

    it("2026-07-28: every request names the level in _meta; set_log_level changes it, nothing sent", function()
      local got, on_log = collector()
      local conn <close> = connect("modern", { log_level = "critical", on_log = on_log })
      assert.equal("logged 3", assert(conn:call_tool("log", {})).text)
      assert.same({ "critical", "alert", "emergency" }, levels(got))
      assert.is_true(conn:set_log_level("debug"))
      assert.equal("logged 8", assert(conn:call_tool("log", {})).text)
      local s = seen(conn)
      assert.same({}, s.levels)
      -- server/discover, log, log, seen: each named the level of its time
      assert.same({ "critical", "critical", "debug", "debug" }, s.meta_levels)
    end)

    it("2026-07-28: without a level no request names one (the server then sends no log notices)", function()
      local got, on_log = collector()
      local conn <close> = connect("modern", { on_log = on_log })
      assert.equal("logged 0", assert(conn:call_tool("log", {})).text)
      assert.same({}, got)
      assert.same({ "-", "-", "-" }, seen(conn).meta_levels)
    end)

    it("is one of the eight levels, on connect and on set_log_level", function()
      assert.has_error(function() connect("legacy", { log_level = "verbose" }) end,
        'connect: log_level must be one of "debug", "info", "notice", "warning", "error", "critical", '
          .. '"alert", "emergency"')
      local conn <close> = connect("legacy")
      assert.has_error(function() conn:set_log_level("WARNING") end)
      assert.has_error(function() conn:set_log_level(3) end)
    end)
  end)

  describe("client_info", function()
    for _, era in ipairs { "legacy", "modern" } do
      it(era .. ": names the client to the server (initialize's clientInfo / the envelope's)", function()
        local info = { name = "my-agent", version = "1.2.0", title = "My Agent" }
        local conn <close> = connect(era, { client_info = info })
        info.name = "changed later"  -- the connection keeps its own copy
        assert.same({ name = "my-agent", version = "1.2.0", title = "My Agent" }, seen(conn).client_info)
      end)

      it(era .. ": is mcpclient and its version by default", function()
        local conn <close> = connect(era)
        assert.same({ name = "mcpclient", version = core.version }, seen(conn).client_info)
      end)
    end

    it("takes name and version (and title) as short UTF-8 strings without controls", function()
      for _, bad in ipairs { { name = "x" }, { name = "", version = "1" }, { name = "a\nb", version = "1" },
        { name = "a", version = "1", title = 5 }, { name = "a", version = "1", extra = true },
        { name = string.rep("n", 201), version = "1" }, { name = "\255", version = "1" } } do
        assert.has_error(function() connect("legacy", { client_info = bad }) end)
      end
      assert.has_error(function() connect("legacy", { client_info = "me" }) end,
        "client_info must be a table, not a string")
    end)
  end)

  describe("on_stderr", function()
    it("gets the child's stderr as whole lines under the text rule; the last one when it ends", function()
      local lines = {}
      local conn = connect("legacy", { on_stderr = function(line) lines[#lines + 1] = line end })
      assert(conn:call_tool("stderr", { text = "one\r\ntwo \27[31mred\27[0m\nhalf" }))
      assert(conn:call_tool("stderr", { text = "-way\nthree\n" }))
      assert.same({ "one", "two red", "half-way", "three" }, lines)
      assert(conn:call_tool("stderr", { text = "last words" }))
      conn:close()
      assert.same({ "one", "two red", "half-way", "three", "last words" }, lines)
    end)

    it("hands a line over 4 096 bytes over in parts of 4 096, ended or not", function()
      local lines = {}
      local conn <close> = connect("legacy", { on_stderr = function(line) lines[#lines + 1] = line end })
      local long = string.rep("a", 4096) .. string.rep("b", 4096) .. "cc"
      assert(conn:call_tool("stderr", { text = long .. "\n" .. string.rep("d", 5000) }))
      assert.same({ string.rep("a", 4096), string.rep("b", 4096), "cc", string.rep("d", 4096) }, lines)
      assert(conn:call_tool("stderr", { text = "e\n" }))
      assert.same("dddd", lines[4]:sub(1, 4))
      assert.equal(string.rep("d", 904) .. "e", lines[5])
    end)

    it("hands over whole lines only when the 64 KiB ring lost some to a flood", function()
      local whole, other = 0, {}
      local line = string.rep("y", 999)
      local conn <close> = connect("legacy", { on_stderr = function(l)
        if l == line then whole = whole + 1 else other[#other + 1] = l:sub(1, 20) end
      end })
      -- 400 000 bytes at once, lines that do not divide the ring: the ring loses the start of a line
      assert(conn:call_tool("stderr", { text = string.rep(line .. "\n", 400) }))
      assert.is_true(whole > 0 and whole < 400, "lines: " .. whole)
      assert.same({}, other)
      assert(conn:call_tool("stderr", { text = "after\n" }))
      assert.same({ "after" }, other)
    end)

    it("a handler that raises is logged, and the connection goes on", function()
      local warnings = {}
      local conn <close> = connect("modern", { on_stderr = function() error("handler bug") end,
        log = function(_, text) warnings[#warnings + 1] = text end })
      assert.equal("written", assert(conn:call_tool("stderr", { text = "a\nb\n" })).text)
      assert.equal("written", assert(conn:call_tool("stderr", { text = "c\n" })).text)
      assert.equal(3, #warnings)
      assert.truthy(warnings[1]:find("on_stderr handler raised", 1, true))
    end)

    it("is for a server started with command", function()
      assert.has_error(function()
        mcp.connect { identifier = "x", url = "http://127.0.0.1:1/mcp", health = mcp.health.discard,
          on_stderr = function() end }
      end, "connect: on_stderr is for a server started with command (stdio): a server reached by url has no stderr")
    end)
  end)

  describe("conn:request and conn:notify", function()
    for _, era in ipairs { "legacy", "modern" } do
      it(era .. ": a request through the session: the result, or the failure value", function()
        local conn <close> = connect(era)
        local result = assert(conn:request("vendor/echo", { a = 1, list = { 1, 2 } }))
        assert.equal(1, result.echoed.a)
        assert.same({ 1, 2 }, result.echoed.list)
        if era == "modern" then
          -- the envelope, as every request of the era carries it
          assert.equal("2026-07-28", result.echoed._meta["io.modelcontextprotocol/protocolVersion"])
        end
        local none, message, err = conn:request("vendor/missing")
        assert.is_nil(none)
        assert.equal("rpc_error", err.kind)
        assert.equal(-32601, err.rpc_code)
        assert.truthy(message:find("set", 1, true))
      end)

      it(era .. ": a notification reaches the server", function()
        local conn <close> = connect(era)
        assert.is_true(conn:notify("notifications/vendor/hello", { n = 7 }))
        local notices = seen(conn).notices
        local last = notices[#notices]
        assert.same({ method = "notifications/vendor/hello", params = { n = 7 } }, last)
      end)
    end

    it("keeps its budget and cancel hook", function()
      local conn <close> = connect("legacy")
      local none, _, err = conn:request("vendor/echo", {}, { cancel = function() return true end })
      assert.is_nil(none)
      assert.equal("cancelled", err.kind)
    end)

    it("refuses the methods the client sends itself, and names that are no method, sending nothing", function()
      local conn <close> = connect("legacy")
      for method, why in pairs {
        initialize = "the handshake", ["notifications/initialized"] = "the handshake",
        ["tools/call"] = "conn:call_tool", ["server/discover"] = "discovery",
        ["logging/setLevel"] = "set_log_level", ["subscriptions/listen"] = "listened for",
        [""] = "visible ASCII", ["vendor/a b"] = "visible ASCII", ["rpc.discover"] = "JSON-RPC",
        [string.rep("m", 257)] = "visible ASCII" } do
        for _, send in ipairs { "request", "notify" } do
          local none, message, err = conn[send](conn, method, {})
          assert.is_nil(none)
          assert.equal("invalid", err.kind, method)
          assert.equal("method", err.field)
          assert.truthy(message:find(why, 1, true), message)
        end
      end
      local none, _, err = conn:notify("notifications/cancelled", { requestId = 1 })
      assert.is_nil(none)
      assert.equal("invalid", err.kind)
      -- nothing of those reached the server (the opening came with the seen call itself)
      assert.same({ { method = "notifications/initialized", params = {} } }, seen(conn).notices)
      assert.has_error(function() conn:request(42) end, "request: method must be a string")
      assert.has_error(function() conn:request("vendor/echo", "x") end,
        "request: params must be a table of named values (or nil)")
      assert.has_error(function() conn:notify("vendor/echo", { 1, 2 }) end,
        "notify: params must be a table of named values (or nil)")
    end)
  end)

  describe("pages", function()
    for _, era in ipairs { "legacy", "modern" } do
      it(era .. ": tools_page: one request a page, the cursor sent as it came, the tools list_tools gives", function()
        local conn <close> = connect(era)
        local first = assert(conn:tools_page())
        assert.equal("page 2/=", first.next_cursor)
        assert.equal(era, first.era)
        local names = {}
        for i, tool in ipairs(first.items) do names[i] = tool.name end
        assert.same({ "log", "stderr", "seen" }, names)
        local second = assert(conn:tools_page(first.next_cursor))
        assert.is_nil(second.next_cursor)
        assert.equal("later", second.items[1].name)
        local whole = assert(conn:list_tools())
        assert.same(json.decode(json.encode(whole[4])), json.decode(json.encode(second.items[1])))
        assert.same({ type = "object" }, second.items[1].inputSchema)
        -- what a listing teaches the connection is learned from a page too: the output schema
        local outcome = assert(conn:call_tool("later", { delay = 0 }))
        assert.same({ n = 1 }, outcome.structured)
        local text = assert(conn:tools_page(nil, { schemas = "text" }))
        assert.equal('{"type":"object"}', text.items[1].inputSchema)
        local none, _, err = conn:tools_page("no such cursor")
        assert.is_nil(none)
        assert.equal("rpc_error", err.kind)
      end)

      it(era .. ": resources, templates and prompts page by page, shaped as the whole listings", function()
        local conn <close> = connect(era)
        local first = assert(conn:resources_page())
        assert.equal("r2", first.next_cursor)
        assert.equal(1, #first.items)  -- the entry without a uri is left out, as list_resources does
        assert.equal("file:///a", first.items[1].uri)
        assert.is_nil(first.items[1].name:find("\27", 1, true))
        local second = assert(conn:resources_page("r2"))
        assert.is_nil(second.next_cursor)
        assert.equal("file:///b", second.items[1].uri)
        local whole = assert(conn:list_resources())
        assert.same({ first.items[1], second.items[1] }, { whole[1], whole[2] })
        local templates = assert(conn:resource_templates_page())
        assert.equal("file:///{path}", templates.items[1].uriTemplate)
        assert.same(assert(conn:list_resource_templates()), templates.items)
        local prompts = assert(conn:prompts_page())
        assert.is_nil(prompts.items[1].description:find("\27", 1, true))
        assert.is_nil(prompts.items[1].arguments[1].description:find("\27", 1, true))
        assert.same(assert(conn:list_prompts()), prompts.items)
      end)
    end

    it("takes a cursor as a string or nothing", function()
      local conn <close> = connect("legacy")
      for _, method in ipairs { "tools_page", "resources_page", "resource_templates_page", "prompts_page" } do
        assert.has_error(function() conn[method](conn, 2) end,
          method .. ": cursor must be nil (the first page) or the string a page gave as next_cursor")
        assert.has_error(function() conn[method](conn, { cursor = "x" }) end)
      end
    end)
  end)

  describe("between operations: mcp.engine.step", function()
    for _, era in ipairs { "legacy", "modern" } do
      it(era .. ": hands out the notices the server wrote after its answer", function()
        local methods, kinds, logs = {}, {}, {}
        local conn <close> = connect(era, {
          on_notification = function(method, params) methods[#methods + 1] = { method, params } end,
          on_change = function(kind) kinds[#kinds + 1] = kind end,
          on_log = function(level, _, data) logs[#logs + 1] = level .. " " .. tostring(data) end, cache = true })
        assert(conn:list_tools())
        assert(conn:call_tool("later", { delay = 0.1 }))
        assert.same({}, methods)
        local deadline = core.now() + 5
        while #methods < 3 and core.now() < deadline do mcp.engine.step(0.05) end
        assert.same({ "notifications/tools/list_changed", "notifications/vendor/ping", "notifications/message" },
          { methods[1][1], methods[2][1], methods[3][1] })
        assert.equal("ping", methods[2][2].text:sub(1, 4))
        assert.is_nil(methods[2][2].text:find("\27", 1, true))
        assert.same({ "tools" }, kinds)
        assert.same({ "error late" }, logs)
      end)
    end

    it("a handler that raises is logged, the engine and the connection go on", function()
      local warnings = {}
      local conn <close> = connect("legacy", { on_notification = function() error("boom") end,
        log = function(_, text) warnings[#warnings + 1] = text end })
      assert(conn:call_tool("later", { delay = 0 }))
      local deadline = core.now() + 5
      while #warnings < 3 and core.now() < deadline do mcp.engine.step(0.05) end
      assert.equal(3, #warnings)
      assert.truthy(warnings[1]:find("on_notification handler raised", 1, true))
      assert.equal("written", assert(conn:call_tool("stderr", { text = "" })).text)
    end)

    it("takes a timeout in seconds, as step(t) and e:step(t)", function()
      local started = core.now()
      mcp.engine.step(0.05)
      mcp.engine:step(0.05)
      mcp.engine.step()
      assert.is_true(core.now() - started < 2)
      assert.has_error(function() mcp.engine.step(-1) end, "step: timeout must be a number of seconds, 0 or more")
      assert.has_error(function() mcp.engine.step("1") end, "step: timeout must be a number of seconds, 0 or more")
    end)
  end)
end)
