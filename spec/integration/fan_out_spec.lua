-- The operator command contacts servers at once: `test --all` and
-- `import --all` over a real SDK server and three silent ones (a node
-- listener on 127.0.0.1 that accepts and never answers, started here and
-- stopped by PID). Each silent server costs its whole budget; one after the
-- other they would cost three budgets, at once they cost about one.
local cli = require "mcpclient.agent.cli"
local core = require "mcpclient.core"
local peers = require "support.peers"
local store_module = require "mcpclient.agent.store"

local shell = require "support.shell"
local quote = shell.quote

local BUDGET = 1.5

local SILENT = "require('http').createServer(() => {}).listen(0, '127.0.0.1', function () {"
  .. " console.log('listening ' + this.address().port) })"

local function start_silent()
  local pipe = assert(io.popen("echo $$; export MCP_PEER_EXIT_WITH_PARENT=1; exec node --import "
    .. quote(peers.loopback) .. " -e " .. quote(SILENT)))
  local pid = math.tointeger(tonumber(pipe:read("l")))
  local port = assert((pipe:read("l") or ""):match("^listening (%d+)$"), "the silent server printed no port")
  return { pid = pid, pipe = pipe, url = "http://127.0.0.1:" .. port .. "/mcp" }
end

local sink = require("support.cli").sink

describe("the operator command's fan-out #integration", function()
  local peer, silent, db, store = nil, {}, nil, nil

  setup(function()
    peers.require_available()
    peer = peers.start("sdk-session")
    for i = 1, 3 do silent[i] = start_silent() end
    db = os.tmpname()
    os.remove(db)
    store = assert(store_module.open(db))
    local function add(identifier, url)
      assert(store:add_server { identifier = identifier, name = identifier, url = url, data_class = "publicContent",
        requires_approval = "0", enabled = true })
    end
    add("real", peer.url)
    for i, s in ipairs(silent) do add("silent" .. i, s.url) end
  end)

  teardown(function()
    if store then store:close() end
    if peer then peer.stop() end
    for _, s in ipairs(silent) do
      os.execute("kill -TERM " .. s.pid .. " 2>/dev/null")
      s.pipe:close()
    end
    for _, suffix in ipairs { "", "-wal", "-shm" } do if db then os.remove(db .. suffix) end end
  end)

  local function run(...)
    local out, err = sink(), sink()
    local t0 = core.monotonic_ns()
    local code = cli.main({ ... }, { store = store, stdout = out, stderr = err, progress = false,
      options = { budget = BUDGET } })
    return code, out:text(), err:text(), (core.monotonic_ns() - t0) / 1e9
  end

  it("tests every enabled server at once", function()
    local code, out, _, wall = run("test", "--all")
    assert.equal(cli.FAILED, code)
    assert.truthy(out:find("real: Reachable", 1, true), out)
    for i = 1, 3 do assert.truthy(out:find("silent" .. i .. ": ", 1, true), out) end
    assert.is_true(wall < 2 * BUDGET, "test --all took " .. wall .. " s")
  end)

  it("imports every enabled server at once, the reports in order", function()
    local code, out, err, wall = run("import", "--all")
    assert.equal(cli.FAILED, code)
    local first = out:find("real: %d+ imported")
    assert.truthy(first, out)
    -- a refusal is printed once, on stderr
    for i = 1, 3 do assert.truthy(err:find("silent" .. i .. ": refused", 1, true), err) end
    assert.is_true(wall < 2 * BUDGET, "import --all took " .. wall .. " s")
  end)
end)
