-- Connections through real proxies this file starts on 127.0.0.1 by PID, each
-- with its own configuration and log (spec/support/proxies.lua): tinyproxy
-- (HTTP: plain forwarding for http targets, CONNECT for https ones) and
-- danted (SOCKS5, the proxy resolving names). The MCP servers are
-- spec/support/hostile_server.mjs, one plain and one HTTPS with certificates
-- of a private CA made by openssl in a temporary directory. The proxies' own
-- logs show what reached them: the traffic of the warm calls, and nothing of
-- what the host gate refused.
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local certs = require "support.certs"
local hostile = require "support.hostile"
local proxies = require "support.proxies"
local shell = require "support.shell"

local quote, read_all = shell.quote, shell.read_all

local WARM_CALLS = 12

describe("proxies #integration", function()
  local dir, plain, secure, tinyproxy, dante

  setup(function()
    dir = shell.tmpdir()
    certs.ca(dir, "ca", "/CN=mcpclient proxy spec CA")
    certs.leaf(dir, "server", "/CN=127.0.0.1", "subjectAltName = IP:127.0.0.1, DNS:localhost\n" .. certs.SERVER, "ca")
    plain = hostile.start("")
    secure = hostile.start("--tls-cert " .. quote(dir .. "/server.pem") .. " --tls-key " .. quote(dir .. "/server.key"))
    tinyproxy = proxies.tinyproxy(dir)
    dante = proxies.dante(dir)
  end)

  teardown(function()
    proxies.stop(tinyproxy)
    proxies.stop(dante)
    hostile.stop(plain)
    hostile.stop(secure)
    if dir then os.execute("rm -rf " .. quote(dir)) end
  end)

  -- Run spec/support/proxy_child.lua with `env` (a shell prefix of NAME=value words) and no other
  -- proxy variable: its output line and its trace lines.
  local function child(env, url, option, auth_reference)
    local err_file = dir .. "/child.err"
    local cmd = string.format("env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY -u all_proxy "
      .. "-u ALL_PROXY -u no_proxy -u NO_PROXY %s MCPCLIENT_TRACE=1 LUA_PATH=%s LUA_CPATH=%s lua5.4 "
      .. "spec/support/proxy_child.lua %s %s %s %s 2>%s", env, quote(package.path), quote(package.cpath), quote(url),
      quote(option or ""), quote(""), auth_reference and quote(auth_reference) or "", quote(err_file))
    local pipe = assert(io.popen(cmd, "r"))
    local out = pipe:read("a")
    pipe:close()
    return out, read_all(err_file)
  end

  local function connect(url, extra)
    local options = { url = url, identifier = "px", health = mcp.health.memory(), budget = 10 }
    for k, v in pairs(extra or {}) do options[k] = v end
    return mcp.connect(options)
  end

  -- What the HTTPS server saw on a path, read directly with the CA trusted.
  local function secure_state(path)
    local leg <close> = core.http_leg()
    local res = assert(leg:send { method = "GET", timeout_ms = 5000, ca_file = dir .. "/ca.pem",
      url = string.format("https://127.0.0.1:%d/_state?path=%s", secure.port, path) })
    return core.json.decode(res.body)
  end

  local function tool_calls(state)
    local n = 0
    for _, r in ipairs(state.requests) do
      if r.method == "tools/call" then n = n + 1 end
    end
    return n
  end

  -- WARM_CALLS calls after the first, none failing; the server saw each once.
  local function warm_calls(conn, state_of)
    for i = 1, WARM_CALLS + 1 do
      local out, message = conn:call_tool("echo", { text = "call " .. i })
      assert.is_table(out, message)
      assert.equal("echo: call " .. i, out.text)
    end
    assert.equal(WARM_CALLS + 1, tool_calls(state_of()))
  end

  describe("an HTTP proxy (tinyproxy)", function()
    it("forwards an http target: every warm call goes through it once and none fails, though it closes "
      .. "its connection after each answer", function()
      local path = "/good/forwarded"
      local before = #proxies.lines(tinyproxy, "POST http://127.0.0.1:" .. plain.port .. path)
      local conn <close> = connect(hostile.url(plain, path), { proxy = tinyproxy.url })
      warm_calls(conn, function() return hostile.state(plain, path) end)
      local seen = #proxies.lines(tinyproxy, "POST http://127.0.0.1:" .. plain.port .. path) - before
      -- initialize, notifications/initialized and the calls: each request went through the proxy once
      assert.equal(#hostile.state(plain, path).requests, seen)
    end)

    it("tunnels an https target with CONNECT: one tunnel, then one exchange per warm call", function()
      local path = "/good/tunnelled"
      local target = "CONNECT 127.0.0.1:" .. secure.port
      local before = #proxies.lines(tinyproxy, target)
      local conn <close> = connect(string.format("https://127.0.0.1:%d%s", secure.port, path),
        { proxy = tinyproxy.url, ca_file = dir .. "/ca.pem" })
      warm_calls(conn, function() return secure_state(path) end)
      assert.equal(1, #proxies.lines(tinyproxy, target) - before)
      -- the proxy saw no request of the tunnel in clear
      assert.same({}, proxies.lines(tinyproxy, path))
    end)

    it("tunnels to a name the proxy resolves; nothing is resolved or pinned here", function()
      local path = "/good/by-name"
      local conn <close> = connect(string.format("https://localhost:%d%s", secure.port, path),
        { proxy = tinyproxy.url, ca_file = dir .. "/ca.pem" })
      local out, message = conn:call_tool("echo", { text = "by name" })
      assert.is_table(out, message)
      assert.equal(1, #proxies.lines(tinyproxy, "CONNECT localhost:" .. secure.port))
    end)

    it("a direct connection and one through the proxy never share a pooled connection", function()
      local pool = core.http_pool()
      local leg <close> = core.http_leg(pool)
      local url = hostile.url(plain, "/_state?path=/pooled")
      local through = "GET " .. url
      local before = #proxies.lines(tinyproxy, through)
      assert.equal(200, assert(leg:send { method = "GET", url = url, timeout_ms = 5000 }).status)
      assert.equal(200, assert(leg:send { method = "GET", url = url, timeout_ms = 5000, proxy = tinyproxy.url }).status)
      assert.equal(200, assert(leg:send { method = "GET", url = url, timeout_ms = 5000 }).status)
      assert.equal(200, assert(leg:send { method = "GET", url = url, timeout_ms = 5000, proxy = tinyproxy.url }).status)
      assert.equal(2, #proxies.lines(tinyproxy, through) - before)
    end)
  end)

  describe("an https:// proxy (spec/support/https_proxy.mjs)", function()
    local pipe, pid, port, log

    setup(function()
      log = dir .. "/https_proxy.log"
      pipe = assert(io.popen(string.format("exec sh -c %s", quote(string.format(
        "echo $$; exec node spec/support/https_proxy.mjs %s %s 2>%s", quote(dir .. "/server.pem"),
        quote(dir .. "/server.key"), quote(log)))), "r"))
      pid = assert(math.tointeger(tonumber(pipe:read("l"))))
      port = assert(tonumber((pipe:read("l") or ""):match("^listening (%d+)$")), "the https proxy did not start")
    end)

    teardown(function()
      if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
      if pipe then pipe:close() end
    end)

    it("is spoken to in TLS verified with ca_file, and tunnels to the server inside it", function()
      local path = "/good/https-proxy"
      local url = string.format("https://127.0.0.1:%d%s", secure.port, path)
      local conn <close> = connect(url, { proxy = "https://127.0.0.1:" .. port, ca_file = dir .. "/ca.pem" })
      warm_calls(conn, function() return secure_state(path) end)
      local tunnels = select(2, read_all(log):gsub("CONNECT 127%.0%.0%.1:" .. secure.port, ""))
      assert.equal(1, tunnels)
    end)

    it("without the CA that signed the proxy's certificate fails as tls, before any tunnel", function()
      local before = read_all(log)
      local conn <close> = connect(string.format("https://127.0.0.1:%d/good/https-proxy-untrusted", secure.port),
        { proxy = "https://127.0.0.1:" .. port })
      local out, message, err = conn:call_tool("echo", { text = "x" })
      assert.is_nil(out)
      assert.equal("tls", err.kind, message)
      assert.equal(before, read_all(log))
    end)
  end)

  describe("a proxy that wants credentials (tinyproxy with BasicAuth)", function()
    local guarded
    local PASSWORD = "pr0xy-s3cret-7f2a"

    setup(function()
      guarded = proxies.tinyproxy(dir, "tinyproxy-auth", { "BasicAuth alice " .. PASSWORD })
    end)

    teardown(function() proxies.stop(guarded) end)

    local function with_login(credential)
      return { proxy = guarded.url, ca_file = dir .. "/ca.pem",
        proxy_auth = { username = "alice", credential = credential or "vault:proxy" },
        resolver = function(ref)
          if ref == "vault:proxy" then return PASSWORD end
          if ref == "vault:wrong" then return "nope" end
        end }
    end

    local function no_secret(message)
      assert.is_nil(tostring(message):find(PASSWORD, 1, true))
      assert.is_nil(read_all(guarded.log):find(PASSWORD, 1, true))
    end

    it("gets them from proxy_auth's reference, for forwarded and tunnelled calls alike", function()
      local path = "/good/login"
      local conn <close> = connect(hostile.url(plain, path), with_login())
      warm_calls(conn, function() return hostile.state(plain, path) end)
      local tls_path = "/good/login-tls"
      local secure_conn <close> = connect(string.format("https://127.0.0.1:%d%s", secure.port, tls_path), with_login())
      warm_calls(secure_conn, function() return secure_state(tls_path) end)
      no_secret("")
    end)

    it("without them, or with a wrong password, the proxy's refusal is the answer; nothing reached the server",
      function()
      local path = "/good/no-login"
      for _, extra in ipairs { { proxy = guarded.url }, with_login("vault:wrong") } do
        local conn <close> = connect(hostile.url(plain, path), extra)
        local out, message, err = conn:call_tool("echo", { text = "x" })
        assert.is_nil(out)
        -- tinyproxy answers 407 and closes without reading the POST's body: the answer or the reset
        -- may come first
        if err.kind == "http_status" then
          assert.equal(407, err.status)
        else
          assert.equal("transport", err.kind, message)
          assert.truthy(message:find("reset by peer", 1, true), message)
        end
        no_secret(message)
        local tunnel <close> = connect(string.format("https://127.0.0.1:%d/good/no-login", secure.port), extra)
        out, message, err = tunnel:call_tool("echo", { text = "x" })
        assert.is_nil(out)
        assert.equal("transport", err.kind, message)
        -- tinyproxy refuses an unauthorized CONNECT with 401
        assert.truthy(message:find("CONNECT tunnel failed, response 40[17]"), message)
      end
      assert.equal(0, #hostile.state(plain, path).requests)
    end)

    it("a reference that does not resolve fails as credential before the proxy hears anything", function()
      local lines = #read_all(guarded.log)
      local conn <close> = connect(hostile.url(plain, "/good/unresolved"), with_login("vault:missing"))
      local out, message, err = conn:call_tool("echo", { text = "x" })
      assert.is_nil(out)
      assert.equal("credential", err.kind, message)
      assert.truthy(message:find("proxy_auth", 1, true), message)
      assert.equal(lines, #read_all(guarded.log))
    end)

    it("is not asked for when the target goes direct (NO_PROXY)", function()
      local out, trace = child("http_proxy=" .. guarded.url .. " NO_PROXY=127.0.0.1",
        hostile.url(plain, "/good/direct-login"), "", "env:PROXY_PASSWORD_NOT_SET")
      assert.equal("ok\n", out, trace)
      out, trace = child("http_proxy=" .. guarded.url, hostile.url(plain, "/good/proxied-login"), "",
        "env:PROXY_PASSWORD_NOT_SET")
      assert.equal("failed credential\n", out, trace)
    end)

    it("is checked at connect", function()
      for _, case in ipairs {
        { { proxy = false, proxy_auth = { username = "a", credential = "env:X" } }, "proxy is false" },
        { { proxy_auth = { username = "a:b", credential = "env:X" } }, "without a colon" },
        { { proxy_auth = { username = "a" } }, "credential must be" },
        { { proxy_auth = { username = "a", credential = "env:X", password = "pw" } }, "not password" },
        { { proxy_auth = "alice:pw" }, "must be a table" },
      } do
        local options = { url = hostile.url(plain, "/good/x"), identifier = "px", health = mcp.health.discard }
        for k, v in pairs(case[1]) do options[k] = v end
        local ok, why = pcall(mcp.connect, options)
        assert.is_false(ok)
        assert.truthy(tostring(why):find(case[2], 1, true), tostring(why))
        assert.is_nil(tostring(why):find("pw", 1, true))
      end
    end)
  end)

  describe("the operation's rules through a proxy", function()
    it("the budget bounds a call the server never answers; it was sent once", function()
      local path = "/never-answers/budget"
      local conn <close> = connect(hostile.url(plain, path), { proxy = tinyproxy.url, budget = 2 })
      local started = core.now()
      local out, message, err = conn:call_tool("hostile", {})
      local elapsed = core.now() - started
      assert.is_nil(out)
      assert.equal("timeout", err.kind, message)
      assert.truthy(elapsed >= 1.9 and elapsed < 3, string.format("took %.2f s", elapsed))
      assert.equal(1, tool_calls(hostile.state(plain, path)))
    end)

    it("cancel ends a call in flight at once, and nothing is sent again", function()
      local path = "/never-answers/cancel"
      local conn <close> = connect(hostile.url(plain, path), { proxy = tinyproxy.url })
      assert(conn:ping())
      local started = core.now()
      local out, message, err = conn:call_tool("hostile", {},
        { cancel = function() return core.now() - started > 0.3 end })
      assert.is_nil(out)
      assert.equal("cancelled", err.kind, message)
      assert.is_true(err.in_flight)
      assert.truthy(core.now() - started < 1.5)
      assert.equal(1, tool_calls(hostile.state(plain, path)))
    end)

    it("a redirect is handed back, never followed through the proxy", function()
      local path = "/redirect/proxied"
      local before = #hostile.state(plain, path).other.contacts
      local conn <close> = connect(hostile.url(plain, path .. "?status=307"), { proxy = tinyproxy.url })
      local out, message, err = conn:call_tool("hostile", {})
      assert.is_nil(out)
      assert.equal("http_status", err.kind, message)
      assert.equal(307, err.status)
      assert.equal(before, #hostile.state(plain, path).other.contacts, "the redirect target was contacted")
    end)

    it("OAuth's own requests go through the connection's proxy, past the same gate", function()
      local fetch = require "mcpclient.oauth.fetch"
      local hostgate = require "mcpclient.hostgate"
      local Deadline = require "mcpclient.deadline"
      local leg <close> = core.http_leg()
      local ctx = { identifier = "px", leg = leg, host_gate = hostgate.default, refuse_private = false,
        proxy = tinyproxy.url, tls = {}, connect_timeout = 5 }
      local url = hostile.url(plain, "/_state?path=/oauth-metadata")
      local res = assert(fetch.send(ctx, { deadline = Deadline.open(5, core.now) }, { method = "GET", url = url }))
      assert.equal(200, res.status)
      assert.equal(1, #proxies.lines(tinyproxy, "GET " .. url))
      local lines = #read_all(tinyproxy.log)
      local out, message, err = fetch.send(ctx, { deadline = Deadline.open(5, core.now) },
        { method = "GET", url = "http://169.254.169.254/.well-known/oauth-authorization-server" })
      assert.is_nil(out)
      assert.equal("authorization_failed", err.kind, message)  -- not https and not loopback: refused first
      out, message, err = fetch.send(ctx, { deadline = Deadline.open(5, core.now) },
        { method = "GET", url = "https://metadata.google.internal/.well-known/oauth-authorization-server" })
      assert.is_nil(out)
      assert.equal("refused_host", err.kind, message)
      assert.equal(lines, #read_all(tinyproxy.log))
    end)
  end)

  describe("a SOCKS5 proxy (danted)", function()
    it("carries warm calls, the proxy resolving the name (socks5h)", function()
      local path = "/good/socks"
      local before = #proxies.lines(dante, "tcp/connect [")
      local conn <close> = connect(string.format("http://localhost:%d%s", plain.port, path), { proxy = dante.url })
      warm_calls(conn, function() return hostile.state(plain, path) end)
      -- one connection through the proxy, kept alive by the server across the calls
      assert.equal(1, #proxies.lines(dante, "tcp/connect [") - before)
    end)

    it("carries an https target", function()
      local path = "/good/socks-tls"
      local conn <close> = connect(string.format("https://127.0.0.1:%d%s", secure.port, path),
        { proxy = dante.url, ca_file = dir .. "/ca.pem" })
      warm_calls(conn, function() return secure_state(path) end)
    end)
  end)

  describe("the host gate's refusals", function()
    local function refused_before_the_proxy(url, extra, host)
      local lines = #read_all(tinyproxy.log)
      local conn <close> = connect(url, extra)
      local out, message, err = conn:call_tool("echo", { text = "x" })
      assert.is_nil(out)
      assert.equal("refused_host", err.kind, message)
      assert.equal(host, err.host)
      -- nothing at all reached the proxy
      assert.equal(lines, #read_all(tinyproxy.log))
    end

    it("refuses the metadata address literal without asking the proxy", function()
      refused_before_the_proxy("http://169.254.169.254/latest/meta-data", { proxy = tinyproxy.url },
        "169.254.169.254")
    end)

    it("refuses a metadata service's name without asking the proxy", function()
      refused_before_the_proxy("http://metadata.google.internal/computeMetadata/v1/", { proxy = tinyproxy.url },
        "metadata.google.internal")
    end)

    it("refuses a private literal with refuse_private, and the loopback name too", function()
      refused_before_the_proxy(hostile.url(plain, "/good/private"), { proxy = tinyproxy.url, refuse_private = true },
        "127.0.0.1")
      refused_before_the_proxy(string.format("http://localhost:%d/good/private", plain.port),
        { proxy = tinyproxy.url, refuse_private = true }, "localhost")
    end)

    it("asks a host_gate with the name and no address, and refuses what it refuses", function()
      local asked = {}
      refused_before_the_proxy("http://blocked.example/mcp", { proxy = tinyproxy.url,
        host_gate = function(host, address, options)
          asked[#asked + 1] = { host, address == nil, options.proxied }
          return false
        end }, "blocked.example")
      assert.same({ { "blocked.example", true, true } }, asked)
    end)
  end)

  describe("the environment", function()

    local function proxied_count(path)
      return #proxies.lines(tinyproxy, "POST http://127.0.0.1:" .. plain.port .. path)
    end

    it("http_proxy sends an http target through the proxy, and the trace names it", function()
      local path = "/good/env-http"
      local out, trace = child("http_proxy=" .. tinyproxy.url, hostile.url(plain, path))
      assert.equal("ok\n", out, trace)
      assert.is_true(proxied_count(path) > 0)
      assert.truthy(trace:find("via proxy " .. tinyproxy.url .. " (http_proxy)", 1, true), trace)
    end)

    it("HTTP_PROXY in upper case is not read (as curl: CGI programs get it from a request header)", function()
      local path = "/good/env-upper"
      local out, trace = child("HTTP_PROXY=" .. tinyproxy.url, hostile.url(plain, path))
      assert.equal("ok\n", out, trace)
      assert.equal(0, proxied_count(path))
      assert.is_nil(trace:find("via proxy", 1, true))
    end)

    it("HTTPS_PROXY tunnels an https target", function()
      local path = "/good/env-https"
      local before = #proxies.lines(tinyproxy, "CONNECT 127.0.0.1:" .. secure.port)
      local out, trace = child("HTTPS_PROXY=" .. tinyproxy.url,
        string.format("https://127.0.0.1:%d%s", secure.port, path), nil)
      -- without the CA the certificate is refused: the tunnel was made, and the failure is tls
      assert.equal("failed tls\n", out, trace)
      assert.equal(1, #proxies.lines(tinyproxy, "CONNECT 127.0.0.1:" .. secure.port) - before)
    end)

    it("ALL_PROXY is used when no scheme's own variable is set", function()
      local path = "/good/env-all"
      local out, trace = child("ALL_PROXY=" .. tinyproxy.url, hostile.url(plain, path))
      assert.equal("ok\n", out, trace)
      assert.is_true(proxied_count(path) > 0)
      assert.truthy(trace:find("(ALL_PROXY)", 1, true), trace)
    end)

    for _, list in ipairs { "127.0.0.1", "localhost,127.0.0.0/8", " * ", "example.com, 127.0.0.1" } do
      it("NO_PROXY=" .. list .. " sends the target direct", function()
        local path = "/good/env-noproxy" .. #list
        local out, trace = child("http_proxy=" .. tinyproxy.url .. " NO_PROXY=" .. quote(list),
          hostile.url(plain, path))
        assert.equal("ok\n", out, trace)
        assert.equal(0, proxied_count(path))
      end)
    end

    it("NO_PROXY naming another host leaves the proxy in use", function()
      local path = "/good/env-other"
      local out, trace = child("http_proxy=" .. tinyproxy.url .. " no_proxy=127.0.0.2,example.com",
        hostile.url(plain, path))
      assert.equal("ok\n", out, trace)
      assert.is_true(proxied_count(path) > 0)
    end)

    it("proxy = false ignores the environment", function()
      local path = "/good/env-false"
      local out, trace = child("http_proxy=" .. tinyproxy.url .. " ALL_PROXY=" .. tinyproxy.url,
        hostile.url(plain, path), "false")
      assert.equal("ok\n", out, trace)
      assert.equal(0, proxied_count(path))
    end)

    it("an unusable variable fails the call naming the variable, never its value", function()
      local out, trace = child("http_proxy=socks5://user:hunter2@127.0.0.1:1", hostile.url(plain, "/good/env-bad"))
      assert.equal("failed transport\n", out, trace)
      assert.is_nil(trace:find("hunter2", 1, true))
    end)
  end)

  describe("the proxy option", function()
    local function raises(value, pattern)
      local ok, why = pcall(mcp.connect, { url = hostile.url(plain, "/good/x"), identifier = "px",
        health = mcp.health.discard, proxy = value })
      assert.is_false(ok)
      assert.truthy(tostring(why):find(pattern), tostring(why))
      assert.is_nil(tostring(why):find("hunter2", 1, true))
    end

    it("refuses socks5:// and socks4:// (local resolution would bypass the gate)", function()
      raises("socks5://127.0.0.1:1080", "socks5h")
      raises("socks4://127.0.0.1:1080", "outside the host gate")
    end)

    it("refuses other schemes, user information, a path, a bad port, a non-string", function()
      raises("ftp://127.0.0.1:21", "not http, https or socks5h")
      raises("http://user:hunter2@127.0.0.1:3128", "user information")
      raises("http://127.0.0.1:3128/path", "path")
      raises("http://127.0.0.1:99999", "port")
      raises(3128, "proxy must be")
      raises(true, "proxy must be")
    end)

    it("is for a server reached by url", function()
      local ok, why = pcall(mcp.connect, { command = { "true" }, identifier = "px", health = mcp.health.discard,
        proxy = tinyproxy.url })
      assert.is_false(ok)
      assert.truthy(tostring(why):find("proxy is for a server reached by url", 1, true), tostring(why))
    end)
  end)
end)
