-- A stdio server through the operator's store and command: add with its argv after --, --env
-- (values and env: references) and --cwd; the readout shows the command (clipped) and the env by
-- name only; test, import, tools, check, edit and remove work on it; usage errors are named.
-- The server is the scripted one of spec/support/stdio_server.lua.
local core = require "mcpclient.core"
local backends = require "support.backends"
local cli = require "support.cli"
local stdio = require "support.stdio"

local json = core.json

-- `lua5.4 bin/mcpclient --db <db> <args...>` → exit code, stdout, stderr.
local function mcpclient(db, ...)
  return cli.run(cli.command(db, { "MCP_SPEC_SECRET=s3cr3t-zz-value" }, ...))
end

local fresh_db = cli.fresh_db

-- The child's environment the specs hand over with --env: the module path, and under the
-- sanitizer run the runtimes the ASan build needs (the allow-list rightly drops them otherwise).
local SANITIZER_NAMES = { "ASAN_OPTIONS", "LD_PRELOAD", "UBSAN_OPTIONS" }
local function env_args()
  local env, args = stdio.env(), { "--env", "LUA_CPATH=" .. stdio.env().LUA_CPATH }
  for _, name in ipairs(SANITIZER_NAMES) do
    if env[name] then args[#args + 1], args[#args + 2] = "--env", name .. "=" .. env[name] end
  end
  return args
end
local function env_names(...)
  local names = { "LUA_CPATH", ... }
  for _, name in ipairs(SANITIZER_NAMES) do if stdio.env()[name] then names[#names + 1] = name end end
  table.sort(names)
  return names
end

describe("a stdio server in the store and the command", function()
  local db
  before_each(function() db = fresh_db() end)
  after_each(function()
    for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(db .. suffix) end
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("is added, read out, tested, imported, checked, edited and removed", function()
    local command = stdio.command("legacy")
    local args = { "add", "--identifier", "fake", "--name", "Fake", "--data-class", "publicContent",
      "--approval", "no", "--enabled", "--env", "SECRET_TOKEN=env:MCP_SPEC_SECRET", "--env",
      "PLAIN=visible-value-x", "--cwd", "/tmp", table.unpack(env_args()) }
    args[#args + 1] = "--"
    for _, word in ipairs(command) do args[#args + 1] = word end
    local code, out, err = mcpclient(db, table.unpack(args))
    assert.equal(0, code, err)
    assert.matches("Added server 1 (fake).", out, 1, true)

    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.matches("Command:%s+lua5.4 .-stdio_server.lua legacy", out)
    assert.matches("Environment:%s+" .. table.concat(env_names("PLAIN", "SECRET_TOKEN"), ", ")
      .. " %(values not shown%)", out)
    assert.matches("Directory:%s+/tmp", out)
    assert.matches("Transport:%s+stdio", out)
    assert.is_nil(out:find("visible-value-x", 1, true))
    assert.is_nil(out:find("s3cr3t", 1, true))

    code, out = mcpclient(db, "--json", "servers")
    assert.equal(0, code)
    local card = json.decode(out)[1]
    assert.equal("stdio", card.transport)
    assert.same(env_names("PLAIN", "SECRET_TOKEN"), card.env)
    assert.is_nil(out:find("visible-value-x", 1, true))

    code, out, err = mcpclient(db, "test", "fake")
    assert.equal(0, code, err)
    assert.matches("Reachable", out, 1, true)

    code, out, err = mcpclient(db, "import", "fake")
    assert.equal(0, code, err)
    assert.matches("fake: 13 imported", out, 1, true)
    code, out = mcpclient(db, "tools", "fake")
    assert.equal(0, code)
    assert.matches("mcp_fake_echo", out, 1, true)

    code, out, err = mcpclient(db, "check", "fake")
    assert.equal(0, code, out .. err)
    assert.matches("0 failed", out, 1, true)

    -- a new URL makes it an HTTP server: the command, env and cwd go
    code, out, err = mcpclient(db, "edit", "fake", "--url", "http://127.0.0.1:9/mcp")
    assert.equal(0, code, err)
    assert.matches("Updated server 1", out, 1, true)
    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.matches("Endpoint:%s+http://127.0.0.1:9/mcp", out)
    assert.is_nil(out:find("Command:", 1, true))
    -- and a command after -- makes it a stdio server again
    local edit = { "edit", "fake", table.unpack(env_args()) }
    edit[#edit + 1] = "--"
    for _, word in ipairs(command) do edit[#edit + 1] = word end
    code, out, err = mcpclient(db, table.unpack(edit))
    assert.equal(0, code, err)
    assert.matches("Updated server 1", out, 1, true)
    code, out, err = mcpclient(db, "test", "fake")
    assert.equal(0, code, err)
    assert.matches("Reachable", out, 1, true)

    code, out, err = mcpclient(db, "remove", "fake")
    assert.equal(0, code, err)
    assert.matches("Removed server 1", out, 1, true)
    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.is_nil(out:find("fake", 1, true))
  end)

  it("checks a server started from a command after --, with no database and nothing stored", function()
    local args = { "check", table.unpack(env_args()) }
    args[#args + 1] = "--"
    for _, word in ipairs(stdio.command("legacy")) do args[#args + 1] = word end
    local code, out, err = cli.run(cli.command(nil, nil, table.unpack(args)))
    assert.equal(0, code, out .. err)
    assert.matches("^passed%s+handshake", out)
    assert.matches("stdio_server.lua legacy: %d+ passed, 0 failed", out)
    -- no database was made: the spec's XDG_DATA_HOME points nowhere, and none was named
    assert.is_nil(io.open("/nonexistent/mcpclient-spec/mcpclient/mcpclient.db"))
    args[1], args[#args + 1] = "--json", "ignored-by-the-server"
    table.insert(args, 2, "check")
    local _
    code, out = cli.run(cli.command(nil, nil, table.unpack(args)))
    assert.equal(0, code, out)
    local report = json.decode(out)
    assert.same({ json.null, true }, { report.id, report.ok })
    assert.matches("stdio_server.lua legacy ignored%-by%-the%-server$", report.server)
    -- usage: nothing after --, a server and a command at once, --env without a command
    code, _, err = cli.run(cli.command(nil, nil, "check", "--"))
    assert.equal(2, code)
    assert.matches("Give the program and its arguments after --.", err, 1, true)
    code, _, err = cli.run(cli.command(nil, nil, "check", "fake", "--", "cat"))
    assert.equal(2, code)
    assert.matches('"check" takes a server, a URL or a command after --, not two', err, 1, true)
    code, _, err = cli.run(cli.command(db, nil, "check", "--env", "A=1", "fake"))
    assert.equal(2, code)
    assert.matches("--env and --cwd go with a command after --.", err, 1, true)
  end)

  it("names what is wrong with a command line", function()
    local code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X")
    assert.equal(2, code)
    assert.matches("needs --url, or the command of a stdio server after --", err, 1, true)
    code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X", "--url", "http://127.0.0.1:9/", "--",
      "cat")
    assert.equal(2, code)
    assert.matches("not both", err, 1, true)
    code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X", "--")
    assert.equal(2, code)
    assert.matches("Give the program and its arguments after --.", err, 1, true)
    code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X", "--env", "1BAD=x", "--", "cat")
    assert.equal(2, code)
    assert.matches("--env takes NAME=VALUE", err, 1, true)
    code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X", "--env", "A=1", "--env", "A=2", "--",
      "cat")
    assert.equal(2, code)
    assert.matches("--env names A twice.", err, 1, true)
    code, _, err = mcpclient(db, "add", "--identifier", "x", "--name", "X", "--credential", "env:T", "--", "cat")
    assert.equal(2, code)
    assert.matches("takes no credential", err, 1, true)
  end)
end)

describe("the store's stdio columns", function()
  local store = require "mcpclient.agent.store"
  it("keep a command, env and cwd, and refuse a bad command", function()
    local s = assert(store.open(backends.fresh(os.tmpname() .. ".db")))
    local uid = assert(s:add_server { identifier = "mem", name = "Memory", command = { "npx", "-y", "a b" },
      env = { MEMORY_FILE_PATH = "/srv/mem.json", TOKEN = "env:MEMORY_TOKEN" }, cwd = "/srv" })
    local row = s:server(uid)
    assert.same({ "npx", "-y", "a b" }, row.command)
    assert.same({ MEMORY_FILE_PATH = "/srv/mem.json", TOKEN = "env:MEMORY_TOKEN" }, row.env)
    assert.equal("/srv", row.cwd)
    assert(s:update_server(uid, { command = {}, env = {}, cwd = "" }))
    row = s:server(uid)
    assert.is_nil(row.command)
    assert.same({}, row.env)
    assert.has_error(function() s:add_server { identifier = "bad", command = { "" } } end)
    assert.has_error(function() s:add_server { identifier = "bad", command = "npx -y x" } end)
    assert.has_error(function() s:add_server { identifier = "bad", env = { ["A B"] = "x" } } end)
    s:close()
  end)
end)
