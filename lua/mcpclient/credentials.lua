--- Credentials are references, resolved per leg.
--
-- A connection holds `env:NAME` or a key for a host-supplied resolver, never
-- the secret. Each leg resolves it afresh and hands libcurl one header line,
-- which the C side wipes after the exchange. A reference that does not
-- resolve fails closed: nothing is sent anonymously instead.
local suggest = require "mcpclient.suggest"

local credentials = {}

credentials.placements = { bearer = true, header = true }

--- Check an `auth` option at connect time (misuse raises).
function credentials.validate(auth)
  if auth == nil then return nil end
  if type(auth) ~= "table" then error("auth must be a table", 3) end
  for key in pairs(auth) do
    if key ~= "placement" and key ~= "credential" and key ~= "header_name" then
      error(suggest.unknown_option("auth", key, { placement = true, credential = true, header_name = true }), 3)
    end
  end
  local placement = auth.placement or "bearer"
  if not credentials.placements[placement] then
    error(string.format('auth.placement must be "bearer" or "header", not %q', tostring(placement)), 3)
  end
  if type(auth.credential) ~= "string" or auth.credential == "" then
    error("auth.credential must be a non-empty reference such as \"env:NAME\"", 3)
  end
  if placement == "header" then
    local name = auth.header_name
    if type(name) ~= "string" or not name:match("^[!#$%%&'*+.^_`|~%w-]+$") then
      error("auth.header_name must be an HTTP header name when placement is \"header\"", 3)
    end
  end
  return { placement = placement, credential = auth.credential, header_name = auth.header_name }
end

--- Is `text` a reference to an environment variable: "env:" and a variable
--- name (letters, digits and _, not starting with a digit)?
function credentials.env_reference(text)
  return type(text) == "string" and text:match("^env:[A-Za-z_][A-Za-z0-9_]*$") ~= nil
end

--- Resolve a reference to its secret.
-- @param resolver optional host function(reference) -> secret | nil
-- @return secret | nil, reason (the reason never contains the secret)
function credentials.resolve(reference, resolver)
  local name = reference:match("^env:(.*)$")
  local secret
  if name then
    -- Only a real variable name is ever repeated in a message: the reference
    -- is operator input and may hold line breaks or escape sequences.
    if not name:match("^[A-Za-z_][A-Za-z0-9_]*$") then
      return nil, "the env: reference does not name an environment variable (letters, digits and _)"
    end
    secret = os.getenv(name)
    if secret == nil or secret == "" then
      return nil, string.format("the environment variable %s is not set", name)
    end
  elseif resolver then
    local ok, value = pcall(resolver, reference)
    if not ok then return nil, "the credential resolver failed" end
    if type(value) ~= "string" or value == "" then return nil, "the credential resolver has no such secret" end
    secret = value
  else
    return nil, "no resolver was given for a reference that is not env:NAME"
  end
  if secret:find("[\r\n%z]") then return nil, "the secret contains a line break or NUL" end
  return secret
end

--- The one header line carrying the secret for this leg.
function credentials.header_line(auth, secret)
  if auth.placement == "header" then
    return auth.header_name .. ": " .. secret
  end
  return "Authorization: Bearer " .. secret
end

return credentials
