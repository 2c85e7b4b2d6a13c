-- mcpclient.proxy: which proxy dials a target, read as curl reads the environment,
-- and the host gate's judgement of a target a proxy resolves.
local core = require "mcpclient.core"
local hostgate = require "mcpclient.hostgate"
local proxy = require "mcpclient.proxy"

local function target(url) return assert(hostgate.parse_url(url)) end

local function env(vars) return function(name) return vars[name] end end

describe("proxy.parse", function()
  it("gives scheme, canonical host and port, and the URL handed to libcurl", function()
    assert.same({ scheme = "http", host = "proxy.corp", port = 3128, url = "http://proxy.corp:3128" },
      proxy.parse("HTTP://Proxy.Corp:3128/"))
    assert.same({ scheme = "socks5h", host = "::1", port = 1080, url = "socks5h://[::1]:1080" },
      proxy.parse("socks5h://[::1]"))
    assert.equal("https://10.0.0.1:443", proxy.parse("https://0x0a.0.0.1").url)
    assert.equal("http://proxy:8080", proxy.parse("proxy:8080").url)  -- no scheme: http, as curl
  end)

  it("refuses what it cannot dial as the operator meant, without repeating the value", function()
    for value, pattern in pairs {
      ["socks5://p:1080"] = "socks5h", ["socks4://p:1080"] = "outside the host gate", ["socks4a://p:1"] = "SOCKS4a",
      ["ftp://p:21"] = "not http, https or socks5h", ["http://u:hunter2@p:3128"] = "user information",
      ["http://p:3128/x"] = "path", ["http://p:0"] = "port", ["http://p :1"] = "space", [""] = "empty",
      ["http://p%zz:1"] = "percent",
    } do
      local plan, why = proxy.parse(value)
      assert.is_nil(plan, value)
      assert.truthy(why:find(pattern), value .. ": " .. why)
      assert.is_nil(why:find("hunter2", 1, true))
    end
  end)
end)

describe("proxy.bypassed (NO_PROXY as curl matches it)", function()
  local cases = {
    { "*", "https://anything.example/", true },
    { " * ", "http://10.1.2.3/", true },
    { "*.example.com", "https://a.example.com/", false },  -- "*" is only the whole list
    { "example.com", "https://example.com/", true },
    { "example.com", "https://api.example.com/", true },
    { ".example.com", "https://api.example.com/", true },
    { "example.com", "https://notexample.com/", false },
    { "EXAMPLE.com.", "https://api.example.COM/", true },
    { "a.test, example.com", "https://x.example.com/", true },
    { "a.test example.com", "https://x.example.com/", true },
    { "127.0.0.1", "http://127.0.0.1:8080/", true },
    { "127.0.0.0/8", "http://127.1.2.3/", true },
    { "10.0.0.0/8", "http://11.0.0.1/", false },
    { "127.0.0.1", "http://localhost/", false },  -- an address entry names no name
    { "localhost", "http://127.0.0.1/", false },
    { "::1", "http://[::1]:80/", true },
    { "[::1]", "http://[::1]/", true },
    { "fd00::/8", "http://[fd12::5]/", true },
    { "0.0.0.0/0", "http://[::1]/", false },  -- families do not mix
    { "", "http://a.test/", false },
  }
  for _, case in ipairs(cases) do
    it(string.format("%q %s %s", case[1], case[3] and "covers" or "does not cover", case[2]), function()
      assert.equal(case[3], proxy.bypassed(case[1], target(case[2])))
    end)
  end
end)

describe("proxy.choose", function()
  local https, http = target("https://mcp.corp.example/mcp"), target("http://mcp.corp.example/mcp")

  it("takes the option before the environment, and false for direct", function()
    local vars = env { HTTPS_PROXY = "http://env:1" }
    assert.equal("http://opt:2", proxy.choose("http://opt:2", https, vars).url)
    assert.equal("the proxy option", proxy.choose("http://opt:2", https, vars).source)
    assert.is_false(proxy.choose(false, https, vars))
    assert.is_false(proxy.choose(false, https, env {}))
  end)

  it("reads https_proxy then HTTPS_PROXY for https, only http_proxy for http, then all_proxy/ALL_PROXY", function()
    assert.equal("https_proxy", proxy.choose(nil, https, env { https_proxy = "l:1", HTTPS_PROXY = "u:2" }).source)
    assert.equal("HTTPS_PROXY", proxy.choose(nil, https, env { HTTPS_PROXY = "u:2", ALL_PROXY = "a:3" }).source)
    assert.equal("http_proxy", proxy.choose(nil, http, env { http_proxy = "l:1" }).source)
    assert.is_false(proxy.choose(nil, http, env { HTTP_PROXY = "u:2" }))
    assert.equal("ALL_PROXY", proxy.choose(nil, http, env { HTTP_PROXY = "u:2", ALL_PROXY = "a:3" }).source)
    assert.equal("all_proxy", proxy.choose(nil, https, env { all_proxy = "a:3", ALL_PROXY = "b:4" }).source)
    assert.is_false(proxy.choose(nil, https, env { https_proxy = "" }))
  end)

  it("sends what no_proxy / NO_PROXY names direct, the lower-case list first", function()
    local direct, why = proxy.choose(nil, https, env { HTTPS_PROXY = "p:1", NO_PROXY = "corp.example" })
    assert.is_false(direct)
    assert.equal("NO_PROXY names the host", why)
    local vars = env { HTTPS_PROXY = "p:1", no_proxy = "other", NO_PROXY = "corp.example" }
    assert.is_table(proxy.choose(nil, https, vars))
  end)

  it("an unusable variable is named, its value never shown", function()
    local plan, why = proxy.choose(nil, https, env { HTTPS_PROXY = "socks5://u:hunter2@p:1" })
    assert.is_nil(plan)
    assert.truthy(why:find("HTTPS_PROXY", 1, true))
    assert.is_nil(why:find("hunter2", 1, true))
  end)
end)

