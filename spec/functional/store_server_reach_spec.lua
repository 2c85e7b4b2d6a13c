-- Migration 11: a server row's proxy, TLS files, plain headers and roots, on
-- the backend the suite runs on. A store from before it opens, migrates, and
-- its servers read as they meant (no proxy setting, no TLS files, no headers,
-- no roots); the new fields round-trip; their stored shapes are checked.
local backends = require "support.backends"
local store_module = require "mcpclient.agent.store"

local BEFORE = 10 -- the last migration before these columns

local function fresh()
  local path = os.tmpname()
  local location = backends.fresh(path)
  return location, setmetatable({}, { __close = function()
    for _, suffix in ipairs { "", "-journal", "-wal", "-shm" } do os.remove(path .. suffix) end
  end })
end

describe("a server's proxy, TLS files, headers and roots in the store (" .. backends.name .. ")", function()
  it("migrates a store from before them; its rows read with none of them", function()
    local location, _ <close> = fresh()
    local old = assert(store_module.open(location, { migrate_to = BEFORE }))
    local uid = assert(old.adapter:insert("INSERT INTO mcp_server (identifier, name, url) VALUES (?, ?, ?)",
      { "old", "Old", "https://old.example/mcp" }))
    -- the columns are not there yet
    assert.is_nil(old.adapter:rows("SELECT proxy FROM mcp_server", {}))
    old:close()

    local s <close> = assert(store_module.open(location))
    assert.equal(store_module.SCHEMA_VERSION, s:schema_version())
    assert.is_true(store_module.SCHEMA_VERSION > BEFORE)
    local row = assert(s:server(uid))
    assert.same({ "old", "https://old.example/mcp", "", "", "", "" },
      { row.identifier, row.url, row.proxy, row.ca_file, row.client_cert, row.client_key })
    assert.same({}, row.headers)
    assert.same({}, row.roots)
    local described = assert(s.adapter:rows("SELECT description FROM schema_version WHERE version = ?", { 11 }))
    assert.matches("proxy", tostring(described[1].description))
  end)

  it("keeps each field and gives it back as it was given", function()
    local location, _ <close> = fresh()
    local s <close> = assert(store_module.open(location))
    local uid = assert(s:add_server { identifier = "corp", name = "Corp", url = "https://mcp.corp.example/mcp",
      proxy = "http://proxy.corp:3128", ca_file = "/etc/corp/ca.pem", client_cert = "/etc/corp/agent.pem",
      client_key = "env:AGENT_KEY_PATH", headers = { ["X-Tenant"] = "acme", ["X-Region"] = "eu" },
      roots = { { uri = "file:///srv/notes", name = "notes" }, { uri = "file:///srv/other" } } })
    local row = assert(s:server(uid))
    assert.same({ "http://proxy.corp:3128", "/etc/corp/ca.pem", "/etc/corp/agent.pem", "env:AGENT_KEY_PATH" },
      { row.proxy, row.ca_file, row.client_cert, row.client_key })
    assert.same({ ["X-Tenant"] = "acme", ["X-Region"] = "eu" }, row.headers)
    assert.same({ { uri = "file:///srv/notes", name = "notes" }, { uri = "file:///srv/other" } }, row.roots)
    -- stored as JSON text: an object and an array
    local raw = assert(s.adapter:rows("SELECT headers, roots FROM mcp_server WHERE uid = ?", { uid }))[1]
    assert.equal('{"X-Region":"eu","X-Tenant":"acme"}', raw.headers)
    assert.equal('[{"name":"notes","uri":"file:///srv/notes"},{"uri":"file:///srv/other"}]', raw.roots)

    -- changed, then cleared: empty tables and "" store nothing
    assert.is_true(s:update_server(uid, { proxy = "none", headers = { ["X-Tenant"] = "other" },
      roots = { { uri = "file:///x" } } }))
    row = assert(s:server(uid))
    assert.same({ "none", { ["X-Tenant"] = "other" }, { { uri = "file:///x" } } },
      { row.proxy, row.headers, row.roots })
    assert.is_true(s:update_server(uid, { proxy = "", ca_file = "", client_cert = "", client_key = "", headers = {},
      roots = {} }))
    raw = assert(s.adapter:rows("SELECT proxy, ca_file, client_cert, client_key, headers, roots FROM mcp_server "
      .. "WHERE uid = ?", { uid }))[1]
    assert.same({ "", "", "", "", "", "" }, { raw.proxy, raw.ca_file, raw.client_cert, raw.client_key, raw.headers,
      raw.roots })
  end)

  it("refuses values of the wrong shape as misuse, storing nothing", function()
    local location, _ <close> = fresh()
    local s <close> = assert(store_module.open(location))
    for _, fields in ipairs {
      { identifier = "x", headers = "X-A: b" },
      { identifier = "x", headers = { ["X-A"] = 1 } },
      { identifier = "x", headers = { "X-A=b" } },
      { identifier = "x", roots = "file:///a" },
      { identifier = "x", roots = { { name = "no uri" } } },
      { identifier = "x", roots = { uri = "file:///a" } },
      { identifier = "x", roots = { { uri = "file:///a", name = 3 } } },
      { identifier = "x", proxy = false },
      { identifier = "x", client_key = { "env:K" } },
    } do
      assert.has_error(function() s:add_server(fields) end)
    end
    assert.same({}, assert(s:servers()))
  end)

  it("reads stored text that is not its shape as none (a row written by hand)", function()
    local location, _ <close> = fresh()
    local s <close> = assert(store_module.open(location))
    local uid = assert(s.adapter:insert("INSERT INTO mcp_server (identifier, url, headers, roots) VALUES (?, ?, ?, ?)",
      { "hand", "https://h.example/mcp", '["not","an","object"]', '{"uri":"file:///not-a-list"}' }))
    local row = assert(s:server(uid))
    assert.same({}, row.headers)
    assert.same({}, row.roots)
    assert(s.adapter:exec("UPDATE mcp_server SET headers = ?, roots = ? WHERE uid = ?",
      { '{"X-A":1}', '[{"name":"no uri"}]', uid }))
    row = assert(s:server(uid))
    assert.same({}, row.headers)
    assert.same({}, row.roots)
  end)
end)
