-- The host's own header lines (connect's `headers`) on the wire, through the real C leg: on every
-- HTTP request to the server (the opening, the notification, logging/setLevel, the GET stream,
-- each POST, the DELETE that ends the session), and only on the connection that set them. And
-- what a 2025 server sends on its GET stream between operations, handed out by mcp.engine.step.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local peers = require "support.peers"

-- Start spec/support/headers_server.mjs; fn(url) runs; the server is stopped by its PID and every
-- request line it printed is returned.
local function with_server(fn)
  local pipe = assert(io.popen("exec sh -c 'echo $$; exec node \"$0\"' spec/support/headers_server.mjs"))
  local pid = assert(tonumber(pipe:read("l")), "no pid from the server's shell")
  local port = assert(tonumber(pipe:read("l")), "the server printed no port")
  local ok, err = pcall(fn, "http://127.0.0.1:" .. port .. "/mcp")
  os.execute("kill " .. pid)
  local lines = {}
  for l in pipe:lines() do lines[#lines + 1] = l end
  pipe:close()
  assert(ok, err)
  return lines
end

local function connect(url, extra)
  local options = { identifier = "hdr", url = url, health = mcp.health.discard, budget = 10,
    on_log = function() end, log_level = "info", protocol = "2025-11-25" }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

-- The lines of requests of `kind` ("GET", "DELETE", or a JSON-RPC method).
local function of(lines, kind)
  local found = {}
  for _, l in ipairs(lines) do
    local http_method, method = l:match("^(%S+) (%S+)")
    if http_method == kind or method == kind then found[#found + 1] = l end
  end
  return found
end

describe("connect's headers on the wire #integration", function()
  setup(function() peers.require_available() end)

  it("go with every request of the connection, the GET stream and the DELETE included", function()
    local lines = with_server(function(url)
      local conn = connect(url, { headers = { ["X-Tenant"] = "acme", ["X-Trace"] = "t 1" } })
      assert(conn:list_tools())
      assert(conn:list_tools())
      conn:close()
    end)
    for _, kind in ipairs { "initialize", "notifications/initialized", "logging/setLevel", "tools/list", "GET",
      "DELETE" } do
      assert.is_true(#of(lines, kind) > 0, kind .. " reached the server: " .. table.concat(lines, "\n"))
    end
    for _, l in ipairs(lines) do
      if not l:find("^POST server/discover") then
        assert.truthy(l:find("x%-tenant=acme x%-trace=t 1 auth=no"), l)
      end
    end
  end)

  it("are the connection's own: another connection sends none", function()
    local lines = with_server(function(url)
      local conn = connect(url)
      assert(conn:list_tools())
      conn:close()
    end)
    assert.is_true(#of(lines, "GET") > 0 and #of(lines, "DELETE") > 0, table.concat(lines, "\n"))
    for _, l in ipairs(lines) do assert.truthy(l:find("x%-tenant=%- x%-trace=%- auth=no"), l) end
  end)

  it("between operations, mcp.engine.step holds the 2025 session's GET stream for what comes", function()
    local methods, kinds, logs = {}, {}, {}
    local lines = with_server(function(url)
      local conn = connect(url, { headers = { ["X-Tenant"] = "acme" },
        on_notification = function(method) methods[#methods + 1] = method end,
        on_change = function(kind) kinds[#kinds + 1] = kind end,
        on_log = function(level, _, data) logs[#logs + 1] = level .. " " .. tostring(data) end })
      assert(conn:list_tools())
      assert.equal("later", assert(conn:call_tool("later", {})).text)
      local until_s = core.now() + 5
      while #methods < 2 and core.now() < until_s do mcp.engine.step(0.2) end
      conn:close()
    end)
    assert.same({ "notifications/tools/list_changed", "notifications/message" }, methods)
    assert.same({ "tools" }, kinds)
    assert.same({ "error late" }, logs)
    -- the GET of the step carries the connection's headers as every other request
    for _, l in ipairs(of(lines, "GET")) do assert.truthy(l:find("x%-tenant=acme", 1), l) end
  end)

  it("on_notification alone holds the 2025 session's GET stream during an operation", function()
    local methods = {}
    with_server(function(url)
      local conn = mcp.connect { identifier = "hdr", url = url, health = mcp.health.discard, budget = 10,
        protocol = "2025-11-25", on_notification = function(method) methods[#methods + 1] = method end }
      assert.equal("during", assert(conn:call_tool("during", {})).text)
      conn:close()
    end)
    assert.same({ "notifications/vendor/during" }, methods)
  end)

  it("between operations, nothing is asked of the server when nothing listens", function()
    local lines = with_server(function(url)
      local conn = mcp.connect { identifier = "hdr", url = url, health = mcp.health.discard, budget = 10,
        protocol = "2025-11-25" }
      assert(conn:list_tools())
      for _ = 1, 3 do mcp.engine.step(0.05) end
      conn:close()
    end)
    assert.same({}, of(lines, "GET"))
  end)

  it("go beside a credential, which stays its own header line", function()
    local lines = with_server(function(url)
      local conn = connect(url, { headers = { ["X-Tenant"] = "acme" },
        auth = { credential = "tenant-token" },
        resolver = function(reference) return reference == "tenant-token" and "tok" or nil end })
      assert(conn:list_tools())
      conn:close()
    end)
    for _, l in ipairs(of(lines, "tools/list")) do assert.truthy(l:find("x%-tenant=acme x%-trace=%- auth=yes"), l) end
  end)
end)