describe("hostgate.check through a proxy", function()
  local function never_resolve() error("nothing may be resolved for a target a proxy dials") end

  it("judges the name without resolving it, and pins nothing", function()
    local dial = assert(hostgate.check(target("https://mcp.corp.example/mcp"), never_resolve, hostgate.default,
      { proxied = true }))
    assert.is_nil(dial.pin)
    assert.equal("https://mcp.corp.example/mcp", dial.url)
  end)

  it("refuses metadata names, and loopback names with refuse_private", function()
    for _, url in ipairs { "http://metadata.google.internal/", "http://metadata/", "http://instance-data/" } do
      local dial, verdict = hostgate.check(target(url), never_resolve, hostgate.default, { proxied = true })
      assert.is_nil(dial, url)
      assert.equal("refused", verdict)
    end
    assert.is_table(hostgate.check(target("http://localhost:1/"), never_resolve, hostgate.default, { proxied = true }))
    for _, url in ipairs { "http://localhost:1/", "http://a.localhost/" } do
      assert.is_nil(hostgate.check(target(url), never_resolve, hostgate.default,
        { proxied = true, refuse_private = true }), url)
    end
  end)

  it("judges an address literal by the address rules, as without a proxy", function()
    for _, url in ipairs { "http://169.254.169.254/", "http://[fd00:ec2::254]/" } do
      assert.is_nil(hostgate.check(target(url), never_resolve, hostgate.default, { proxied = true }), url)
    end
    assert.is_nil(hostgate.check(target("http://10.1.1.1/"), never_resolve, hostgate.default,
      { proxied = true, refuse_private = true }))
    assert.is_table(hostgate.check(target("http://10.1.1.1/"), never_resolve, hostgate.default, { proxied = true }))
  end)
end)

describe("the leg's proxy field", function()
  it("takes only http://, https:// and socks5h:// without credentials, and never with a pin", function()
    local leg <close> = core.http_leg()
    for _, value in ipairs { "socks5://127.0.0.1:1", "socks4://127.0.0.1:1", "http://u:p@127.0.0.1:1", "127.0.0.1:1",
      "http://" } do
      local ok, why = pcall(leg.send, leg, { method = "GET", url = "http://127.0.0.1:1/", timeout_ms = 100,
        proxy = value })
      assert.is_false(ok, value)
      assert.truthy(tostring(why):find("'proxy' must be", 1, true), why)
    end
    local ok, why = pcall(leg.send, leg, { method = "GET", url = "http://a.test:1/", timeout_ms = 100,
      proxy = "http://127.0.0.1:1", pin = "a.test:1:127.0.0.1" })
    assert.is_false(ok)
    assert.truthy(tostring(why):find("either 'pin' or 'proxy'", 1, true), why)
  end)

  it("takes proxy_user and proxy_password together, and only with a proxy", function()
    local leg <close> = core.http_leg()
    for _, fields in ipairs {
      { proxy = "http://127.0.0.1:1", proxy_user = "alice" },
      { proxy = "http://127.0.0.1:1", proxy_password = "pw" },
      { proxy_user = "alice", proxy_password = "pw" },
      { proxy = "http://127.0.0.1:1", proxy_user = "alice", proxy_password = "p\nw" },
    } do
      local req = { method = "GET", url = "http://127.0.0.1:1/", timeout_ms = 100 }
      for k, v in pairs(fields) do req[k] = v end
      local ok, why = pcall(leg.send, leg, req)
      assert.is_false(ok)
      assert.truthy(tostring(why):find("proxy", 1, true), why)
      assert.is_nil(tostring(why):find("p\nw", 1, true))
    end
  end)
end)
