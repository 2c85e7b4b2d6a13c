-- Migration 10 names the columns for what they hold (agent_run.fence,
-- created_at, updated_at, governance_event.user_uid) and drops the dead
-- mcp_server.hidden. A store written before it opens, migrates, and every row
-- keeps its values under the new names, on the backend the suite runs on.
local backends = require "support.backends"
local store_module = require "mcpclient.agent.store"

local BEFORE = 9 -- the last migration before the names changed

-- Rows in every table that had an old name, written as a store at BEFORE
-- wrote them (straight SQL: this version's store speaks the new names).
-- → the uids, by table
local function old_rows(old)
  local db = old.adapter
  local function insert(sql, params) return assert(db:insert(sql, params)) end
  local uids = {}
  uids.server = insert("INSERT INTO mcp_server (identifier, name, url, enabled, crdate, tstamp, hidden) "
    .. "VALUES (?, ?, ?, 1, ?, ?, 1)", { "old", "Old", "https://old.example/mcp", 101, 102 })
  uids.tool = insert("INSERT INTO mcp_tool (server, tool_name, remote_name, crdate, tstamp) VALUES (?, ?, ?, ?, ?)",
    { uids.server, "mcp_old_read", "read", 103, 104 })
  uids.offer = insert("INSERT INTO mcp_offer (server, kind, ident, name, crdate, tstamp) VALUES (?, ?, ?, ?, ?, ?)",
    { uids.server, "resource", "file:///a", "a", 105, 106 })
  insert("INSERT INTO tool_state (tool_name, enabled, tstamp) VALUES (?, 1, ?)", { "mcp_old_read", 107 })
  insert("INSERT INTO tool_group_state (group_name, enabled, tstamp) VALUES (?, 0, ?)", { "mcp_old", 108 })
  uids.run = insert("INSERT INTO agent_run (uuid, status, claimed_by, lease_expires, pending_effect, crdate, tstamp) "
    .. "VALUES (?, ?, ?, ?, ?, ?, ?)", { "old-run", "completed", "me", 0,
      '[{"tool":"mcp_old_read","arguments_sha256":"x","sequence":1}]', 109, 110 })
  insert("INSERT INTO agent_run_event (run, sequence, kind, round, payload, crdate) VALUES (?, 1, ?, 1, ?, ?)",
    { uids.run, "tool", "{}", 111 })
  uids.task = insert("INSERT INTO agent_task (run, sequence, server, task_id, tool, handle, status, crdate, tstamp) "
    .. "VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)", { uids.run, "old", "t-1", "mcp_old_read", "{}", "working", 112, 113 })
  insert("INSERT INTO governance_event (crdate, decision, reason, be_user, tool_name, agentrun_uid) "
    .. "VALUES (?, ?, ?, ?, ?, ?)", { 114, "deny", "ceiling", 7, "mcp_old_read", uids.run })
  insert("INSERT INTO mcp_oauth_grant (server, resource, issuer, record, tstamp) VALUES (?, ?, ?, ?, ?)",
    { "old", "https://old.example/mcp", "https://issuer.example", "{}", 115 })
  return uids
end

describe("a store from before the columns were named for what they hold (" .. backends.name .. ")", function()
  it("migrates, and finds every row with its values under the new names", function()
    local path = os.tmpname()
    local location = backends.fresh(path)
    local _ <close> = setmetatable({}, { __close = function() os.remove(path) end })
    local old = assert(store_module.open(location, { migrate_to = BEFORE }))
    assert.equal(BEFORE, old:schema_version())
    local uids = old_rows(old)
    old:close()

    local s <close> = assert(store_module.open(location))
    assert.equal(store_module.SCHEMA_VERSION, s:schema_version())
    assert.is_true(store_module.SCHEMA_VERSION > BEFORE)

    local server = assert(s:server(uids.server))
    assert.same({ "old", 101, 102 }, { server.identifier, server.created_at, server.updated_at })
    local tool = assert(s:tools_of(uids.server))[1]
    assert.same({ uids.tool, 103, 104 }, { tool.uid, tool.created_at, tool.updated_at })
    local offer = assert(s:offers_of(uids.server, "resource"))[1]
    assert.same({ uids.offer, 105, 106 }, { offer.uid, offer.created_at, offer.updated_at })
    assert.is_true(s:tool_enabled("mcp_old_read"))
    assert.is_false(s:group_enabled("mcp_old"))

    local run = assert(s:run(uids.run))
    assert.equal('[{"tool":"mcp_old_read","arguments_sha256":"x","sequence":1}]', run.fence)
    assert.same({ 109, 110 }, { run.created_at, run.updated_at })
    assert.equal(111, assert(s:events(uids.run))[1].created_at)
    local task = assert(s:tasks_by_id("t-1", "old"))[1]
    assert.same({ uids.task, 112, 113 }, { task.uid, task.created_at, task.updated_at })
    local event = assert(s:governance_events())[1]
    assert.same({ 114, 7, uids.run }, { event.created_at, event.user_uid, event.agentrun_uid })
    local grant = assert(s:grants("old"))[1]
    assert.equal(115, grant.updated_at)

    -- the old names are gone, hidden with them
    for _, query in ipairs { "SELECT pending_effect FROM agent_run", "SELECT crdate FROM mcp_tool",
      "SELECT tstamp FROM mcp_server", "SELECT be_user FROM governance_event", "SELECT hidden FROM mcp_server" } do
      assert.is_nil(s.adapter:rows(query, {}), query)
    end
    -- and the new ones are written: a change stamps updated_at, a fence is kept as `fence`
    assert.is_true(s:update_run(uids.run, { fence = "" }))
    assert.equal("", assert(s:run(uids.run)).fence)
    assert.is_true(assert(s:run(uids.run)).updated_at >= os.time() - 5)
  end)
end)
