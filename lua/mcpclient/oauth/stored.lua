--- Grants kept outside the connection: the `grants` hook of the oauth option,
--- so a token obtained once (by `mcpclient login`, or by one agent loop) is
--- used and refreshed by every later connection to the same server.
--
-- The hook is a table { load = function(server) -> record | nil,
-- save = function(record) }. A record is keyed by server, issuer and
-- resource: { server, issuer, resource, token_endpoint, access_token,
-- refresh_token, expires_at (unix seconds, nil when the token named no
-- lifetime), scope, client_id, client_secret, auth_method }. Whoever
-- implements the hook keeps records where only the user can read them
-- (mcpclient.agent.grants: a table of the store, the SQLite file 0600).
-- Nothing of a record is ever printed or logged.
local stored = {}

-- The connection's clock is monotonic (its origin is arbitrary); a record
-- outlives the process, so it carries wall-clock seconds.
local function to_wall(provider, expires_at)
  if not expires_at then return nil end
  return os.time() + math.floor(expires_at - provider:clock_now())
end

local function from_wall(provider, expires_at)
  if math.type(expires_at) ~= "integer" then return nil end
  return provider:clock_now() + (expires_at - os.time())
end

--- Save the provider's token, with what a refresh needs, through the hook.
function stored.keep(provider)
  local hook, discovered, token = provider.options.grants, provider.discovered, provider.token
  if not (hook and discovered and token) then return end
  local client = provider.client or {}
  local configured = provider.options.client_id ~= nil -- its secret stays a reference, resolved at use
  pcall(hook.save, {
    server = provider.ctx.identifier, issuer = discovered.issuer, resource = discovered.resource,
    token_endpoint = discovered.metadata.token_endpoint,
    access_token = token.access_token, refresh_token = token.refresh_token,
    expires_at = to_wall(provider, token.expires_at), scope = token.scope,
    client_id = client.client_id, client_secret = not configured and client.client_secret or nil,
    auth_method = client.method,
  })
end

--- Take a saved grant for this server, once per provider, when it holds no token.
function stored.restore(provider)
  local hook = provider.options.grants
  if provider.restored or not hook or provider.token then return end
  provider.restored = true
  local ok, record = pcall(hook.load, provider.ctx.identifier)
  if not ok or type(record) ~= "table" or type(record.access_token) ~= "string" then return end
  provider.discovered = { issuer = record.issuer, resource = record.resource,
    metadata = { token_endpoint = record.token_endpoint } }
  if not provider.options.client_id and record.client_id then
    provider.client = { client_id = record.client_id, client_secret = record.client_secret,
      method = record.auth_method or "none" }
  elseif provider.options.client_id then
    provider.client = provider:configured_client()
    if provider.client then provider.client.method = record.auth_method or "none" end
  end
  provider.token = { access_token = record.access_token, refresh_token = record.refresh_token,
    scope = record.scope, expires_at = from_wall(provider, record.expires_at) }
end

return stored
