-- connect's headers, checked when the connection is made and sent with every request to the
-- server (through a fake leg: every request the channel makes is recorded); the refusals of
-- everything the host may not set, and of headers where there is no HTTP.
local mcp = require "mcpclient"
local Fake = require "support.fake_server"

local function quiet() end

local function connect(fake, extra)
  local options = { identifier = "srv", url = "https://mcp.example.com/mcp", transport = fake, clock = fake.clock,
    health = quiet }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function refused(headers, expected)
  local ok, err = pcall(connect, Fake.new(), { headers = headers })
  assert.is_false(ok)
  assert.truthy(err:find(expected, 1, true), err)
end

describe("connect's headers", function()
  it("go on every request of the connection, the opening, the notification and the DELETE included", function()
    local fake = Fake.new()
    fake:will_handshake("sess-1")
    fake:will_return { tools = require("mcpclient.json").array {} }
    local conn = connect(fake, { headers = { ["X-Tenant"] = "acme", ["x-request-source"] = "agent 7" } })
    assert(conn:list_tools())
    assert.is_true(conn:notify("notifications/vendor", {}))
    conn:close()
    local seen = {}
    for _, r in ipairs(fake.requests) do
      seen[#seen + 1] = r.method or r.http_method
      assert.equal("acme", Fake.header(r, "X-Tenant"), r.method or r.http_method)
      assert.equal("agent 7", Fake.header(r, "x-request-source"))
    end
    assert.same({ "initialize", "notifications/initialized", "tools/list", "notifications/vendor", "DELETE" }, seen)
    -- beside the client's own lines, never instead of them
    assert.equal("sess-1", fake.requests[3].session)
    assert.equal("application/json, text/event-stream", fake.requests[3].accept)
  end)

  it("are sent in the same order every time (sorted by name)", function()
    local fake = Fake.new()
    fake:will_handshake("s")
    local conn = connect(fake, { headers = { ["X-B"] = "2", ["X-A"] = "1", ["X-C"] = "3" } })
    assert(conn:ping())
    local names = {}
    for _, line in ipairs(fake.requests[1].headers) do
      local name = line:match("^(X%-%u):")
      if name then names[#names + 1] = name end
    end
    assert.same({ "X-A", "X-B", "X-C" }, names)
    conn:close()
  end)

  it("refuse the headers the client writes itself, and a secret's, with where it belongs", function()
    for _, name in ipairs { "Authorization", "cookie", "Proxy-Authorization", "DPoP" } do
      refused({ [name] = "x" }, "credentials go through auth (a credential reference) or oauth")
    end
    for _, name in ipairs { "Mcp-Session-Id", "mcp-method", "Host", "Content-Type", "content-length", "Accept",
      "Last-Event-ID", "Transfer-Encoding", "Connection" } do
      refused({ [name] = "x" }, "is written by the client itself")
    end
  end)

  it("refuse names that are no HTTP token and values that would break the line", function()
    refused({ ["X Tenant"] = "a" }, "is not an HTTP header name")
    refused({ ["X:Tenant"] = "a" }, "is not an HTTP header name")
    refused({ [""] = "a" }, "is not an HTTP header name")
    refused({ [1] = "a" }, "is not an HTTP header name")
    refused({ ["X-Tenant"] = "a\r\nX-Evil: 1" }, "holds a CR, LF or NUL")
    refused({ ["X-Tenant"] = "a\nb" }, "holds a CR, LF or NUL")
    refused({ ["X-Tenant"] = "a\0b" }, "holds a CR, LF or NUL")
    refused({ ["X-Tenant"] = "a\27b" }, "holds a control character")
    refused({ ["X-Tenant"] = "" }, "must be 1 to 4096 bytes")
    refused({ ["X-Tenant"] = " a" }, "starts or ends with white space")
    refused({ ["X-Tenant"] = 5 }, "must be a string")
    refused({ ["X-Tenant"] = "a", ["x-tenant"] = "b" }, "named twice")
    -- a tab inside a value is HTTP's own white space
    local fake = Fake.new()
    assert(connect(fake, { headers = { ["X-Tabbed"] = "a\tb" } }))
  end)

  it("are refused for a server started with command, and for an injected channel", function()
    local ok, err = pcall(mcp.connect, { identifier = "x", command = { "true" }, health = quiet,
      headers = { ["X-Tenant"] = "acme" } })
    assert.is_false(ok)
    assert.truthy(err:find("a server started with command (stdio) has no HTTP requests", 1, true), err)
    local channel = {}
    for _, method in ipairs(require("mcpclient.channel.http").CONTRACT) do channel[method] = function() end end
    ok, err = pcall(mcp.connect, { identifier = "x", url = "https://mcp.example.com/mcp", health = quiet,
      channel = channel, headers = { ["X-Tenant"] = "acme" } })
    assert.is_false(ok)
    assert.truthy(err:find("not an injected one", 1, true), err)
  end)
end)
