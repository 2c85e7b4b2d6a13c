-- `mcpclient login` / `logout` as processes against a scripted MCP server behind OAuth
-- (spec/support/oauth_server.mjs, whose /authorize redirects at once: curl plays the browser).
-- The grant lands in the store (file 0600), `servers` shows it without the token, and every later
-- connection (the command's test and import, an agent loop's provider) uses it.
local core = require "mcpclient.core"
local backends = require "support.backends"
local cli = require "support.cli"
local peers = require "support.peers"
local shell = require "support.shell"

local json = core.json
local quote, read_all = shell.quote, shell.read_all
local MARK = "oauthspecSECRET"
local SECRET = "login-spec-client-secret-4711"

local server, other

local function start()
  local stderr = os.tmpname()
  local pipe = assert(io.popen(string.format(
    "exec sh -c 'echo $$; cd %s && exec node spec/support/oauth_server.mjs 2>%s'", peers.root, stderr), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))))
  local port = (pipe:read("l") or ""):match("^listening (%d+)$")
  if not port then
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    error("the OAuth server did not start: " .. read_all(stderr))
  end
  return { pipe = pipe, pid = pid, port = tonumber(port), stderr = stderr }
end

local function command_line(db, ...)
  -- LOGIN_SPEC_SECRET: the secret a --client-secret env:LOGIN_SPEC_SECRET names
  return cli.command(db, { "LOGIN_SPEC_SECRET=" .. SECRET }, ...)
end

local function mcpclient(db, ...)
  return cli.run(command_line(db, ...))
end

