--- Signed JWTs for client authentication (RFC 7523 section 2.2, private_key_jwt).
local core = require "mcpclient.core"

local crypto = core.crypto
local json = core.json

local jwt = {}

jwt.LIFETIME = 300   -- seconds an assertion is valid: long enough for one token request

local function segment(value)
  return crypto.base64url(json.encode(value))
end

--- A compact JWS over `claims` with the PEM key, or nil, reason.
-- @param alg "ES256" | "RS256"
function jwt.sign(alg, pem, claims, header_extra)
  local header = { alg = alg, typ = "JWT" }
  for k, v in pairs(header_extra or {}) do header[k] = v end
  local input = segment(header) .. "." .. segment(claims)
  local signature, why = crypto.jws_sign(alg, pem, input)
  if not signature then return nil, why end
  return input .. "." .. crypto.base64url(signature)
end

--- The claims of a client assertion: issued by and about the client, for
--- the authorization server, short-lived and unique.
function jwt.client_assertion_claims(client_id, audience, now)
  local issued = math.floor(now)
  return {
    iss = client_id, sub = client_id, aud = audience,
    iat = issued, exp = issued + jwt.LIFETIME,
    jti = crypto.base64url(crypto.random_bytes(16)),
  }
end

return jwt
