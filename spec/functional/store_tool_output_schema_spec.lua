-- Migration 12: an imported tool's outputSchema kept on its row, on the
-- backend the suite runs on. A store from before it opens, migrates, and its
-- tools read as declaring none; the column round-trips through reconcile;
-- a value of the wrong shape is misuse and stores nothing.
local backends = require "support.backends"
local store_module = require "mcpclient.agent.store"

local BEFORE = 11 -- the last migration before the column

local function fresh()
  local path = os.tmpname()
  local location = backends.fresh(path)
  return location, setmetatable({}, { __close = function()
    for _, suffix in ipairs { "", "-journal", "-wal", "-shm" } do os.remove(path .. suffix) end
  end })
end

local function tool(name, output_schema)
  return { tool_name = name, remote_name = name:gsub("^mcp_%w+_", ""), description = "",
    input_schema = '{"type":"object"}', remote_annotations = "", output_schema = output_schema }
end

describe("an imported tool's output schema in the store (" .. backends.name .. ")", function()
  it("migrates a store from before it; its tools read as declaring none", function()
    local location, _ <close> = fresh()
    local old = assert(store_module.open(location, { migrate_to = BEFORE }))
    local server = assert(old.adapter:insert("INSERT INTO mcp_server (identifier, name, url) VALUES (?, ?, ?)",
      { "old", "Old", "https://old.example/mcp" }))
    assert(old.adapter:insert("INSERT INTO mcp_tool (server, tool_name, remote_name, input_schema) "
      .. "VALUES (?, ?, ?, ?)", { server, "mcp_old_t", "t", '{"type":"object"}' }))
    -- the column is not there yet
    assert.is_nil(old.adapter:rows("SELECT output_schema FROM mcp_tool", {}))
    old:close()

    local s <close> = assert(store_module.open(location))
    assert.equal(store_module.SCHEMA_VERSION, s:schema_version())
    assert.is_true(store_module.SCHEMA_VERSION > BEFORE)
    local rows = assert(s:tools_of(server))
    assert.same({ "mcp_old_t", '{"type":"object"}', "" }, { rows[1].tool_name, rows[1].input_schema,
      rows[1].output_schema })
    local described = assert(s.adapter:rows("SELECT description FROM schema_version WHERE version = ?", { 12 }))
    assert.matches("output_schema", tostring(described[1].description))
  end)

  it("keeps each tool's schema text as given, updates it on the next import, and '' for none", function()
    local location, _ <close> = fresh()
    local s <close> = assert(store_module.open(location))
    local row = assert(s:server(assert(s:add_server { identifier = "srv", name = "Srv",
      url = "https://srv.example/mcp" })))
    -- key order and spacing are the server's: the text is kept, not re-encoded
    local output = '{"type": "object", "required": ["z", "a"], "properties": {"z": {"type": "string"}}}'
    assert(s:reconcile(row, { tool("mcp_srv_a", output), tool("mcp_srv_b"), tool("mcp_srv_c", "") }, 1))
    local by = {}
    for _, t in ipairs(assert(s:tools_of(row.uid))) do by[t.tool_name] = t.output_schema end
    assert.same({ mcp_srv_a = output, mcp_srv_b = "", mcp_srv_c = "" }, by)

    assert(s:reconcile(row, { tool("mcp_srv_a"), tool("mcp_srv_b", "false") }, 2))
    by = {}
    for _, t in ipairs(assert(s:live_tools_of(row.uid))) do by[t.tool_name] = t.output_schema end
    assert.same({ mcp_srv_a = "", mcp_srv_b = "false" }, by)
  end)

  it("refuses an output schema that is not text as misuse, storing nothing", function()
    local location, _ <close> = fresh()
    local s <close> = assert(store_module.open(location))
    local row = assert(s:server(assert(s:add_server { identifier = "srv", name = "Srv",
      url = "https://srv.example/mcp" })))
    assert.has_error(function() s:reconcile(row, { tool("mcp_srv_a", { type = "object" }) }, 1) end,
      "reconcile: accepted[1].output_schema must be a string")
    assert.same({}, assert(s:tools_of(row.uid)))
  end)
end)