-- Run `login` (with any extra arguments), play the browser on the URL it prints; returns exit
-- code, stdout, stderr.
local function login(db, browse, ...)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(command_line(db, "login", "guarded", "--wait", browse and "20" or "1", ...) .. " 2>"
    .. quote(errfile)))
  local lines = {}
  for line in pipe:lines() do
    lines[#lines + 1] = line
    local url = line:match("^  (http%S+)$")
    if url and browse then os.execute("curl -s -L -o /dev/null " .. quote(url)) end
  end
  local _, _, code = pipe:close()
  local err = read_all(errfile)
  os.remove(errfile)
  return code, table.concat(lines, "\n") .. "\n", err
end

describe("mcpclient login and logout #integration", function()
  local db
  setup(function()
    peers.require_available()
    server = start()
    other = start()
  end)
  teardown(function()
    for _, s in ipairs { server, other } do
      os.execute("kill " .. s.pid .. " 2>/dev/null")
      s.pipe:close()
      os.remove(s.stderr)
    end
  end)
  before_each(function()
    db = backends.fresh(os.tmpname() .. ".db")   -- a schema of its own on a PostgreSQL run
    assert.equal(0, (mcpclient(db, "add", "--identifier", "guarded", "--name", "Guarded",
      "--url", "http://127.0.0.1:" .. server.port .. "/mcp", "--data-class", "publicContent", "--enabled")))
  end)
  after_each(function()
    if not backends.postgres then
      for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(db .. suffix) end
    end
  end)

  it("logs in through the browser's redirect and shares the grant with every later connection", function()
    local outputs = {}
    local function keep(code, out, err) outputs[#outputs + 1] = out .. err; return code, out, err end

    -- before: the server refuses, and the command says how to log in
    local code, _, err = keep(mcpclient(db, "test", "guarded"))
    assert.equal(1, code)
    assert.truthy(err:find("If the server uses OAuth, log in first: `mcpclient login guarded`.", 1, true), err)

    local out
    code, out, err = keep(login(db, true))
    assert.equal(0, code, out .. err)
    assert.truthy(out:find("^To log in to guarded, open this URL in a browser:\n  http://127%.0%.0%.1:%d+/authorize%?"),
      out)
    assert.truthy(out:find("redirect_uri=http%%3A%%2F%%2F127%.0%.0%.1%%3A%d+%%2Fcallback"), out)
    assert.truthy(out:find("\nLogged in: authorized %(no scope named, expires %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC, "
      .. "refreshed as needed%)\n$"), out)

    -- the database file is its owner's only
    if not backends.postgres then
      local pipe = assert(io.popen("stat -c %a " .. quote(db)))
      assert.equal("600", pipe:read("l"))
      pipe:close()
    end

    -- every later connection uses the stored grant: test, import, the readout
    code, out, err = keep(mcpclient(db, "test", "guarded"))
    assert.equal(0, code, err)
    assert.truthy(out:find("^Reachable"), out)
    code, out, err = keep(mcpclient(db, "import", "guarded"))
    assert.equal(0, code, err)
    assert.truthy(out:find("^guarded: 1 imported"), out)
    out = select(2, keep(mcpclient(db, "servers")))
    assert.truthy(out:find("\n  OAuth:            authorized (no scope named, expires ", 1, true), out)
    out = select(2, keep(mcpclient(db, "--json", "servers")))
    local card = json.decode(out)[1]
    assert.equal("authorized", card.authorization.state)
    assert.is_true(card.authorization.refreshable)
    assert.truthy(card.authorization.expires_at:find("Z$"))

    -- an agent loop's provider on the same database
    local store = assert(require("mcpclient.agent.store").open(db))
    local provider = require("mcpclient.agent.catalogue").provider(store)
    local tools = assert(provider.tools())
    local outcome = assert(tools[1]:execute({}))
    provider.close()
    store:close()
    assert.truthy(outcome, "the provider's call")

    -- logout forgets it
    code, out = keep(mcpclient(db, "logout", "guarded"))
    assert.equal(0, code)
    assert.equal("Logged out of guarded: its stored authorization is removed.\n", out)
    code = keep(mcpclient(db, "test", "guarded"))
    assert.equal(1, code)
    out = select(2, keep(mcpclient(db, "servers")))
    assert.falsy(out:find("OAuth:", 1, true), out)

    -- no token in anything any command printed
    for _, text in ipairs(outputs) do assert.falsy(text:find(MARK, 1, true), text) end
  end)

  it("gives up when no redirect arrives, and stores nothing", function()
    local code, out, err = login(db, false)
    assert.equal(1, code, out .. err)
    assert.truthy(err:find("requires authorization", 1, true), err)
    out = select(2, mcpclient(db, "--json", "servers"))
    assert.equal(json.null, json.decode(out)[1].authorization)
  end)

  -- What a scripted server saw since it was last reset: { path, authorization (bool), token }.
  local function state_of(s)
    local leg <close> = core.http_leg()
    local res = assert(leg:send { method = "GET", url = "http://127.0.0.1:" .. s.port .. "/_state", timeout_ms = 5000 })
    return json.decode(res.body)
  end
  local function reset(s)
    local leg <close> = core.http_leg()
    assert(leg:send { method = "POST", url = "http://127.0.0.1:" .. s.port .. "/_config", body = "{}",
      timeout_ms = 5000 })
  end
  local function other_url() return "http://127.0.0.1:" .. other.port .. "/mcp" end

  it("never sends a grant to a server it was not issued for: edit --url, remove then add, logout", function()
    reset(other)
    local outputs = {}
    local function keep(code, out, err) outputs[#outputs + 1] = out .. err; return code, out, err end

    -- login, then the URL moves to another server: the grant is forgotten, and the command says so
    local code, out, err = keep(login(db, true))
    assert.equal(0, code, out .. err)
    code, out, err = keep(mcpclient(db, "edit", "guarded", "--url", other_url()))
    assert.equal(0, code, err)
    assert.equal("Updated server 1 (guarded).\nIts stored OAuth authorization was for the old URL and is "
      .. "forgotten; log in again with `mcpclient login guarded` if the new one needs it.\n", out)
    code, out, err = keep(mcpclient(db, "test", "guarded"))
    assert.equal(1, code, out)
    assert.truthy(err:find("mcpclient login guarded", 1, true), err)
    out = select(2, keep(mcpclient(db, "--json", "servers")))
    assert.equal(json.null, json.decode(out)[1].authorization)

    -- back to the first server, login, then remove and add the other one under the same identifier
    assert.equal(0, (keep(mcpclient(db, "edit", "guarded", "--url", "http://127.0.0.1:" .. server.port .. "/mcp"))))
    code, out, err = keep(login(db, true))
    assert.equal(0, code, out .. err)
    code, out = keep(mcpclient(db, "--json", "remove", "guarded"))
    assert.equal(0, code)
    assert.equal(1, json.decode(out).grants_forgotten)
    assert.equal(0, (keep(mcpclient(db, "add", "--identifier", "guarded", "--name", "Other", "--url", other_url(),
      "--data-class", "publicContent", "--enabled"))))
    code = keep(mcpclient(db, "test", "guarded"))
    assert.equal(1, code)
    code = keep(mcpclient(db, "import", "guarded"))
    assert.equal(1, code)

    -- a login at the first server, then logout, then the other server again
    assert.equal(0, (keep(mcpclient(db, "edit", "guarded", "--url", "http://127.0.0.1:" .. server.port .. "/mcp"))))
    assert.equal(0, (keep(login(db, true))))
    code, out = keep(mcpclient(db, "logout", "guarded"))
    assert.equal(0, code)
    assert.equal("Logged out of guarded: its stored authorization is removed.\n", out)
    assert.equal(1, (keep(mcpclient(db, "test", "guarded"))))

    -- the other server was asked, and never saw an Authorization header
    local seen = state_of(other)
    local asked = 0
    for _, r in ipairs(seen) do
      if r.path == "/mcp" then asked = asked + 1 end
      assert.is_false(r.authorization, r.path)
    end
    assert.is_true(asked >= 3, "the other server was asked " .. asked .. " times")
    for _, text in ipairs(outputs) do assert.falsy(text:find(MARK, 1, true), text) end
  end)

  it("keeps a grant for its resource only, even where nothing forgot it", function()
    -- a second row under another identifier points at the other server; a grant saved for the first
    -- server under that identifier (as a store from another version might hold) is not used there
    reset(other)
    assert.equal(0, (login(db, true)))
    local store = assert(require("mcpclient.agent.store").open(db))
    local rows = assert(store:grants("guarded"))
    local record = json.decode(rows[1].record)
    store:close()
    assert.equal("http://127.0.0.1:" .. server.port .. "/mcp", record.resource)
    assert.equal(0, (mcpclient(db, "add", "--identifier", "second", "--name", "Second", "--url", other_url(),
      "--data-class", "publicContent")))
    store = assert(require("mcpclient.agent.store").open(db))
    record.server = "second"
    assert(require("mcpclient.agent.grants").save(store, record))
    store:close()
    assert.equal(1, (mcpclient(db, "test", "second")))
    for _, r in ipairs(state_of(other)) do assert.is_false(r.authorization, r.path) end
  end)

  it("takes a fixed port, a pre-registered client with a secret reference and scopes, and says how over SSH",
    function()
      reset(server)
      local port = 20000 + math.random(0, 20000)
      local code, out, err = login(db, true, "--port", tostring(port), "--client-id", "preset-client",
        "--client-secret", "env:LOGIN_SPEC_SECRET", "--scope", "read write")
      assert.equal(0, code, out .. err)
      assert.truthy(out:find("redirect_uri=http%3A%2F%2F127.0.0.1%3A" .. port .. "%2Fcallback", 1, true), out)
      assert.truthy(out:find("client_id=preset-client", 1, true), out)
      assert.truthy(out:find("scope=read%20write", 1, true), out)
      assert.truthy(out:find("Over SSH, forward that port from the machine with the browser first: ssh -L "
        .. port .. ":127.0.0.1:" .. port .. " <this host>", 1, true), out)
      assert.is_nil((out .. err):find(SECRET, 1, true))
      for _, r in ipairs(state_of(server)) do assert.not_equal("/register", r.path) end
      -- the grant keeps the client and the reference to its secret, never the secret
      local store = assert(require("mcpclient.agent.store").open(db))
      local kept = assert(store:grants("guarded"))[1].record
      store:close()
      assert.is_nil(kept:find(SECRET, 1, true), kept)
      local record = json.decode(kept)
      assert.equal("preset-client", record.client_id)
      assert.equal("env:LOGIN_SPEC_SECRET", record.client_secret_ref)
      assert.equal(0, (mcpclient(db, "test", "guarded")))
      -- without --port the SSH word says how to get one
      code, out = login(db, true)
      assert.equal(0, code)
      assert.truthy(out:find("Over SSH, run `mcpclient login guarded --port 8765` instead", 1, true), out)
    end)

  it("refuses a client secret given as itself, without echoing it", function()
    for _, args in ipairs {
      { "--client-id", "c", "--client-secret", "s3cr3t-VALUE" },
      { "--client-secret", "env:X" },
      { "--port", "70000" },
      { "--scope", "" },
    } do
      local code, out, err = mcpclient(db, "login", "guarded", table.unpack(args))
      assert.equal(2, code, out .. err)
      assert.is_nil((out .. err):find("s3cr3t", 1, true), err)
    end
  end)
end)
