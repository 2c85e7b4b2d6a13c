--- Which proxy, if any, dials a connection's target.
--
-- The decision is made here, in Lua, not by libcurl: libcurl is always told
-- the proxy explicitly (or none) and never reads the environment itself, so
-- the host gate knows before the first byte whether it judges resolved
-- addresses (direct) or the target's canonical host (through a proxy), and
-- the trace can say which proxy was chosen and why.
--
-- Without a `proxy` option the environment is read as curl reads it:
-- https_proxy / HTTPS_PROXY for an https target, http_proxy for an http one
-- (only the lower-case name: a CGI program gets the client's `Proxy:` request
-- header as HTTP_PROXY, so curl ignores that name), then all_proxy /
-- ALL_PROXY; no_proxy / NO_PROXY lists the hosts reached directly. An explicit
-- `proxy` option is the operator's own choice for this connection and the
-- environment is not read at all; `proxy = false` means direct, whatever
-- the environment says.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local errors = require "mcpclient.errors"

local proxy = {}

-- The schemes a proxy URL may have, with the port libcurl assumes when none is written.
local DEFAULT_PORT = { http = 1080, https = 443, socks5h = 1080 }

-- Schemes libcurl knows that are refused, and why.
local REFUSED_SCHEME = {
  socks5 = "socks5:// resolves the server's name on this machine, outside the host gate; "
    .. "use socks5h:// (the proxy resolves the name)",
  socks4 = "socks4:// resolves the server's name on this machine, outside the host gate, and has no "
    .. "remote resolution; use socks5h://",
  socks4a = "SOCKS4a is not supported; use socks5h://",
}

local function ascii_lower(text)
  return (text:gsub("[A-Z]", function(c) return string.char(c:byte() + 32) end))
end

--- Parse and check a proxy URL (an option or an environment value).
-- A value without a scheme is taken as http://, as curl takes it.
-- @return { scheme, host, port, url = "scheme://host:port" } | nil, reason (never repeating the value:
--   it may carry a password)
function proxy.parse(text)
  if type(text) ~= "string" or text == "" then return nil, "it is empty" end
  if text:find("[\0-\32\127-\255]") then return nil, "it contains a control character, a space or a non-ASCII byte" end
  local scheme, rest = text:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then scheme, rest = "http", text end
  scheme = ascii_lower(scheme)
  if REFUSED_SCHEME[scheme] then return nil, REFUSED_SCHEME[scheme] end
  if not DEFAULT_PORT[scheme] then
    return nil, string.format('its scheme "%s" is not http, https or socks5h', scheme:sub(1, 16))
  end
  local authority, path = rest:match("^([^/?#]*)(.*)$")
  if path ~= "" and path ~= "/" then
    return nil, "it has a path, query or fragment; a proxy URL is scheme://host:port"
  end
  if authority:find("@", 1, true) then
    return nil, "it carries user information; proxy credentials are not taken from a URL (use a proxy that "
      .. "authorizes this machine, or reach it through one that does)"
  end
  -- the host and port by the same canonical rules the host gate applies to a server URL
  local target, why = require("mcpclient.hostgate").parse_url("http://" .. authority .. "/")
  if not target then return nil, why end
  if target.refusal then return nil, target.refusal end
  local port = authority:match(":(%d+)$") and target.port or DEFAULT_PORT[scheme]
  local host = target.host:find(":", 1, true) and ("[" .. target.host .. "]") or target.host
  return { scheme = scheme, host = target.host, port = port, url = string.format("%s://%s:%d", scheme, host, port) }
end

