-- Operator actions over a real SQLite store: the admin gate, server id
-- validation, the readout, the connection test, the import, server and tool administration; and the
-- command's own logic (cli.main with an injected store and fake leg).
local cli = require "support.cli"
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"
local Fake = require "support.fake_server"

local json = core.json
local ADMIN = { name = "ops", admin = true }

local servers = require "support.servers"
local open_store, add = servers.open_store, servers.add

local function catalogue_of(names)
  local fake = Fake.new():will_handshake()
  local tools = json.array {}
  for i, name in ipairs(names) do tools[i] = { name = name, inputSchema = { type = "object" } } end
  fake:will_return { tools = tools }
  return fake
end

describe("operator gates", function()
  it("admits administrators only; an absent actor is not one", function()
    assert.is_true(operator.require_admin(ADMIN))
    for _, actor in ipairs { false, "admin", { name = "x" }, { admin = "yes" }, { admin = 1 } } do
      local ok, message, err = operator.require_admin(actor)
      assert.is_nil(ok)
      assert.equal("This action requires administrator privileges.", message)
      assert.equal("forbidden", err.kind)
    end
    assert.is_nil((operator.require_admin(nil)))
  end)

  it("validates a server id strictly: one reading only, within 64 bits", function()
    local accepted = { [1] = 1, ["1"] = 1, [" 1"] = 1, ["1 "] = 1, ["\t42\n"] = 42, ["+7"] = 7, [4711] = 4711,
      ["9223372036854775807"] = math.maxinteger }
    for value, uid in pairs(accepted) do assert.equal(uid, (operator.server_id(value))) end
    for _, value in ipairs { "first", "1.9", "1e3", "", " ", "01", "0x1", "1 2", "-1", "0", "-0", "+", 0, -3, 1.0,
      1.5, "9223372036854775808", "٣" } do
      local uid, message, err = operator.server_id(value)
      assert.is_nil(uid, tostring(value))
      assert.equal("Unknown MCP server.", message)
      assert.equal(message, err.message)
      assert.equal("unknown_server", err.kind)
    end
    assert.is_nil((operator.server_id({ "1" })))
    assert.is_nil((operator.server_id(nil)))
    assert.is_nil((operator.server_id(true)))
  end)

  it("requires the id to name an existing server that is not deleted", function()
    local store = open_store()
    local uid = add(store)
    local gone = add(store, { identifier = "gone" })
    assert(store:remove_server(gone))
    local got, row = operator.server_id(tostring(uid), store)
    assert.equal(uid, got)
    assert.equal("srv", row.identifier)
    for _, id in ipairs { gone, 4711, tostring(gone) } do
      local none, message, err = operator.server_id(id, store)
      assert.is_nil(none)
      assert.equal(string.format("Unknown MCP server (id %d).", math.tointeger(tonumber(id))), message)
      assert.equal("unknown_server", err.kind)
    end
    store:close()
  end)

  it("checks the actor before the id, for every action that changes or reaches something", function()
    local store = open_store()
    local fake = catalogue_of { "a" }
    local options = { actor = { name = "guest" }, transport = fake, clock = fake.clock }
    for _, action in ipairs {
      function() return operator.test(store, "first", options) end,
      function() return operator.import(store, 4711, options) end,
      function() return operator.add(store, { identifier = "x", name = "X", url = "http://127.0.0.1/" }, options) end,
      function() return operator.edit(store, 1, { name = "Y" }, options) end,
      function() return operator.remove(store, 1, options) end,
      function() return operator.set_enabled(store, "mcp_srv_a", true, options) end,
    } do
      local result, _, err = action()
      assert.is_nil(result)
      assert.equal("forbidden", err.kind)
    end
    assert.same({}, fake.requests)
    assert.same({}, store:servers())
    store:close()
  end)
end)

