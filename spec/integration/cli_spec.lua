-- The operator command as a process (bin/mcpclient) against real MCP
-- servers on 127.0.0.1: the official SDK server, server-everything, and a hostile server of our own
-- (spec/peers/hostile-info.mjs) whose self-description is full of terminal escapes and line breaks.
local core = require "mcpclient.core"
local peers = require "support.peers"

local json = core.json

local shell = require "support.shell"
local quote, read_all = shell.quote, shell.read_all

-- Run `lua5.4 bin/mcpclient --db <db> <args...>`; returns exit code, stdout, stderr.
local function mcpclient(db, ...)
  local args = { "lua5.4", quote(peers.root .. "/bin/mcpclient") }
  if db then args[#args + 1] = "--db " .. quote(db) end
  for _, a in ipairs { ... } do args[#args + 1] = quote(a) end
  local errfile = os.tmpname()
  local pipe = assert(io.popen(table.concat(args, " ") .. " 2>" .. quote(errfile), "r"))
  local out = pipe:read("a")
  local _, _, code = pipe:close()
  local err = read_all(errfile)
  os.remove(errfile)
  return code, out, err
end

local function fresh_db()
  local path = os.tmpname()
  os.remove(path)
  return path .. ".db"
end

local function remove_db(path)
  for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(path .. suffix) end
end

-- The hostile peer, started like support.peers starts the SDK server (loopback preload, own PID).
local function start_hostile()
  local stdout, stderr = os.tmpname(), os.tmpname()
  local pipe = assert(io.popen("echo $$; export MCP_PEER_EXIT_WITH_PARENT=1; cd " .. quote(peers.dir)
    .. " && exec node --import " .. quote(peers.loopback) .. " hostile-info.mjs >" .. quote(stdout)
    .. " 2>" .. quote(stderr) .. " </dev/null"))
  local pid = math.tointeger(tonumber(pipe:read("l") or ""))
  assert(pid, "no PID for the hostile peer")
  local port
  for _ = 1, 200 do
    port = read_all(stdout):match("^listening (%d+)\n")
    if port or not peers.alive(pid) then break end
    os.execute("sleep 0.05")
  end
  local peer = { pid = pid, url = port and ("http://127.0.0.1:" .. port .. "/mcp") }
  function peer.stop()
    if peer.stopped then return end
    peer.stopped = true
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    pipe:close()
    os.remove(stdout)
    os.remove(stderr)
  end
  if not port then
    local why = read_all(stderr)
    peer.stop()
    error("the hostile peer did not start: " .. why)
  end
  return peer
end

-- Line breaks the command itself writes are fine; any other control character is not.
local function no_escapes(text)
  local flat = text:gsub("\n", "")
  assert.falsy(flat:find("%c"), "control characters in: " .. text)
end

describe("the mcpclient command #integration", function()
  local db
  local started = {}

  setup(function()
    peers.require_available()
  end)

  before_each(function() db = fresh_db() end)
  after_each(function()
    remove_db(db)
    for _, p in ipairs(started) do p.stop() end
    started = {}
  end)

  local function start(kind)
    local p = peers.start(kind)
    started[#started + 1] = p
    return p
  end

  it("adds, imports, reads out and tests the SDK server", function()
    local sdk = start("sdk-stateless")
    local code, out, err = mcpclient(db, "add", "--identifier", "sdk", "--name", "SDK peer", "--url", sdk.url,
      "--data-class", "publicContent", "--approval", "no", "--enabled")
    assert.equal(0, code, err)
    assert.equal("Added server 1 (sdk).\n", out)

    code, out, err = mcpclient(db, "import", "sdk")
    assert.equal(0, code, err)
    local imported, skipped, orphaned = out:match("^sdk: (%d+) imported, (%d+) skipped, (%d+) orphaned\n")
    assert.truthy(imported, out)
    assert.equal(7, tonumber(imported) + tonumber(skipped), out)
    assert.is_true(tonumber(imported) >= 6)
    assert.equal("0", orphaned)
    assert.equal("", err)

    -- idempotent: a second run against the same catalogue changes nothing
    local again = select(2, mcpclient(db, "import", "--all"))
    assert.equal(out, again)

    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.truthy(out:find("^sdk  SDK peer %(id 1%)  %[Enabled%]\n"), out)
    assert.truthy(out:find("Transport:        HTTP (JSON-RPC)", 1, true), out)
    assert.truthy(out:find("Authentication:   None — requests are sent unauthenticated", 1, true), out)
    assert.truthy(out:find("Approval:         ! Tools run without asking", 1, true), out)
    assert.truthy(out:find("Last import:      %d%d%d%d%-%d%d%-%d%d %d%d:%d%d — ok") or
      out:find("Last import:      %d%d%d%d%-%d%d%-%d%d %d%d:%d%d — partial"), out)
    assert.truthy(out:find("Tools discovered: " .. imported, 1, true), out)
    assert.truthy(out:find("    mcp_sdk_echo  (echo)\n", 1, true), out)
    assert.truthy(out:find("Last contact:     %d%d%d%d%-%d%d%-%d%d %d%d:%d%d — Latency: %d+ ms"), out)

    code, out = mcpclient(db, "--json", "servers")
    assert.equal(0, code)
    local cards = assert(json.decode(out))
    assert.equal("sdk", cards[1].identifier)
    assert.equal(tonumber(imported), #cards[1].tools)

    code, out, err = mcpclient(db, "test", "1")
    assert.equal(0, code, err)
    assert.truthy(out:find("^Reachable — %d+ ms · Protocol 2025%-11%-25 · mcpclient%-sdk%-peer 1%.0%.0\n"), out)
    assert.truthy(out:find("\nLast contact: %d%d%d%d%-%d%d%-%d%d %d%d:%d%d — Latency: %d+ ms\n$"), out)

    code, out = mcpclient(db, "--json", "test", " 1")
    assert.equal(0, code)
    local result = json.decode(out)
    assert.is_true(result.success)
    assert.equal("", result.error)

    code, out = mcpclient(db, "enable", "mcp_sdk_echo")
    assert.equal(0, code)
    assert.equal("Tool mcp_sdk_echo on.\n", out)
    code, out = mcpclient(db, "tools", "1")
    assert.equal(0, code)
    assert.truthy(out:find("mcp_sdk_echo%s+on%s+sdk%s+%(echo%)"), out)
    assert.truthy(out:find("mcp_sdk_add%s+off"), out)
  end)

  it("imports server-everything", function()
    local everything = start("everything")
    assert.equal(0, (mcpclient(db, "add", "--identifier", "every", "--name", "Everything", "--url", everything.url,
      "--data-class", "publicContent", "--enabled")))
    local code, out, err = mcpclient(db, "import", "--all")
    assert.equal(0, code, err)
    local imported = tonumber(out:match("^every: (%d+) imported, %d+ skipped, 0 orphaned\n"))
    assert.truthy(imported and imported > 0, out)
  end)

  it("refuses to import a disabled server whose identifier an enabled one uses", function()
    local sdk = start("sdk-stateless")
    assert.equal(0, (mcpclient(db, "add", "--identifier", "docs", "--name", "Docs", "--url", sdk.url,
      "--data-class", "publicContent", "--enabled")))
    local code, out, err = mcpclient(db, "add", "--identifier", "docs", "--name", "Twin", "--url", sdk.url,
      "--data-class", "publicContent")
    assert.equal(0, code, err)
    assert.equal("Added server 2 (docs).\n", out)
    code, out, err = mcpclient(db, "import", "--server", "2")
    assert.equal(1, code)
    assert.equal('docs: refused — The identifier "docs" is also used by server "Docs"; identifiers must be unique '
      .. "because they name the imported tools.\n", out)
    assert.equal("1 of 1 server(s) refused the import.\n", err)
    -- the refusal is recorded on the twin; nothing of it was imported
    code, out = mcpclient(db, "--json", "servers")
    assert.equal(0, code)
    local cards = json.decode(out)
    assert.equal("error", cards[2].import_status)
    assert.equal(0, #cards[2].tools)
    -- and the twin cannot be enabled beside it
    code, out, err = mcpclient(db, "edit", "2", "--enabled")
    assert.equal("", out)
    assert.equal(1, code)
    assert.truthy(err:find('is also used by server "Docs"', 1, true))
  end)

  it("reports a server that does not answer, exit 1", function()
    local port = peers.free_port()
    assert.equal(0, (mcpclient(db, "add", "--identifier", "dead", "--name", "Dead", "--url",
      "http://127.0.0.1:" .. port .. "/mcp", "--data-class", "publicContent", "--enabled")))
    local code, out, err = mcpclient(db, "test", "1")
    assert.equal(1, code)
    assert.equal("", out)
    assert.truthy(err:find('"dead"', 1, true), err)
    code, out, err = mcpclient(db, "import", "dead")
    assert.equal(1, code)
    assert.truthy(out:find('^dead: refused — MCP server "dead" could not be reached'), out)
    assert.truthy(err:find("An MCP catalogue import failed", 1, true), err)
    assert.truthy(err:find("1 of 1 server(s) refused the import.\n", 1, true), err)
  end)

  it("exits 2 on usage errors and 1 on an unknown server", function()
    local cases = {
      { { "import", "docs", "--all" }, "Pass either an identifier or --all, not both." },
      { { "import" }, "Name a server identifier, or pass --all to import every enabled server." },
      { { "bogus" }, 'Unknown command "bogus".' },
      { { "test" }, '"test" needs a server id (see `mcpclient servers`).' },
      { { "add", "--identifier", "x" }, '"add" needs --name.' },
      { { "servers", "--frob" }, '"servers" does not take the option --frob.' },
    }
    for _, case in ipairs(cases) do
      local code, out, err = mcpclient(db, table.unpack(case[1]))
      assert.equal(2, code, table.concat(case[1], " "))
      assert.equal("", out)
      assert.equal(case[2] .. "\nRun `mcpclient help` for usage.\n", err)
    end
    for _, id in ipairs { "4711", "first", "1.9", "1e3" } do
      local code, out, err = mcpclient(db, "test", id)
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal(id == "4711" and "Unknown MCP server (id 4711).\n" or "Unknown MCP server.\n", err)
    end
    local code, out = mcpclient(nil, "help")
    assert.equal(0, code)
    assert.truthy(out:find("^usage: mcpclient"))
  end)

  it("takes the database from MCPCLIENT_DB when --db is not given", function()
    local pipe = assert(io.popen("cd /tmp && MCPCLIENT_DB=" .. quote(db) .. " lua5.4 "
      .. quote(peers.root .. "/bin/mcpclient") .. " add --identifier envdb --name E --url http://127.0.0.1:9/"))
    local out = pipe:read("a")
    assert.is_true((pipe:close()))
    assert.equal("Added server 1 (envdb).\n", out)
    local code, listed = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.truthy(listed:find("^envdb  E"))
  end)

  it("prints what a hostile server wrote about itself inert", function()
    local hostile = start_hostile()
    started[#started + 1] = hostile
    assert.equal(0, (mcpclient(db, "add", "--identifier", "evil", "--name", "Evil peer", "--url", hostile.url,
      "--data-class", "publicContent", "--enabled")))

    local code, out, err = mcpclient(db, "test", "1")
    assert.equal(0, code, err)
    no_escapes(out)
    local report = out:match("^(Reachable[^\n]*)\n")
    assert.truthy(report, out)
    assert.truthy(report:find(" · Evil [31m X-Injected: yes 6.6 Set-Cookie: x", 1, true), report)
    assert.equal(2, select(2, out:gsub("\n", "")))   -- the report line and the contact line, nothing injected

    code, out = mcpclient(db, "--json", "test", "1")
    assert.equal(0, code)
    assert.falsy(out:find("\27", 1, true))
    assert.equal(1, select(2, out:gsub("\n", "")))

    code, out, err = mcpclient(db, "import", "evil")
    assert.equal(0, code, err)
    no_escapes(out)
    assert.truthy(out:find("^evil: 2 imported, 2 skipped, 0 orphaned\n"
      .. '    skipped: "bad %[2Jname" cannot be given a valid local tool name and was skipped.\n'), out)

    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    no_escapes(out)
    assert.truthy(out:find('\n      "bad [2Jname" cannot be given a valid local tool name and was skipped.\n', 1, true),
      out)

    code, out = mcpclient(db, "tools")
    assert.equal(0, code)
    no_escapes(out)
    assert.truthy(out:find("Reads ]0;pwned  things X-Injected: description", 1, true), out)
    assert.equal(2, select(2, out:gsub("\n", "")))

    code, out = mcpclient(db, "--json", "tools")
    assert.equal(0, code)
    assert.falsy(out:find("\27", 1, true))
    assert.equal("Reads\27]0;pwned\7 things\nX-Injected: description", json.decode(out)[1].description)
  end)

  it("keeps the C1 and bidi characters a server wrote off the terminal and out of --json", function()
    local hostile = start_hostile()
    started[#started + 1] = hostile
    assert.equal(0, (mcpclient(db, "add", "--identifier", "evil", "--name", "Evil peer", "--url", hostile.url,
      "--data-class", "publicContent", "--enabled")))
    -- U+202E (right-to-left override), U+2066 (left-to-right isolate), U+009B (C1 CSI), ESC
    local bidi = { "\u{202E}", "\u{2066}" }
    local controls = { "\u{9B}", "\27" }
    local function free_of(text, list, what)
      for _, c in ipairs(list) do assert.falsy(text:find(c, 1, true), what .. ": " .. text) end
    end
    for _, argv in ipairs { { "test", "1" }, { "import", "evil" }, { "servers" }, { "tools" },
      { "--json", "test", "1" }, { "--json", "import", "evil" }, { "--json", "servers" }, { "--json", "tools" } } do
      local code, out, err = mcpclient(db, table.unpack(argv))
      local what = table.concat(argv, " ")
      assert.equal(0, code, err)
      free_of(out .. err, controls, what)
      free_of(out .. err, bidi, what)
      if argv[1] == "--json" then assert.truthy(json.decode(out), what) end
    end
    local _, out = mcpclient(db, "--json", "tools")
    assert.equal("Looks \u{202E}safe\u{2066} \u{9B}31m here\27[0m", json.decode(out)[2].description)
  end)
end)