--- Check the `proxy_auth` option: { username = NAME, credential = REF }, the
--- password given as a credential reference (`env:NAME`, or a key the
--- connection's resolver answers), never as text. Raises on misuse.
-- @return a copy { username, credential }
function proxy.validate_auth(auth, level)
  level = (level or 1) + 1
  if type(auth) ~= "table" then error("proxy_auth must be a table { username, credential }", level) end
  for key in pairs(auth) do
    if key ~= "username" and key ~= "credential" then
      error(string.format("proxy_auth takes username and credential, not %s", tostring(key)), level)
    end
  end
  local name = auth.username
  if type(name) ~= "string" or name == "" or #name > 256 or name:find("[%z\1-\31\127:]") then
    error("proxy_auth.username must be 1 to 256 bytes without a colon or a control character", level)
  end
  if type(auth.credential) ~= "string" or auth.credential == "" then
    error('proxy_auth.credential must be a non-empty reference such as "env:PROXY_PASSWORD"', level)
  end
  return { username = name, credential = auth.credential }
end

-- Prefix match of two address byte strings over `bits` bits.
local function same_network(a, b, bits)
  if #a ~= #b then return false end
  local whole = bits // 8
  if a:sub(1, whole) ~= b:sub(1, whole) then return false end
  local rest = bits % 8
  if rest == 0 then return true end
  local mask = (0xFF << (8 - rest)) & 0xFF
  return (a:byte(whole + 1) & mask) == (b:byte(whole + 1) & mask)
end

-- Does one NO_PROXY entry (lower case) name an address literal host (its bytes)?
local function entry_covers_address(entry, bytes)
  local address, bits = entry:match("^(.-)/(%d+)$")
  address = (address or entry):match("^%[(.*)%]$") or address or entry
  local network = core.address_bytes(address)
  if not network or #network ~= #bytes then return false end
  bits = tonumber(bits) or #bytes * 8
  if bits > #bytes * 8 then return false end
  return same_network(bytes, network, bits)
end

-- Does one NO_PROXY entry (lower case) name the host `name` or a domain it is in?
local function entry_covers_name(entry, name)
  entry = entry:gsub("^%.", ""):gsub("%.$", "")
  if entry == "" then return false end
  return name == entry or (#name > #entry and name:sub(-#entry - 1) == "." .. entry)
end

--- Does a NO_PROXY list send `target` (from hostgate.parse_url) direct? As
--- curl matches it: entries separated by commas or blanks; the list "*"
--- alone matches every host; a name matches itself and every name under it
--- (a leading dot changes nothing); an address literal matches an address
--- entry, with an optional /bits prefix length. Case does not matter.
function proxy.bypassed(list, target)
  if type(list) ~= "string" then return false end
  list = ascii_lower(list)
  if list:match("^%s*%*%s*$") then return true end
  local bytes = target.ip_literal and core.address_bytes(target.host)
  local name = not target.ip_literal and target.host:gsub("%.$", "")
  for entry in list:gmatch("[^,%s]+") do
    if bytes then
      if entry_covers_address(entry, bytes) then return true end
    elseif entry_covers_name(entry, name) then
      return true
    end
  end
  return false
end

-- The first non-empty variable of `names`: value, name.
local function first_set(getenv, names)
  for _, name in ipairs(names) do
    local value = getenv(name)
    if value and value ~= "" then return value, name end
  end
end

--- The proxy's password for one exchange (proxy_auth = { username,
--- credential }), resolved afresh each time and never kept: false when the
--- exchange goes direct or no proxy_auth is given | the password | nil,
--- message, err (kind credential, naming proxy_auth but never the value;
--- nothing is sent).
function proxy.password(auth, dial, resolver, identifier)
  if not (auth and dial.proxy) then return false end
  local password, reason = credentials.resolve(auth.credential, resolver)
  if not password then
    return errors.fail("credential", { server = identifier, detail = "proxy_auth: " .. reason })
  end
  return password
end

--- Decide how `target` is dialled.
-- @param option the connection's `proxy` option: nil (read the environment), false (direct) or a URL
-- @param target from hostgate.parse_url
-- @param getenv (default os.getenv)
-- @return plan { scheme, host, port, url, source = "the proxy option" | the variable's name }
--   | false, why direct (for the trace) | nil, reason (an unusable environment value, named, not shown)
function proxy.choose(option, target, getenv)
  if option == false then return false, "proxy = false" end
  if option ~= nil then
    local plan, why = proxy.parse(option)
    if not plan then return nil, "the proxy option is not usable: " .. why end
    plan.source = "the proxy option"
    return plan
  end
  getenv = getenv or os.getenv
  local names = target.scheme == "https" and { "https_proxy", "HTTPS_PROXY" } or { "http_proxy" }
  local value, name = first_set(getenv, names)
  if not value then value, name = first_set(getenv, { "all_proxy", "ALL_PROXY" }) end
  if not value then return false, "no proxy variable is set" end
  local list, list_name = first_set(getenv, { "no_proxy", "NO_PROXY" })
  if proxy.bypassed(list, target) then return false, list_name .. " names the host" end
  local plan, why = proxy.parse(value)
  if not plan then return nil, string.format("the %s environment variable is not a usable proxy URL: %s", name, why) end
  plan.source = name
  return plan
end

return proxy