describe("the readout", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  it("shows every server, enabled or not, in identifier order, as configured", function()
    add(store, { identifier = "zz", enabled = false, data_class = "" })
    local uid = add(store, { identifier = "docs", name = "Docs", requires_approval = "0",
      auth_credential = "env:DOCS_TOKEN", auth_placement = "header", auth_header_name = "X-Api-Key" })
    add(store, { identifier = "mm", auth_credential = "env:T" })
    add(store, { identifier = "qq", auth_credential = "env:T", auth_placement = "query" })
    local cards = assert(operator.readout(store))
    local ids = {}
    for i, c in ipairs(cards) do ids[i] = c.identifier end
    assert.same({ "docs", "mm", "qq", "zz" }, ids)

    local docs = cards[1]
    assert.equal(uid, docs.uid)
    assert.is_true(docs.enabled)
    assert.equal("Enabled", docs.state)
    assert.equal("HTTP (JSON-RPC)", docs.transport)
    assert.equal("Secret in header X-Api-Key", docs.authentication)
    assert.equal("publicContent", docs.data_class)
    assert.is_false(docs.data_class_warning)
    assert.equal("Tools run without asking", docs.approval)
    assert.is_true(docs.approval_warning)
    assert.equal("Never imported", docs.last_import)
    assert.equal("Never reached", docs.contact)
    assert.is_true(docs.never_reached)
    assert.equal(0, docs.tool_count)
    assert.same({}, docs.tools)
    for _, card in ipairs(cards) do
      for _, v in pairs(card) do
        if type(v) == "string" then assert.falsy(v:find("DOCS_TOKEN", 1, true)) end
      end
    end

    assert.equal("Bearer token from a credential reference", cards[2].authentication)
    assert.is_false(cards[2].authentication_warning)
    assert.equal("A human approves every call", cards[2].approval)
    assert.equal("Stored placement, not one this client offers: query", cards[3].authentication)
    assert.is_true(cards[3].authentication_warning)
    local zz = cards[4]
    assert.is_false(zz.enabled)
    assert.equal("Disabled", zz.state)
    assert.equal("None — requests are sent unauthenticated", zz.authentication)
    assert.equal("No data class declared — this server supplies no tools until you declare one.", zz.data_class)
    assert.is_true(zz.data_class_warning)
  end)

  it("shows the last import with its raw status, the error, the count and the tools with orphans marked", function()
    local uid = add(store)
    local now = os.time { year = 2025, month = 3, day = 4, hour = 5, min = 6 }
    for _, names in ipairs { { "a", "b" }, { "a", "bad name" } } do
      local fake = catalogue_of(names)
      assert(operator.import(store, uid, { actor = ADMIN, now = now, transport = fake, clock = fake.clock }))
    end
    local card = assert(operator.readout(store))[1]
    assert.equal("2025-03-04 05:06:00 UTC — partial", card.last_import)
    assert.equal("partial", card.import_status)
    assert.equal('"bad name" cannot be given a valid local tool name and was skipped.', card.import_error)
    assert.equal(1, card.tool_count)
    assert.same({
      { tool_name = "mcp_srv_a", remote_name = "a", orphaned = false },
      { tool_name = "mcp_srv_b", remote_name = "b", orphaned = true, badge = "Gone from the server" },
    }, card.tools)
  end)

  it("composes the contact line with the same function the connection test uses", function()
    local uid = add(store)
    assert.equal("Never reached", assert(operator.readout(store))[1].contact)
    local at = os.time { year = 2024, month = 12, day = 31, hour = 23, min = 59, sec = 30 }
    assert(store:record_contact(uid, at, 0))
    assert.equal("2024-12-31 23:59:30 UTC — Latency: 0 ms", assert(operator.readout(store))[1].contact)
    local fake = Fake.new():will_handshake():take(0.004)
    local result = assert(operator.test(store, uid, { actor = ADMIN, transport = fake, clock = fake.clock }))
    assert.equal(assert(operator.readout(store))[1].contact, result.contact)
    assert.truthy(result.contact:find(" — Latency: 4 ms$"))
  end)
end)

