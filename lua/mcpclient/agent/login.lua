--- `mcpclient login`: the authorization code flow with a person at a browser,
--- for a configured server, its grant kept in the store for every later
--- connection (mcpclient.agent.grants).
--
-- The redirect comes back to a one-shot listener on 127.0.0.1 (a port the
-- kernel picks, path /callback). The authorization URL is handed to
-- `announce` to show; it is never opened through a shell. Any earlier grant
-- of the server is forgotten first, so a login always asks afresh.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local fetch = require "mcpclient.oauth.fetch"
local grants = require "mcpclient.agent.grants"
local mcp = require "mcpclient"

local login = {}

login.DEFAULT_WAIT = 300   -- seconds a person has to finish in the browser
login.CALLBACK_PATH = "/callback"

-- The authorize callback: show the URL, wait for the browser's redirect,
-- return what it carried (code, state, iss) or nil.
local function authorize_with(listener, announce, wait)
  return function(url)
    announce(url, listener:port())
    local target = listener:accept(wait, login.CALLBACK_PATH)
    if not target then return nil end
    local params = fetch.query(target)
    if params.error or not params.code or params.code == "" then return nil end
    return params.code, params.state, params.iss
  end
end

-- The connection that logs in: the row's server, OAuth with the store's hook.
local function connection_for(store, row, listener, options)
  return mcp.connect {
    url = row.url, identifier = row.identifier, health = store:health_recorder(row.uid),
    budget = (options.budget or 20) + options.wait,
    oauth = { grant = "authorization_code", offline_access = true, grants = grants.hook(store),
      redirect_uri = "http://127.0.0.1:" .. listener:port() .. login.CALLBACK_PATH,
      authorize = authorize_with(listener, options.announce, options.wait) },
    resolver = options.resolver, host_gate = options.host_gate, refuse_private = options.refuse_private,
  }
end

--- Log in to the server `row` describes.
-- @param options { announce = function(url, port) (required), wait = seconds (default 300), budget,
--   resolver, host_gate, refuse_private, listen = core.loopback_listen (specs) }
-- @return status (see grants.status) | nil, message, err (kind "configuration" for a server with a
--   static credential or one that asked for no authorization, "authorization_required" when no
--   redirect came, "authorization_failed", a transport kind, "store")
function login.run(store, row, options)
  options = setmetatable({ wait = (options or {}).wait or login.DEFAULT_WAIT }, { __index = options or {} })
  if type(options.announce) ~= "function" then error("login.run: options.announce must be a function", 2) end
  if type(row.auth_credential) == "string" and row.auth_credential ~= "" then
    return errors.fail("configuration", { server = row.identifier,
      detail = "it has a static credential; OAuth login is for servers without one" })
  end
  local removed, message, err = grants.forget(store, row.identifier)
  if not removed then return nil, message, err end
  local listener, why = (options.listen or core.loopback_listen)()
  if not listener then return errors.fail("configuration", { server = row.identifier, detail = why }) end
  local conn = connection_for(store, row, listener, options)
  local report
  report, message, err = conn:ping()
  conn:close()
  listener:close()
  if not report then return nil, message, err end
  local status = grants.status(store, row.identifier)
  if not status then
    return errors.fail("configuration", { server = row.identifier,
      detail = "it answered without asking for authorization; there is nothing to log in to" })
  end
  return status
end

return login
