-- The peer harness itself (spec/support/peers.lua): each real server starts, binds 127.0.0.1 only,
-- answers a raw initialize POST (sent with the curl command, not with mcpclient) in the media type
-- each is known to answer (JSON or an event stream), and is gone after stop().
local peers = require "support.peers"

local INITIALIZE = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
  .. '"capabilities":{},"clientInfo":{"name":"peers-smoke","version":"0.1"}}}'

local shell_quote = require("support.shell").quote

-- POST `body` to `url` with curl; returns status, headers (lower-case names), body.
local function post(url, body, extra_headers)
  local cmd = { "curl -sS --max-time 10 -D - -o - -X POST",
    "-H 'Content-Type: application/json'", "-H 'Accept: application/json, text/event-stream'" }
  for _, h in ipairs(extra_headers or {}) do cmd[#cmd + 1] = "-H " .. shell_quote(h) end
  cmd[#cmd + 1] = "--data-binary " .. shell_quote(body)
  cmd[#cmd + 1] = shell_quote(url) .. " 2>&1"
  local pipe = assert(io.popen(table.concat(cmd, " ")))
  local raw = pipe:read("a")
  pipe:close()
  local head, rest = raw:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "curl got no HTTP answer: " .. raw)
  local status = tonumber(head:match("^HTTP/[%d.]+ (%d+)"))
  local headers = {}
  for name, value in head:gmatch("\r?\n([^:\r\n]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
  return status, headers, rest
end

-- The local addresses (hex "0100007F" style) of TCP sockets listening on `port`, from /proc.
local function listeners(port)
  local found = {}
  for _, file in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    local f = io.open(file, "r")
    if f then
      for line in f:lines() do
        local addr, p, state = line:match("^%s*%d+:%s+(%x+):(%x+)%s+%x+:%x+%s+(%x+)")
        if addr and tonumber(p, 16) == port and state == "0A" then found[#found + 1] = addr end
      end
      f:close()
    end
  end
  return found
end

local function gone(pid)
  return not peers.alive(pid) and not os.execute("kill -0 " .. pid .. " 2>/dev/null")
end

local function initialize_result(body)
  return body:match('"protocolVersion"%s*:%s*"([^"]+)"')
end

describe("the MCP peers #integration", function()
  local started = {}

  local function start(kind, opts)
    assert(peers.available(), "the MCP peers are not installed (spec/peers/node_modules): run `make peers`")
    local p = peers.start(kind, opts)
    started[#started + 1] = p
    return p
  end

  after_each(function()
    for _, p in ipairs(started) do p:stop() end
    started = {}
  end)

  it("are installed (run `make peers` if this fails)", function()
    assert.is_true(peers.available(),
      "the MCP peers are not installed (" .. peers.node_modules .. "): run `make peers`")
    local node22 = assert(peers.node22())
    local pipe = assert(io.popen(shell_quote(node22) .. " --version"))
    local version = pipe:read("l")
    pipe:close()
    assert.matches("^v22%.", version)
  end)

  it("sdk-stateless answers initialize with JSON, no session, and logs what it received", function()
    local p = start("sdk-stateless", { log = true })
    assert.equals("http://127.0.0.1:" .. p.port .. "/mcp", p.url)
    assert.same({ "0100007F" }, listeners(p.port))
    local status, headers, body = post(p.url, INITIALIZE)
    assert.equals(200, status)
    assert.matches("^application/json", headers["content-type"])
    assert.is_nil(headers["mcp-session-id"])
    assert.equals("2025-06-18", initialize_result(body))
    assert.matches('"id"%s*:%s*1', body)
    assert.same({ "POST initialize 1 - -" }, p.log_lines())

    local pid = p.pid
    p.stop()
    assert.is_true(gone(pid))
  end)

  it("sdk-session answers initialize with an event stream and a session id", function()
    local p = start("sdk-session", { log = true })
    assert.same({ "0100007F" }, listeners(p.port))
    local status, headers, body = post(p.url, INITIALIZE)
    assert.equals(200, status)
    assert.matches("^text/event%-stream", headers["content-type"])
    local session = headers["mcp-session-id"]
    assert.matches("^%x+%-%x+%-%x+%-%x+%-%x+$", session)
    assert.matches("event: message\ndata: {", body, 1, true)
    assert.equals("2025-06-18", initialize_result(body))

    -- The session is real: a made-up one is refused with a 404, as the SDK server answers an unknown session.
    local status2, _, body2 = post(p.url, '{"jsonrpc":"2.0","id":2,"method":"ping"}',
      { "Mcp-Session-Id: 00000000-0000-0000-0000-000000000000", "MCP-Protocol-Version: 2025-06-18" })
    assert.equals(404, status2)
    assert.matches('"code"%s*:%s*%-32001', body2)
    assert.same({
      "POST initialize 1 - -",
      "POST ping 2 00000000-0000-0000-0000-000000000000 2025-06-18",
    }, p.log_lines())

    local pid = p.pid
    p:stop()
    assert.is_true(gone(pid))
  end)

  it("everything answers initialize with an event stream and a session id, on 127.0.0.1 only", function()
    local p = start("everything")
    assert.is_nil(p.log)
    assert.same({ "0100007F" }, listeners(p.port))
    local status, headers, body = post(p.url, INITIALIZE)
    assert.equals(200, status)
    assert.matches("^text/event%-stream", headers["content-type"])
    assert.is_string(headers["mcp-session-id"])
    assert.matches("event: message", body, 1, true)
    assert.equals("2025-06-18", initialize_result(body))
    assert.matches('"name"%s*:%s*"mcp%-servers/everything"', body)

    local pid = p.pid
    p.stop()
    assert.is_true(gone(pid))
  end)

  it("stop() is idempotent and a failed start names the cause", function()
    local a = start("sdk-stateless")
    local ok, err = pcall(peers.start, "sdk-session", { port = a.port })
    assert.is_false(ok)
    assert.matches("EADDRINUSE", err, 1, true)
    a.stop()
    a.stop()
    assert.is_true(gone(a.pid))
    assert.has_error(function() peers.start("nonesuch") end, "unknown peer kind nonesuch")
  end)
end)
