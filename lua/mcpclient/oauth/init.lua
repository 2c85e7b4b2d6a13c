--- OAuth 2.1 authorization for remote MCP servers (the MCP authorization
--- spec, 2025-11-25): the `oauth` option of connect.
--
-- The transport asks the provider for the secret header of every leg and,
-- when a request is refused with 401 (or 403 insufficient_scope), hands it the
-- response headers. The provider then discovers the authorization server,
-- identifies the client, obtains a token and answers "retry": the refused
-- request provably never ran, so sending it again is safe. Tokens live in
-- memory, travel only as wiped secret headers, and never enter a message.
local challenge = require "mcpclient.oauth.challenge"
local core = require "mcpclient.core"
local discovery = require "mcpclient.oauth.discovery"
local dpop = require "mcpclient.oauth.dpop"
local errors = require "mcpclient.errors"
local fetch = require "mcpclient.oauth.fetch"
local grants = require "mcpclient.oauth.grants"
local engine = require "mcpclient.engine"
local suggest = require "mcpclient.suggest"
local stored = require "mcpclient.oauth.stored"

local fail = errors.fail

local oauth = {}

oauth.MAX_AUTHORIZATIONS = 3      -- authorization requests per operation, at most
oauth.EXPIRY_MARGIN = 30          -- seconds before its expiry a token is no longer sent
oauth.DEFAULT_REDIRECT_URI = "http://127.0.0.1:8765/callback"

local option_types = {
  grant = "string", authorize = "function", client_id = "string", client_secret = "string",
  private_key = "string", signing_algorithm = "string", client_metadata_url = "string",
  redirect_uri = "string", client_name = "string", scope = "string", offline_access = "boolean",
  idp = "table", grants = "table", assertion = "string", dpop = "boolean",
}
local grants_known = { authorization_code = true, client_credentials = true, cross_app_access = true,
  jwt_bearer = true }
local idp_types = { token_endpoint = "string", id_token = "string", client_id = "string", client_secret = "string" }

local function check_table(options, types, prefix, level)
  for key, value in pairs(options) do
    local expected = types[key]
    if not expected then error(suggest.unknown_option(prefix, key, types), level) end
    if type(value) ~= expected then
      error(string.format("%s.%s must be a %s, not a %s", prefix, key, expected, type(value)), level)
    end
  end
end

-- Misuse of the option raises at connect time, never at the first request.
local function validate(options, level)
  if type(options) ~= "table" then error("oauth must be a table", level) end
  check_table(options, option_types, "oauth", level + 1)
  local grant = options.grant or "authorization_code"
  if not grants_known[grant] then
    error('oauth.grant must be "authorization_code", "client_credentials", "cross_app_access" or "jwt_bearer"',
      level)
  end
  if grant == "jwt_bearer" and not options.assertion then
    error("oauth.assertion (a reference to the workload's JWT) is required for the jwt_bearer grant", level)
  end
  if grant ~= "authorization_code" and not options.client_id then
    error("oauth.client_id is required for the " .. grant .. " grant", level)
  end
  if options.signing_algorithm and options.signing_algorithm ~= "ES256" and options.signing_algorithm ~= "RS256" then
    error('oauth.signing_algorithm must be "ES256" or "RS256"', level)
  end
  if grant == "cross_app_access" then
    if not options.idp then error("oauth.idp is required for the cross_app_access grant", level) end
    check_table(options.idp, idp_types, "oauth.idp", level + 1)
    if not (options.idp.token_endpoint and options.idp.id_token) then
      error("oauth.idp needs token_endpoint and id_token", level)
    end
  end
  if options.client_metadata_url and not options.client_metadata_url:match("^https://[^/]+/.") then
    error("oauth.client_metadata_url must be an https URL with a path", level)
  end
  return grant
end

local Provider = {}
Provider.__index = Provider

--- Make the provider for a connection. `ctx` is the transport: identifier,
--- leg, host_gate, refuse_private, connect_timeout, tls, resolver, clock.
function oauth.provider(options, ctx, level)
  level = (level or 1) + 1
  local grant = validate(options, level)
  local copy = {}   -- the host's table may change later; the connection keeps what it was given
  for k, v in pairs(options) do copy[k] = v end
  if options.idp then
    copy.idp = {}
    for k, v in pairs(options.idp) do copy.idp[k] = v end
  end
  return setmetatable({ options = copy, grant = grant, ctx = ctx, registrations = {} }, Provider)
