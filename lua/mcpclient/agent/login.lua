--- `mcpclient login`: the authorization code flow with a person at a browser,
--- for a configured server, its grant kept in the store for every later
--- connection (mcpclient.agent.grants).
--
-- The redirect comes back to a one-shot listener on 127.0.0.1
-- (mcp.oauth.loopback_authorize: a port the kernel picks, or a fixed one to
-- forward over SSH; path /callback). The authorization URL is handed to
-- `announce` to show; it is never opened through a shell. Any earlier grant
-- of the server is forgotten first, so a login always asks afresh.
local errors = require "mcpclient.errors"
local grants = require "mcpclient.agent.grants"
local mcp = require "mcpclient"
local server_options = require "mcpclient.agent.server_options"

local login = {}

login.DEFAULT_WAIT = 300   -- seconds a person has to finish in the browser
login.CALLBACK_PATH = "/callback"

-- The connection that logs in: the row's server, OAuth with the store's hook;
-- the row's proxy and TLS files carry the OAuth requests too.
-- @return connection | nil, message, err (a client key reference that does not resolve)
local function connection_for(store, row, signin, options)
  local spec = {
    url = row.url, identifier = row.identifier, health = store:health_recorder(row.uid),
    budget = (options.budget or 20) + options.wait,
    oauth = { grant = "authorization_code", offline_access = true, grants = grants.hook(store),
      redirect_uri = signin.redirect_uri, authorize = signin.authorize, client_id = options.client_id,
      client_secret = options.client_secret, scope = options.scope },
    resolver = options.resolver, host_gate = options.host_gate, refuse_private = options.refuse_private,
  }
  local applied, message, err = server_options.apply(row, spec, options.resolver)
  if not applied then return nil, message, err end
  return mcp.connect(spec)
end

--- Log in to the server `row` describes.
-- @param options { announce = function(url, port) (required), wait = seconds (default 300), port (the
--   listener's, default: the kernel picks), client_id (a pre-registered client), client_secret (a
--   reference to its secret: env:NAME or a resolver key), scope (space-separated, added to what the
--   server asks for), budget, resolver, host_gate, refuse_private }
-- @return status (see grants.status) | nil, message, err (kind "configuration" for a server with a
--   static credential, one that asked for no authorization, or a port that cannot be opened;
--   "authorization_required" when no redirect came, "authorization_failed", "credential", a
--   transport kind, "store")
function login.run(store, row, options)
  options = setmetatable({ wait = (options or {}).wait or login.DEFAULT_WAIT }, { __index = options or {} })
  if type(options.announce) ~= "function" then error("login.run: options.announce must be a function", 2) end
  if options.client_secret ~= nil and options.client_id == nil then
    error("login.run: options.client_secret goes with options.client_id", 2)
  end
  if type(row.auth_credential) == "string" and row.auth_credential ~= "" then
    return errors.fail("configuration", { server = row.identifier,
      detail = "it has a static credential; OAuth login is for servers without one" })
  end
  local removed, message, err = grants.forget(store, row.identifier)
  if not removed then return nil, message, err end
  local signin, _, refused = mcp.oauth.loopback_authorize { port = options.port, wait = options.wait,
    announce = function(url, info) options.announce(url, info.port) end }
  if not signin then
    return errors.fail("configuration", { server = row.identifier, detail = refused.detail })
  end
  local conn
  conn, message, err = connection_for(store, row, signin, options)
  if not conn then
    signin:close()
    return nil, message, err
  end
  local report
  report, message, err = conn:ping()
  conn:close()
  signin:close()
  if not report then return nil, message, err end
  local status
  status, message, err = grants.status(store, row)
  if err then return nil, message, err end
  if not status then
    return errors.fail("configuration", { server = row.identifier,
      detail = "it answered without asking for authorization; there is nothing to log in to" })
  end
  return status
end

return login
