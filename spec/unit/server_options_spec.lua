-- mcpclient.agent.server_options: the operator's checks of a server's proxy,
-- TLS files, plain headers and roots, and the connect options a stored row
-- gives a connection (catalogue.connect and login build theirs with it).
local server_options = require "mcpclient.agent.server_options"

local function temp_file(content)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

describe("agent.server_options", function()
  describe("headers", function()
    it("takes plain headers", function()
      assert.is_nil(server_options.header_problem("X-Tenant", "acme"))
      assert.is_nil(server_options.header_problem("User-Agent", "corp-agent/1.0 (tab\there)"))
      assert.is_nil(server_options.headers_problem { ["X-Tenant"] = "acme", ["X-Region"] = "eu" })
    end)

    it("refuses the credential's, the client's own and the protocol's headers, whatever their case", function()
      for _, name in ipairs { "Authorization", "authorization", "Proxy-Authorization", "Cookie", "Host", "Accept",
        "Content-Type", "content-length", "Mcp-Session-Id", "MCP-Protocol-Version" } do
        local problem = server_options.header_problem(name, "x")
        assert.is_string(problem, name)
        assert.matches("not a plain header", problem, 1, true)
      end
      assert.matches("credential", server_options.header_problem("Authorization", "Bearer x"), 1, true)
    end)

    it("refuses a line break or another control character in a value, and names that are no header names", function()
      for _, value in ipairs { "a\r\nX-Injected: 1", "a\nb", "a\0b", "a\27[31m" } do
        assert.matches("control character", server_options.header_problem("X-A", value), 1, true)
      end
      for _, name in ipairs { "", "X A", "X-A:", "X\nA", "Ünicode" } do
        assert.is_string(server_options.header_problem(name, "v"), name)
      end
    end)

    it("refuses a header that looks like a secret, pointing to the credential", function()
      local problem = server_options.header_problem("X-Api-Key", "abc")
      assert.matches("looks like a secret", problem, 1, true)
      assert.matches("--header-name X-Api-Key", problem, 1, true)
      assert.is_string(server_options.header_problem("X-Thing", "ghp_0123456789abcdefghij"))
    end)

    it("refuses what connect's headers refuse too (framing headers, an empty or padded value)", function()
      for _, headers in ipairs { { ["Transfer-Encoding"] = "chunked" }, { Connection = "close" },
        { ["Last-Event-ID"] = "1" }, { ["X-A"] = "" }, { ["X-A"] = " padded" } } do
        local name = next(headers)
        assert.is_string(server_options.headers_problem(headers), name)
      end
    end)

    it("refuses one name given twice in two spellings, and too many", function()
      assert.matches("twice", server_options.headers_problem { ["X-A"] = "1", ["x-a"] = "2" }, 1, true)
      local many = {}
      for i = 1, server_options.MAX_HEADERS + 1 do many["X-H" .. i] = "v" end
      assert.matches("at most", server_options.headers_problem(many), 1, true)
    end)
  end)

  describe("roots", function()
    it("takes file:// roots with an optional name", function()
      assert.is_nil(server_options.roots_problem { { uri = "file:///srv/notes", name = "notes" },
        { uri = "FILE:///srv/Other" } })
      assert.is_nil(server_options.roots_problem {})
    end)

    it("refuses any other scheme, blanks, a list that is not one, a duplicate", function()
      for _, roots in ipairs {
        { { uri = "https://example.com/" } }, { { uri = "/srv/notes" } }, { { uri = "file:///a b" } },
        { { uri = "file:///a\n" } }, { { name = "no uri" } }, { uri = "file:///a" },
        { { uri = "file:///a", name = "two\nlines" } }, { { uri = "file:///a" }, { uri = "file:///a" } },
      } do
        assert.is_string(server_options.roots_problem(roots))
      end
    end)
  end)

  describe("proxy", function()
    it('takes "", "none" and http, https, socks5h URLs with a host and an optional port', function()
      for _, proxy in ipairs { "", "none", "http://proxy.corp:3128", "https://proxy.corp", "socks5h://127.0.0.1:1080",
        "http://[::1]:3128/", "HTTP://Proxy.Corp:8080" } do
        assert.is_nil(server_options.proxy_problem(proxy), proxy)
      end
    end)

    it("refuses other schemes, credentials in the URL, a path, a bad port, no host", function()
      local cases = {
        ["socks5://proxy:1080"] = "socks5h", ["ftp://proxy"] = "not http, https or socks5h",
        ["proxy.corp:3128"] = "a URL", ["http://user:secret@proxy:3128"] = "user information",
        ["http://proxy:3128/path"] = "a path", ["http://proxy:0"] = "port", ["http://proxy:99999"] = "port",
        ["http://proxy:x"] = "no host", ["http://"] = "no host",
      }
      for proxy, why in pairs(cases) do
        local problem = server_options.proxy_problem(proxy)
        assert.is_string(problem, proxy)
        assert.matches(why, problem, 1, true)
        assert.falsy(problem:find("secret", 1, true), "the refusal repeats the password")
      end
    end)
  end)

  describe("files", function()
    it("takes a readable file and refuses a missing one, a directory, an empty one", function()
      local path = temp_file("-----BEGIN CERTIFICATE-----\n")
      local empty = temp_file("")
      finally(function() os.remove(path); os.remove(empty) end)
      assert.is_nil(server_options.file_problem(path))
      assert.is_string(server_options.file_problem(path .. ".missing"))
      assert.is_string(server_options.file_problem("/tmp"))
      assert.is_string(server_options.file_problem(empty))
      assert.is_string(server_options.file_problem(""))
    end)

    it("takes a client key as a file, env:NAME or a key the resolver knows; never repeats a refused value", function()
      local path = temp_file("key")
      finally(function() os.remove(path) end)
      assert.is_nil(server_options.client_key_problem(path))
      assert.is_nil(server_options.client_key_problem("env:AGENT_KEY_PATH"))
      assert.is_nil(server_options.client_key_problem("vault/agent-key", function(k)
        return k == "vault/agent-key" and "/run/keys/agent.key" or nil end))
      local pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
      assert.matches("environment variable", server_options.client_key_problem("env:"), 1, true)
      for _, value in ipairs { pem, "/nonexistent/agent.key", "env:1BAD", "vault/unknown" } do
        local problem = server_options.client_key_problem(value, function() return nil end)
        assert.is_string(problem, value)
        assert.falsy(problem:find(value, 1, true), "the refusal repeats the value")
      end
      assert.matches("never stored", server_options.client_key_problem(pem), 1, true)
    end)
  end)

  describe("apply: a row's settings as connect options", function()
    it("adds nothing for a row without them", function()
      local spec = server_options.apply({ url = "https://a/mcp", proxy = "", ca_file = "", client_cert = "",
        client_key = "", headers = {}, roots = {} }, { url = "https://a/mcp" })
      assert.same({ url = "https://a/mcp" }, spec)
      -- a row from a host schema without the columns
      assert.same({ url = "https://a/mcp" }, server_options.apply({ url = "https://a/mcp" }, { url = "https://a/mcp" }))
    end)

    it("gives each one set: the proxy, false for none, the TLS files, copies of the headers and roots", function()
      local row = { url = "https://a/mcp", proxy = "socks5h://127.0.0.1:1080", ca_file = "/etc/ca.pem",
        client_cert = "/etc/agent.pem", client_key = "/etc/agent.key", headers = { ["X-Tenant"] = "acme" },
        roots = { { uri = "file:///srv/notes", name = "notes" } } }
      local spec = server_options.apply(row, {})
      assert.same({ proxy = "socks5h://127.0.0.1:1080", ca_file = "/etc/ca.pem", client_cert = "/etc/agent.pem",
        client_key = "/etc/agent.key", headers = { ["X-Tenant"] = "acme" },
        roots = { { uri = "file:///srv/notes", name = "notes" } } }, spec)
      assert.are_not.equal(row.headers, spec.headers)
      assert.are_not.equal(row.roots[1], spec.roots[1])
      row.proxy = "none"
      assert.is_false(server_options.apply(row, {}).proxy)
    end)

    it("resolves a client key reference to the key file's path at every connect", function()
      local row = { url = "https://a/mcp", client_key = "env:MCPCLIENT_SPEC_KEY_PATH_UNSET" }
      local spec, message, err = server_options.apply(row, {})
      assert.is_nil(spec)
      assert.equal("configuration", err.kind)
      assert.matches("MCPCLIENT_SPEC_KEY_PATH_UNSET is not set", message, 1, true)
      row.client_key = "vault/agent-key"
      spec = assert(server_options.apply(row, {}, function(k) return k == "vault/agent-key" and "/run/agent.key" end))
      assert.equal("/run/agent.key", spec.client_key)
    end)

    it("gives a stdio row only its roots (the rest is for HTTP)", function()
      local spec = server_options.apply({ command = { "server" }, proxy = "http://p:1", ca_file = "/ca",
        headers = { ["X-A"] = "b" }, roots = { { uri = "file:///w" } } }, {})
      assert.same({ roots = { { uri = "file:///w" } } }, spec)
    end)
  end)

  describe("catalogue.connect", function()
    local connection = require "mcpclient.connection"
    local catalogue = require "mcpclient.agent.catalogue"

    it("hands the row's settings to mcp.connect", function()
      local real = connection.connect
      local seen
      connection.connect = function(spec) seen = spec; return { fake = true } end
      finally(function() connection.connect = real end)
      local conn = catalogue.connect({ identifier = "corp", url = "https://mcp.corp.example/mcp", proxy = "none",
        ca_file = "/etc/ca.pem", headers = { ["X-Tenant"] = "acme" }, roots = { { uri = "file:///srv" } } }, {})
      assert.same({ fake = true }, conn)
      assert.same({ false, "/etc/ca.pem", { ["X-Tenant"] = "acme" }, { { uri = "file:///srv" } } },
        { seen.proxy, seen.ca_file, seen.headers, seen.roots })
      assert.equal("https://mcp.corp.example/mcp", seen.url)

      seen = nil
      local none, message, err = catalogue.connect({ identifier = "corp", url = "https://mcp.corp.example/mcp",
        client_key = "env:MCPCLIENT_SPEC_KEY_PATH_UNSET" }, {})
      assert.is_nil(none)
      assert.is_nil(seen, "connected with a key that did not resolve")
      assert.equal("configuration", err.kind)
      assert.matches("client key", message, 1, true)

      catalogue.connect({ identifier = "local", command = { "server" }, roots = { { uri = "file:///w", name = "w" } } },
        {})
      assert.same({ { uri = "file:///w", name = "w" } }, seen.roots)
      assert.is_nil(seen.proxy)
    end)
  end)

  describe("login", function()
    local mcp = require "mcpclient"
    local login = require "mcpclient.agent.login"

    -- login.run against a store row, mcp.connect replaced by `fake`; → login.run's results
    local function log_in(fields, fake)
      local store <close> = assert(require("mcpclient.agent.store").open(":memory:"))
      fields.identifier, fields.url = "corp", "https://mcp.corp.example/mcp"
      local row = assert(store:server(assert(store:add_server(fields))))
      local real = mcp.connect
      mcp.connect = fake
      local results = table.pack(pcall(login.run, store, row, { announce = function() end, wait = 1 }))
      mcp.connect = real
      assert(results[1], results[2])
      return table.unpack(results, 2, results.n)
    end

    it("makes the OAuth connection with the row's proxy, TLS files and headers", function()
      local seen
      local _, _, err = log_in({ proxy = "http://proxy.corp:3128", ca_file = "/etc/ca.pem",
        headers = { ["X-Tenant"] = "acme" } }, function(spec)
        seen = spec
        return { ping = function() return nil, "no server here", { kind = "transport" } end, close = function() end }
      end)
      assert.equal("transport", err.kind)
      assert.same({ "http://proxy.corp:3128", "/etc/ca.pem", { ["X-Tenant"] = "acme" } },
        { seen.proxy, seen.ca_file, seen.headers })
      assert.equal("authorization_code", seen.oauth.grant)
    end)

    it("refuses, connecting to nothing, when the row's key reference does not resolve", function()
      local called = false
      local conn, message, err = log_in({ client_key = "env:MCPCLIENT_SPEC_KEY_PATH_UNSET" }, function()
        called = true
      end)
      assert.is_nil(conn)
      assert.is_false(called)
      assert.equal("configuration", err.kind)
      assert.matches("client key reference does not resolve", message, 1, true)
    end)
  end)
end)