describe("the connection test", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  local function test(uid, fake)
    return operator.test(store, uid, { actor = ADMIN, transport = fake, clock = fake.clock })
  end

  it("reports reachability with version and name, only what the server said", function()
    local uid = add(store, { data_class = "" }) -- a ping does not need a data class
    local fake = Fake.new():will_handshake(nil, "2025-03-26", { name = "Example MCP", version = "4.2" }):take(0.012)
    local result = assert(test(uid, fake))
    assert.same({ success = true, error = "", report = "Reachable — 12 ms · Protocol 2025-03-26 · Example MCP 4.2" },
      { success = result.success, error = result.error, report = result.report })
    assert.same({ "initialize", "notifications/initialized" }, fake:methods())
    assert.equal(12, store:server(uid).last_latency_ms)
  end)

  it("leaves out what the server did not say, and labels what it did", function()
    local uid = add(store)
    local fake = Fake.new():will_handshake(nil, "2025-06-18", { name = 42 })
    assert.equal("Reachable — 0 ms · Protocol 2025-06-18", assert(test(uid, fake)).report)
    fake = Fake.new():will_handshake(nil, "2025-06-18", { name = "Evil\27[31m\nX-Injected: yes", version = "1.0" })
    assert.equal("Reachable — 0 ms · Protocol 2025-06-18 · Evil [31m X-Injected: yes 1.0",
      assert(test(uid, fake)).report)
  end)

  it("reports a failure and stores nothing", function()
    local uid = add(store)
    local before = store:server(uid)
    local fake = Fake.new():will_return_raw("<html>maintenance</html>", 200, "text/html")
    local result = assert(test(uid, fake))
    assert.is_false(result.success)
    assert.is_nil(result.report)
    assert.truthy(result.error:find('"srv"', 1, true))
    assert.same(before, store:server(uid))
  end)

  it("refuses a server without a URL before sending anything", function()
    local uid = add(store)
    assert(store:update_server(uid, { url = "" }))
    local fake = Fake.new():will_handshake()
    local result = assert(test(uid, fake))
    assert.is_false(result.success)
    assert.equal('MCP server "srv" is not usable: it has no URL and no command.', result.error)
    assert.equal("configuration", result.err.kind)
    assert.equal("srv", result.err.server)
    assert.same({}, fake.requests)
  end)

  it("answers an unknown or malformed id with Unknown MCP server", function()
    for _, id in ipairs { "first", "1.9", "1e3", "", 4711 } do
      local result, message, err = test(id, Fake.new())
      assert.is_nil(result)
      assert.equal(id == 4711 and "Unknown MCP server (id 4711)." or "Unknown MCP server.", message)
      assert.equal("unknown_server", err.kind)
    end
  end)
end)

