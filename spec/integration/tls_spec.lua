-- TLS against HTTPS MCP servers this file starts on 127.0.0.1
-- (spec/support/hostile_server.mjs --tls-cert ...), with certificates made by
-- the openssl command into a temporary directory: a private CA, a server
-- certificate it signed (subjectAltName IP:127.0.0.1), one for another
-- address, a self-signed leaf, and client certificates from this CA and from
-- another. Verification is on by default, ca_file and the client certificate
-- options make the connections work, and nothing turns verification off.
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local dir
local servers = {}

local shell = require "support.shell"
local quote = shell.quote

local function sh(command)
  assert(shell.run(command), "failed: " .. command)
end

local function file(name) return dir .. "/" .. name end

-- The hostile server's options to serve HTTPS with certificate `name`.
local function serving(name)
  return "--tls-cert " .. quote(file(name .. ".pem")) .. " --tls-key " .. quote(file(name .. ".key"))
end

-- A key and a certificate `name` signed by the CA `ca` (or self-signed when ca is nil).
local function certificate(name, subject, extensions, ca, days)
  local ext = file(name .. ".ext")
  local f = assert(io.open(ext, "w"))
  f:write(extensions)
  f:close()
  if ca then
    sh(string.format("openssl req -newkey rsa:2048 -nodes -subj %s -keyout %s -out %s", quote(subject),
      quote(file(name .. ".key")), quote(file(name .. ".csr"))))
    sh(string.format("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -days %d -extfile %s -out %s",
      quote(file(name .. ".csr")), quote(file(ca .. ".pem")), quote(file(ca .. ".key")), days or 1, quote(ext),
      quote(file(name .. ".pem"))))
  else
    sh(string.format("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj %s -keyout %s -out %s -extensions v3 "
      .. "-config %s", quote(subject), quote(file(name .. ".key")), quote(file(name .. ".pem")), quote(ext)))
  end
end

local function make_certificates()
  dir = shell.tmpdir()
  local ca_config = "[req]\ndistinguished_name = dn\n[dn]\n[v3]\nbasicConstraints = critical, CA:TRUE\n"
    .. "keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"
  certificate("ca", "/CN=mcpclient spec CA", ca_config)
  certificate("other-ca", "/CN=another CA", ca_config)
  certificate("server", "/CN=127.0.0.1",
    "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n", "ca")
  certificate("elsewhere", "/CN=127.0.0.2",
    "subjectAltName = IP:127.0.0.2\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n", "ca")
  -- -days -1: its end lies a day before its start
  certificate("expired", "/CN=127.0.0.1",
    "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n", "ca", -1)
  certificate("selfsigned", "/CN=127.0.0.1", "[req]\ndistinguished_name = dn\n[dn]\n[v3]\n"
    .. "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")
  certificate("client", "/CN=mcpclient spec client",
    "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n", "ca")
  certificate("stranger", "/CN=stranger",
    "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n", "other-ca")
end

local hostile = require "support.hostile"

