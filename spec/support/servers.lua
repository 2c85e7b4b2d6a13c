--- Store fixtures the functional specs share: an in-memory store, a server
--- row with the standard record ("Test server" at the example URL), and
--- read-outs only specs need.
local servers = {}

function servers.open_store()
  return assert(require("mcpclient.agent.store").open(":memory:"))
end

--- Add the standard server, with `fields` overriding any column; returns its uid.
function servers.add(store, fields)
  local row = {
    identifier = "srv", name = "Test server", url = "https://mcp.example.com/rpc",
    data_class = "publicContent", enabled = true,
  }
  for k, v in pairs(fields or {}) do row[k] = v end
  return assert(store:add_server(row))
end

--- Every tool row of the store, any server, by tool_name (hydration aside:
--- orphaned read as a boolean, as the store's own readers give it).
function servers.all_tools(store)
  local rows = assert(store.adapter:rows("SELECT * FROM mcp_tool ORDER BY tool_name ASC", {}))
  for _, row in ipairs(rows) do row.orphaned = row.orphaned == 1 end
  return rows
end

return servers