end

local function now(self)
  return (self.ctx.clock or os.time)()
end

-- The token is usable until its expiry, which `hold` set a margin early.
local function fresh(self)
  local token = self.token
  return token and (not token.expires_at or now(self) < token.expires_at)
end

-- The per-operation bookkeeping: authorization count, challenges seen, and
-- the access token its last request carried (false: none).
local function op_state(op)
  op.oauth = op.oauth or { authorizations = 0, seen = {}, sent = false }
  return op.oauth
end

--[[
One authorization or refresh per grant at a time. While one operation is
getting a token, another that needs it (two calls of a gather) waits for it,
within its own budget and cancel hook, and then uses what the first got:
one browser step, one refresh request. Outside a task nothing else could
finish the first one (it is this very call, re-entered from a host
callback), so there is nothing to wait for. Inside a gather (or a coroutine
the host's loop resumes) the wait lets the others run.
Returns true | the failure triple (cancelled, deadline).
]]
function Provider:await(op)
  local stopped
  engine.wait_until(function()
    if not self.busy then return true end
    if op.cancel and op.cancel() then stopped = "cancelled"
    elseif op.deadline:remaining() <= 0 then stopped = "deadline" end
    return stopped ~= nil
  end)
  if stopped == "cancelled" then return fail("cancelled", { server = self.ctx.identifier, in_flight = false }) end
  if stopped == "deadline" then
    return fail("deadline", { server = self.ctx.identifier, budget = errors.seconds(op.deadline.total) })
  end
  return true
end

-- Run fn(), the one token exchange of this grant for now: others await it.
function Provider:exclusive(fn)
  self.busy = true
  local _ <close> = setmetatable({}, { __close = function() self.busy = false end })
  return fn()
end

-- The token, unless it has been refreshed or replaced since `sent` was sent.
local function replaced(self, sent)
  return self.token ~= nil and self.token.access_token ~= sent
end

--- The secret header line for a leg, or false to send none. An expired
--- token is refreshed first when a refresh token is held; a refresh that
--- could not be asked (budget, network) or a grant store that could not be
--- read is the leg's failure triple.
function Provider:header(op)
  local ok, message, err = stored.restore(self)   -- a grant kept by an earlier process (oauth.grants), once
  if not ok then return nil, message, err end
  local state = op_state(op)
  if self.token and not fresh(self) then
    local expired = self.token.access_token
    ok, message, err = self:await(op)
    if not ok then return nil, message, err end
    if not replaced(self, expired) or not fresh(self) then
      local refreshed = false
      if self.token and self.token.refresh_token then
        refreshed, message, err = self:exclusive(function() return self:refresh(op) end)
      end
      if refreshed == nil then return nil, message, err end
      if not refreshed then self:drop() end
    end
  end
  state.sent = self.token and self.token.access_token or false
  if not self.token then return false end
  if self.token.dpop then return "Authorization: DPoP " .. self.token.access_token end
  return "Authorization: Bearer " .. self.token.access_token
end

--- The `DPoP: &lt;proof&gt;` header line for a request to the resource that
--- presents the held token, or false when the token is not DPoP-bound;
--- the failure triple when the proof cannot be signed.
function Provider:proof(method, url)
  local token = self.token
  if not (token and token.dpop and self.dpop) then return false end
  local line, why = self.dpop:proof(method, url, token.access_token, os.time())
  if not line then
    return fail("credential", { server = self.ctx.identifier, detail = "the DPoP proof could not be signed: " .. why })
  end
  return line
end

-- The connection's DPoP key, made on first use; nil when DPoP is not asked for.
function Provider:proof_key()
  if not self.options.dpop then return nil end
  if not self.dpop then
    local key, why = dpop.new()
    if not key then return fail("credential", { server = self.ctx.identifier, detail = "no DPoP key: " .. why }) end
    self.dpop = key
  end
  return self.dpop
end

-- Forget the token and the client it was obtained with (a grant that no
-- longer matches its resource or issuer, or that its server refused).
function Provider:drop()
  self.token, self.client = nil, nil
end

--[[
A request was refused with `status` (401 or 403). Returns true when a new
token is held and the request may be sent again; false when this refusal is
not the provider's to answer (the caller reports the status); or the failure
triple. Bounded: never twice for the same challenge in one operation, and at
most MAX_AUTHORIZATIONS authorization requests per operation. A 401 to a
request that carried a token looks at the resource's metadata again first:
the token is refreshed only while the resource and its authorization server
are still the ones that issued it.
]]
function Provider:refused(op, status, headers)
  local parsed = challenge.parse(headers["www-authenticate"])
  local state = op_state(op)
  if self.options.dpop then
    -- A DPoP resource challenges with its own scheme; a nonce it asks for is
    -- taken and the request signed again (RFC 9449 section 9), a bounded
    -- number of times per operation and only for a nonce not yet sent.
    local proofed = challenge.parse(headers["www-authenticate"], "dpop")
    if proofed.bearer then parsed = proofed end
    if proofed.params.error == "use_dpop_nonce" then
      state.nonces = (state.nonces or 0) + 1
      return self.dpop ~= nil and state.nonces <= dpop.MAX_NONCE_RETRIES
        and self.dpop:take_nonce(self.ctx.url, headers["dpop-nonce"])
    end
  end
  local params = parsed.params
  if status == 403 and params.error ~= "insufficient_scope" then return false end
  -- A refusal of a request that presented a token is another challenge than
  -- the first one without: the token may belong to an authorization server
  -- the resource has left.
  local key = table.concat({ status, params.scope or "", params.resource_metadata or "",
    state.sent and "token" or "none" }, "\n")
  if state.seen[key] then return false end
  state.seen[key] = true
  local ok, message, err = self:await(op)
  if not ok then return nil, message, err end
  -- another operation got a new token while this request was out: use it
  if replaced(self, state.sent) then return true end
  return self:exclusive(function() return self:renew(op, status, params, state) end)
end

-- The refusal's answer, alone: a refresh, else a new authorization.
function Provider:renew(op, status, params, state)
  if status == 401 and self.token then
    local discovered, message, err = self:discover(op, params.resource_metadata, true)
    if not discovered then return nil, message, err end
    if not (self.token.issuer == discovered.issuer and self.token.resource == discovered.resource) then
      self:drop()   -- issued by another authorization server, or for another resource
    elseif self.token.refresh_token and not state.refreshed then
      state.refreshed = true
      local refreshed
      refreshed, message, err = self:refresh(op)
      if refreshed == nil then return nil, message, err end
      if refreshed then return true end
    end
  end
  if state.authorizations >= oauth.MAX_AUTHORIZATIONS then return false end
  state.authorizations = state.authorizations + 1
  local ok, message, err = self:obtain(op, params, status == 403)
  if not ok then return nil, message, err end
  return true
end

-- What the resource and its authorization server say: fetched once, and
-- again when `again` (a token was refused: the resource may have moved to
-- another authorization server).
function Provider:discover(op, hinted, again)
  local known = self.discovered
  if not again and known and known.hint == hinted and not known.restored then return known end
  local found, message, err = discovery.discover(self.ctx, op, self.ctx.url, hinted)
  if not found then return nil, message, err end
  found.hint = hinted
  self.discovered = found
  return found
end

local function add_all(list, seen, items)
  for _, scope in ipairs(items) do
    if type(scope) == "string" and not seen[scope] then
      seen[scope] = true
      list[#list + 1] = scope
    end
  end
end

--[[
The scopes to ask for: the challenge's scope; else the resource's
scopes_supported; else none. A step-up keeps what was asked before. The
host's own scope is added, and offline_access only when the host wants a
refresh token and the authorization server offers it.
]]
function Provider:scopes(params, discovered, step_up)
  local list, seen = {}, {}
  if step_up and self.requested then add_all(list, seen, self.requested) end
  if params.scope then add_all(list, seen, challenge.scopes(params.scope))
  elseif discovered.scopes_supported then add_all(list, seen, discovered.scopes_supported) end
  if self.options.scope then add_all(list, seen, challenge.scopes(self.options.scope)) end
  if self.options.offline_access and grants.list_has(discovered.metadata.scopes_supported, "offline_access") then
    add_all(list, seen, { "offline_access" })
  end
  self.requested = list
  if #list == 0 then return nil end
  return table.concat(list, " ")
end

-- Get a new token with the configured grant.
function Provider:obtain(op, params, step_up)
  local discovered, message, err = self:discover(op, params.resource_metadata)
  if not discovered then return nil, message, err end
  local scope = self:scopes(params, discovered, step_up)
  if self.options.dpop and not dpop.offered(discovered.metadata.dpop_signing_alg_values_supported) then
    return fail("authorization_failed", { server = self.ctx.identifier,
      detail = "the authorization server does not offer DPoP with " .. dpop.ALGORITHM })
  end
  local token
  if self.grant == "client_credentials" then
    token, message, err = self:client_credentials(op, discovered, scope)
  elseif self.grant == "cross_app_access" then
    token, message, err = self:cross_app_access(op, discovered, scope)
  elseif self.grant == "jwt_bearer" then
    token, message, err = self:jwt_bearer(op, discovered, scope)
  else
    token, message, err = self:authorization_code(op, discovered, scope)
  end
  if not token then return nil, message, err end
  return self:hold(token)
end

--[[
Keep a token, bound to what it was issued for (the resource and the
authorization server's issuer: it is used and refreshed only while both still
match), with its expiry on the connection's clock: EXPIRY_MARGIN early (at
most half its lifetime, so a short-lived token is still used). Saved through
the grants hook when there is one: a hook that cannot save is the failure
triple (the token is held in memory all the same).
]]
function Provider:hold(token)
  local lifetime = token.expires_in
  token.expires_at = lifetime and (now(self) + lifetime - math.min(oauth.EXPIRY_MARGIN, lifetime / 2)) or nil
  token.issuer, token.resource = self.discovered.issuer, self.discovered.resource
  self.token = token
  return stored.keep(self)
end

-- The connection's clock, for the grant hook's wall-clock conversion.
function Provider:clock_now() return now(self) end

--[[
The configured client's own credentials (secret or private key), resolved now.
With `discovered`, the client is about to be used at that authorization
server: a pre-registered client belongs to the server it was first used with
(or whose grant was restored), and a resource that has moved to another one
is refused rather than shown the client there.
]]
function Provider:configured_client(discovered)
  if discovered then
    if self.client_issuer and self.client_issuer ~= discovered.issuer then
      return fail("authorization_failed", { server = self.ctx.identifier,
        detail = "the resource now names another authorization server than the one the configured client_id "
          .. "belongs to; register the client there and configure it anew" })
    end
    self.client_issuer = discovered.issuer
  end
  local o = self.options
  local client = { client_id = o.client_id, algorithm = o.signing_algorithm or "ES256" }
  local message, err
  if o.client_secret then
    client.client_secret, message, err = grants.secret(self.ctx, o.client_secret, "oauth.client_secret")
    if not client.client_secret then return nil, message, err end
  end
  if o.private_key then
    client.private_key, message, err = grants.secret(self.ctx, o.private_key, "oauth.private_key", true)
    if not client.private_key then return nil, message, err end
  end
  return client
end

-- The registration method this client asks for, from what the server lists.
local function registration_method(metadata)
  local supported = metadata.token_endpoint_auth_methods_supported
  if type(supported) ~= "table" or grants.list_has(supported, "none") then return "none" end
  if grants.list_has(supported, "client_secret_basic") then return "client_secret_basic" end
  if grants.list_has(supported, "client_secret_post") then return "client_secret_post" end
  return "none"
end

--[[
Who this client is at the authorization server, in order: pre-registered
(client_id option), a registration made earlier with this issuer, a client ID
metadata document URL when the server accepts one, dynamic registration.
]]
function Provider:client_identity(op, discovered)
  local metadata = discovered.metadata
  local client, message, err
  if self.options.client_id then
    client, message, err = self:configured_client(discovered)
    if not client then return nil, message, err end
  elseif self.registrations[discovered.issuer] then
    client = self.registrations[discovered.issuer]
  elseif self.options.client_metadata_url and metadata.client_id_metadata_document_supported == true then
    client = { client_id = self.options.client_metadata_url, auth_method = "none" }
  elseif type(metadata.registration_endpoint) == "string" then
    client, message, err = grants.register(self.ctx, op, metadata, {
      name = self.options.client_name or "mcpclient", redirect_uri = self:redirect_uri(),
      grant_types = { "authorization_code", "refresh_token" }, auth_method = registration_method(metadata),
    })
    if not client then return nil, message, err end
    self.registrations[discovered.issuer] = client
  else
    return fail("authorization_failed", { server = self.ctx.identifier,
      detail = "the authorization server has no registration endpoint and no client_id is configured" })
  end
  client.method = grants.auth_method(metadata, client)
  return client
end

function Provider:redirect_uri()
  return self.options.redirect_uri or oauth.DEFAULT_REDIRECT_URI
end

--[[
The authorization response must answer the request made and come from the
issuer asked, before its code goes anywhere (against injected codes and
mix-up): the state sent must come back unchanged (a response without one is
refused), and `iss` (RFC 9207), when present, must be the issuer's exact
string (no case folding, no trailing slash added or removed); a server whose
metadata says it sends `iss` must send it.
]]
local function check_response(self, discovered, state, returned_state, iss)
  local why
  if returned_state == nil or returned_state == "" then
    why = "the authorization response carries no state"
  elseif returned_state ~= state then
    why = "the authorization response carries another state than the request"
  elseif iss ~= nil and iss ~= discovered.issuer then
    why = "the authorization response names another issuer"
  elseif iss == nil and discovered.metadata.authorization_response_iss_parameter_supported == true then
    why = "the authorization response names no issuer, which this authorization server promises"
  end
  if why then return fail("authorization_failed", { server = self.ctx.identifier, detail = why }) end
  return true
end

-- The host's authorize callback, guarded: it gets the URL and what it needs
-- to finish the step (info: redirect_uri, state, server, get = a GET through
-- the host gate and the operation's budget, cancelled() = the operation's
-- cancel hook fired, remaining() = seconds left of its budget), and returns
-- the code, the state and the iss it read from the redirect, or nil (and a
-- failure triple of the library's own, which is passed on as it is).
function Provider:ask_host(op, url, state, discovered)
  local info = {
    redirect_uri = self:redirect_uri(), state = state, server = self.ctx.identifier,
    get = function(target) return fetch.send(self.ctx, op, { method = "GET", url = target }) end,
    cancelled = function() return op.cancel ~= nil and op.cancel() and true or false end,
    remaining = function() return op.deadline:remaining() end,
  }
  local ok, code, returned_state, iss = pcall(self.options.authorize, url, info)
  if not ok then
    return fail("authorization_failed", { server = self.ctx.identifier, detail = "the authorize callback failed" })
  end
  if code == nil and type(iss) == "table" and errors.KINDS[iss.kind] then return errors.pass(iss) end
  if type(code) ~= "string" or code == "" then
    return fail("authorization_required", { server = self.ctx.identifier })
  end
  local checked, message, err = check_response(self, discovered, state, returned_state, iss)
  if not checked then return nil, message, err end
  return code
end

-- The authorization code grant with PKCE (S256) and the resource indicator.
function Provider:authorization_code(op, discovered, scope)
  local metadata = discovered.metadata
  if not self.options.authorize then return fail("authorization_required", { server = self.ctx.identifier }) end
  if not grants.list_has(metadata.code_challenge_methods_supported, "S256") then
    return fail("authorization_failed", { server = self.ctx.identifier,
      detail = "the authorization server does not offer PKCE with S256" })
  end
  local target, message, err = fetch.target(self.ctx, metadata.authorization_endpoint)
  if not target then return nil, message, err end
  local client
  client, message, err = self:client_identity(op, discovered)
  if not client then return nil, message, err end
  local verifier, code_challenge = grants.pkce()
  local state = grants.state()
  local endpoint = metadata.authorization_endpoint
  local url = endpoint .. (endpoint:find("?", 1, true) and "&" or "?") .. fetch.form {
    { "response_type", "code" }, { "client_id", client.client_id }, { "redirect_uri", self:redirect_uri() },
    { "state", state }, { "code_challenge", code_challenge }, { "code_challenge_method", "S256" },
    { "scope", scope }, { "resource", discovered.resource },
  }
  local code
  code, message, err = self:ask_host(op, url, state, discovered)
  if not code then return nil, message, err end
  self.client = client
  return self:token_request(op, discovered, {
    { "grant_type", "authorization_code" }, { "code", code }, { "redirect_uri", self:redirect_uri() },
    { "code_verifier", verifier }, { "resource", discovered.resource },
  }, client)
end

-- A request to the authorization server's token endpoint, with a DPoP proof
-- when the host asked for sender-constrained tokens.
function Provider:token_request(op, discovered, form, client)
  local key, message, err = self:proof_key()
  if self.options.dpop and not key then return nil, message, err end
  return grants.token(self.ctx, op, discovered.metadata.token_endpoint, form, client, discovered, key)
end

--[[
The JWT bearer grant (RFC 7523 section 2.1), for workload identity: the
workload's own signed assertion, issued by its platform for this
authorization server, is the grant. A refusal (invalid_grant, invalid_scope,
unauthorized_client) is the operation's failure: the same assertion would be
refused again, and no other grant is tried in its place.
]]
function Provider:jwt_bearer(op, discovered, scope)
  local assertion, message, err = grants.secret(self.ctx, self.options.assertion, "oauth.assertion")
  if not assertion then return nil, message, err end
  local client
  client, message, err = self:configured_client()
  if not client then return nil, message, err end
  client.method = grants.auth_method(discovered.metadata, client)
  self.client = client
  return self:token_request(op, discovered, {
    { "grant_type", grants.JWT_BEARER }, { "assertion", assertion }, { "scope", scope },
    { "resource", discovered.resource },
  }, client)
end

-- The client credentials grant (machine to machine): a secret or a signed assertion.
function Provider:client_credentials(op, discovered, scope)
  local client, message, err = self:configured_client(discovered)
  if not client then return nil, message, err end
  client.method = grants.auth_method(discovered.metadata, client)
  self.client = client
  return self:token_request(op, discovered, {
    { "grant_type", "client_credentials" }, { "scope", scope }, { "resource", discovered.resource },
  }, client)
end

--[[
Cross-app access: the identity provider exchanges the user's ID token for an
identity assertion grant (ID-JAG) for this authorization server and resource
(RFC 8693), which the authorization server takes as a JWT bearer grant
(RFC 7523) from the authenticated client.
]]
function Provider:cross_app_access(op, discovered, scope)
  local idp = self.options.idp
  local id_token, message, err = grants.secret(self.ctx, idp.id_token, "oauth.idp.id_token")
  if not id_token then return nil, message, err end
  local idp_client = { client_id = idp.client_id or self.options.client_id, method = "none" }
  if idp.client_secret then
    idp_client.client_secret, message, err = grants.secret(self.ctx, idp.client_secret, "oauth.idp.client_secret")
    if not idp_client.client_secret then return nil, message, err end
    idp_client.method = "client_secret_post"
  end
  local exchanged
  exchanged, message, err = grants.token(self.ctx, op, idp.token_endpoint, {
    { "grant_type", grants.TOKEN_EXCHANGE }, { "requested_token_type", grants.ID_JAG },
    { "audience", discovered.issuer }, { "resource", discovered.resource }, { "scope", scope },
    { "subject_token", id_token }, { "subject_token_type", grants.ID_TOKEN },
  }, idp_client, discovered)
  if not exchanged then return nil, message, err end
  local client
  client, message, err = self:configured_client(discovered)
  if not client then return nil, message, err end
  client.method = grants.auth_method(discovered.metadata, client)
  self.client = client
  return self:token_request(op, discovered, {
    { "grant_type", grants.JWT_BEARER }, { "assertion", exchanged.access_token }, { "scope", scope },
  }, client)
end

-- Refresh the token: true when a new one is held; false when the server
-- refused (the refresh token is dropped, so the next refusal starts a new
-- authorization); the failure triple when the request could not be made.
function Provider:refresh(op)
  local adopted, message, err = stored.newer(self)   -- another process may have refreshed it already
  if adopted == nil then return nil, message, err end
  if adopted then return true end
  local discovered, client, token = self.discovered, self.client, self.token
  if not (discovered and client and token and token.refresh_token) then return false end
  if token.issuer ~= discovered.issuer or token.resource ~= discovered.resource then return false end
  local new
  new, message, err = self:token_request(op, discovered, {
    { "grant_type", "refresh_token" }, { "refresh_token", token.refresh_token }, { "resource", discovered.resource },
  }, client)
  if not new then
    if err.kind ~= "authorization_failed" then return nil, message, err end
    token.refresh_token = nil
    return false
  end
  new.refresh_token = new.refresh_token or token.refresh_token
  local kept
  kept, message, err = self:hold(new)
  if not kept then return nil, message, err end
  return true
end

--[[
An authorize callback for test authorization servers that answer the
authorization request at once with a redirect to the redirect URI (no user
step): it GETs the URL through the host gate, does NOT follow the redirect,
and reads the code and state from its Location. Opt in explicitly; a real
authorization server needs a person, and then a host's own callback.
]]
function oauth.follow_immediate_redirect(url, info)
  local response, message, err = info.get(url)
  if not response then return nil, message, err end
  if response.status < 300 or response.status >= 400 then return nil end
  local location = response.headers["location"]
  if type(location) ~= "string" then return nil end
  local params = fetch.query(location)
  if params.error or not params.code then return nil end
  return params.code, params.state, params.iss
end

oauth.LOOPBACK_WAIT = 300          -- seconds a person has to finish in the browser, by default
oauth.LOOPBACK_PATH = "/callback"
local LOOPBACK_SLICE = 0.1         -- the longest look away from the cancel hook while waiting

local loopback_types = { announce = "function", port = "number", wait = "number" }

local Loopback = {}
Loopback.__index = Loopback

-- The redirect, waited for in slices: the operation's cancel hook and budget
-- are looked at in between, and inside a gather the other tasks run.
local function await_redirect(listener, wait, info)
  local limit = core.monotonic_ns() + math.floor(wait * 1e9)
  while true do
    if info.cancelled and info.cancelled() then
      return fail("cancelled", { server = info.server, in_flight = false })
    end
    local left = (limit - core.monotonic_ns()) / 1e9
    if info.remaining then left = math.min(left, info.remaining()) end
    if left <= 0 then return nil end
    local slice = math.min(left, engine.inside() and 0.01 or LOOPBACK_SLICE)
    local target = listener:accept(slice, oauth.LOOPBACK_PATH)
    if target then return target end
    if engine.inside() then engine.sleep(0.01, info.cancelled) end
  end
end

--[[
A browser sign-in on this machine: a one-shot listener on 127.0.0.1 that the
authorization server's redirect comes back to, and the authorize callback that
shows the URL (through `announce`) and waits for that redirect. `mcpclient
login` is built on it.

  local signin <close> = assert(mcp.oauth.loopback_authorize {
    announce = function(url) print("Open this URL in a browser: " .. url) end })
  local conn = mcp.connect { url = "https://mcp.example.com/mcp",
    oauth = { authorize = signin.authorize, redirect_uri = signin.redirect_uri } }

options: announce = function(url, info) (required: show the URL to the person;
it is never opened through a shell; info = { port, redirect_uri, server, wait }),
port (default 0: the kernel picks one; a fixed port can be forwarded over SSH
with `ssh -L PORT:127.0.0.1:PORT host`), wait (seconds a person has, default
300, at most 3600; the operation's budget and cancel hook bound it too).
Returns { authorize, redirect_uri, port, close } (close is also __close and
__gc), or nil, message, err (kind "configuration": the port could not be
opened). The callback answers nil when no redirect came in time or the
redirect carries an error, and the failure triple when the operation was
cancelled.
]]
function oauth.loopback_authorize(options)
  if type(options) ~= "table" then error("loopback_authorize: options must be a table", 2) end
  check_table(options, loopback_types, "loopback_authorize", 3)
  if not options.announce then error("loopback_authorize: announce is required", 2) end
  local port = options.port or 0
  if math.type(port) ~= "integer" or port < 0 or port > 65535 then
    error("loopback_authorize: port must be an integer in [0, 65535]", 2)
  end
  local wait = options.wait or oauth.LOOPBACK_WAIT
  if not (wait > 0 and wait <= 3600) then error("loopback_authorize: wait must be in (0, 3600] seconds", 2) end
  local listener, why = core.loopback_listen(port)
  if not listener then return fail("configuration", { detail = why }) end
  local self = setmetatable({ listener = listener, port = listener:port() }, Loopback)
  self.redirect_uri = "http://127.0.0.1:" .. self.port .. oauth.LOOPBACK_PATH
  local announce = options.announce
  self.authorize = function(url, info)
    info = info or {}
    if not self.listener then error("loopback_authorize: the listener is closed", 2) end
    announce(url, { port = self.port, redirect_uri = self.redirect_uri, server = info.server, wait = wait })
    local target, message, err = await_redirect(self.listener, wait, info)
    if not target then return nil, message, err end
    local params = fetch.query(target)
    if params.error or not params.code or params.code == "" then return nil end
    return params.code, params.state, params.iss
  end
  return self
end

--- Close the listener (idempotent; also __close and __gc).
function Loopback:close()
  if self.listener then
    self.listener:close()
    self.listener = nil
  end
end
Loopback.__close = Loopback.close
Loopback.__gc = Loopback.close

return oauth
