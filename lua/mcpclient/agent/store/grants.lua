--- The OAuth grants repository of the store (mcp_oauth_grant): a server's
-- grants keyed by protected resource and issuer. mcpclient.agent.grants
-- speaks for them; this file only reads and writes the rows. A grant's
-- record is JSON and a secret: it is never put in a message.
local core = require "mcpclient.agent.store.core"

local exec, insert, insert_sql, select_rows = core.exec, core.insert, core.insert_sql, core.select_rows

local grants = {}

local hydrate_grant = core.hydrator {
  uid = "integer", server = "string", resource = "string", issuer = "string", record = "string", updated_at = "integer",
}

local function check_text(value, name)
  if type(value) ~= "string" then error(name .. " must be a string", 3) end
  return value
end

--- A server's grant rows { uid, server, resource, issuer, record (JSON), updated_at }, newest first.
function grants.grants(self, server)
  check_text(server, "server")
  return select_rows(self, "read the authorization grants of " .. server,
    "SELECT * FROM mcp_oauth_grant WHERE server = ? ORDER BY updated_at DESC, uid DESC", { server }, hydrate_grant)
end

--- Keep a grant of `server` for (resource, issuer): it replaces the grant
-- held for the same resource, whichever authorization server issued that one
-- (a resource trusts one issuer at a time). → true
function grants.save_grant(self, server, resource, issuer, record)
  check_text(server, "server")
  check_text(resource, "resource")
  check_text(issuer, "issuer")
  check_text(record, "record")
  return self:transaction(function()
    local ok, message, err = exec(self, "replace an authorization grant of " .. server,
      "DELETE FROM mcp_oauth_grant WHERE server = ? AND resource = ?", { server, resource })
    if not ok then return nil, message, err end
    ok, message, err = insert(self, "save an authorization grant of " .. server,
      insert_sql("mcp_oauth_grant", { "server", "resource", "issuer", "record", "updated_at" }),
      { server, resource, issuer, record, os.time() })
    if not ok then return nil, message, err end
    return true
  end)
end

--- Forget every grant of `server`. → the number forgotten
function grants.forget_grants(self, server)
  check_text(server, "server")
  local ok, message, err = exec(self, "forget the authorization grants of " .. server,
    "DELETE FROM mcp_oauth_grant WHERE server = ?", { server })
  if not ok then return nil, message, err end
  return core.adapter_of(self):changes()
end

--- Server changes that concern its grants, in the transaction of the change:
-- a new URL forgets them (they were issued for the old one), a new
-- identifier carries them along. → the number forgotten
function grants.follow(self, row, fields)
  if fields.url ~= nil and fields.url ~= row.url then return self:forget_grants(row.identifier) end
  if fields.identifier ~= nil and fields.identifier ~= row.identifier then
    local ok, message, err = exec(self, "move the authorization grants of " .. row.identifier,
      "UPDATE mcp_oauth_grant SET server = ? WHERE server = ?", { fields.identifier, row.identifier })
    if not ok then return nil, message, err end
  end
  return 0
end

return grants