describe("server administration", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  local base = { identifier = " Docs ", name = " Docs ", url = "http://127.0.0.1:9/mcp" }
  local function with(extra)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(extra or {}) do t[k] = v end
    return t
  end

  it("adds a server with trimmed fields, a lower-cased identifier and the defaults", function()
    local uid = assert(operator.add(store, with { data_class = "sourceCode" }, { actor = ADMIN }))
    local row = store:server(uid)
    assert.equal("docs", row.identifier)
    assert.equal("Docs", row.name)
    assert.equal("bearer", row.auth_placement)
    assert.equal("1", row.requires_approval)
    assert.is_false(row.enabled)
    assert.equal("sourceCode", row.data_class)
  end)

  it("refuses values it cannot store, saying why", function()
    local cases = {
      { identifier = "has space" }, { identifier = string.rep("a", 33) }, { identifier = "" },
      { name = "  " }, { url = "ftp://x" }, { url = "not a url" }, { data_class = "public" },
      { auth_placement = "query" }, { requires_approval = "maybe" }, { auth_header_name = "Bad Header" },
      { auth_credential = "env:X", auth_placement = "header" },
    }
    for _, extra in ipairs(cases) do
      local uid, message, err = operator.add(store, with(extra), { actor = ADMIN })
      assert.is_nil(uid, json.encode(extra))
      assert.equal("invalid", err.kind)
      assert.is_string(message)
    end
    assert.same({}, store:servers())
    assert.has_error(function() operator.add(store, with { colour = "red" }, { actor = ADMIN }) end)
  end)

  it("refuses a duplicate identifier at add, enabled or not", function()
    assert(operator.add(store, with { enabled = false }, { actor = ADMIN }))
    local ok, message, err = operator.add(store, with { name = "Twin" }, { actor = ADMIN })
    assert.is_nil(ok)
    assert.equal("conflict", err.kind)
    assert.equal("identifier", err.field)
    assert.equal('The identifier "docs" is also used by server "Docs"; identifiers must be unique because they name '
      .. "the imported tools.", message)
    assert.equal(1, #store:servers())
  end)

  it("keeps identifiers unique among enabled servers", function()
    assert(operator.add(store, with { enabled = true }, { actor = ADMIN }))
    -- a twin stored before add refused duplicates
    local twin = assert(store:add_server(with { identifier = "docs", name = "Twin" }))
    local ok, message, err = operator.edit(store, twin, { enabled = true }, { actor = ADMIN })
    assert.is_nil(ok)
    assert.equal("conflict", err.kind)
    assert.equal('The identifier "docs" is also used by server "Docs"; identifiers must be unique because they name '
      .. "the imported tools.", message)
    assert.is_nil((operator.add(store, with { enabled = true }, { actor = ADMIN })))
    assert.is_true(operator.edit(store, twin, { identifier = "docs2", enabled = true }, { actor = ADMIN }))
  end)

  it("edits and removes by id", function()
    local uid = assert(operator.add(store, with(), { actor = ADMIN }))
    assert.is_true(operator.edit(store, tostring(uid), { name = "Renamed", requires_approval = "0" },
      { actor = ADMIN }))
    assert.equal("Renamed", store:server(uid).name)
    assert.equal("0", store:server(uid).requires_approval)
    assert.is_true(operator.remove(store, uid, { actor = ADMIN }))
    assert.is_nil(store:server(uid))
    local _, message = operator.edit(store, uid, { name = "x" }, { actor = ADMIN })
    assert.equal(string.format("Unknown MCP server (id %d).", uid), message)
  end)
end)

describe("tool enablement", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  it("switches tools and groups; a tool is on only when it and its group are", function()
    local uid = add(store)
    local fake = catalogue_of { "a", "b" }
    assert(operator.import(store, uid, { actor = ADMIN, transport = fake, clock = fake.clock }))
    local function states()
      local out = {}
      for _, t in ipairs(assert(operator.tools(store, uid))) do out[t.tool_name] = t.enabled end
      return out
    end
    assert.same({ mcp_srv_a = false, mcp_srv_b = false }, states()) -- off until an operator enables them
    assert.equal("tool", operator.set_enabled(store, "mcp_srv_a", true, { actor = ADMIN }))
    assert.same({ mcp_srv_a = true, mcp_srv_b = false }, states())
    assert.equal("group", operator.set_enabled(store, "mcp_srv", false, { actor = ADMIN }))
    assert.same({ mcp_srv_a = false, mcp_srv_b = false }, states())
    assert.equal("group", operator.set_enabled(store, "mcp_srv", true, { actor = ADMIN }))
    assert.same({ mcp_srv_a = true, mcp_srv_b = false }, states())
    local none, message, err = operator.set_enabled(store, "mcp_nope", true, { actor = ADMIN })
    assert.is_nil(none)
    assert.equal("unknown_tool", err.kind)
    assert.equal('No imported tool or server group is named "mcp_nope".', message)
  end)

  it("asks which one is meant when a name is both a tool and a group", function()
    local a = add(store, { identifier = "a" })
    add(store, { identifier = "a_b" })
    local fake = catalogue_of { "b" }
    assert(operator.import(store, a, { actor = ADMIN, transport = fake, clock = fake.clock }))
    local _, message, err = operator.set_enabled(store, "mcp_a_b", true, { actor = ADMIN })
    assert.equal("invalid", err.kind)
    assert.equal("name", err.field)
    assert.equal('"mcp_a_b" names both a tool and a group; say which with --tool or --group.', message)
    assert.equal("tool", operator.set_enabled(store, "mcp_a_b", true, { actor = ADMIN, what = "tool" }))
    assert.is_true(store:tool_enabled("mcp_a_b"))
    assert.equal("group", operator.set_enabled(store, "mcp_a_b", false, { actor = ADMIN, what = "group" }))
    assert.is_false(store:group_enabled("mcp_a_b"))
  end)
end)

describe("the command over an injected store", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  local function run(argv, options, progress)
    return cli.main(argv, { store = store, options = options, progress = progress or false })
  end

  it("imports by identifier with the reference's lines and exit codes", function()
    local uid = add(store, { identifier = "docs" })
    local fake = catalogue_of { "a", "bad name" }
    local code, out, err = run({ "import", "docs" }, { transport = fake, clock = fake.clock })
    assert.equal(0, code)
    assert.equal('docs: 1 imported, 1 skipped, 0 orphaned\n'
      .. '    skipped: "bad name" cannot be given a valid local tool name and was skipped.\n'
      .. "Imported tools start switched off: `mcpclient enable <tool>` switches one on, `mcpclient enable mcp_docs` "
      .. "all of this server's (see `mcpclient tools docs`).\n", out)
    assert.equal("", err)
    assert.equal("partial", store:server(uid).import_status)
  end)

  it("with no arguments shows the usage summary on stderr, exit 2", function()
    local code, out, err = run {}
    assert.equal(2, code)
    assert.equal("", out)
    assert.equal(require("mcpclient.agent.cli.help").OVERVIEW .. "\n", err)
  end)

  it("after a re-import, the enable hint names only the new tools, never one the operator switched off", function()
    add(store, { identifier = "docs" })
    local fake = catalogue_of { "a", "b" }
    assert.equal(0, (run({ "import", "docs" }, { transport = fake, clock = fake.clock })))
    assert.equal(0, (run { "enable", "mcp_docs" }))
    assert.equal(0, (run { "disable", "mcp_docs_b" }))
    fake = catalogue_of { "a", "b", "c" }
    local code, out = run({ "import", "docs" }, { transport = fake, clock = fake.clock })
    assert.equal(0, code)
    assert.truthy(out:find("\nNew tools start switched off: `mcpclient enable mcp_docs_c` switches it on "
      .. "(see `mcpclient tools docs`).\n", 1, true), out)
    assert.is_nil(out:find("enable mcp_docs`", 1, true), out)
  end)

  it("an unknown tool name to enable names the closest: by remote name, or a typo", function()
    add(store, { identifier = "ev" })
    local fake = catalogue_of { "echo", "add" }
    assert.equal(0, (run({ "import", "ev" }, { transport = fake, clock = fake.clock })))
    local code, _, err = run { "enable", "echo" }
    assert.equal(1, code)
    assert.truthy(err:find('named "echo". Did you mean "mcp_ev_echo"?', 1, true), err)
    code, _, err = run { "enable", "mcp_ev_ech" }
    assert.equal(1, code)
    assert.truthy(err:find('Did you mean "mcp_ev_echo"?', 1, true), err)
    code, _, err = run { "disable", "zzzzzzzzzzzz" }
    assert.equal(1, code)
    assert.is_nil(err:find("Did you mean", 1, true), err)
  end)

  it("points --server to the argument, and a duplicate add to edit or remove", function()
    local code, _, err = run { "tools", "--server", "ev" }
    assert.equal(2, code)
    assert.truthy(err:find('"tools" takes the server as its argument, not --server: `mcpclient tools ev`.', 1, true),
      err)
    assert.equal(0, (run { "add", "--identifier", "dup", "--name", "D", "--url", "https://d.example.com/mcp" }))
    local out
    code, out, err = run { "add", "--identifier", "dup", "--name", "D", "--url", "https://d.example.com/mcp" }
    assert.equal(1, code)
    assert.equal("", out)
    assert.truthy(err:find("`mcpclient edit dup …` (the same flags); to replace it, `mcpclient remove dup` first",
      1, true), err)
  end)

  it("names a refusal and fails the run, but goes on with the other servers", function()
    add(store, { identifier = "aa", data_class = "" })
    add(store, { identifier = "bb" })
    local fake = catalogue_of {}
    local code, out, err = run({ "import", "--all" }, { transport = fake, clock = fake.clock })
    assert.equal(1, code)
    assert.equal("bb: 0 imported, 0 skipped, 0 orphaned\n", out)
    assert.equal("aa: refused — The server has no declared data class, so its tools cannot be classified.\n"
      .. "1 of 2 server(s) refused the import.\n", err)
  end)

  it("says so when there is nothing to import, and exits 0", function()
    add(store, { enabled = false })
    local code, out, err = run { "import", "--all" }
    assert.equal(0, code)
    assert.equal("", out)
    assert.equal("No enabled MCP server to import.\n", err)
  end)

  it("exits 1 for a name no server has, or that several share, echoing it and how to list them", function()
    local code, _, err = run { "import", "nosuch" }
    assert.equal(1, code)
    assert.equal('No MCP server is named "nosuch" (by identifier or id). List them with `mcpclient servers`.\n', err)
    code, _, err = run { "test", "42" }
    assert.equal(1, code)
    assert.equal('No MCP server is named "42" (by identifier or id). List them with `mcpclient servers`.\n', err)
    add(store, { identifier = "dup" })
    add(store, { identifier = "dup", enabled = false })
    code, _, err = run { "import", "dup" }
    assert.equal(1, code)
    assert.equal('2 servers have the identifier "dup" (ids 1, 2): name one by its id.\n', err)
  end)

  it("prints a refusal once, not again as a warning", function()
    add(store, { identifier = "off", url = "http://unreachable.invalid/mcp" })
    local code, out, err = run { "import", "off" }
    assert.equal(1, code)
    assert.equal("", out)
    local _, count = err:gsub("could not be reached", "")
    assert.equal(1, count, err)
    assert.truthy(err:find("^off: refused — "), err)
  end)

  it("exits 2 on usage errors", function()
    local function usage(argv, first_line)
      local code, out, err = run(argv)
      assert.equal(2, code, table.concat(argv, " "))
      assert.equal("", out)
      local command = argv[1] and argv[1]:sub(1, 1) ~= "-" and argv[1] ~= "frobnicate" and argv[1] ~= "imprt"
      local hint = command and ("Run `mcpclient " .. argv[1] .. " --help` for its usage.")
        or "Run `mcpclient help` for usage."
      if first_line:find("^Unknown") or first_line:find("needs a value") or first_line:find("has no option")
          or first_line:find("^Name a command") then
        hint = "Run `mcpclient help` for usage."
      end
      assert.equal(first_line .. "\n" .. hint .. "\n", err)
    end
    usage({ "import", "docs", "--all" }, "Pass either a server or --all, not both.")
    usage({ "import" }, "Name a server (identifier or id), or pass --all to import every enabled one.")
    usage({ "import", "" }, "Name a server (identifier or id), or pass --all to import every enabled one.")
    usage({ "frobnicate" }, 'Unknown command "frobnicate".')
    usage({ "imprt" }, 'Unknown command "imprt". Did you mean "import"?')
    usage({ "--jsno", "servers" }, 'Unknown option --jsno. Did you mean "--json"?')
    usage({ "test" }, '"test" needs a server: an identifier or an id (see `mcpclient servers`).')
    usage({ "servers", "--all" }, '"servers" has no option --all.')
    usage({ "import", "--al" }, '"import" has no option --al. Did you mean "--all"?')
    usage({ "--budget", "0", "servers" }, "--budget is a positive number of seconds.")
    usage({ "add", "--identifier", "x", "--name", "X", "--url", "http://h/", "--credential", "" },
      "An empty --credential names nothing: leave it out for a server without a credential.")
    usage({ "add", "--name", "x" }, '"add" needs --identifier.')
    usage({ "add", "--identifier", "x", "--name", "X", "--url", "http://h/", "--approval", "maybe" },
      "--approval is yes or no.")
    usage({ "add", "--identifier", "x y", "--name", "X", "--url", "http://h/" },
      "The identifier must be 1 to 32 characters of A-Z, a-z, 0-9, _ and - (it is stored in lower case).")
    usage({ "--db" }, "--db needs a value.")
  end)

  it("shows a progress line on a terminal only, and erases it", function()
    add(store, { identifier = "docs" })
    local fake = catalogue_of {}
    local _, _, err = run({ "import", "docs" }, { transport = fake, clock = fake.clock }, true)
    assert.equal("\r\27[Kimporting docs (1 of 1)…\r\27[K", err)
  end)

  it("prints the readout with remote text made inert", function()
    local uid = add(store, { identifier = "docs" })
    assert(store:record_import(uid, { status = "partial", error = "first\27]0;title\7\nsecond", tool_count = 0,
      at = 1 }))
    local code, out = run { "servers" }
    assert.equal(0, code)
    assert.falsy(out:find("\27", 1, true))
    assert.falsy(out:find("\7", 1, true))
    assert.truthy(out:find("\n      first ]0;title\n      second\n", 1, true))
  end)

  it("prints failure messages inert, even when they quote stored text", function()
    add(store, { identifier = "docs", name = "Docs\27[2J\27]0;owned\7" })
    add(store, { identifier = "docs", name = "Twin", enabled = false })
    local code, out, err = run { "edit", "2", "--enabled" }
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal('The identifier "docs" is also used by server "Docs [2J ]0;owned"; identifiers must be unique '
      .. "because they name the imported tools.\n", err)
  end)

  it("prints JSON for read commands", function()
    add(store, { identifier = "docs" })
    local code, out = run { "--json", "servers" }
    assert.equal(0, code)
    local cards = json.decode(out)
    assert.equal("docs", cards[1].identifier)
    assert.is_true(json.is_array(cards[1].tools))
    code, out = run { "tools", "--json" }
    assert.equal(0, code)
    assert.equal("[]\n", out)
  end)
end)

describe("a credential is stored as a reference, never as the secret", function()
  local SECRET = "sk-live-4f9a2c7e1b3d5f8a0c6e"
  local refused = { SECRET, "Bearer " .. SECRET, "env:", "env: ", "env:1ST", "env:MY TOKEN", "env:" .. SECRET .. "-x",
    "env:A\27[2J" }

  -- Every byte the database left on disk, journal and WAL included.
  local function on_disk(path)
    local bytes = {}
    for _, suffix in ipairs { "", "-wal", "-journal" } do
      local f = io.open(path .. suffix, "rb")
      if f then bytes[#bytes + 1] = f:read("a"); f:close() end
    end
    return table.concat(bytes)
  end

  local function with_row(extra)
    local row = { identifier = "docs", name = "Docs", url = "https://mcp.example.com/rpc" }
    for k, v in pairs(extra) do row[k] = v end
    return row
  end

  it("refuses anything but env:NAME in operator.add and operator.edit, without echoing it", function()
    local store = open_store()
    local uid = assert(operator.add(store, with_row { auth_credential = " env:DOCS_TOKEN " }, { actor = ADMIN }))
    assert.equal("env:DOCS_TOKEN", store:server(uid).auth_credential)
    for _, given in ipairs(refused) do
      for _, attempt in ipairs {
        function()
          return operator.add(store, with_row { identifier = "x", auth_credential = given }, { actor = ADMIN })
        end,
        function() return operator.edit(store, uid, { auth_credential = given }, { actor = ADMIN }) end,
      } do
        local ok, message, err = attempt()
        assert.is_nil(ok, given)
        assert.equal("invalid", err.kind)
        assert.equal("auth_credential", err.field)
        assert.truthy(message:find("env:NAME", 1, true), message)
        assert.falsy(message:find(SECRET, 1, true))
        assert.falsy(message:find("1ST", 1, true))
        assert.falsy(message:find("\27", 1, true))
      end
    end
    assert.equal("env:DOCS_TOKEN", store:server(uid).auth_credential)
    assert.equal(1, #store:servers())
    store:close()
  end)

  it("points out a stored value that is not env:NAME in the readout, without showing it", function()
    local store = open_store()
    add(store, { identifier = "old", auth_credential = SECRET })
    local card = assert(operator.readout(store))[1]
    assert.is_true(card.authentication_warning)
    assert.equal("Bearer token from a credential reference (not env:NAME: if the stored value is the secret itself, "
      .. "replace it with `mcpclient edit <id> --credential env:NAME`)", card.authentication)
    for _, v in pairs(card) do
      if type(v) == "string" then assert.falsy(v:find("4f9a2c7e", 1, true)) end
    end
    store:close()
  end)

  it("takes another key only when the host's resolver resolves it", function()
    local store = open_store()
    local resolver = function(key) if key == "vault:docs" then return "s3cr3t" end end
    local uid = assert(operator.add(store, with_row { auth_credential = "vault:docs" },
      { actor = ADMIN, resolver = resolver }))
    assert.equal("vault:docs", store:server(uid).auth_credential)
    local ok, _, err = operator.edit(store, uid, { auth_credential = SECRET }, { actor = ADMIN, resolver = resolver })
    assert.is_nil(ok)
    assert.equal("auth_credential", err.field)
    ok = operator.edit(store, uid, { auth_credential = "vault:docs" }, { actor = ADMIN })
    assert.is_nil(ok) -- without the resolver, the key cannot be told from a secret
    store:close()
  end)

  it("keeps the secret out of the database file when the command is given one", function()
    local base = os.tmpname()
    local path = base .. ".db"
    local function run(...) return cli.main({ "--db", path, ... }) end
    assert.equal(0, (run("add", "--identifier", "docs", "--name", "Docs", "--url", "https://mcp.example.com/rpc")))
    for _, given in ipairs(refused) do
      local code, out, err = run("add", "--identifier", "leak", "--name", "Leak", "--url", "https://x.example/",
        "--credential", given)
      assert.equal(2, code, given)
      assert.equal("", out)
      assert.truthy(err:find("put the secret in an environment variable and give env:NAME", 1, true), err)
      assert.falsy(err:find(SECRET, 1, true))
      code = run("edit", "1", "--credential", given)
      assert.equal(2, code, given)
    end
    assert.equal(0, (run("edit", "1", "--credential", "env:DOCS_TOKEN")))
    local bytes = on_disk(path)
    assert.truthy(bytes:find("env:DOCS_TOKEN", 1, true))
    assert.falsy(bytes:find(SECRET, 1, true))
    assert.falsy(bytes:find("4f9a2c7e", 1, true))
    for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(path .. suffix) end
    os.remove(base)
  end)
end)