-- An HTTPS hostile server (every path well-behaved for "echo") with these options.
local function start_server(args)
  local s = hostile.start(args)
  servers[#servers + 1] = s
  return s
end

local function https(server, path)
  return string.format("https://127.0.0.1:%d%s", server.port, path or "/good")
end

local function connect(server, extra)
  local options = { url = https(server), identifier = "tls", health = mcp.health.memory(), budget = 10 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

-- What an HTTPS server saw on a path (GET /_state), read with the CA trusted.
local function requests_seen(server, path)
  local leg <close> = core.http_leg()
  local res = assert(leg:send { method = "GET", url = https(server, "/_state?path=" .. path), timeout_ms = 5000,
    ca_file = file("ca.pem"), client_cert = file("client.pem"), client_key = file("client.key") })
  return #core.json.decode(res.body).requests
end

-- A TLS refusal: kind tls, naming the server, the host and the reason.
local function assert_refused(pattern, out, message, err)
  assert.is_nil(out)
  assert.is_table(err, tostring(message))
  assert.equal("tls", err.kind, message)
  assert.equal("127.0.0.1", err.host)
  assert.truthy(message:find('host "127.0.0.1"', 1, true), message)
  assert.truthy(message:find('MCP server "tls"', 1, true), message)
  assert.truthy(message:lower():find(pattern), "expected /" .. pattern .. "/ in: " .. message)
  assert.is_nil(message:find("%c"))
end

local function works(conn)
  local out, message = conn:call_tool("echo", { text = "over tls" })
  assert.is_table(out, message)
  assert.equal("echo: over tls", out.text)
  local tools = assert(conn:list_tools())
  assert.equal(3, #tools)
end

describe("TLS #integration", function()
  local plain, mutual, selfsigned, elsewhere, expired

  setup(function()
    make_certificates()
    plain = start_server(serving("server"))
    mutual = start_server(serving("server") .. " --tls-ca " .. quote(file("ca.pem")) .. " --require-client-cert")
    selfsigned = start_server(serving("selfsigned"))
    elsewhere = start_server(serving("elsewhere"))
    expired = start_server(serving("expired"))
  end)

  teardown(function()
    for _, s in ipairs(servers) do hostile.stop(s) end
    if dir then os.execute("rm -rf " .. quote(dir)) end
  end)

  describe("by default", function()
    it("refuses a server whose certificate no trusted CA signed, naming the server and the certificate", function()
      local conn <close> = connect(plain, {
        auth = { credential = "vault:tls" }, resolver = function() return "tls-spec-secret" end,
      })
      local before = requests_seen(plain, "/good")
      local out, message, err = conn:call_tool("echo", { text = "x" })
      assert_refused("certificate", out, message, err)
      assert.is_nil(message:find("tls-spec-secret", 1, true))
      -- Nothing reached the HTTP layer, so no credential went out.
      assert.equal(before, requests_seen(plain, "/good"))
      -- and it stays refused: a failure does not lower verification for the next try
      out, message, err = conn:call_tool("echo", { text = "x" })
      assert_refused("certificate", out, message, err)
    end)

    it("refuses a self-signed server certificate", function()
      local conn <close> = connect(selfsigned)
      local out, message, err = conn:ping()
      assert_refused("self.signed certificate", out, message, err)
    end)

    -- The library leaves libcrypto's error texts unloaded (they cost 0.6 MiB); a handshake
    -- failure is worded by libssl's own table, which stays.
    it("names a handshake failure in libssl's words: TLS spoken to a plain HTTP server", function()
      local http = start_server("")
      local conn <close> = connect(http)
      local out, message, err = conn:ping()
      assert_refused("ssl routines::wrong version number", out, message, err)
    end)
  end)

  describe("with ca_file", function()
    it("trusts a server certificate the given CA signed", function()
      local conn <close> = connect(plain, { ca_file = file("ca.pem") })
      works(conn)
    end)

    it("trusts a self-signed certificate given as its own CA", function()
      local conn <close> = connect(selfsigned, { ca_file = file("selfsigned.pem") })
      works(conn)
    end)

    it("refuses an expired certificate, naming the expiry", function()
      local conn <close> = connect(expired, { ca_file = file("ca.pem") })
      local out, message, err = conn:ping()
      assert_refused("expired", out, message, err)
    end)

    it("still checks the name: a certificate for another address is refused", function()
      local conn <close> = connect(elsewhere, { ca_file = file("ca.pem") })
      local out, message, err = conn:ping()
      assert_refused("127%.0%.0%.1", out, message, err)
    end)

    it("refuses when the file is not the CA that signed the server", function()
      local conn <close> = connect(plain, { ca_file = file("other-ca.pem") })
      local out, message, err = conn:ping()
      assert_refused("certificate", out, message, err)
    end)

    it("fails clearly when the CA file does not exist", function()
      local conn <close> = connect(plain, { ca_file = file("missing.pem") })
      local out, message, err = conn:ping()
      assert_refused("missing%.pem", out, message, err)
    end)

    it("belongs to its connection: another connection without it is refused", function()
      local trusted <close> = connect(plain, { ca_file = file("ca.pem") })
      works(trusted)
      local untrusted <close> = connect(plain)
      local out, message, err = untrusted:ping()
      assert_refused("certificate", out, message, err)
      works(trusted)
    end)

    it("belongs to its send: a leg that trusted a CA once does not reuse that trust without it", function()
      local leg <close> = core.http_leg()
      local ok = assert(leg:send { method = "GET", url = https(plain, "/_state"), timeout_ms = 5000,
        ca_file = file("ca.pem") })
      assert.equal(200, ok.status)
      local res, kind, detail = leg:send { method = "GET", url = https(plain, "/_state"), timeout_ms = 5000 }
      assert.is_nil(res)
      assert.equal("tls", kind)
      assert.truthy(detail:lower():find("certificate"), detail)
    end)
  end)

  describe("client certificates", function()
    it("work when the server requires one", function()
      local conn <close> = connect(mutual, {
        ca_file = file("ca.pem"), client_cert = file("client.pem"), client_key = file("client.key"),
      })
      works(conn)
    end)

    it("are required: without one the server's refusal is a tls failure naming it; nothing is resent", function()
      local conn <close> = connect(mutual, { ca_file = file("ca.pem") })
      local before = requests_seen(mutual, "/good")
      local out, message, err = conn:call_tool("echo", { text = "x" })
      assert_refused("certificate required", out, message, err)
      -- the server's HTTP layer never read the request
      assert.equal(before, requests_seen(mutual, "/good"))
    end)

    -- Under TLS 1.3 the server checks the certificate after the client's handshake is over; its
    -- alert races the reset of the connection it closes. An alert read is a tls failure naming it;
    -- a reset (or an end without a reply) alone cannot be told from a server lost after reading
    -- the request, so it stays what a lost connection is (transport, for a ping).
    it("must be one the server trusts", function()
      local conn <close> = connect(mutual, {
        ca_file = file("ca.pem"), client_cert = file("stranger.pem"), client_key = file("stranger.key"),
      })
      local out, message, err = conn:ping()
      assert.is_nil(out)
      if err.kind == "tls" then
        assert_refused("unknown ca", out, message, err)
      else
        assert.equal("transport", err.kind, message)
        assert.truthy(message:find("reset by peer", 1, true) or message:find("Empty reply", 1, true), message)
      end
    end)

    it("fail at connect when the key is not the certificate's, naming neither key nor its bytes", function()
      local conn <close> = connect(mutual, {
        ca_file = file("ca.pem"), client_cert = file("client.pem"), client_key = file("stranger.key"),
      })
      local started = core.monotonic_ns()
      local out, message, err = conn:ping()
      assert_refused("private key", out, message, err)
      assert.is_true((core.monotonic_ns() - started) / 1e9 < 5, "a mismatched key must fail at once")
      local key = assert(io.open(file("stranger.key"))):read("a")
      local body = key:match("%-%-%-%-%-\n(.-)\n") or key:sub(40, 80)
      assert.is_nil(message:find(body, 1, true))
    end)

    it("fail at connect when the key cannot be read", function()
      local conn <close> = connect(mutual, {
        ca_file = file("ca.pem"), client_cert = file("client.pem"), client_key = file("nowhere.key"),
      })
      local out, message, err = conn:ping()
      assert_refused("nowhere%.key", out, message, err)
    end)

    it("need their key: a certificate without it fails clearly", function()
      local conn <close> = connect(mutual, { ca_file = file("ca.pem"), client_cert = file("client.pem") })
      local out, message, err = conn:ping()
      assert_refused("key", out, message, err)
    end)
  end)

  describe("verification", function()
    for _, option in ipairs {
      { insecure = true }, { verify = false }, { ssl_verify_peer = false }, { verify_peer = false },
      { verify_host = false }, { tls = { verify = false } }, { ssl_verifypeer = 0 }, { no_verify = true },
    } do
      local key = next(option)
      it("cannot be switched off (connect raises on " .. key .. ")", function()
        local options = { url = https(plain), identifier = "tls", health = mcp.health.discard }
        options[key] = option[key]
        local ok, why = pcall(mcp.connect, options)
        assert.is_false(ok)
        assert.truthy(tostring(why):find(key, 1, true), why)
      end)
    end

    it("is not switched off by an empty ca_file either", function()
      local conn <close> = connect(plain, { ca_file = "" })
      local out, message, err = conn:ping()
      assert.is_nil(out)
      assert.equal("tls", err.kind, message)
    end)
  end)
end)
