-- A server whose catalogue changes while a run uses it: the official TypeScript SDK's server in
-- its session-changing mode (spec/peers/sdk-server.mjs), whose tool `grow` makes later sessions
-- list `grown` instead of `add` and sends notifications/tools/list_changed twice on the call's own
-- event stream. The notices mark the stored catalogue stale; a server the operator set to
-- re-import on its own is imported again at the run's next safe point (run:tools(), never inside
-- the turn that heard them), once per burst, through the import's own path (orphans, the recorded
-- outcome, the contact); a manual one stays stale until `mcpclient import`; a re-import that fails
-- leaves the catalogue as it was, stale, the failure recorded, and is not tried again. Over stdio,
-- the SDK v2 server in the 2026-07-28 era tells its change only to a standing listen, which a
-- stored server's stdio connection keeps open. On SQLite, and on PostgreSQL with MCPCLIENT_TEST_PG.
local backends = require "support.backends"
local catalogue = require "mcpclient.agent.catalogue"
local core = require "mcpclient.core"
local peers = require "support.peers"
local run = require "mcpclient.agent.run"
local shell = require "support.shell"
local store_module = require "mcpclient.agent.store"

local json = core.json

local ADMIN = { name = "ops", uid = 1, admin = true }
local LOCAL = { identifier = "cfg-local", provider = "p-local" }
local PROVIDERS = { ["p-local"] = { zone = "local" } }

-- How many tools/list requests the server received.
local function listings(peer)
  local n = 0
  for _, line in ipairs(peer.log_lines()) do
    if line:match("^POST tools/list ") then n = n + 1 end
  end
  return n
end

local function names(specs)
  local set = {}
  for _, spec in ipairs(specs) do set[spec.name] = true end
  return set
end

local events_of = require("support.trail").of_kind

