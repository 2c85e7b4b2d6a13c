--- The host gate (DESIGN D9): which addresses a connection may dial.
--
-- It runs before any credential is attached. Host names are resolved here and
-- the addresses that passed are the only ones libcurl dials (pinned), so DNS
-- cannot change between the check and the connect.
local core = require "mcpclient.core"

local hostgate = {}

--- Split an http(s) URL into scheme, host (brackets removed), port.
-- @return { scheme, host, port, ip_literal } or nil, reason
function hostgate.parse_url(url)
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then return nil, "it is not an absolute URL" end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return nil, string.format('its scheme "%s" is not http or https', scheme)
  end
  local authority = rest:match("^([^/?#]*)")
  if authority:find("@", 1, true) then
    return nil, "it carries user information; give credentials with the auth option"
  end
  local host, port = authority:match("^%[([^%]]+)%]:?(%d*)$")
  if not host then
    host, port = authority:match("^([^:]+):?(%d*)$")
  end
  if not host or host == "" then return nil, "it names no host" end
  if port == "" then port = (scheme == "https") and 443 or 80 else port = tonumber(port) end
  if port < 1 or port > 65535 then return nil, "its port is out of range" end
  return {
    scheme = scheme, host = host:lower(), port = port,
    ip_literal = core.address_bytes(host) ~= nil,
  }
end

-- Prefix match of `bytes` against a network given as bytes + prefix length.
local function in_network(bytes, network, bits)
  if #bytes ~= #network then return false end
  local whole = bits // 8
  if bytes:sub(1, whole) ~= network:sub(1, whole) then return false end
  local rest = bits % 8
  if rest == 0 then return true end
  local mask = (0xFF << (8 - rest)) & 0xFF
  return (bytes:byte(whole + 1) & mask) == (network:byte(whole + 1) & mask)
end

local function networks(list)
  local parsed = {}
  for _, cidr in ipairs(list) do
    local address, bits = cidr:match("^(.+)/(%d+)$")
    parsed[#parsed + 1] = { assert(core.address_bytes(address)), tonumber(bits), cidr }
  end
  return parsed
end

-- Never dialled by default: nothing a remote tool server legitimately lives on.
local refused_always = networks {
  "0.0.0.0/8",            -- "this network", unspecified
  "169.254.0.0/16",       -- link-local, includes the cloud metadata address
  "100.100.100.200/32",   -- a cloud metadata service outside link-local
  "224.0.0.0/4",          -- multicast
  "255.255.255.255/32",   -- broadcast
  "::/128",               -- unspecified
  "fe80::/10",            -- link-local
  "ff00::/8",             -- multicast
  "fd00:ec2::254/128",    -- cloud metadata over IPv6
}

-- Refused when the connection says refuse_private = true.
local private = networks {
  "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
  "::1/128", "fc00::/7",
}

local mapped_v4 = core.address_bytes("::ffff:0.0.0.0")

-- An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
local function unmap(bytes)
  if #bytes == 16 and bytes:sub(1, 12) == mapped_v4:sub(1, 12) then return bytes:sub(13) end
  return bytes
end

local function matches(bytes, list)
  for _, net in ipairs(list) do
    if in_network(bytes, net[1], net[2]) then return true end
  end
  return false
end

--- The default predicate: (host, address, options) -> allowed.
function hostgate.default(_, address, options)
  local bytes = core.address_bytes(address)
  if not bytes then return false end
  bytes = unmap(bytes)
  if matches(bytes, refused_always) then return false end
  if options.refuse_private and matches(bytes, private) then return false end
  return true
end

-- One CURLOPT_RESOLVE entry: every address libcurl may dial for host:port, in
-- the resolver's order, IPv6 ones in brackets. libcurl tries them in turn (and
-- races IPv6 against IPv4), so a host whose first address does not answer is
-- still reached, but only ever at an address the gate allowed.
local function pin_of(target, addresses)
  local listed = {}
  for i, address in ipairs(addresses) do
    listed[i] = address:find(":", 1, true) and "[" .. address .. "]" or address
  end
  return string.format("%s:%d:%s", target.host, target.port, table.concat(listed, ","))
end

--- Decide where `target` (from parse_url) may be dialled.
-- @param resolve function(host) -> { addresses } | nil, reason
-- @param allow predicate(host, address, options) -> boolean, asked once per address
-- @return { addresses = the allowed ones in resolver order,
--           pin = "host:port:address[,address...]" (nil for an IP literal) }
--   | nil, "resolve", reason | nil, "refused" (no address allowed)
function hostgate.check(target, resolve, allow, options)
  if target.ip_literal then
    if not allow(target.host, target.host, options) then return nil, "refused" end
    return { addresses = { target.host } }
  end
  local resolved, reason = resolve(target.host)
  if not resolved or #resolved == 0 then
    return nil, "resolve", reason or "the host name did not resolve"
  end
  local allowed = {}
  for _, address in ipairs(resolved) do
    if allow(target.host, address, options) then allowed[#allowed + 1] = address end
  end
  if #allowed == 0 then return nil, "refused" end
  return { addresses = allowed, pin = pin_of(target, allowed) }
end

return hostgate
