--- Requests to the authorization server's endpoints: dynamic client
--- registration (RFC 7591), and the token endpoint for every grant this client
--- uses (authorization code with PKCE, refresh, client credentials, token
--- exchange for an identity assertion, JWT bearer), with the client
--- authentication the server supports.
--
-- Tokens and secrets never enter a failure: a refusal reports the OAuth error
-- code (clipped far-side text) and the HTTP status only.
local core = require "mcpclient.core"
local dpop = require "mcpclient.oauth.dpop"
local errors = require "mcpclient.errors"
local fetch = require "mcpclient.oauth.fetch"
local jwt = require "mcpclient.oauth.jwt"

local crypto = core.crypto
local json = core.json
local fail = errors.fail

local grants = {}

grants.ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
grants.TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
grants.JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
grants.ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
grants.ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"

local function list_has(list, value)
  if type(list) ~= "table" then return false end
  for _, v in ipairs(list) do
    if v == value then return true end
  end
  return false
end
grants.list_has = list_has

--- A PKCE pair (RFC 7636, S256): verifier, challenge.
function grants.pkce()
  local verifier = crypto.base64url(crypto.random_bytes(32))
  return verifier, crypto.base64url(crypto.sha256(verifier))
end

--- An unguessable state value.
function grants.state()
  return crypto.base64url(crypto.random_bytes(16))
end

grants.REDACTED = "[redacted]"

-- The form fields whose values are secrets the client sends.
local SECRET_FIELDS = {
  code = true, code_verifier = true, refresh_token = true, client_secret = true, client_assertion = true,
  assertion = true, subject_token = true,
}