describe("a catalogue that changes under a run (" .. backends.name .. ") #integration", function()
  local peer, store, path

  before_each(function()
    peers.require_available()
    peer = peers.start("sdk-changing", { log = true })
    path = os.tmpname()
    store = assert(store_module.open(backends.fresh(path)))
  end)

  after_each(function()
    store:close()
    if peer then peer.stop() end
    for _, suffix in ipairs { "", "-wal", "-shm" } do os.remove(path .. suffix) end
  end)

  -- The server added, imported, its `grow` and `add` switched on; a run over the store's tools.
  local function prepared(reimport)
    local uid = assert(store:add_server { identifier = "lab", name = "Lab", url = peer.url,
      data_class = "publicContent", requires_approval = "0", enabled = true, reimport = reimport })
    local report = catalogue.import(store, assert(store:server(uid)), { log = function() end })
    assert.is_false(report.refused, table.concat(report.skip_reasons or {}, "\n"))
    assert(store:set_tool_enabled("mcp_lab_grow", true))
    assert(store:set_tool_enabled("mcp_lab_add", true))
    assert(store:set_tool_enabled("mcp_lab_echo", true))
    local r = assert(run.start(store, { user = ADMIN, configuration = LOCAL, providers = PROVIDERS,
      log = function() end }))
    assert.is_true(names(r:tools()).mcp_lab_add)
    return uid, r
  end

  it("auto: re-imported once at the next safe point, never inside the turn; the run's tools follow", function()
    local uid, r = prepared("auto")
    assert.equal(1, listings(peer))
    local before = assert(store:server(uid))
    assert.equal("auto", before.reimport)

    -- the turn that hears the burst: the catalogue is marked, and nothing is imported inside it
    assert.equal("3", r:invoke("mcp_lab_add", { a = 1, b = 2 }).text)
    local results = r:turn { { name = "mcp_lab_grow", arguments = {} }, { name = "mcp_lab_echo",
      arguments = { message = "hi" } } }
    assert.equal("grown", results[1].text)
    assert.equal("Echo: hi", results[2].text)
    local marked = assert(store:server(uid))
    assert.is_true(marked.catalogue_stale)
    assert.equal(1, marked.reimport_pending)
    assert.equal(1, listings(peer))
    assert.same({}, events_of(r, "reimport"))

    -- the safe point: one re-import for the burst of two notices (its contact recorded as a call's is)
    assert(store.adapter:exec("UPDATE mcp_server SET last_contact = 0, last_imported = 0 WHERE uid = ?", { uid }))
    local offered = names(r:tools())
    assert.equal(2, listings(peer))
    local after = assert(store:server(uid))
    assert.is_false(after.catalogue_stale)
    assert.equal(0, after.reimport_pending)
    assert.equal("ok", after.import_status)
    assert.is_true(after.last_contact >= before.last_contact and after.last_contact > 0)
    assert.is_true(after.last_imported > 0)
    -- through the import's path: `add` orphaned (kept for the audit), `grown` imported switched off
    local live = {}
    for _, t in ipairs(assert(store:live_tools_of(uid))) do live[t.tool_name] = true end
    assert.is_nil(live.mcp_lab_add)
    assert.is_true(live.mcp_lab_grown)
    assert.is_nil(offered.mcp_lab_add)
    assert.is_nil(offered.mcp_lab_grown)
    local reimports = events_of(r, "reimport")
    assert.equal(1, #reimports)
    assert.equal("lab", reimports[1].data.server)
    assert.equal(1, reimports[1].data.orphaned)
    assert.is_false(reimports[1].data.refused)
    assert.is_true(reimports[1].duration_ms >= 0)

    -- nothing more until the next notice
    r:tools()
    assert.equal(2, listings(peer))
    assert.equal(1, #events_of(r, "reimport"))
    -- the run's registry follows the store: the orphan is unknown, the new tool callable once on
    local gone = r:invoke("mcp_lab_add", { a = 1, b = 2 })
    assert.is_true(gone.is_error)
    assert.truthy(gone.text:find("unknown tool", 1, true))
    assert(store:set_tool_enabled("mcp_lab_grown", true))
    assert.is_true(names(r:tools()).mcp_lab_grown)
    assert.equal("grown word", r:invoke("mcp_lab_grown", { word = "word" }).text)
    assert.equal("completed", r:finish())
  end)

  it("manual (the default): stale until `mcpclient import`, which clears it", function()
    local uid, r = prepared(nil)
    assert.equal("manual", assert(store:server(uid)).reimport)
    assert.equal("grown", r:invoke("mcp_lab_grow", {}).text)
    assert.is_true(names(r:tools()).mcp_lab_add)
    assert.equal(1, listings(peer))
    assert.is_true(assert(store:server(uid)).catalogue_stale)
    assert.same({}, events_of(r, "reimport"))
    r:finish()
    if backends.postgres then
      assert.is_false(catalogue.import(store, assert(store:server(uid)), { log = function() end }).refused)
    else
      local pipe = assert(io.popen("XDG_DATA_HOME=/nonexistent/mcpclient-spec lua5.4 "
        .. shell.quote(peers.root .. "/bin/mcpclient") .. " --db " .. shell.quote(path) .. " --json import lab"))
      local out = pipe:read("a")
      pipe:close()
      assert.equal(1, json.decode(out)[1].orphaned, out)
    end
    assert.equal(2, listings(peer))
    assert.is_false(assert(store:server(uid)).catalogue_stale)
  end)

  it("a re-import that fails leaves the catalogue as it was, stale, the failure recorded, not retried", function()
    local uid, r = prepared("auto")
    assert.equal("grown", r:invoke("mcp_lab_grow", {}).text)
    peer.stop()
    peer = nil
    local offered = names(r:tools())
    assert.is_true(offered.mcp_lab_add)
    local row = assert(store:server(uid))
    assert.is_true(row.catalogue_stale)
    assert.equal("error", row.import_status)
    assert.truthy(row.import_error ~= "")
    local live = {}
    for _, t in ipairs(assert(store:live_tools_of(uid))) do live[t.tool_name] = true end
    assert.is_true(live.mcp_lab_add)
    assert.is_nil(live.mcp_lab_grown)
    local reimports = events_of(r, "reimport")
    assert.equal(1, #reimports)
    assert.is_true(reimports[1].data.refused)
    assert.is_true(reimports[1].data.isError)
    assert.truthy(reimports[1].data.result:find("still stale", 1, true))
    -- once per burst: the next safe point does not try again
    r:tools()
    assert.equal(1, #events_of(r, "reimport"))
    r:finish()
  end)

  it("over stdio, in the 2026-07-28 era: a notice told to the standing listen makes the re-import due", function()
    local uid = assert(store:add_server { identifier = "kid", name = "Kid", command = { "node",
      peers.dir .. "/sdk2-stdio-server.mjs" }, data_class = "publicContent", requires_approval = "0", enabled = true,
      reimport = "auto" })
    assert.is_false(catalogue.import(store, assert(store:server(uid)), { log = function() end }).refused)
    assert.equal(1, #assert(store:offers_of(uid, "resource")))
    assert(store:set_tool_enabled("mcp_kid_touch", true))
    local r = assert(run.start(store, { user = ADMIN, configuration = LOCAL, providers = PROVIDERS,
      log = function() end }))
    assert.is_true(names(r:tools()).mcp_kid_touch)
    assert.equal("touched", r:invoke("mcp_kid_touch", {}).text)
    local marked = assert(store:server(uid))
    assert.is_true(marked.catalogue_stale)
    assert.equal(1, marked.reimport_pending)
    r:tools()
    local after = assert(store:server(uid))
    assert.is_false(after.catalogue_stale)
    assert.equal(0, after.reimport_pending)
    local reimports = events_of(r, "reimport")
    assert.equal(1, #reimports)
    assert.equal("kid", reimports[1].data.server)
    assert.is_false(reimports[1].data.refused)
    assert.equal("completed", r:finish())
  end)
end)
