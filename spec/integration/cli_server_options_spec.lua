-- The operator command's flags for how a server is reached and what it is
-- told: --proxy, --ca-file, --client-cert, --client-key, --header, --root,
-- on add and edit, their checks, and how `servers` shows them (never a key's
-- content, never a refused value repeated when it may be a secret).
local backends = require "support.backends"
local cli = require "support.cli"
local core = require "mcpclient.core"

local json = core.json

local function temp_file(content)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

local KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
  .. "-----END PRIVATE KEY-----\n"

describe("mcpclient add/edit: proxy, TLS files, headers, roots (" .. backends.name .. ")", function()
  local store, ca, cert, key

  before_each(function()
    store = backends.open_store()
    ca, cert, key = temp_file("-----BEGIN CERTIFICATE-----\n"), temp_file("-----BEGIN CERTIFICATE-----\n"),
      temp_file(KEY)
  end)

  after_each(function()
    store:close()
    os.remove(ca); os.remove(cert); os.remove(key)
  end)

  local function run(...)
    return cli.main({ ... }, { store = store })
  end

  local function add(...)
    return run("add", "--identifier", "corp", "--name", "Corp", "--url", "https://mcp.corp.example/mcp", ...)
  end

  it("stores each flag, and `servers` shows them without the key's content", function()
    local code, out, err = add("--proxy", "http://proxy.corp:3128", "--ca-file", ca, "--client-cert", cert,
      "--client-key", key, "--header", "X-Tenant=acme", "--header", "X-Region=eu",
      "--root", "file:///srv/notes=notes", "--root", "file:///srv/other")
    assert.equal(0, code, err)
    assert.matches("Added server", out)
    local row = assert(store:servers())[1]
    assert.same({ "http://proxy.corp:3128", ca, cert, key },
      { row.proxy, row.ca_file, row.client_cert, row.client_key })
    assert.same({ ["X-Tenant"] = "acme", ["X-Region"] = "eu" }, row.headers)
    assert.same({ { uri = "file:///srv/notes", name = "notes" }, { uri = "file:///srv/other" } }, row.roots)

    code, out = run("servers", "corp")
    assert.equal(0, code)
    assert.matches("Proxy:%s+http://proxy.corp:3128", out)
    assert.matches("CA file:%s+" .. ca:gsub("%p", "%%%0"), out)
    assert.matches("Client key:%s+" .. key:gsub("%p", "%%%0"), out)
    assert.matches("Header:%s+X%-Region: eu", out)
    assert.matches("Header:%s+X%-Tenant: acme", out)
    assert.matches("Root:%s+file:///srv/notes %(notes%)", out)
    assert.falsy(out:find("PRIVATE KEY", 1, true))
    assert.falsy(out:find("MIIE", 1, true))

    code, out = run("--json", "servers", "corp")
    assert.equal(0, code)
    local card = json.decode(out)[1]
    assert.same({ "http://proxy.corp:3128", ca, cert, key }, { card.proxy, card.ca_file, card.client_cert,
      card.client_key })
    assert.same({ ["X-Tenant"] = "acme", ["X-Region"] = "eu" }, card.headers)
    assert.same({ "file:///srv/notes", "notes" }, { card.roots[1].uri, card.roots[1].name })
    assert.falsy(out:find("PRIVATE KEY", 1, true))
  end)

  it("shows a key reference as a reference, and --proxy none as none", function()
    local code, _, err = add("--client-key", "env:AGENT_KEY_PATH", "--client-cert", cert, "--proxy", "none")
    assert.equal(0, code, err)
    assert.same({ "env:AGENT_KEY_PATH", "none" }, { store:servers()[1].client_key, store:servers()[1].proxy })
    local _, out = run("servers")
    assert.matches("Client key:%s+from a credential reference", out)
    assert.matches("Proxy:%s+none", out)
  end)

  it("refuses each bad value as a usage error that names it, storing nothing", function()
    local cases = {
      { { "--header", "Authorization=Bearer abc" }, "Authorization is not a plain header" },
      { { "--header", "Cookie=a=b" }, "Cookie is not a plain header" },
      { { "--header", "Mcp-Session-Id=1" }, "Mcp-" },
      { { "--header", "Content-Type=text/plain" }, "Content-" },
      { { "--header", "Host=evil" }, "Host is not a plain header" },
      { { "--header", "Accept=*/*" }, "Accept is not a plain header" },
      { { "--header", "X-A=a\r\nX-Injected: 1" }, "control character" },
      { { "--header", "X-Api-Key=abc" }, "looks like a secret" },
      { { "--header", "novalue" }, "--header takes NAME=VALUE" },
      { { "--header", "X-A=1", "--header", "x-a=2" }, "twice" },
      { { "--root", "https://example.com/" }, "not a file:// URI" },
      { { "--root", "/srv/notes" }, "not a file:// URI" },
      { { "--proxy", "ftp://proxy:21" }, 'scheme "ftp" is not http, https or socks5h' },
      { { "--proxy", "http://user:pw@proxy:3128" }, "user information" },
      { { "--ca-file", "/nonexistent/ca.pem" }, "CA file names no file" },
      { { "--ca-file", "/tmp" }, "CA file names no readable file" },
      { { "--client-cert", "/nonexistent/cert.pem" }, "client certificate names no file" },
      { { "--client-key", "/nonexistent/key.pem" }, "client key names no readable file" },
      { { "--client-key", KEY }, "never stored" },
    }
    for _, case in ipairs(cases) do
      local code, out, err = add(table.unpack(case[1]))
      assert.equal(2, code, table.concat(case[1], " "))
      assert.matches(case[2], err, 1, true)
      assert.equal("", out)
      assert.falsy(err:find("MIIE", 1, true), "a key's content was printed")
      assert.falsy(err:find("user:pw", 1, true), "a proxy password was printed")
    end
    assert.same({}, assert(store:servers()))
  end)

  it("refuses proxy, TLS files and headers on a server started by a command; takes its roots", function()
    local code, _, err = run("add", "--identifier", "local", "--name", "Local", "--header", "X-A=b", "--", "server")
    assert.equal(2, code)
    assert.matches("for a server reached by URL", err, 1, true)
    code, _, err = run("add", "--identifier", "local", "--name", "Local", "--root", "file:///w=work", "--", "server")
    assert.equal(0, code, err)
    assert.same({ { uri = "file:///w", name = "work" } }, store:servers()[1].roots)
  end)

  it("edit replaces headers and roots, clears them with \"\", drops HTTP settings with a new command", function()
    assert.equal(0, (add("--header", "X-Tenant=acme", "--root", "file:///a", "--proxy", "http://p:3128")))
    local code, _, err = run("edit", "corp", "--header", "X-Region=eu", "--root", "file:///b=b")
    assert.equal(0, code, err)
    local row = store:servers()[1]
    assert.same({ ["X-Region"] = "eu" }, row.headers)
    assert.same({ { uri = "file:///b", name = "b" } }, row.roots)
    code, _, err = run("edit", "corp", "--header", "", "--root", "", "--proxy", "")
    assert.equal(0, code, err)
    row = store:servers()[1]
    assert.same({ {}, {}, "" }, { row.headers, row.roots, row.proxy })
    -- a bad value changes nothing
    code = run("edit", "corp", "--proxy", "gopher://p")
    assert.equal(2, code)
    assert.equal("", store:servers()[1].proxy)

    assert.equal(0, (run("edit", "corp", "--proxy", "socks5h://127.0.0.1:1080", "--header", "X-A=b")))
    code, _, err = run("edit", "corp", "--", "server", "--stdio")
    assert.equal(0, code, err)
    row = store:servers()[1]
    assert.same({ "", "", {}, { "server", "--stdio" } }, { row.url, row.proxy, row.headers, row.command })
  end)
end)
