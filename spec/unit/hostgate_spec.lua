-- The host gate's URL handling: the host is made canonical before it is
-- judged (the form libcurl will dial), hosts that cannot be are refused as
-- failures, and URLs that cannot be used at all are refused at connect.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local hostgate = require "mcpclient.hostgate"
local Deadline = require "mcpclient.deadline"

local Fake = require "support.fake_server"

-- A fake leg that also keeps the URL each send was given.
local function fake_leg()
  local fake = Fake.new()
  fake.urls = {}
  local send = fake.send
  fake.send = function(self, req)
    self.urls[#self.urls + 1] = req.url
    return send(self, req)
  end
  return fake
end

local function connect(fake, url, extra)
  local options = { url = url, identifier = "srv", health = mcp.health.discard, transport = fake }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

describe("hostgate.parse_url", function()
  it("writes IPv4 numbers as the dotted quad, as WHATWG and libcurl read them", function()
    for written, dotted in pairs {
      ["2130706433"] = "127.0.0.1", ["127.1"] = "127.0.0.1", ["0x7f.1"] = "127.0.0.1", ["0177.0.0.1"] = "127.0.0.1",
      ["0x7F.0.0.0X1"] = "127.0.0.1", ["127.0.0.1."] = "127.0.0.1", ["0x0000007f.1"] = "127.0.0.1",
      ["%31%32%37.0.0.1"] = "127.0.0.1", ["10.0x10.257"] = "10.16.1.1", ["0"] = "0.0.0.0",
      ["4294967295"] = "255.255.255.255", ["0xa9fea9fe"] = "169.254.169.254",
    } do
      local target = assert(hostgate.parse_url("http://" .. written .. ":8080/mcp?q=1"))
      assert.equal(dotted, target.host, written)
      assert.is_true(target.ip_literal, written)
      assert.is_nil(target.refusal, written)
      assert.equal("http://" .. dotted .. ":8080/mcp?q=1", target.url, written)
    end
  end)

  it("writes names in lower case, percent-decoded, in A-label form, without the final dot", function()
    for written, canonical in pairs {
      ["bücher.test"] = "xn--bcher-kva.test", ["BÜCHER.Test"] = "xn--bcher-kva.test",
      ["b%C3%BCcher.test"] = "xn--bcher-kva.test", ["loc%61lhost"] = "localhost", ["Example.COM."] = "example.com",
      ["my_host-1.example"] = "my_host-1.example",
    } do
      local target = assert(hostgate.parse_url("https://" .. written .. "/rpc"))
      assert.equal(canonical, target.host, written)
      assert.is_false(target.ip_literal, written)
      assert.equal("https://" .. canonical .. "/rpc", target.url, written)
      assert.equal(443, target.port)
    end
  end)

  it("leaves a URL that is already canonical exactly as it was", function()
    for _, url in ipairs { "https://mcp.example.com/rpc", "http://127.0.0.1:3000/mcp", "http://[::1]:8080/x#f" } do
      assert.equal(url, assert(hostgate.parse_url(url)).url)
    end
    assert.equal("http://h.example:80/", assert(hostgate.parse_url("http://h.example:0080/")).url)
  end)

  it("marks hosts that cannot be made canonical as refused, without raising", function()
    for _, host in ipairs { "256.0.0.1", "0x100000000", "4294967296", "1.2.3.4.5", "foo.0x7f", "08.0.0.1",
                            "99999999999999999999999", "0x1ffffffffffffffff", "a%zz", "a%2", "a%2fb", "a..b",
                            "a%20b", "%00", "a%e2%80%aeb", "%ff", "[fe80::1%25eth0]", "[1.2.3.4]" } do
      local target = hostgate.parse_url("http://" .. host .. "/mcp")
      assert.is_table(target, host)
      assert.is_string(target.refusal, host)
    end
  end)

  it("refuses URLs with C1 controls, bidi or invisible formatting characters, or broken UTF-8", function()
    for _, url in ipairs { "http://example.com/\u{202E}fdp.exe", "http://example.com/a\u{85}b",
                           "http://ex\u{200B}ample.com/", "http://example.com/\u{2066}", "http://ex\xFFample/" } do
      local target, why = hostgate.parse_url(url)
      assert.is_nil(target, url)
      assert.equal("it contains a C1 control, an invisible formatting character or bytes that are not UTF-8", why)
    end
    assert.is_table(hostgate.parse_url("http://example.com/b\u{FC}cher/\u{1F600}"))
  end)

  it("refuses URLs with control characters or spaces anywhere", function()
    for _, url in ipairs { "http://example.com/mcp\r\nX-Injected: 1", "http://example.com/a b", "http://exa\nmple.com/",
                           "http://example.com/\t", "http://example.com/\0", "http://example.com/\127",
                           " http://example.com/" } do
      local target, why = hostgate.parse_url(url)
      assert.is_nil(target, url)
      assert.equal("it contains a control character or a space", why)
    end
  end)
end)

describe("connect with an unusual host", function()
  it("raises at once for a URL with CR, LF or a space, before any operation", function()
    for _, url in ipairs { "http://example.com/mcp\r", "http://example.com/mcp\nx", "http://exa mple.com/" } do
      assert.has_error(function() connect(Fake.new(), url) end,
        "connect: url is not usable: it contains a control character or a space")
    end
  end)

  it("judges and sends the canonical host: no pin for a dotted quad, the A-label in the pin", function()
    local fake = fake_leg():will_handshake()
    local asked = {}
    assert(connect(fake, "http://0x7f.1:9000/mcp", { host_gate = function(host, address)
      asked[#asked + 1] = host .. " " .. address
      return true
    end }):ping())
    assert.same({ "127.0.0.1 127.0.0.1" }, asked)
    assert.equal("http://127.0.0.1:9000/mcp", fake.urls[1])
    assert.is_nil(fake.requests[1].pin)
    assert.same({}, fake.resolved)

    fake = fake_leg():will_handshake()
    assert(connect(fake, "https://Bücher.example/mcp"):ping())
    assert.same({ "xn--bcher-kva.example" }, fake.resolved)
    assert.equal("https://xn--bcher-kva.example/mcp", fake.urls[1])
    assert.equal("xn--bcher-kva.example:443:203.0.113.10", fake.requests[1].pin)
  end)

  it("returns refused_host, sending and resolving nothing, for a host that cannot be made canonical", function()
    for _, host in ipairs { "256.0.0.1", "a%2fb", "0x100000000" } do
      local fake = Fake.new()
      local ok, message, err = connect(fake, "http://" .. host .. "/mcp", { auth = { credential = "k" } }):ping()
      assert.is_nil(ok)
      assert.equal("refused_host", err.kind, host)
      assert.equal("srv", err.server)
      assert.is_string(err.detail)
      assert.matches('^MCP server "srv" points at host', message)
      assert.same({}, fake.requests)
      assert.same({}, fake.resolved)
    end
  end)

  it("judges a metadata address however it is spelled", function()
    for _, host in ipairs { "169.254.169.254", "2852039166", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376",
                            "169.254.43518", "%31%36%39.254.169.254" } do
      local fake = Fake.new()
      local _, _, err = connect(fake, "http://" .. host .. "/latest/meta-data/"):ping()
      assert.equal("refused_host", err.kind, host)
      assert.same({}, fake.requests)
    end
  end)
end)

describe("core.idna and core.url_host", function()
  it("give the A-label form, and refuse what is not a name", function()
    assert.equal("xn--bcher-kva.test", core.idna("bücher.test"))
    assert.equal("xn--mnchen-3ya.de", core.idna("MÜNCHEN.de"))
    local none, why = core.idna("a\xffb")
    assert.is_nil(none)
    assert.is_string(why)
    assert.is_nil((core.idna("")))
  end)

  it("read the host as libcurl does", function()
    assert.equal("example.com", core.url_host("https://example.com:8443/x"))
    assert.equal("[::1]", core.url_host("http://[::1]:80/"))
    assert.is_nil(core.url_host("http://"))
  end)
end)

describe("hostgate.resolve", function()
  it("resolves a name on its helper thread", function()
    local addresses = assert(hostgate.resolve("localhost", Deadline.open(5, core.now)))
    assert.is_true(#addresses >= 1)
    local none, verdict, why = hostgate.resolve("name.invalid", Deadline.open(5, core.now))
    assert.is_nil(none)
    assert.equal("resolve", verdict)
    assert.is_string(why)
  end)

  it("answers an already spent budget or a raised cancel flag within one slice", function()
    local started = core.now()
    -- nil, verdict, reason: the order of hostgate.check's refusals
    local _, verdict, why = hostgate.resolve("localhost", Deadline.open(1e-9, core.now), function() return true end)
    assert.is_true(core.now() - started < 0.1)
    if verdict then  -- the lookup may win the first 10 ms slice; otherwise the flag is seen first
      assert.equal("cancelled", verdict)
      assert.equal("the operation was cancelled", why)
    end
  end)
end)

describe("hostgate.check", function()
  it("hands a lookup's refusal on in the one order: nil, verdict, reason", function()
    local target = assert(hostgate.parse_url("https://mcp.example.com/rpc"))
    local allow = function() return true end
    for _, verdict in ipairs { "resolve", "timeout", "cancelled" } do
      local dial, got, why = hostgate.check(target, function() return nil, verdict, "because " .. verdict end, allow)
      assert.is_nil(dial)
      assert.equal(verdict, got)
      assert.equal("because " .. verdict, why)
    end
    local dial, got, why = hostgate.check(target, function() return { "203.0.113.5" } end, function() return false end)
    assert.is_nil(dial)
    assert.equal("refused", got)
    assert.is_nil(why)
  end)
end)

describe("core.lookup", function()
  it("may be closed before it finishes, and not used after", function()
    for _ = 1, 50 do
      local lookup = assert(core.lookup("localhost"))
      lookup:close()
      assert.has_error(function() lookup:wait(0) end, "attempt to use a closed lookup")
    end
    collectgarbage()
  end)

  it("waits at most the slice it is given and refuses bad slices", function()
    local lookup <close> = assert(core.lookup("localhost"))
    local done, addresses = lookup:wait(1000)
    assert.is_true(done)
    assert.is_table(addresses)
    assert.has_error(function() lookup:wait(-1) end)
    assert.has_error(function() lookup:wait(1001) end)
    local none, why = core.lookup("")
    assert.is_nil(none)
    assert.is_string(why)
  end)

  it("gives a descriptor the engine waits on, readable once the answer is in", function()
    local engine = require "mcpclient.engine"
    local lookup <close> = assert(core.lookup("localhost"))
    local fd = assert(lookup:fd())
    assert.equal("r", engine.await(fd, "r", core.now() + 5))
    local done, addresses = lookup:wait(0)
    assert.is_true(done)
    assert.is_table(addresses)
    lookup:close()
    assert.has_error(function() lookup:fd() end, "attempt to use a closed lookup")
    -- inside gather the resolution waits by yielding: both tasks finish
    local results = engine.gather {
      function()
        return hostgate.resolve("localhost", Deadline.open(5, core.now))
      end,
      function() return "other" end,
    }
    assert.is_table(results[1][1])
    assert.equal("other", results[2][1])
  end)
end)
