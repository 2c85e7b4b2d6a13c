-- The operator command as a process (bin/mcpclient) against real MCP
-- servers on 127.0.0.1: the official SDK server, server-everything, and a hostile server of our own
-- (spec/peers/hostile-info.mjs) whose self-description is full of terminal escapes and line breaks.
local core = require "mcpclient.core"
local cli = require "support.cli"
local peers = require "support.peers"

local json = core.json

local shell = require "support.shell"
local quote, read_all = shell.quote, shell.read_all

-- Run `lua5.4 bin/mcpclient --db <db> <args...>`; returns exit code, stdout, stderr.
-- XDG_DATA_HOME points at a directory that never exists, so a spec that forgets --db fails loudly.
local mcpclient = cli.mcpclient

local fresh_db = cli.fresh_db

local remove_db = cli.remove_db

-- The hostile peer, started like support.peers starts the SDK server (loopback preload, own PID).
local function start_hostile()
  local stdout, stderr = os.tmpname(), os.tmpname()
  local pipe = assert(io.popen("echo $$; export MCP_PEER_EXIT_WITH_PARENT=1; cd " .. quote(peers.dir)
    .. " && exec node --import " .. quote(peers.loopback) .. " hostile-info.mjs >" .. quote(stdout)
    .. " 2>" .. quote(stderr) .. " </dev/null"))
  local pid = math.tointeger(tonumber(pipe:read("l") or ""))
  assert(pid, "no PID for the hostile peer")
  -- until it listens (or is gone), for as long as any peer may take to start on a loaded machine
  local port
  local give_up = core.now() + peers.START_SECONDS
  repeat
    port = read_all(stdout):match("^listening (%d+)\n")
    if port or not peers.alive(pid) then break end
    core.sleep(0.05)
  until core.now() > give_up
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
    error("the hostile peer (pid " .. pid .. ") did not start; the end of its stderr:\n" .. peers.tail(why))
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
    assert.equal("Added server 1 (sdk).\nNext: `mcpclient import sdk` fetches its tools.\n", out)

    code, out, err = mcpclient(db, "import", "sdk")
    assert.equal(0, code, err)
    local imported, skipped, orphaned = out:match("^sdk: (%d+) imported, (%d+) skipped, (%d+) orphaned\n")
    assert.truthy(out:find("\nImported tools start switched off: `mcpclient enable <tool>` switches one on, "
      .. "`mcpclient enable mcp_sdk` all of this server's (see `mcpclient tools sdk`).\n", 1, true), out)
    assert.truthy(imported, out)
    assert.equal(7, tonumber(imported) + tonumber(skipped), out)
    assert.is_true(tonumber(imported) >= 6)
    assert.equal("0", orphaned)
    assert.equal("", err)

    -- idempotent: a second run against the same catalogue changes nothing, and brings no new tool to switch on
    local again = select(2, mcpclient(db, "import", "--all"))
    assert.equal(out:match("^[^\n]*\n"), again)

    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    assert.truthy(out:find("^sdk  SDK peer %(id 1%)  %[Enabled%]\n"), out)
    assert.truthy(out:find("Transport:        HTTP (JSON-RPC)", 1, true), out)
    assert.truthy(out:find("Authentication:   None — requests are sent unauthenticated", 1, true), out)
    assert.truthy(out:find("Approval:         ! Tools run without asking", 1, true), out)
    assert.truthy(out:find("Last import:      %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC — ok") or
      out:find("Last import:      %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC — partial"), out)
    assert.truthy(out:find("Tools discovered: " .. imported, 1, true), out)
    assert.truthy(out:find("    mcp_sdk_echo  (echo)\n", 1, true), out)
    assert.truthy(out:find("Last contact:     %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC — Latency: %d+ ms"), out)

    code, out = mcpclient(db, "--json", "servers")
    assert.equal(0, code)
    local cards = assert(json.decode(out))
    assert.equal("sdk", cards[1].identifier)
    assert.equal(1, cards[1].id)
    assert.equal(tonumber(imported), #cards[1].tools)
    assert.equal(tonumber(imported), cards[1].tool_count)
    assert.equal("publicContent", cards[1].data_class)
    assert.is_false(cards[1].requires_approval)
    assert.equal("none", cards[1].authentication)
    assert.equal("integer", math.type(cards[1].latency_ms))
    assert.truthy(cards[1].last_contact:find("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"), cards[1].last_contact)
    assert.truthy(cards[1].last_import:find("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"), cards[1].last_import)

    -- the same server by id and by identifier
    for _, name in ipairs { "1", "sdk" } do
      code, out, err = mcpclient(db, "test", name)
      assert.equal(0, code, err)
      assert.truthy(out:find("^Reachable — %d+ ms · Protocol 2025%-11%-25 · mcpclient%-sdk%-peer 1%.0%.0\n"), out)
      assert.truthy(out:find("\nLast contact: %d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d UTC — Latency: %d+ ms\n$"), out)
    end

    code, out = mcpclient(db, "--json", "test", " 1")
    assert.equal(0, code)
    local result = json.decode(out)
    assert.is_true(result.reachable)
    assert.equal(json.null, result.error)
    assert.equal("integer", math.type(result.latency_ms))
    assert.equal("2025-11-25", result.protocol_version)
    assert.equal("mcpclient-sdk-peer", result.server_name)
    assert.truthy(result.last_contact:find("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"))

    code, out = mcpclient(db, "enable", "mcp_sdk_echo")
    assert.equal(0, code)
    assert.equal("Tool mcp_sdk_echo on.\n", out)
    code, out = mcpclient(db, "tools", "sdk")
    assert.equal(0, code)
    -- aligned columns: every row's second column starts where the header's does
    local header = out:match("^([^\n]*)\n")
    local column = header:find("STATE", 1, true)
    for line in out:gmatch("[^\n]+") do
      assert.truthy(line:sub(column):find("^%S"), line)
      assert.equal(" ", line:sub(column - 1, column - 1), line)
    end
    assert.truthy(out:find("mcp_sdk_echo%s+on%s+sdk%s+echo"), out)
    assert.truthy(out:find("mcp_sdk_add%s+off"), out)

    code, out = mcpclient(db, "--json", "enable", "mcp_sdk")
    assert.equal(0, code)
    result = json.decode(out)
    assert.equal("group", result.switch)
    assert.equal(tonumber(imported), result.tools_switched_on)
    out = select(2, mcpclient(db, "--json", "tools", "sdk"))
    for _, t in ipairs(json.decode(out)) do assert.is_true(t.enabled, t.tool_name) end
  end)

  it("runs the live conformance checks against the official SDK server and server-everything", function()
    local kinds = { { "sdk-session", { "--call", "echo", "--arguments", '{"message":"hi"}' } },
      { "sdk-stateless", {} }, { "everything", {} } }
    for i, case in ipairs(kinds) do
      local peer = start(case[1])
      local id = "peer" .. i
      assert.equal(0, (mcpclient(db, "add", "--identifier", id, "--name", case[1], "--url", peer.url)))
      local code, out, err = mcpclient(db, "check", id, table.unpack(case[2]))
      local lines = {}
      for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
      local statuses = {}
      for _, line in ipairs(lines) do
        local status, check = line:match("^(%a[%a ]-)%s%s+(%S+)")
        if status then statuses[check] = status end
      end
      for _, always in ipairs { "handshake", "session", "capabilities", "discovery", "error-shape", "budget",
        "cancel", "health" } do
        assert.equal("passed", statuses[always], case[1] .. " " .. always .. "\n" .. out .. err)
      end
      -- a call only when named or declared read-only; server-everything declares one
      assert.equal(case[1] == "sdk-stateless" and "not applicable" or "passed", statuses.call, out)
      -- the SDK's passthrough schema ({"additionalProperties": {}}) is read as true
      assert.equal("passed", statuses.schemas, out)
      assert.equal(0, code, out .. err)
      assert.truthy(lines[#lines]:find("^" .. id .. ": %d+ passed, %d+ failed, %d+ not applicable$"), out)

      code, out = mcpclient(db, "--json", "check", id, table.unpack(case[2]))
      local report = assert(json.decode(out))
      assert.equal(id, report.server)
      assert.equal(report.failed == 0, report.ok)
      assert.equal(report.ok and 0 or 1, code)
      assert.equal(#lines - 1, #report.checks)
      for _, c in ipairs(report.checks) do
        assert.equal(statuses[c.id], c.status)
        assert.is_string(c.detail)
      end
    end
  end)

  it("runs the live checks against a server that does not answer: the handshake fails, the rest is not applicable",
    function()
      local port = peers.free_port()
      assert.equal(0, (mcpclient(db, "add", "--identifier", "dead", "--name", "Dead", "--url",
        "http://127.0.0.1:" .. port .. "/mcp")))
      local code, out = mcpclient(db, "check", "dead")
      assert.equal(1, code)
      assert.truthy(out:find("^failed%s+handshake%s+MCP server \"dead\" could not be reached"), out)
      assert.truthy(out:find('\nnot applicable  discovery%s+the "handshake" check did not pass'), out)
    end)

  it("bounds every operation by --budget", function()
    local sdk = start("sdk-session")
    assert.equal(0, (mcpclient(db, "add", "--identifier", "sdk", "--name", "SDK", "--url", sdk.url)))
    local code, out = mcpclient(db, "--json", "--budget", "0.001", "test", "sdk")
    assert.equal(1, code)
    local result = json.decode(out)
    assert.is_false(result.reachable)
    assert.truthy(result.kind == "deadline" or result.kind == "timeout", out)
    -- and a budget the checks fit in (generous: the machine may be loaded) passes
    code = mcpclient(db, "--budget", "60", "test", "sdk")
    assert.equal(0, code)
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

  it("refuses a duplicate identifier at add, and says what a new server still needs", function()
    local sdk = start("sdk-stateless")
    local code, out, err = mcpclient(db, "add", "--identifier", "docs", "--name", "Docs", "--url", sdk.url)
    assert.equal(0, code, err)
    assert.equal("Added server 1 (docs).\nApproval: a human approves every call of its tools (the default), so an "
      .. "agent's turn waits for an approval; `mcpclient edit docs --approval no` lets them run without asking.\n"
      .. "Not usable yet:\n"
      .. "  - no data class is declared, so no tool of it is offered: `mcpclient edit docs --data-class "
      .. "publicContent|editorContent|sourceCode|internalConfiguration|systemDiagnostics|secretAdjacent`\n"
      .. "  - it is disabled: `mcpclient edit docs --enabled`\n", out)
    code, out, err = mcpclient(db, "add", "--identifier", "docs", "--name", "Twin", "--url", sdk.url,
      "--data-class", "publicContent")
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal('The identifier "docs" is also used by server "Docs"; identifiers must be unique '
      .. "because they name the imported tools.\nTo change that server, `mcpclient edit docs …` (the same flags); "
      .. "to replace it, `mcpclient remove docs` first, then add again.\n", err)
    code, out = mcpclient(db, "--json", "add", "--identifier", "two", "--name", "Two", "--url", sdk.url,
      "--enabled")
    assert.equal(0, code)
    local added = json.decode(out)
    assert.equal(2, added.id)
    assert.is_false(added.usable)
    assert.equal("data_class", added.missing[1].field)
    assert.truthy(added.missing[1].fix:find("^mcpclient edit two %-%-data%-class "))
    code, out = mcpclient(db, "--json", "add", "--identifier", "two", "--name", "Two", "--url", sdk.url)
    assert.equal(1, code)
    assert.equal("conflict", json.decode(out).kind)
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
    assert.equal("", out)
    -- printed once: no warning repeating it
    assert.truthy(err:find('^dead: refused — MCP server "dead" could not be reached'), err)
    assert.falsy(err:find("An MCP catalogue import failed", 1, true), err)
    assert.equal(1, select(2, err:gsub("\n", "")), err)
  end)

  it("exits 2 on usage errors and 1 on an unknown server", function()
    local cases = {
      { { "import", "docs", "--all" }, "Pass either a server or --all, not both.", "import" },
      { { "import" }, "Name a server (identifier or id), or pass --all to import every enabled one.", "import" },
      { { "bogus" }, 'Unknown command "bogus".' },
      { { "tset", "1" }, 'Unknown command "tset". Did you mean "test"?' },
      { { "--verison" }, 'Unknown option --verison. Did you mean "--version"?' },
      { { "test" }, '"test" needs a server: an identifier or an id (see `mcpclient servers`).', "test" },
      { { "add", "--identifier", "x" }, '"add" needs --name.', "add" },
      { { "servers", "--frob" }, '"servers" has no option --frob.' },
      { { "import", "--al" }, '"import" has no option --al. Did you mean "--all"?' },
      { { "check", "x", "--call", "echo", "--arguments", "[1]" },
        "--arguments is a JSON object, such as '{\"message\": \"hi\"}'.", "check" },
    }
    assert.equal(0, (mcpclient(db, "add", "--identifier", "one", "--name", "One", "--url", "http://127.0.0.1:9/")))
    for _, case in ipairs(cases) do
      local code, out, err = mcpclient(db, table.unpack(case[1]))
      assert.equal(2, code, table.concat(case[1], " "))
      assert.equal("", out)
      local hint = case[3] and ("Run `mcpclient " .. case[3] .. " --help` for its usage.")
        or "Run `mcpclient help` for usage."
      assert.equal(case[2] .. "\n" .. hint .. "\n", err)
    end
    for _, id in ipairs { "4711", "first", "1.9", "1e3" } do
      local code, out, err = mcpclient(db, "test", id)
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal('No MCP server is named "' .. id .. '" (by identifier or id). List them with `mcpclient servers`.\n',
        err)
      code, out = mcpclient(db, "--json", "test", id)
      assert.equal(1, code)
      assert.equal("unknown_server", json.decode(out).kind)
    end
    local code, out = mcpclient(nil, "help")
    assert.equal(0, code)
    assert.truthy(out:find("^usage: mcpclient"))
    for _, argv in ipairs { { "check", "--help" }, { "help", "check" }, { "--help", "check" } } do
      code, out = mcpclient(nil, table.unpack(argv))
      assert.equal(0, code)
      assert.truthy(out:find("^usage: mcpclient check <server>"), out)
    end
    code, out = mcpclient(nil, "--version")
    assert.equal(0, code)
    assert.truthy(out:find("^mcpclient %d+%.%d+%.%d+\n$"), out)
  end)

  it("keeps its database in the XDG data directory, and never creates one to read", function()
    local home = os.tmpname()
    os.remove(home)
    assert(os.execute("mkdir -p " .. quote(home)))
    local function run(...)
      local args = { "cd /tmp && HOME=" .. quote(home), "XDG_DATA_HOME=", "MCPCLIENT_DB=", "lua5.4",
        quote(peers.root .. "/bin/mcpclient") }
      for _, a in ipairs { ... } do args[#args + 1] = quote(a) end
      local pipe = assert(io.popen(table.concat(args, " ") .. " 2>&1"))
      local out = pipe:read("a")
      local _, _, code = pipe:close()
      return code, out
    end
    local path = home .. "/.local/share/mcpclient/mcpclient.db"
    for _, argv in ipairs { { "servers" }, { "--json", "tools" }, { "test", "x" }, { "check", "x" } } do
      run(table.unpack(argv))
      assert.is_nil(io.open(path, "r"), table.concat(argv, " "))
    end
    local code, out = run("servers")
    assert.equal(0, code)
    assert.equal("No MCP server is configured. Add one with `mcpclient add`.\n", out)
    code, out = run("test", "x")
    assert.equal(1, code)
    assert.truthy(out:find('^No database at "' .. home .. '/.local/share/mcpclient/mcpclient.db" yet'), out)
    code = run("add", "--identifier", "x", "--name", "X", "--url", "http://127.0.0.1:9/")
    assert.equal(0, code)
    assert.truthy(io.open(path, "r"))
    local pipe = assert(io.popen("stat -c %a " .. quote(home .. "/.local/share/mcpclient")))
    assert.equal("700", pipe:read("l"))
    pipe:close()
    os.execute("rm -rf " .. quote(home))
  end)

  it("refuses at once a database path that is not a regular file, or cannot be created as one", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. quote(dir) .. " && mkfifo " .. quote(dir .. "/pipe.db") .. " && mkdir "
      .. quote(dir .. "/adir.db") .. " && mkfifo " .. quote(dir .. "/plain.db-wal") .. " && : > "
      .. quote(dir .. "/plain.db")))
    local cases = {
      { dir .. "/pipe.db", "servers", "names a FIFO (named pipe), not a regular file" },
      { dir .. "/pipe.db", "add", "names a FIFO (named pipe), not a regular file" },
      { dir .. "/adir.db", "tools", "names a directory, not a regular file" },
      { "/dev/null", "servers", "names a character device, not a regular file" },
      { dir .. "/plain.db", "servers", "wal file beside it is a FIFO (named pipe), not a regular file" },
      { dir .. "/plain.db/x.db", "add", "cannot be reached: Not a directory" },
    }
    for _, case in ipairs(cases) do
      local path, command, reason = case[1], case[2], case[3]
      local argv = { "timeout", "60", "lua5.4", quote(peers.root .. "/bin/mcpclient"), "--db", quote(path), command }
      if command == "add" then
        for _, a in ipairs { "--identifier", "x", "--name", "X", "--url", "http://127.0.0.1:9/" } do
          argv[#argv + 1] = a
        end
      end
      local t0 = core.now()
      local pipe = assert(io.popen(table.concat(argv, " ") .. " 2>&1"))
      local out = pipe:read("a")
      local _, _, code = pipe:close()
      -- refused, not stuck opening it (a FIFO's open would wait for ever: `timeout` ends it at 60 s)
      assert.is_true(core.now() - t0 < 30, path .. ": the command took " .. (core.now() - t0) .. " s")
      assert.equal(1, code, path .. " " .. command .. ": " .. out)
      assert.truthy(out:find('The database "' .. path .. '" cannot be opened: ', 1, true), out)
      assert.truthy(out:find(reason, 1, true), out)
    end
    -- and --json names the kind
    local pipe = assert(io.popen("timeout 60 lua5.4 " .. quote(peers.root .. "/bin/mcpclient") .. " --json --db "
      .. quote(dir .. "/pipe.db") .. " servers"))
    local refusal = json.decode(pipe:read("a"))
    pipe:close()
    assert.equal("store", refusal.kind)
    os.execute("rm -rf " .. quote(dir))
  end)

  it("takes the database from MCPCLIENT_DB when --db is not given", function()
    local pipe = assert(io.popen("cd /tmp && MCPCLIENT_DB=" .. quote(db) .. " lua5.4 "
      .. quote(peers.root .. "/bin/mcpclient") .. " add --identifier envdb --name E --url http://127.0.0.1:9/"))
    local out = pipe:read("a")
    assert.is_true((pipe:close()))
    assert.truthy(out:find("^Added server 1 %(envdb%)%.\nApproval: a human approves every call"), out)
    assert.truthy(out:find("\nNot usable yet:\n", 1, true), out)
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
    assert.truthy(out:find("\nImported tools start switched off", 1, true), out)

    code, out = mcpclient(db, "servers")
    assert.equal(0, code)
    no_escapes(out)
    assert.truthy(out:find('\n      "bad [2Jname" cannot be given a valid local tool name and was skipped.\n', 1, true),
      out)

    code, out = mcpclient(db, "tools")
    assert.equal(0, code)
    no_escapes(out)
    assert.truthy(out:find("Reads ]0;pwned  things X-Injected: description", 1, true), out)
    assert.equal(3, select(2, out:gsub("\n", "")))   -- the header and two tools

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

-- A tiny HTTP server (spec/support/tiny_http_server.mjs) on 127.0.0.1: /secret answers 401, /hang never
-- answers, any other path 404. Started and stopped by its PID.
local function start_tiny()
  local pipe = assert(io.popen("cd " .. quote(peers.root) .. " && exec sh -c 'echo $$; exec node "
    .. "spec/support/tiny_http_server.mjs'", "r"))
  local pid = math.tointeger(tonumber(pipe:read("l")))
  local port = assert((pipe:read("l") or ""):match("^(%d+) "), "the tiny server printed no port")
  local tiny = { pid = pid, base = "http://127.0.0.1:" .. port }
  function tiny.stop()
    if tiny.stopped then return end
    tiny.stopped = true
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    pipe:close()
  end
  return tiny
end

describe("the mcpclient command, as a new user meets it #integration", function()
  local db
  local started = {}

  setup(function() peers.require_available() end)
  before_each(function() db = fresh_db() end)
  after_each(function()
    remove_db(db)
    for _, p in ipairs(started) do p.stop() end
    started = {}
  end)

  local function start(kind)
    local p = kind == "tiny" and start_tiny() or peers.start(kind)
    started[#started + 1] = p
    return p
  end

  it("checks a URL with no server added and no database at all", function()
    local sdk = start("sdk-stateless")
    local missing = db .. ".absent"
    local code, out, err = mcpclient(missing, "check", sdk.url)
    assert.equal(0, code, out .. err)
    assert.truthy(out:find(sdk.url .. ": %d+ passed, 0 failed, %d+ not applicable\n$"), out)
    assert.is_nil(io.open(missing, "r")) -- nothing was created
    code, out = mcpclient(missing, "--json", "check", sdk.url)
    assert.equal(0, code)
    local report = json.decode(out)
    assert.equal(sdk.url, report.server)
    assert.equal(json.null, report.id)
    assert.is_true(report.ok)
  end)

  it("fails check --call on a tool the server does not have, showing the tool's error text", function()
    local sdk = start("sdk-stateless")
    local code, out = mcpclient(nil, "check", sdk.url, "--call", "no_such_tool")
    assert.equal(1, code, out)
    local line = out:match("\n(failed%s+call%s+[^\n]*)")
    assert.truthy(line, out)
    assert.truthy(line:find('"no_such_tool"', 1, true), line)
    assert.truthy(line:lower():find("not found", 1, true), line) -- the server's own words
    -- a tool that exists and works still passes
    code, out = mcpclient(nil, "check", sdk.url, "--call", "echo", "--arguments", '{"message":"hi"}')
    assert.equal(0, code, out)
  end)

  it("says what to do when an import is refused: 401 → login, 404 → the path, a timeout → it may have run",
    function()
      local tiny = start("tiny")
      -- the answered cases get a budget they fit in on a loaded machine; the silent one 1 s to wait
      local cases = {
        { "locked", "/secret", "`mcpclient login locked`", "60" },
        { "wrongpath", "/no/mcp/here", "check the URL's path", "60" },
        { "silent", "/hang", "may still have acted on the request", "1" },
      }
      for _, case in ipairs(cases) do
        assert.equal(0, (mcpclient(db, "add", "--identifier", case[1], "--name", case[1], "--url", tiny.base .. case[2],
          "--data-class", "publicContent", "--enabled")))
        local code, out, err = mcpclient(db, "--budget", case[4], "import", case[1])
        assert.equal(1, code, out .. err)
        assert.truthy(err:find(case[3], 1, true), case[1] .. ": " .. err)
      end
    end)

  it("says a tool switched on stays off while its group is off", function()
    local sdk = start("sdk-stateless")
    assert.equal(0, (mcpclient(db, "add", "--identifier", "sdk", "--name", "SDK", "--url", sdk.url, "--data-class",
      "publicContent", "--enabled")))
    assert.equal(0, (mcpclient(db, "import", "sdk")))
    -- the server's identifier is not its group's name: the refusal names the group
    local code, _, err = mcpclient(db, "disable", "sdk")
    assert.equal(1, code)
    assert.equal('No imported tool or server group is named "sdk". The server "sdk" switches as its group, '
      .. "mcp_sdk.\n", err)
    assert.equal(0, (mcpclient(db, "disable", "mcp_sdk")))
    local out
    code, out = mcpclient(db, "enable", "mcp_sdk_echo")
    assert.equal(0, code)
    assert.equal("Tool mcp_sdk_echo is switched on, but it stays off: its group mcp_sdk is off. `mcpclient enable "
      .. "mcp_sdk` switches the group on.\n", out)
    code, out = mcpclient(db, "--json", "enable", "mcp_sdk_echo")
    assert.equal(0, code)
    assert.equal("mcp_sdk", json.decode(out).group_off)
    assert.equal(0, (mcpclient(db, "enable", "mcp_sdk")))
    code, out = mcpclient(db, "enable", "mcp_sdk_echo")
    assert.equal(0, code)
    assert.equal("Tool mcp_sdk_echo on.\n", out)
    -- and once every tool is on, a re-import does not tell how to switch them on again
    code, out = mcpclient(db, "import", "sdk")
    assert.equal(0, code)
    assert.is_nil(out:find("Imported tools start switched off", 1, true), out)
  end)

  it("says at add that a human approves every call by default, and servers shows it", function()
    local code, out, err = mcpclient(db, "add", "--identifier", "Docs", "--name", "Docs", "--url",
      "http://127.0.0.1:9/mcp")
    assert.equal(0, code)
    assert.truthy(out:find("\nApproval: a human approves every call of its tools (the default)", 1, true), out)
    -- an identifier given in upper case is stored lower case, and the command says so
    assert.truthy(err:find('warning: the identifier "Docs" is stored as "docs"', 1, true), err)
    code, out = mcpclient(db, "servers", "docs")
    assert.equal(0, code)
    assert.truthy(out:find("Approval:         A human approves every call", 1, true), out)
    code, out = mcpclient(db, "--json", "add", "--identifier", "two", "--name", "Two", "--url", "http://127.0.0.1:9/")
    assert.equal(0, code)
    assert.is_true(json.decode(out).requires_approval)
  end)

  it("shows one server with servers <id>, and refuses an unknown one with its kind", function()
    for _, id in ipairs { "alpha", "beta" } do
      assert.equal(0, (mcpclient(db, "add", "--identifier", id, "--name", id, "--url", "http://127.0.0.1:9/")))
    end
    local code, out = mcpclient(db, "servers", "beta")
    assert.equal(0, code)
    assert.truthy(out:find("^beta  beta %(id 2%)"), out)
    assert.is_nil(out:find("alpha", 1, true), out)
    code, out = mcpclient(db, "--json", "servers", "2")
    assert.equal(0, code)
    assert.equal(1, #json.decode(out))
    code, out = mcpclient(db, "--json", "servers", "gamma")
    assert.equal(1, code)
    assert.equal("unknown_server", json.decode(out).kind)
  end)

  it("answers usage errors in JSON under --json, and gives every refusal a kind", function()
    assert.equal(0, (mcpclient(db, "add", "--identifier", "one", "--name", "One", "--url", "http://127.0.0.1:9/")))
    local code, out, err = mcpclient(db, "--json", "servers", "a", "b")
    assert.equal(2, code)
    local refusal = json.decode(out)
    assert.equal("invalid", refusal.kind)
    assert.truthy(refusal.error:find('"servers" takes one argument', 1, true), refusal.error)
    assert.truthy(err:find("--help", 1, true), err)
    code, out = mcpclient(db, "--json", "frobnicate")
    assert.equal(2, code)
    assert.equal("invalid", json.decode(out).kind)
    -- a command that needs a database there is none of: a refusal with its kind, never null
    code, out = mcpclient(db .. ".absent", "--json", "test", "x")
    assert.equal(1, code)
    assert.equal("store", json.decode(out).kind)
  end)
end)
