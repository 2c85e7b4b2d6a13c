-- OAuth against a scripted authorization server (spec/support/oauth_server.mjs,
-- started and stopped by this file on 127.0.0.1): what the official suite's
-- scenarios do not cover — refresh on expiry, a stalled token endpoint, metadata
-- naming addresses the host gate refuses, the missing human step, and a token
-- that never appears in any output.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local hostgate = require "mcpclient.hostgate"
local read_all = require("support.shell").read_all

local json = core.json
local MARK = "oauthspecSECRET"

local server

local function start()
  local stderr = os.tmpname()
  local pipe = assert(io.popen(string.format(
    "exec sh -c 'echo $$; exec node spec/support/oauth_server.mjs 2>%s'", stderr), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))))
  local port = (pipe:read("l") or ""):match("^listening (%d+)$")
  if not port then
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    error("the OAuth server did not start: " .. read_all(stderr))
  end
  return { pipe = pipe, pid = pid, port = tonumber(port), stderr = stderr }
end

local function base() return "http://127.0.0.1:" .. server.port end

local function control(method, path, body)
  local leg <close> = core.http_leg()
  local res = assert(leg:send { method = method, url = base() .. path, body = body, timeout_ms = 5000 })
  assert.equal(200, res.status)
  return json.decode(res.body)
end

local function configure(values) control("POST", "/_config", json.encode(values)) end

-- What the server saw since the last configure: paths (and grants) in order.
local function seen()
  local list = {}
  for _, r in ipairs(control("GET", "/_state")) do
    list[#list + 1] = r.grant_type and (r.path .. " " .. r.grant_type) or r.path
  end
  return list
end

local function count(list, entry)
  local n = 0
  for _, e in ipairs(list) do if e == entry then n = n + 1 end end
  return n
end

-- A leg that records every URL the client sends to, around the real one.
local function recording_leg(urls)
  local leg = core.http_leg()
  return setmetatable({
    send = function(_, request)
      urls[#urls + 1] = request.url
      return leg:send(request)
    end,
    close = function() return leg:close() end,
  }, {})
end

local function connect(extra)
  local options = {
    url = base() .. "/mcp", identifier = "oauthspec", health = mcp.health.discard,
    oauth = { authorize = mcp.oauth.follow_immediate_redirect },
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

describe("OAuth against a scripted authorization server #integration", function()
  setup(function() server = start() end)
  teardown(function()
    if server then
      os.execute("kill " .. server.pid .. " 2>/dev/null")
      server.pipe:close()
      os.remove(server.stderr)
    end
  end)
  before_each(function() configure { expires_in = 3600, authorization_server = json.null, stall_token = false } end)

  it("authorizes on the first 401 with PKCE, then resends the refused request", function()
    local conn <close> = connect()
    local tools = assert(conn:list_tools())
    assert.equal("echo", tools[1].name)
    local log = seen()
    assert.equal(1, count(log, "/authorize"))
    assert.equal(1, count(log, "/token authorization_code"))
    assert.equal("/mcp", log[1])       -- refused, then the flow, then the same request again
    assert.equal("/mcp", log[#log])
  end)

  it("refreshes an expired token before the next request, without a new authorization", function()
    local now = 1000
    local conn <close> = connect { clock = function() return now end }
    assert(conn:list_tools())
    configure { expires_in = 3600 }
    now = now + 3600
    assert(conn:list_tools())
    local log = seen()
    assert.equal(1, count(log, "/token refresh_token"))
    assert.equal(0, count(log, "/authorize"))
    assert.equal(0, count(log, "/token authorization_code"))
  end)

  it("ends a stalled token endpoint with the operation's budget", function()
    configure { stall_token = true }
    local conn <close> = connect()
    local started = core.now()
    local result, message, err = conn:list_tools { budget = 1 }
    local elapsed = core.now() - started
    assert.is_nil(result)
    assert.equal("timeout", err.kind, message)
    assert.is_true(elapsed < 2.5, "took " .. elapsed .. " s")
  end)

  it("refuses metadata that names a link-local authorization server before any request to it", function()
    configure { authorization_server = "https://169.254.169.254/" }
    local urls, asked = {}, {}
    local conn <close> = connect {
      transport = recording_leg(urls),
      host_gate = function(host, address, options)
        asked[#asked + 1] = address
        return hostgate.default(host, address, options)
      end,
    }
    local result, message, err = conn:list_tools()
    assert.is_nil(result)
    assert.equal("refused_host", err.kind, message)
    assert.equal("169.254.169.254", err.host)
    assert.truthy(table.concat(asked, " "):find("169.254.169.254", 1, true))
    for _, url in ipairs(urls) do assert.is_nil(url:find("169.254", 1, true), url) end
  end)

  it("refuses an authorization server that is neither https nor on loopback, without resolving it", function()
    configure { authorization_server = "http://as.example.com/" }
    local urls, asked = {}, {}
    local conn <close> = connect {
      transport = recording_leg(urls),
      host_gate = function(host, address, options)
        asked[#asked + 1] = host
        return hostgate.default(host, address, options)
      end,
    }
    local result, message, err = conn:list_tools()
    assert.is_nil(result)
    assert.equal("authorization_failed", err.kind, message)
    assert.is_nil(table.concat(asked, " "):find("example", 1, true))
    for _, url in ipairs(urls) do assert.is_nil(url:find("example", 1, true), url) end
  end)

  it("without an authorize callback fails with authorization_required, registering nothing", function()
    local conn <close> = connect { oauth = {} }
    local result, message, err = conn:list_tools()
    assert.is_nil(result)
    assert.equal("authorization_required", err.kind, message)
    assert.equal("oauthspec", err.server)
    local log = seen()
    assert.equal(0, count(log, "/register"))
    assert.equal(0, count(log, "/authorize"))
  end)

  it("refuses an authorization response whose state is not the request's", function()
    local conn <close> = connect { oauth = { authorize = function() return "some-code", "another-state" end } }
    local result, message, err = conn:list_tools()
    assert.is_nil(result)
    assert.equal("authorization_failed", err.kind, message)
    assert.equal(0, count(seen(), "/token authorization_code"))
  end)

  it("never prints a token: results, messages, err fields and log lines of a whole session", function()
    local out = os.tmpname()
    local ok = os.execute(string.format("lua5.4 spec/support/oauth_client.lua %d >%s 2>&1", server.port, out))
    local text = read_all(out)
    os.remove(out)
    assert.is_true(ok == true or ok == 0, text)
    assert.truthy(text:find("tools\t[{", 1, true), text)          -- the session did run
    assert.truthy(text:find("err.kind\ttimeout", 1, true), text)  -- and its failure was printed
    assert.truthy(text:find("/token", 1, true) == nil)
    assert.is_nil(text:find(MARK, 1, true), "a token was printed:\n" .. text)
    local log = seen()
    assert.equal(1, count(log, "/token refresh_token"))           -- the refresh happened in between
  end)
end)