-- Every secret a token request carries, in each spelling a server could echo:
-- as sent in the form (percent-escaped) and as itself.
local function sent_secrets(form, client)
  local list = {}
  local function add(value)
    if type(value) ~= "string" or value == "" then return end
    list[#list + 1] = value
    local escaped = fetch.escape(value)
    if escaped ~= value then list[#list + 1] = escaped end
    local plus = escaped:gsub("%%20", "+")
    if plus ~= escaped then list[#list + 1] = plus end
  end
  for _, pair in ipairs(form) do
    if SECRET_FIELDS[pair[1]] then add(pair[2]) end
  end
  if client then
    add(client.client_secret)
    if client.client_secret then
      add(crypto.base64(fetch.escape(client.client_id) .. ":" .. fetch.escape(client.client_secret)))
    end
  end
  -- the longest first, so a secret that contains another is replaced whole
  table.sort(list, function(a, b) return #a > #b end)
  return list
end

--- `text` with every occurrence of each of `secrets` replaced by
--- grants.REDACTED. Done before any clipping, so no part of a secret a
--- server echoed survives a cut.
function grants.redact(text, secrets)
  if type(text) ~= "string" then return text end
  for _, secret in ipairs(secrets or {}) do
    local parts, i = {}, 1
    while true do
      local s, e = text:find(secret, i, true)
      if not s then break end
      parts[#parts + 1] = text:sub(i, s - 1)
      parts[#parts + 1] = grants.REDACTED
      i = e + 1
    end
    if #parts > 0 then text = table.concat(parts) .. text:sub(i) end
  end
  return text
end

-- Far-side text as a message may carry it: secrets out, the text rule, and
-- secrets out once more (the text rule joins what control characters split).
local function shown(text, secrets, limit)
  return grants.redact(core.clip(grants.redact(text, secrets), limit), secrets)
end

-- The failure of a refused token or registration request: the HTTP status,
-- the OAuth error code and its description (far-side text: every secret the
-- request carried replaced first, then the text rule).
local function refused(ctx, what, response, secrets)
  local detail = string.format("the %s was refused with HTTP status %d", what, response.status)
  local body = core.json.decode(response.body or "")
  if type(body) == "table" and type(body.error) == "string" then
    local said = shown(body.error, secrets, 64)
    if type(body.error_description) == "string" and body.error_description ~= "" then
      said = said .. ": " .. shown(body.error_description, secrets, 200)
    end
    detail = detail .. " (" .. said .. ")"
  end
  return fail("authorization_failed", { server = ctx.identifier, detail = detail })
end

--[[
The OpenID registration's application_type for a redirect URI: "native" for
an app that receives the code on the user's own machine (a loopback http
redirect, or a private-use scheme such as com.example.app:/cb), "web" for an
https redirect to a host on the network. The 2026-07-28 revision requires the
field; earlier servers ignore it.
]]
function grants.application_type(redirect_uri)
  local scheme = (redirect_uri:match("^(%a[%w+.-]*):") or ""):lower()
  if scheme ~= "http" and scheme ~= "https" then return "native" end
  local authority = redirect_uri:match("^[^:]+://([^/?#]*)") or ""
  local host = (authority:match("^[^@]*@(.*)$") or authority)
  host = (host:match("^%[([^%]]*)%]") or host:match("^[^:]*")):lower()
  if host == "localhost" or host == "::1" or host:match("^127%.%d+%.%d+%.%d+$") then return "native" end
  return "web"
end

--[[
Register this client dynamically. `client` = { name, redirect_uri, grant_types,
auth_method }. Returns { client_id, client_secret, auth_method } or the
failure triple.
]]
function grants.register(ctx, op, metadata, client)
  local request = {
    client_name = client.name, redirect_uris = json.array { client.redirect_uri },
    grant_types = json.array(client.grant_types), response_types = json.array { "code" },
    token_endpoint_auth_method = client.auth_method,
    application_type = grants.application_type(client.redirect_uri),
  }
  local response, message, err = fetch.send(ctx, op, {
    method = "POST", url = metadata.registration_endpoint,
    headers = { "Content-Type: application/json", "Accept: application/json" }, body = json.encode(request),
  })
  if not response then return nil, message, err end
  local document = fetch.json_object(response)
  if not document then return refused(ctx, "client registration", response) end
  if type(document.client_id) ~= "string" or document.client_id == "" then
    return fail("authorization_failed",
      { server = ctx.identifier, detail = "the client registration gave no client_id" })
  end
  return {
    client_id = document.client_id,
    client_secret = type(document.client_secret) == "string" and document.client_secret or nil,
    auth_method = type(document.token_endpoint_auth_method) == "string" and document.token_endpoint_auth_method
      or nil,
  }
end

--- How to authenticate at the token endpoint, given what the client holds
--- and what the server lists (RFC 8414 defaults to client_secret_basic).
function grants.auth_method(metadata, client)
  local stated = client.auth_method
  if stated == "none" or (stated and stated ~= "private_key_jwt" and client.client_secret) then return stated end
  local supported = metadata.token_endpoint_auth_methods_supported
  if client.private_key then return "private_key_jwt" end
  if not client.client_secret then return "none" end
  if type(supported) ~= "table" or list_has(supported, "client_secret_basic") then return "client_secret_basic" end
  if list_has(supported, "client_secret_post") then return "client_secret_post" end
  return "client_secret_basic"
end

-- Add client authentication to a token request: a Basic header line (a
-- secret header, wiped after the exchange) or form fields (in the secret
-- body, wiped the same way).
local function authenticate(ctx, form, client, discovered, wall)
  local method = client.method
  if method == "client_secret_basic" then
    local pair = fetch.escape(client.client_id) .. ":" .. fetch.escape(client.client_secret)
    return "Authorization: Basic " .. crypto.base64(pair)
  end
  form[#form + 1] = { "client_id", client.client_id }
  if method == "client_secret_post" then
    form[#form + 1] = { "client_secret", client.client_secret }
  elseif method == "private_key_jwt" then
    local claims = jwt.client_assertion_claims(client.client_id, discovered.issuer, wall)
    local assertion, why = jwt.sign(client.algorithm, client.private_key, claims)
    if not assertion then
      return fail("credential",
        { server = ctx.identifier, detail = "the client assertion could not be signed: " .. why })
    end
    form[#form + 1] = { "client_assertion_type", grants.ASSERTION_TYPE }
    form[#form + 1] = { "client_assertion", assertion }
  end
  return false
end

-- Read a token response: { access_token, refresh_token, expires_in, scope,
-- dpop }. `secrets`: what the request sent, never shown back; `proved`: the
-- request carried a DPoP proof, so the token must be DPoP-bound.
local function token_of(ctx, response, secrets, proved)
  local document = fetch.json_object(response)
  if not document then return refused(ctx, "token request", response, secrets) end
  local token = document.access_token
  if type(token) ~= "string" or token == "" or token:find("[%c ]") then
    return fail("authorization_failed",
      { server = ctx.identifier, detail = "the token response carries no usable access_token" })
  end
  local token_type = type(document.token_type) == "string" and document.token_type:lower() or nil
  if proved and token_type ~= "dpop" then
    -- A Bearer token would be usable by whoever holds it: the host asked for one bound to its key.
    return fail("authorization_failed", { server = ctx.identifier, detail = "the token is not bound to the DPoP key" })
  elseif not proved and token_type and token_type ~= "bearer" and token_type ~= "n_a" then
    return fail("authorization_failed", { server = ctx.identifier, detail = "the token is not a Bearer token" })
  end
  local expires_in = math.type(document.expires_in) and document.expires_in or nil
  return {
    access_token = token,
    refresh_token = type(document.refresh_token) == "string" and document.refresh_token or nil,
    expires_in = expires_in,
    scope = type(document.scope) == "string" and document.scope or nil,
    issued_token_type = document.issued_token_type,
    dpop = proved or nil,
  }
end

-- Does this refusal ask for a DPoP nonce (RFC 9449 section 8)?
local function wants_nonce(response)
  if response.status ~= 400 then return false end
  local body = core.json.decode(response.body or "")
  return type(body) == "table" and body.error == "use_dpop_nonce"
end

--[[
One token request. `form` is the grant's own fields (a list of { name, value });
`client` = { client_id, client_secret, private_key, algorithm, method } or nil
for a request without client authentication; `proof_key` the connection's
DPoP key (oauth/dpop.lua) or nil. Returns the token table, or the failure
triple. A refusal asking for a DPoP nonce is sent again, signed with the new
nonce, at most dpop.MAX_NONCE_RETRIES times: the server did not act on it.
]]
function grants.token(ctx, op, endpoint, form, client, discovered, proof_key)
  local retries = 0
  while true do
    -- Each attempt is built afresh: a new client assertion and proof (each has its own jti).
    local fields, secret_header = table.move(form, 1, #form, 1, {}), nil
    if client then
      local header, failure_message, failure = authenticate(ctx, fields, client, discovered, os.time())
      if header == nil then return nil, failure_message, failure end
      secret_header = header or nil
    end
    local headers = { "Content-Type: application/x-www-form-urlencoded", "Accept: application/json" }
    if proof_key then
      local line, why = proof_key:proof("POST", endpoint, nil, os.time())
      if not line then
        return fail("credential", { server = ctx.identifier, detail = "the DPoP proof could not be signed: " .. why })
      end
      headers[#headers + 1] = line
    end
    -- Every token request carries a secret in its form (a code and its
    -- verifier, a refresh token, a subject token or assertion, maybe the client
    -- secret), so the form always goes as the leg's wiped secret body.
    local response, message, err = fetch.send(ctx, op, {
      method = "POST", url = endpoint, secret_header = secret_header, headers = headers,
      secret_body = fetch.form(fields),
    })
    if not response then return nil, message, err end
    if not (proof_key and wants_nonce(response) and retries < dpop.MAX_NONCE_RETRIES
        and proof_key:take_nonce(endpoint, response.headers["dpop-nonce"])) then
      return token_of(ctx, response, sent_secrets(fields, client), proof_key ~= nil)
    end
    retries = retries + 1
  end
end

--- Resolve a secret reference (env:NAME or the host's resolver) for the
--- authorization layer; a PEM key may span lines, a client secret may not.
function grants.secret(ctx, reference, what, multiline)
  local secret, reason
  local name = reference:match("^env:(.+)$")
  if name then
    secret = os.getenv(name)
    if secret == nil or secret == "" then reason = "the environment variable " .. name .. " is not set" end
  elseif ctx.resolver then
    local ok, value = pcall(ctx.resolver, reference)
    if ok and type(value) == "string" and value ~= "" then secret = value
    else reason = "the credential resolver has no such secret" end
  else
    reason = "no resolver was given for a reference that is not env:NAME"
  end
  if secret and secret:find(multiline and "%z" or "[\r\n%z]") then
    secret, reason = nil, "the secret contains a line break or NUL"
  end
  if not secret then
    return fail("credential", { server = ctx.identifier, detail = what .. ": " .. reason })
  end
  return secret
end

return grants
