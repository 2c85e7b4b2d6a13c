-- `mcpclient login` / `logout` as processes against a scripted MCP server behind OAuth
-- (spec/support/oauth_server.mjs, whose /authorize redirects at once: curl plays the browser).
-- The grant lands in the store (file 0600), `servers` shows it without the token, and every later
-- connection (the command's test and import, an agent loop's provider) uses it.
local core = require "mcpclient.core"
local peers = require "support.peers"
local shell = require "support.shell"

local json = core.json
local quote, read_all = shell.quote, shell.read_all
local MARK = "oauthspecSECRET"

local server

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
  local args = { "XDG_DATA_HOME=/nonexistent/mcpclient-spec", "lua5.4", quote(peers.root .. "/bin/mcpclient"),
    "--db", quote(db) }
  for _, a in ipairs { ... } do args[#args + 1] = quote(a) end
  return table.concat(args, " ")
end

local function mcpclient(db, ...)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(command_line(db, ...) .. " 2>" .. quote(errfile)))
  local out = pipe:read("a")
  local _, _, code = pipe:close()
  local err = read_all(errfile)
  os.remove(errfile)
  return code, out, err
end

-- Run `login`, play the browser on the URL it prints; returns exit code, stdout, stderr.
local function login(db, browse)
  local errfile = os.tmpname()
  local pipe = assert(io.popen(command_line(db, "login", "guarded", "--wait", browse and "20" or "1") .. " 2>"
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
  end)
  teardown(function()
    if server then
      os.execute("kill " .. server.pid .. " 2>/dev/null")
      server.pipe:close()
      os.remove(server.stderr)
    end
  end)
  before_each(function()
    db = os.tmpname() .. ".db"
    assert.equal(0, (mcpclient(db, "add", "--identifier", "guarded", "--name", "Guarded",
      "--url", "http://127.0.0.1:" .. server.port .. "/mcp", "--data-class", "publicContent", "--enabled")))
  end)
  after_each(function()
    for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(db .. suffix) end
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
    assert.truthy(out:find("\nLogged in: authorized %(no scope named, expires %d%d%d%d%-%d%d%-%d%d %d%d:%d%d UTC, "
      .. "refreshed as needed%)\n$"), out)

    -- the database file is its owner's only
    local pipe = assert(io.popen("stat -c %a " .. quote(db)))
    assert.equal("600", pipe:read("l"))
    pipe:close()

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
end)
