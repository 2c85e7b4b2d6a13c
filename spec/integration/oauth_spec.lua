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
  before_each(function() configure {} end)

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

  describe("checks the authorization response whole", function()
    it("refuses a response without state, before the code goes anywhere", function()
      configure { drop_state = true }
      local conn <close> = connect()
      local result, message, err = conn:list_tools()
      assert.is_nil(result)
      assert.equal("authorization_failed", err.kind, message)
      assert.truthy(err.detail:find("no state", 1, true), err.detail)
      assert.equal(0, count(seen(), "/token authorization_code"))
    end)

    it("takes an iss equal to the issuer where the server advertises it", function()
      configure { iss_supported = true, iss = "exact" }
      local conn <close> = connect()
      assert(conn:list_tools())
      assert.equal(1, count(seen(), "/token authorization_code"))
    end)

    for _, case in ipairs {
      { iss = "none", why = "names no issuer" },
      { iss = "other", why = "another issuer" },
      { iss = "slash", why = "another issuer" },   -- a trailing slash is another string
    } do
      it("refuses an advertised iss that is " .. case.iss .. ", sending no code", function()
        configure { iss_supported = true, iss = case.iss }
        local conn <close> = connect()
        local result, message, err = conn:list_tools()
        assert.is_nil(result)
        assert.equal("authorization_failed", err.kind, message)
        assert.truthy(err.detail:find(case.why, 1, true), err.detail)
        assert.equal(0, count(seen(), "/token authorization_code"))
      end)
    end

    it("compares an iss the server did not advertise all the same", function()
      configure { iss = "slash" }
      local conn <close> = connect()
      local result, _, err = conn:list_tools()
      assert.is_nil(result)
      assert.equal("authorization_failed", err.kind)
      assert.equal(0, count(seen(), "/token authorization_code"))
    end)

    for _, case in ipairs {
      { name = "with a trailing slash added", issuer = function() return base() .. "/" end },
      { name = "of another server", issuer = function() return "http://127.0.0.1:1" end },
      { name = "missing", issuer = function() return "" end },
    } do
      it("never uses authorization server metadata whose issuer is " .. case.name, function()
        configure { metadata_issuer = case.issuer() }
        local conn <close> = connect()
        local result, message, err = conn:list_tools()
        assert.is_nil(result)
        assert.equal("authorization_failed", err.kind, message)
        assert.truthy(err.detail:find("issuer", 1, true), err.detail)
        local log = seen()
        for _, path in ipairs { "/authorize", "/register", "/token authorization_code" } do
          assert.equal(0, count(log, path), path)
        end
      end)
    end
  end)

  describe("never hands back a secret it sent as text", function()
    -- What the client put in its token requests' forms, as sent.
    local function capturing_leg(sent)
      local leg = core.http_leg()
      return setmetatable({
        send = function(_, request)
          if request.secret_body then
            for name, value in pairs(require("mcpclient.oauth.fetch").query("?" .. request.secret_body)) do
              sent[name] = value
            end
          end
          return leg:send(request)
        end,
        close = function() return leg:close() end,
      }, {})
    end

    local function assert_redacted(secret, message, err)
      assert.truthy(#secret >= 16, secret)
      for _, text in ipairs { message, err.message, err.detail } do
        assert.is_nil(text:find(secret, 1, true), text)
        assert.is_nil(text:find(secret:sub(1, 12), 1, true), text)
        assert.truthy(text:find("[redacted]", 1, true), text)
      end
    end

    for _, field in ipairs { "code", "code_verifier" } do
      it("replaces the " .. field .. " a token endpoint echoes in error and error_description", function()
        configure { echo_field = field }
        local sent = {}
        local conn <close> = connect { transport = capturing_leg(sent) }
        local result, message, err = conn:list_tools()
        assert.is_nil(result)
        assert.equal("authorization_failed", err.kind, message)
        assert.truthy(message:find("is not valid", 1, true), message)
        assert_redacted(sent[field], message, err)
      end)
    end

    -- The refresh, client secret and assertion requests, made directly (a refused refresh is not
    -- reported: it starts a new authorization instead).
    for _, case in ipairs {
      { field = "refresh_token", form = { { "grant_type", "refresh_token" } }, client = { method = "none" } },
      { field = "client_secret", form = { { "grant_type", "client_credentials" } },
        client = { method = "client_secret_post" } },
      { field = "assertion", form = { { "grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer" } },
        client = { method = "none" } },
      { field = "subject_token", form = { { "grant_type", "urn:ietf:params:oauth:grant-type:token-exchange" } },
        client = { method = "none" } },
    } do
      it("replaces the " .. case.field .. " a token endpoint echoes", function()
        local grants = require "mcpclient.oauth.grants"
        local Deadline = require "mcpclient.deadline"
        configure { echo_field = case.field }
        local conn <close> = connect()
        local secret = "S3cr3t/" .. MARK .. " +value&more"
        local form = { case.form[1] }
        local client = { client_id = "spec-client", method = case.client.method }
        if case.field == "client_secret" then client.client_secret = secret else form[2] = { case.field, secret } end
        -- the OAuth context of a connection is its HTTP channel's config
        local token, message, err = grants.token(conn.session.channel.config, { deadline = Deadline.open(5, core.now) },
          base() .. "/token", form, client, { issuer = base() })
        assert.is_nil(token)
        assert.equal("authorization_failed", err.kind, message)
        assert.truthy(message:find("is not valid", 1, true), message)
        for _, text in ipairs { message, err.message, err.detail } do
          assert.is_nil(text:find(MARK, 1, true), text)
          assert.is_nil(text:find("S3cr3t", 1, true), text)
          assert.truthy(text:find("[redacted]", 1, true), text)
        end
      end)
    end
  end)

  describe("obeys the operation", function()
    it("ends a stalled token request at the cancel hook, not at the budget", function()
      configure { stall_token = true }
      local conn <close> = connect()
      local started = core.now()
      local fired
      local result, message, err = conn:list_tools { budget = 10, cancel = function()
        if core.now() - started >= 0.5 then fired = fired or core.now(); return true end
        return false
      end }
      local ended = core.now()
      assert.is_nil(result)
      assert.equal("cancelled", err.kind, message)
      assert.is_false(err.in_flight)
      assert.truthy(fired)
      assert.is_true(ended - fired < 0.3, "returned " .. (ended - fired) .. " s after the cancel")
    end)

    it("lets the other operations of a gather run while a token request is out", function()
      local conn <close> = connect()
      local other <close> = connect()
      assert(other:list_tools())   -- authorized: its calls need no token request
      configure { token_delay_ms = 800 }
      local first_ended, other_ended
      local results = mcp.gather {
        function() local r = conn:list_tools(); first_ended = core.now(); return r end,
        function()
          local r
          for _ = 1, 10 do r = other:list_tools() end
          other_ended = core.now()
          return r
        end,
      }
      assert.truthy(results[1][1], results[1][2])
      assert.truthy(results[2][1], results[2][2])
      assert.is_true(other_ended < first_ended - 0.4,
        string.format("the other calls ended %.2f s before the authorization", first_ended - other_ended))
    end)

    it("shares one authorization between two operations refused at once", function()
      configure { no_refresh = true }
      local conn <close> = connect()
      assert(conn:list_tools())
      configure { no_refresh = true, revoke = true, token_delay_ms = 200 }
      local results = mcp.gather {
        function() return conn:list_tools() end,
        function() return conn:list_tools() end,
      }
      assert.truthy(results[1][1], results[1][2])
      assert.truthy(results[2][1], results[2][2])
      local log = seen()
      assert.equal(1, count(log, "/authorize"))
      assert.equal(1, count(log, "/token authorization_code"))
    end)

    it("shares one refresh between two operations refused at once", function()
      local conn <close> = connect()
      assert(conn:list_tools())
      configure { revoke = true, token_delay_ms = 200 }
      local results = mcp.gather {
        function() return conn:list_tools() end,
        function() return conn:list_tools() end,
      }
      assert.truthy(results[1][1], results[1][2])
      assert.truthy(results[2][1], results[2][2])
      local log = seen()
      assert.equal(1, count(log, "/token refresh_token"))
      assert.equal(0, count(log, "/authorize"))
    end)

    it("shares one refresh between two operations that find the token expired", function()
      local now = 1000
      local conn <close> = connect { clock = function() return now end }
      assert(conn:list_tools())
      configure { token_delay_ms = 200 }
      now = now + 3600
      local results = mcp.gather {
        function() return conn:list_tools() end,
        function() return conn:list_tools() end,
      }
      assert.truthy(results[1][1], results[1][2])
      assert.truthy(results[2][1], results[2][2])
      assert.equal(1, count(seen(), "/token refresh_token"))
    end)
  end)

  describe("mcp.oauth.loopback_authorize", function()
    it("signs in through a browser's redirect to its listener", function()
      local browser
      local shown = {}
      local signin <close> = assert(mcp.oauth.loopback_authorize { wait = 20, announce = function(url, info)
        shown[#shown + 1] = info
        -- the person at the browser: curl follows the authorization server's redirect to the listener
        browser = assert(io.popen("curl -s -L -o /dev/null " .. string.format("%q", url) .. " 2>&1"))
      end })
      assert.truthy(signin.redirect_uri:match("^http://127%.0%.0%.1:%d+/callback$"), signin.redirect_uri)
      local conn <close> = connect { oauth = { authorize = signin.authorize, redirect_uri = signin.redirect_uri } }
      local tools, message = conn:list_tools()
      if browser then browser:close() end
      assert.truthy(tools, message)
      assert.equal(1, #shown)
      assert.equal(signin.port, shown[1].port)
      assert.equal("oauthspec", shown[1].server)
      assert.equal(1, count(seen(), "/token authorization_code"))
    end)

    it("stops waiting for the browser at the operation's cancel hook", function()
      local signin <close> = assert(mcp.oauth.loopback_authorize { announce = function() end })
      local conn <close> = connect { oauth = { authorize = signin.authorize, redirect_uri = signin.redirect_uri } }
      local started, fired = core.now(), nil
      local result, message, err = conn:list_tools { budget = 10, cancel = function()
        if core.now() - started >= 0.5 then fired = fired or core.now(); return true end
        return false
      end }
      local ended = core.now()
      assert.is_nil(result)
      assert.equal("cancelled", err.kind, message)
      assert.is_true(ended - fired < 0.3, "returned " .. (ended - fired) .. " s after the cancel")
    end)

    it("ends the wait with the budget: authorization_required, saying what to do", function()
      local signin <close> = assert(mcp.oauth.loopback_authorize { announce = function() end })
      local conn <close> = connect { oauth = { authorize = signin.authorize, redirect_uri = signin.redirect_uri } }
      local started = core.now()
      local result, message, err = conn:list_tools { budget = 1 }
      assert.is_nil(result)
      assert.is_true(core.now() - started < 1.5)
      assert.equal("authorization_required", err.kind, message)
      assert.truthy(message:find("`mcpclient login oauthspec`", 1, true), message)
      assert.truthy(message:find("oauth.authorize callback", 1, true), message)
    end)

    it("listens on a fixed port, and says so when it is taken", function()
      local first <close> = assert(mcp.oauth.loopback_authorize { announce = function() end })
      local again, message, err = mcp.oauth.loopback_authorize { port = first.port, announce = function() end }
      assert.is_nil(again)
      assert.equal("configuration", err.kind)
      assert.truthy(message:find("port " .. first.port, 1, true), message)
      local port = first.port
      first:close()
      local fixed <close> = assert(mcp.oauth.loopback_authorize { port = port, announce = function() end })
      assert.equal("http://127.0.0.1:" .. port .. "/callback", fixed.redirect_uri)
      assert.has_error(function() mcp.oauth.loopback_authorize {} end, "loopback_authorize: announce is required")
      assert.has_error(function() mcp.oauth.loopback_authorize { announce = print, port = -1 } end)
      assert.has_error(function() mcp.oauth.loopback_authorize { announce = print, colour = 1 } end)
    end)
  end)
end)
