--- Store fixtures the functional specs share: an in-memory store and a server
--- row with the standard record (REFERENCE §12.3: "Test server", the example URL).
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

return servers
