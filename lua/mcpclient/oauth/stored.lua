--- Grants kept outside the connection: the `grants` hook of the oauth option,
--- so a token obtained once (by `mcpclient login`, or by one agent loop) is
--- used and refreshed by every later connection to the same server.
--
-- The hook is a table { load = function(server, url) -> records | nil,
-- save = function(record) }. A record is { server, issuer, resource,
-- token_endpoint, access_token, refresh_token, expires_at (unix seconds, nil
-- when the token named no lifetime), scope, client_id, client_secret (a
-- registration's), client_secret_ref (a pre-registered client's: the
-- reference, resolved at use, never the secret), auth_method }: a grant is
-- keyed by the protected resource it was issued for and the issuer of the
-- authorization server that issued it, never by the server's identifier
-- alone. `load` returns the server's records (an array, newest first; a
-- single record is taken as one), nil when there are none, or nil, message,
-- err when they could not be read; `save` returns nothing, or
-- nil, message, err when the record could not be kept. A hook that raises
-- fails the same way, with kind "store": a grant store that cannot be read is
-- a visible failure, never "no grant".
--
-- A record is used only while it still matches: its resource must cover the
-- connection's URL (same origin, the URL's path or a parent of it), and its
-- issuer is checked against the resource's metadata at the first refusal (a
-- resource that moved to another authorization server drops it). Whoever
-- implements the hook keeps records where only the user can read them
-- (mcpclient.agent.grants: a table of the store, the SQLite file 0600).
-- Nothing of a record is ever printed or logged.
local discovery = require "mcpclient.oauth.discovery"
local errors = require "mcpclient.errors"
local grants = require "mcpclient.oauth.grants"

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

-- The failure of a hook that raised or said it failed.
local function hook_failed(provider, what, message, err)
  if type(err) == "table" and errors.KINDS[err.kind] then return errors.pass(err) end
  return errors.fail("store", { server = provider.ctx.identifier, operation = what,
    detail = message ~= nil and tostring(message) or "the grants hook failed" })
end

-- Call a hook function: its results, or the failure triple.
local function call(provider, what, fn, ...)
  local results = table.pack(pcall(fn, ...))
  if not results[1] then return hook_failed(provider, what, results[2]) end
  if results[2] == nil and results[3] ~= nil then return hook_failed(provider, what, results[3], results[4]) end
  return true, results[2]
end

-- The records of this connection's server that match its URL, newest first,
-- or the failure triple.
local function matching(provider)
  local ok, found, err = call(provider, "read the authorization grants", provider.options.grants.load,
    provider.ctx.identifier, provider.ctx.url)
  if not ok then return nil, found, err end
  if type(found) ~= "table" then return {} end
  if type(found.access_token) == "string" then found = { found } end
  local list = {}
  for _, record in ipairs(found) do
    if type(record) == "table" and type(record.access_token) == "string" and type(record.issuer) == "string"
      and type(record.token_endpoint) == "string" and discovery.covers(record.resource, provider.ctx.url) then
      list[#list + 1] = record
    end
  end
  return list
end

--- Save the provider's token, with what a refresh needs, through the hook.
-- @return true | nil, message, err
function stored.keep(provider)
  local hook, discovered, token = provider.options.grants, provider.discovered, provider.token
  -- A DPoP-bound token is useless without the key, which never leaves this connection.
  if not (hook and discovered and token) or token.dpop then return true end
  local client = provider.client or {}
  local configured = provider.options.client_id ~= nil -- its secret stays a reference, resolved at use
  local ok, message, err = call(provider, "save an authorization grant", hook.save, {
    server = provider.ctx.identifier, issuer = token.issuer, resource = token.resource,
    token_endpoint = discovered.metadata.token_endpoint,
    access_token = token.access_token, refresh_token = token.refresh_token,
    expires_at = to_wall(provider, token.expires_at), scope = token.scope,
    client_id = client.client_id, client_secret = not configured and client.client_secret or nil,
    client_secret_ref = configured and provider.options.client_secret or nil, auth_method = client.method,
  })
  if not ok then return nil, message, err end
  return true
end

-- Take `record` as the provider's grant. The client it was obtained with
-- comes along: the configured one, else the record's (a pre-registered
-- client's secret resolved from its reference now, a registration's as kept).
-- @return true | nil, message, err (a secret reference that cannot be resolved)
local function adopt(provider, record)
  local client
  if provider.options.client_id then
    local message, err
    client, message, err = provider:configured_client()
    if not client then return nil, message, err end
    client.method = record.auth_method or "none"
    provider.client_issuer = provider.client_issuer or record.issuer
  elseif type(record.client_id) == "string" then
    client = { client_id = record.client_id, client_secret = record.client_secret,
      method = record.auth_method or "none" }
    if type(record.client_secret_ref) == "string" then
      local secret, message, err = grants.secret(provider.ctx, record.client_secret_ref, "the login's client secret")
      if not secret then return nil, message, err end
      client.client_secret = secret
    else
      -- a registration belongs to the issuer it was made with, and only there is it used again
      provider.registrations[record.issuer] = { client_id = record.client_id,
        client_secret = record.client_secret, auth_method = record.auth_method }
    end
  end
  provider.discovered = { issuer = record.issuer, resource = record.resource, restored = true,
    metadata = { token_endpoint = record.token_endpoint } }
  provider.client = client
  provider.token = { access_token = record.access_token, refresh_token = record.refresh_token,
    scope = record.scope, expires_at = from_wall(provider, record.expires_at), issuer = record.issuer,
    resource = record.resource }
  return true
end

--- Take a saved grant for this server, once per provider, when it holds no token.
-- @return true | nil, message, err (the hook could not read its grants)
function stored.restore(provider)
  if provider.restored or not provider.options.grants or provider.token or provider.options.dpop then return true end
  local list, message, err = matching(provider)
  if not list then return nil, message, err end
  provider.restored = true
  if list[1] then return adopt(provider, list[1]) end
  return true
end

--- Before a refresh: has another connection or process already replaced the
--- token (the same resource and issuer, another access token, not expired)?
--- Then take it instead of refreshing again.
-- @return true (taken) | false | nil, message, err
function stored.newer(provider)
  local token = provider.token
  if not (provider.options.grants and token) then return false end
  local list, message, err = matching(provider)
  if not list then return nil, message, err end
  for _, record in ipairs(list) do
    if record.issuer == token.issuer and record.resource == token.resource
      and record.access_token ~= token.access_token
      and (math.type(record.expires_at) ~= "integer" or record.expires_at > os.time()) then
      local ok
      ok, message, err = adopt(provider, record)
      if not ok then return nil, message, err end
      return true
    end
  end
  return false
end

return stored
