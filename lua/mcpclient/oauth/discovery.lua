--- Where to get a token for an MCP server: protected resource metadata
--- (RFC 9728), then the authorization server's metadata (RFC 8414 / OpenID
--- Connect Discovery), in the order the MCP authorization spec gives.
--
-- A server without protected resource metadata is an older (2025-03-26)
-- server: its own origin is the authorization server, whose metadata lives at
-- the root well-known URL, and without that the default endpoints /authorize,
-- /token and /register at the origin are used.
local errors = require "mcpclient.errors"
local fetch = require "mcpclient.oauth.fetch"

local fail = errors.fail

local discovery = {}

local function origin_of(url)
  return url:match("^(%a[%w+.-]*://[^/?#]+)")
end

local function path_of(url)
  local path = url:match("^%a[%w+.-]*://[^/?#]+([^?#]*)") or ""
  return (path:gsub("/+$", ""))
end

-- GET a metadata document; a JSON object, or false when it is not there
-- (any non-2xx or a body that is not an object), or the failure triple when
-- the request itself failed (gate, budget, network) or the answer broke the
-- read cap.
local function get_document(ctx, op, url)
  local response, message, err = fetch.send(ctx, op,
    { method = "GET", url = url, headers = { "Accept: application/json" } })
  if not response then return nil, message, err end
  if response.truncated then
    return fail("authorization_failed", { server = ctx.identifier,
      detail = "a metadata document exceeded the read cap of " .. fetch.MAX_BYTES .. " bytes" })
  end
  local document = fetch.json_object(response)
  return document or false
end

--- The candidate URLs for the protected resource metadata of `server_url`.
function discovery.resource_metadata_urls(server_url, hinted)
  local list = {}
  if hinted then list[1] = hinted end
  local origin, path = origin_of(server_url), path_of(server_url)
  if path ~= "" then list[#list + 1] = origin .. "/.well-known/oauth-protected-resource" .. path end
  list[#list + 1] = origin .. "/.well-known/oauth-protected-resource"
  return list
end

--- The candidate URLs for an authorization server's metadata, in order:
--- with a path, RFC 8414 path insertion, OpenID path insertion, OpenID path
--- appending; without one, RFC 8414 then OpenID at the root.
function discovery.authorization_metadata_urls(issuer)
  local origin, path = origin_of(issuer), path_of(issuer)
  if path == "" then
    return { origin .. "/.well-known/oauth-authorization-server", origin .. "/.well-known/openid-configuration" }
  end
  return {
    origin .. "/.well-known/oauth-authorization-server" .. path,
    origin .. "/.well-known/openid-configuration" .. path,
    origin .. path .. "/.well-known/openid-configuration",
  }
end

-- Does the metadata's resource cover the server URL? The same origin, and a
-- path that is the server's or one of its parents (compared segment-wise).
local function covers(resource, server_url)
  if type(resource) ~= "string" or resource:find("#", 1, true) then return false end
  if (origin_of(resource) or ""):lower() ~= (origin_of(server_url) or ""):lower() then return false end
  local rpath, spath = path_of(resource), path_of(server_url)
  return rpath == "" or spath == rpath or spath:sub(1, #rpath + 1) == rpath .. "/"
end

--[[
Protected resource metadata: the first document found, checked against the
server URL. Returns the document (or false when there is none anywhere), or
the failure triple; metadata for another resource is a failure, so no
authorization request is ever made for it.
]]
function discovery.resource_metadata(ctx, op, server_url, hinted)
  for _, url in ipairs(discovery.resource_metadata_urls(server_url, hinted)) do
    local document, message, err = get_document(ctx, op, url)
    if document == nil then return nil, message, err end
    if document then
      if not covers(document.resource, server_url) then
        return fail("authorization_failed", { server = ctx.identifier,
          detail = "the protected resource metadata describes another resource than this server" })
      end
      local servers = document.authorization_servers
      if type(servers) ~= "table" or type(servers[1]) ~= "string" then
        return fail("authorization_failed", { server = ctx.identifier,
          detail = "the protected resource metadata names no authorization server" })
      end
      return document
    end
  end
  return false
end

--[[
The authorization server's metadata for `issuer`. Its own `issuer` must be
present and be exactly the one the URL was built from (RFC 8414 section 3.3,
against mix-up attacks: a plain string comparison, no case folding, no
trailing slash forgiven); a document that breaks this is never used, so no
secret is ever sent to the endpoints it names. With `derived` (an older,
2025-03-26 server without resource metadata) no issuer was named at all: the
metadata is looked up at the server's own origin, and its issuer must be on
exactly that origin (a path below it is that revision's shape), so the
document can never name another server as its issuer. Returns the document,
or false
when none is published, or the failure triple.
]]
function discovery.authorization_metadata(ctx, op, issuer, derived)
  for _, url in ipairs(discovery.authorization_metadata_urls(issuer)) do
    local document, message, err = get_document(ctx, op, url)
    if document == nil then return nil, message, err end
    if document then
      if type(document.issuer) ~= "string" then
        return fail("authorization_failed", { server = ctx.identifier,
          detail = "the authorization server metadata names no issuer" })
      end
      if document.issuer ~= issuer and not (derived and origin_of(document.issuer) == issuer) then
        return fail("authorization_failed", { server = ctx.identifier,
          detail = "the authorization server metadata names another issuer than the one it was fetched for" })
      end
      if type(document.token_endpoint) ~= "string" then
        return fail("authorization_failed", { server = ctx.identifier,
          detail = "the authorization server metadata names no token endpoint" })
      end
      return document
    end
  end
  return false
end

--- The endpoints an older server without any metadata is assumed to have.
function discovery.fallback_metadata(server_url)
  local origin = origin_of(server_url)
  return {
    issuer = origin,
    authorization_endpoint = origin .. "/authorize",
    token_endpoint = origin .. "/token",
    registration_endpoint = origin .. "/register",
    code_challenge_methods_supported = { "S256" },
    assumed = true,
  }
end

--[[
Everything needed to ask for a token: { resource (the value of the resource
parameter), scopes_supported (of the resource), issuer, metadata (the
authorization server's) }, or the failure triple.
]]
function discovery.discover(ctx, op, server_url, hinted)
  local prm, message, err = discovery.resource_metadata(ctx, op, server_url, hinted)
  if prm == nil then return nil, message, err end
  local issuer = prm and prm.authorization_servers[1] or origin_of(server_url)
  local metadata
  metadata, message, err = discovery.authorization_metadata(ctx, op, issuer, prm == false)
  if metadata == nil then return nil, message, err end
  if not metadata then
    if prm then
      return fail("authorization_failed", { server = ctx.identifier,
        detail = "the authorization server publishes no metadata" })
    end
    metadata = discovery.fallback_metadata(server_url)
  end
  return {
    resource = prm and prm.resource or discovery.resource_of(server_url),
    scopes_supported = prm and type(prm.scopes_supported) == "table" and prm.scopes_supported or nil,
    issuer = metadata.issuer,
    metadata = metadata,
  }
end

--- The protected resource a server URL names when its metadata names none:
--- the URL without its query and fragment.
function discovery.resource_of(server_url)
  return (server_url:gsub("#.*$", ""):gsub("%?.*$", ""))
end

--- Does a grant issued for `resource` belong to `server_url`? Its resource
--- covers the URL (the same origin, and the URL's path or a parent of it).
function discovery.covers(resource, server_url)
  return covers(resource, server_url)
end

return discovery
