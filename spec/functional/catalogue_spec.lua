-- Catalogue import, reconciliation, liveness and the provider
-- over a real SQLite store, against a scripted MCP server behind the fake HTTP leg.
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"
local Fake = require "support.fake_server"

local json = core.json
local ADMIN = { name = "ops", admin = true }

local servers = require "support.servers"
local open_store, add = servers.open_store, servers.add

local function schema(props)
  return { type = "object", properties = props or {} }
end

local function entry(name, extra)
  local t = { name = name, description = "does " .. tostring(name), inputSchema = schema() }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

-- A fake server whose catalogue is one page of these tool entries.
local function serving(tools)
  local fake = Fake.new()
  fake:will_handshake():will_return { tools = json.array(tools) }
  return fake
end

-- Import options over a fake: its leg and clock, a fixed `now`, a log to read.
local function over(fake, extra)
  local logged = {}
  local options = {
    transport = fake, clock = fake and fake.clock, now = 1700000000,
    log = function(level, message) logged[#logged + 1] = { level = level, message = message } end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return options, logged
end

local function import(store, uid, fake, extra)
  local options, logged = over(fake, extra)
  return catalogue.import(store, assert(store:server(uid)), options), logged
end

local function names_of(rows)
  local list = {}
  for i, r in ipairs(rows) do list[i] = r.tool_name end
  return list
end

describe("catalogue import", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  it("stores every acceptable tool with its normalised schema, in the server's key order", function()
    local wire = [[{"type":"object","title":"dropped","properties":{"zeta":{"type":"string"},
      "alpha":{"type":"integer"}},"required":["zeta"],"x-vendor":1}]]
    local fake = Fake.new():will_handshake()
      :will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[{"name":"read_page","description":"Reads.",'
        .. '"inputSchema":' .. wire .. ',"annotations":{"readOnlyHint":true}},{"name":"plain",'
        .. '"inputSchema":{"type":"object","properties":{}}}]}}')
    local uid = add(store)
    local report = import(store, uid, fake)
    assert.same({ server_uid = uid, imported = 2, skipped = 0, orphaned = 0, skip_reasons = {}, refused = false },
      report)
    local rows = store:tools_of(uid)
    assert.same({ "mcp_srv_plain", "mcp_srv_read_page" }, names_of(rows))
    local read = rows[2]
    assert.equal("read_page", read.remote_name)
    assert.equal("Reads.", read.description)
    assert.equal('{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},'
      .. '"required":["zeta"]}', read.input_schema)
    assert.same({ readOnlyHint = true }, json.decode(read.remote_annotations))
    assert.equal("", rows[1].remote_annotations)
    assert.equal("", rows[1].description)
    assert.equal('{"type":"object","properties":{}}', rows[1].input_schema)
    local row = store:server(uid)
    assert.equal("ok", row.import_status)
    assert.equal("", row.import_error)
    assert.equal(2, row.tool_count)
    assert.equal(1700000000, row.last_imported)
  end)

  it("judges a schema by the rule of the listing's era", function()
    -- 2020-12 keywords ($defs, an in-schema $ref, prefixItems): carried whole from a 2026-07-28
    -- listing; from a 2025 one the reference is written out and the definitions dropped
    local wide = { type = "object", ["$defs"] = { x = { type = "string" } },
      properties = { a = { type = "array", prefixItems = { { type = "string" } } }, b = { ["$ref"] = "#/$defs/x" } } }
    local function listing_of(era)
      return { connect = function()
        return { list_tools = function() return { { name = "wide", inputSchema = wide } }, { era = era } end,
          close = function() return true end }
      end }
    end
    local uid = add(store)
    local modern_report = import(store, uid, nil, listing_of("modern"))
    assert.equal(1, modern_report.imported)
    local stored = json.decode(store:tools_of(uid)[1].input_schema)
    assert.same({ { type = "string" } }, stored.properties.a.prefixItems)
    assert.equal("#/$defs/x", stored.properties.b["$ref"])
    local legacy_report = import(store, uid, nil, listing_of("legacy"))
    assert.equal(1, legacy_report.imported)
    stored = json.decode(store:tools_of(uid)[1].input_schema)
    assert.same({ type = "string" }, stored.properties.b)
    assert.is_nil(stored["$defs"])
    wide.properties.c = { ["$ref"] = "#/$defs/y" }
    legacy_report = import(store, uid, nil, listing_of("legacy"))
    assert.equal(0, legacy_report.imported)
    assert.equal('"wide" was skipped: its "$ref" at #/properties/c points to #/$defs/y, which the schema does not'
      .. " define.", legacy_report.skip_reasons[1])
  end)

  it("skips, in order, each tool it cannot carry and says why", function()
    local other = add(store, { identifier = "a", name = "Other" })
    -- the other server already owns mcp_a_b_c (a + b_c meets a_b + c: the second import must skip it)
    assert(store:reconcile(assert(store:server(other)), { {
      tool_name = "mcp_a_b_c", remote_name = "b_c", description = "", input_schema = "{}", remote_annotations = "",
    } }, 1))
    local uid = add(store, { identifier = "a_b" })
    local fake = serving {
      entry("ok"),
      { description = "nameless", inputSchema = schema() },
      entry(""),
      entry("bad name"),
      entry("ok"),
      entry("builtin"),
      entry("c"),
      entry("nested", { inputSchema = schema { x = { ["$ref"] = "#/defs/x" } } }),
      entry("typeless", { inputSchema = { properties = {} } }),
      entry("bad\27[31mname\nX-Injected: yes"),
    }
    local report = import(store, uid, fake, { builtin_names = { "mcp_a_b_builtin" } })
    assert.is_false(report.refused)
    assert.equal(1, report.imported)
    assert.equal(9, report.skipped)
    local expected = {
      "An advertised tool has no name and was skipped.",
      "An advertised tool has no name and was skipped.",
      '"bad name" cannot be given a valid local tool name and was skipped.',
      '"ok" maps to a name this server already used and was skipped.',
      '"builtin" would collide with a builtin tool of the same name and was skipped.',
      '"c" maps to the name mcp_a_b_c, which server "a" already owns, and was skipped.',
      '"nested" was skipped: its "$ref" at #/properties/x (#/defs/x) names no whole definition in "$defs" or'
        .. ' "definitions".',
      '"typeless" was skipped: its top-level type is not "object".',
      '"bad [31mname X-Injected: yes" cannot be given a valid local tool name and was skipped.',
    }
    assert.same(expected, report.skip_reasons)
    local row = store:server(uid)
    assert.equal("partial", row.import_status)
    assert.equal(table.concat(expected, "\n"), row.import_error)
    assert.equal(1, row.tool_count)
    assert.same({ "mcp_a_b_ok" }, names_of(store:tools_of(uid)))
    -- the other server's row is untouched
    assert.same({ "mcp_a_b_c" }, names_of(store:tools_of(other)))
    assert.equal(other, store:tool_owner("mcp_a_b_c"))
  end)

  it("lists on a connection of its own and ends it afterwards", function()
    local uid = add(store)
    local fake = Fake.new():will_handshake("sess-1"):will_return { tools = json.array { entry("a") } }
    import(store, uid, fake)
    assert.same({ "initialize", "notifications/initialized", "tools/list", "DELETE" }, fake:methods())
    assert.is_true(fake.closed)
  end)

  it("accepts a builtin set as well as a list", function()
    local uid = add(store)
    local report = import(store, uid, serving { entry("x") }, { builtin_names = { mcp_srv_x = true } })
    assert.same({ '"x" would collide with a builtin tool of the same name and was skipped.' }, report.skip_reasons)
  end)

  it("orphans what the server stopped advertising and revives it, same row, when it returns", function()
    local uid = add(store)
    assert.equal(0, import(store, uid, serving { entry("a"), entry("b") }).orphaned)
    local before = {}
    for _, r in ipairs(store:tools_of(uid)) do before[r.tool_name] = r.uid end

    local report = import(store, uid, serving { entry("a") }, { now = 1700000100 })
    assert.same({ imported = 1, orphaned = 1, refused = false }, {
      imported = report.imported, orphaned = report.orphaned, refused = report.refused })
    local rows = store:tools_of(uid)
    assert.same({ "mcp_srv_a", "mcp_srv_b" }, names_of(rows)) -- live first, then orphans
    assert.is_false(rows[1].orphaned)
    assert.is_true(rows[2].orphaned)
    assert.same({ "mcp_srv_a" }, names_of(store:live_tools_of(uid)))
    assert.equal(1, store:server(uid).tool_count)

    -- an orphan is counted again while it stays away
    assert.equal(1, import(store, uid, serving { entry("a") }).orphaned)

    report = import(store, uid, serving { entry("a"), entry("b") })
    assert.equal(0, report.orphaned)
    assert.equal(2, report.imported)
    for _, r in ipairs(store:tools_of(uid)) do
      assert.is_false(r.orphaned)
      assert.equal(before[r.tool_name], r.uid)
    end
  end)

  it("treats an empty catalogue as a successful import that orphans everything", function()
    local uid = add(store)
    import(store, uid, serving { entry("a") })
    local report = import(store, uid, serving {})
    assert.same({ server_uid = uid, imported = 0, skipped = 0, orphaned = 1, skip_reasons = {}, refused = false },
      report)
    assert.equal("ok", store:server(uid).import_status)
  end)

  it("clears an old import error once the server recovers", function()
    local uid = add(store)
    import(store, uid, serving { entry("bad name") })
    assert.equal("partial", store:server(uid).import_status)
    import(store, uid, serving { entry("good") })
    local row = store:server(uid)
    assert.equal("ok", row.import_status)
    assert.equal("", row.import_error)
  end)

  describe("refusals", function()
    -- Import twice: once fine, then refused; the catalogue must be as the first import left it.
    local function refused_after_success(uid, fake, extra)
      import(store, uid, serving { entry("a"), entry("b") })
      local rows = store:tools_of(uid)
      local report, logged = import(store, uid, fake, extra)
      assert.is_true(report.refused)
      assert.same({ imported = 0, skipped = 0, orphaned = 0 },
        { imported = report.imported, skipped = report.skipped, orphaned = report.orphaned })
      assert.equal(1, #report.skip_reasons)
      assert.same(rows, store:tools_of(uid))
      local row = store:server(uid)
      assert.equal("error", row.import_status)
      assert.equal(report.skip_reasons[1], row.import_error)
      assert.equal(2, row.tool_count)
      assert.equal((extra or {}).now or 1700000000, row.last_imported)
      return report, logged
    end

    it("refuses a server without a declared data class, without asking it", function()
      local uid = add(store)
      import(store, uid, serving { entry("a"), entry("b") })
      for _, class in ipairs { "", "public", "PublicContent" } do
        assert(store:update_server(uid, { data_class = class }))
        local fake = serving { entry("z") }
        local report = import(store, uid, fake)
        assert.same({ "The server has no declared data class, so its tools cannot be classified." },
          report.skip_reasons)
        assert.same({}, fake.requests)
        assert.same({ "mcp_srv_a", "mcp_srv_b" }, names_of(store:tools_of(uid)))
      end
    end)

    it("refuses a server without a URL", function()
      local uid = add(store)
      assert(store:update_server(uid, { url = "" }))
      local report = import(store, uid, serving { entry("a") })
      assert.same({ "The server has no URL and no command." }, report.skip_reasons)
    end)

    it("refuses when another enabled server uses the identifier, even for a disabled one", function()
      add(store, { name = "First of its name" })
      local twin = add(store, { name = "Twin", enabled = false })
      local disabled_other = add(store, { identifier = "solo", enabled = false })
      add(store, { identifier = "solo", enabled = false, name = "Also disabled" })
      local fake = serving { entry("a") }
      local report = import(store, twin, fake)
      assert.same({ 'The identifier "srv" is also used by server "First of its name"; identifiers must be unique '
        .. "because they name the imported tools." }, report.skip_reasons)
      assert.same({ "conflict", "identifier", "First of its name" },
        { report.err.kind, report.err.field, report.err.other })
      assert.same({}, fake.requests)
      -- disabled twins do not count; a disabled server can be imported
      assert.is_false(import(store, disabled_other, serving { entry("a") }).refused)
    end)

    it("refuses with the transport's message, logs a warning and orphans nothing", function()
      local uid = add(store)
      local fake = Fake.new():will_handshake():will_return_raw("{}", 502)
      local report, logged = refused_after_success(uid, fake, { now = 1700000500 })
      assert.truthy(report.skip_reasons[1]:find("502", 1, true))
      assert.truthy(report.skip_reasons[1]:find('"srv"', 1, true))
      assert.same({ "http_status", 502, "srv", report.skip_reasons[1] },
        { report.err.kind, report.err.status, report.err.server, report.err.message })
      assert.equal(1, #logged)
      assert.equal("warning", logged[1].level)
      assert.truthy(logged[1].message:find("An MCP catalogue import failed", 1, true))
    end)

    it("hands the connection's failure value up unchanged in the refusal", function()
      local uid = add(store)
      local failure = select(3, require("mcpclient.errors").fail("cancelled", { server = "srv", in_flight = false }))
      local listing = { list_tools = function() return nil, failure.message, failure end, close = function() end }
      local report = catalogue.import(store, store:server(uid), { connect = function() return listing end,
        log = function() end })
      assert.is_true(report.refused)
      assert.equal(failure, report.err)
      assert.same({ failure.message }, report.skip_reasons)
      assert.equal(failure.message, store:server(uid).import_error)
    end)

    it("refuses a catalogue of more than 500 tools and takes exactly 500", function()
      local uid = add(store)
      local many = {}
      for i = 1, 501 do many[i] = entry("t" .. i) end
      local report = refused_after_success(uid, serving(many))
      assert.same({ "The server advertises 501 tools, more than the 500 this client will import." },
        report.skip_reasons)
      many[501] = nil
      report = import(store, uid, serving(many))
      assert.is_false(report.refused)
      assert.equal(500, report.imported)
    end)

    it("does not count entries that are not objects", function()
      local uid = add(store)
      local fake = Fake.new():will_handshake()
        :will_return_raw('{"jsonrpc":"2.0","id":%ID%,"result":{"tools":[1,"x",null,[],'
          .. '{"name":"a","inputSchema":{"type":"object"}}]}}')
      local report = import(store, uid, fake)
      assert.same({ imported = 1, skipped = 0 }, { imported = report.imported, skipped = report.skipped })
    end)

    it("refuses, not raises, a stored placement this client does not offer", function()
      local uid = add(store, { auth_credential = "env:SOME_TOKEN", auth_placement = "query" })
      local fake = serving { entry("a") }
      local report = import(store, uid, fake)
      assert.is_true(report.refused)
      assert.truthy(report.skip_reasons[1]:find('"query"', 1, true))
      assert.truthy(report.skip_reasons[1]:find("credential", 1, true))
      assert.same({}, fake.requests)
    end)
  end)

  describe("liveness", function()
    -- The store's own recorder, counted.
    local function counting(uid)
      local recorder = store:health_recorder(uid)
      local count = { n = 0 }
      count.record = function(identifier, latency)
        count.n = count.n + 1
        return recorder(identifier, latency)
      end
      return count
    end

    it("stamps one contact for a two-page walk, with the last page's latency, and none after a failing listing",
      function()
        local uid = add(store)
        local fake = Fake.new():will_handshake()
          :will_return { tools = json.array { entry("a") }, nextCursor = "p2" }
          :will_return { tools = json.array { entry("b") } }
        fake:take(0.001, 0, 0.003, 0.007)
        local count = counting(uid)
        local report = import(store, uid, fake, { health = count.record })
        assert.equal(2, report.imported)
        assert.equal(1, count.n)
        local row = store:server(uid)
        assert.equal(7, row.last_latency_ms)
        assert.is_true(row.last_contact > 0)

        local failing = Fake.new():will_handshake():will_return { ["no tools key"] = true }
        failing:take(0.002, 0, 0.004)
        report = import(store, uid, failing, { health = count.record })
        assert.is_true(report.refused)
        assert.equal(1, count.n)
        assert.equal(7, store:server(uid).last_latency_ms)
      end)

    it("records the contact through the store by default", function()
      local uid = add(store)
      local fake = serving { entry("a") }
      fake:take(0, 0, 0.012)
      import(store, uid, fake)
      local row = store:server(uid)
      assert.equal(12, row.last_latency_ms)
      assert.is_true(row.last_contact > 0)
    end)

    it("keeps the import error when a connection test succeeds after a failed import", function()
      local uid = add(store)
      import(store, uid, serving { entry("a") })
      local failing = Fake.new():will_handshake():will_return_raw("{}", 503)
      import(store, uid, failing)
      local before = store:server(uid)
      assert.equal("error", before.import_status)

      local probe = Fake.new():will_handshake(nil, "2025-06-18", { name = "Probe MCP", version = "4.2" })
      probe:take(0.009)
      local result = assert(operator.test(store, uid, { actor = ADMIN, transport = probe, clock = probe.clock }))
      assert.is_true(result.success)
      assert.equal("Reachable — 9 ms · Protocol 2025-06-18 · Probe MCP 4.2", result.report)
      local after = store:server(uid)
      assert.equal("error", after.import_status)
      assert.equal(before.import_error, after.import_error)
      assert.equal(before.tool_count, after.tool_count)
      assert.equal(before.last_imported, after.last_imported)
      assert.equal(9, after.last_latency_ms)
      assert.same({ "mcp_srv_a" }, names_of(store:tools_of(uid)))
      assert.same({ "initialize", "notifications/initialized" }, probe:methods())
    end)
  end)
end)

describe("the provider", function()
  local store
  before_each(function() store = open_store() end)
  after_each(function() store:close() end)

  local function imported(fields, tools)
    local uid = add(store, fields)
    local report = import(store, uid, serving(tools))
    assert.is_false(report.refused)
    return uid
  end

  local function tool_names(list)
    local out = {}
    for i, t in ipairs(list) do out[i] = t.name end
    return out
  end

  it("offers the live tools of enabled servers with a declared class only, in identifier and name order", function()
    imported({ identifier = "zed" }, { entry("b"), entry("a") })
    imported({ identifier = "alpha", data_class = "sourceCode" }, { entry("x") })
    local off = imported({ identifier = "off" }, { entry("x") })
    assert(store:update_server(off, { enabled = false }))
    local unclassified = imported({ identifier = "nocls" }, { entry("x") })
    assert(store:update_server(unclassified, { data_class = "" }))
    local gone = imported({ identifier = "gone" }, { entry("x") })
    assert(store:remove_server(gone))
    local orphans = imported({ identifier = "orph" }, { entry("kept"), entry("lost") })
    import(store, orphans, serving { entry("kept") })

    local provider = catalogue.provider(store)
    local tools = assert(provider.tools())
    assert.same({ "mcp_alpha_x", "mcp_orph_kept", "mcp_zed_a", "mcp_zed_b" }, tool_names(tools))
    assert.same(tool_names(tools), tool_names(assert(provider:tools())))
  end)

  it("takes the data class and approval from the row, never from the annotations", function()
    imported({ identifier = "cfg", data_class = "internalConfiguration", requires_approval = "0" },
      { entry("read", { annotations = { readOnlyHint = true, dataClass = "publicContent" } }) })
    local t = assert(catalogue.provider(store).tools())[1]
    assert.equal("internalConfiguration", t.data_class)
    assert.is_false(t.requires_approval)
    assert.equal("read", t.remote_name)
    assert.equal("mcp_cfg", t.group)
    assert.equal("non_idempotent_write", t.effect)
    assert.equal('[via the external MCP server "Test server"] does read', t.description)
  end)

  it("yields no tool for a stored schema that does not decode, and keeps the row", function()
    local uid = add(store)
    local row = assert(store:server(uid))
    local function stored(name, text)
      return { tool_name = "mcp_srv_" .. name, remote_name = name, description = "", input_schema = text,
        remote_annotations = "" }
    end
    assert(store:reconcile(row, {
      stored("list", "[]"), stored("null", "null"), stored("broken", "{ broken"), stored("empty", "{}"),
      stored("fine", '{"type":"object","properties":{}}'),
    }, 1))
    local tools = assert(catalogue.provider(store).tools())
    assert.same({ "mcp_srv_empty", "mcp_srv_fine" }, tool_names(tools))
    assert.equal(5, #store:tools_of(uid))
    assert.equal(5, #assert(operator.readout(store))[1].tools)
  end)

  it("hands each tool its stored output schema decoded, and leaves out a row whose schema no longer decodes", function()
    local uid = add(store)
    local row = assert(store:server(uid))
    local function stored(name, output)
      return { tool_name = "mcp_srv_" .. name, remote_name = name, description = "", input_schema = "{}",
        remote_annotations = "", output_schema = output }
    end
    assert(store:reconcile(row, {
      stored("none", ""), stored("object", '{"type":"object","required":["n"]}'), stored("yes", "true"),
      stored("list", "[1]"), stored("null", "null"), stored("broken", "{ broken"), stored("text", '"x"'),
    }, 1))
    local tools = assert(catalogue.provider(store).tools())
    assert.same({ "mcp_srv_none", "mcp_srv_object", "mcp_srv_yes" }, tool_names(tools))
    local by = {}
    for _, t in ipairs(tools) do by[t.remote_name] = t end
    assert.is_nil(by.none.output_schema)
    assert.same({ type = "object", required = { "n" } }, by.object.output_schema)
    assert.is_true(by.yes.output_schema)
  end)

  it("keeps the output schema a stand-in listing hands as tables, encoded; skips one that is no object", function()
    local uid = add(store)
    local listed = {
      { name = "counted", inputSchema = schema(), outputSchema = { type = "object", required = json.array { "n" } } },
      { name = "listy", inputSchema = schema(), outputSchema = json.array { { type = "object" } } },
      { name = "worded", inputSchema = schema(), outputSchema = "an object" },
      { name = "plain", inputSchema = schema() },
    }
    local report = import(store, uid, nil, { connect = function()
      return { list_tools = function() return listed, { era = "legacy" } end, close = function() return true end }
    end })
    assert.equal(2, report.imported)
    assert.same({ '"listy" has an output schema that is not a JSON object and was skipped.',
      '"worded" has an output schema that is not a JSON object and was skipped.' }, report.skip_reasons)
    local by = {}
    for _, t in ipairs(store:tools_of(uid)) do by[t.remote_name] = t.output_schema end
    assert.same({ counted = '{"required":["n"],"type":"object"}', plain = "" }, by)
  end)

  it("opens one connection per server, on first execution, shared by its tools; close() closes them", function()
    imported({ identifier = "one" }, { entry("a"), entry("b") })
    imported({ identifier = "two" }, { entry("c") })
    local fakes, opened = {}, {}
    local provider = catalogue.provider(store, {
      connect = function(row)
        opened[#opened + 1] = row.identifier
        local fake = Fake.new():will_handshake("sess-" .. row.identifier)
        for _ = 1, 3 do fake:will_return { content = { { type = "text", text = "from " .. row.identifier } } } end
        fakes[row.identifier] = fake
        return require("mcpclient").connect {
          url = row.url, identifier = row.identifier, transport = fake, clock = fake.clock,
          health = store:health_recorder(row.uid),
        }
      end,
    })
    local tools = assert(provider.tools())
    assert.same({}, opened) -- building tools touches no network
    local by_name = {}
    for _, t in ipairs(tools) do by_name[t.name] = t end
    assert.same({ text = "from one", is_error = false }, by_name.mcp_one_a:execute({}))
    assert.same({ text = "from one", is_error = false }, by_name.mcp_one_b:execute({}))
    assert.same({ text = "from two", is_error = false }, by_name.mcp_two_c:execute({}))
    assert.same({ "one", "two" }, opened)
    assert.same({ "initialize", "notifications/initialized", "tools/call", "tools/call" }, fakes.one:methods())
    assert.equal("a", fakes.one.requests[3].body.params.name)
    provider:close()
    assert.is_true(fakes.one.closed)
    assert.is_true(fakes.two.closed)
    provider.close() -- idempotent
  end)

  it("turns a connection that cannot be made into an error result naming the server", function()
    local uid = imported({ identifier = "acct" }, { entry("a") })
    assert(store:update_server(uid, { auth_credential = "env:X", auth_placement = "cookie" }))
    local t = assert(catalogue.provider(store).tools())[1]
    local result = t:execute({})
    assert.is_true(result.is_error)
    assert.truthy(result.text:find('"acct"', 1, true))
    assert.truthy(result.text:find('"cookie"', 1, true))
  end)
end)
