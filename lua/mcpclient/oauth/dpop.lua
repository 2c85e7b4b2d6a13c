--- DPoP (RFC 9449): sender-constrained tokens, the `dpop = true` option of
--- `oauth`.
--
-- The connection makes one P-256 key (held in C memory, never written out)
-- and signs a fresh proof for every request that carries or asks for a token:
-- a JWT of type dpop+jwt whose header holds the public key and whose claims
-- name a unique jti, the method (htm), the URL without query or fragment
-- (htu), the time (iat), with a token the hash of that token (ath), and the
-- nonce the server last supplied. A proof is a public value: it is bound to
-- one method, one URL, one token and a short time, so it travels in the
-- ordinary header list; the token itself stays the wiped secret header.
--
-- Nonces (sections 8 and 9): a server that wants one refuses with
-- `use_dpop_nonce` and supplies it in `DPoP-Nonce`; the request is signed
-- again with it. The nonce is remembered per origin (the authorization
-- server's and the resource's are different servers) and a refusal that
-- brings no new nonce is not retried, so a server that keeps asking cannot
-- keep the client in a loop.
local core = require "mcpclient.core"

local crypto = core.crypto
local json = core.json

local dpop = {}

dpop.ALGORITHM = "ES256"
dpop.MAX_NONCE_RETRIES = 2   -- per token request, and per operation at the resource: then the refusal stands
dpop.MAX_NONCE_BYTES = 512   -- a longer DPoP-Nonce is not taken

local Key = {}
Key.__index = Key

--- A new proof key for one connection, or nil, reason.
function dpop.new()
  local key, why = crypto.ec_key()
  if not key then return nil, why end
  local x, y = key:public()
  return setmetatable({
    key = key, nonces = {},
    jwk = { kty = "EC", crv = "P-256", x = crypto.base64url(x), y = crypto.base64url(y) },
  }, Key)
end

-- The URL a proof names: no query, no fragment (section 4.2).
local function htu(url)
  return (url:match("^[^?#]*"))
end

-- Scheme, host and port: nonces are per server.
local function origin(url)
  return (url:match("^(%a[%w+.-]*://[^/?#]*)") or url):lower()
end

local function segment(value)
  return crypto.base64url(json.encode(value))
end

--[[
The `DPoP: <proof>` header line for one request: `method` and `url` as sent,
`access_token` when the request presents one (its hash becomes ath), `now`
in wall-clock seconds. Returns the line, or nil, reason when it cannot be
signed.
]]
function Key:proof(method, url, access_token, now)
  local claims = {
    jti = crypto.base64url(crypto.random_bytes(16)), htm = method, htu = htu(url), iat = math.floor(now),
    nonce = self.nonces[origin(url)],
    ath = access_token and crypto.base64url(crypto.sha256(access_token)) or nil,
  }
  local input = segment { typ = "dpop+jwt", alg = dpop.ALGORITHM, jwk = self.jwk } .. "." .. segment(claims)
  local signature, why = self.key:sign(input)
  if not signature then return nil, why end
  return "DPoP: " .. input .. "." .. crypto.base64url(signature)
end

--[[
A refusal's `DPoP-Nonce` header: remember it for `url`'s server. Returns true
when the nonce is new (signing again with it may succeed), false when the
header is missing, unusable or the one already sent.
]]
function Key:take_nonce(url, value)
  -- RFC 9449's nonce syntax: visible ASCII without a double quote or a backslash
  if type(value) ~= "string" or value == "" or #value > dpop.MAX_NONCE_BYTES
      or value:find('[\0-\32"\\\127-\255]') then
    return false
  end
  local where = origin(url)
  if self.nonces[where] == value then return false end
  self.nonces[where] = value
  return true
end

--- Is `algorithms` (the metadata's dpop_signing_alg_values_supported) one this key can serve?
function dpop.offered(algorithms)
  if type(algorithms) ~= "table" then return false end
  for _, alg in ipairs(algorithms) do
    if alg == dpop.ALGORITHM then return true end
  end
  return false
end

function Key:close()
  self.key:close()
end

return dpop
