--- The host gate: which addresses a connection may dial.
--
-- It runs before any credential is attached. The URL's host is first made
-- canonical (percent-decoded, IDNA A-label, IPv4 numbers as a dotted quad)
-- and the URL handed to libcurl carries that form, so libcurl has nothing
-- left to convert: the name the gate resolves and judges is the name libcurl
-- reads, and the addresses that passed are the only ones it dials (pinned),
-- so DNS cannot change between the check and the connect. A host that cannot
-- be made canonical, or that libcurl would read differently, is refused.
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local proxy = require "mcpclient.proxy"

local hostgate = {}

local RESOLVE_SLICE_MS = 10   -- how often a pending lookup looks at the deadline and the cancel hook
local NAME_MAX = 253          -- the longest DNS name, in its A-label form

-- ASCII letters in lower case, whatever the host program's locale says
-- (string.lower follows it: in a Turkish locale "I" would not become "i").
local function ascii_lower(text)
  return (text:gsub("[A-Z]", function(c) return string.char(c:byte() + 32) end))
end

-- %XX escapes decoded; nil for a malformed one.
local function percent_decode(text)
  if not text:find("%", 1, true) then return text end
  if text:gsub("%%%x%x", ""):find("%", 1, true) then return nil end
  return (text:gsub("%%(%x%x)", function(hex) return string.char(tonumber(hex, 16)) end))
end

-- One part of a WHATWG IPv4 host: 0x-prefixed hex, 0-prefixed octal, decimal.
-- Digits beyond what 32 bits can hold give math.huge (out of range), never a
-- wrapped-around number.
local function ipv4_part(part)
  local digits, base, widest
  local hex = part:match("^0[xX](%x*)$")
  if hex then
    digits, base, widest = hex, 16, 8
  elseif part:match("^0[0-7]+$") then
    digits, base, widest = part, 8, 11
  elseif part:match("^%d+$") and not part:match("^0%d") then
    digits, base, widest = part, 10, 10
  else
    return nil
  end
  digits = digits:gsub("^0+", "")
  if digits == "" then return 0 end
  if #digits > widest then return math.huge end
  return tonumber(digits, base)
end

-- The WHATWG IPv4 parser ("127.1", "0x7f.1", "0177.0.0.1", "2130706433"):
-- dotted quad, or nil when the host is not a valid IPv4 number.
local function ipv4_dotted(host)
  local parts = {}
  for part in (host .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = part end
  if #parts > 1 and parts[#parts] == "" then parts[#parts] = nil end
  if #parts > 4 then return nil end
  local value = 0
  for i, part in ipairs(parts) do
    local n = ipv4_part(part)
    if not n then return nil end
    if i < #parts then
      if n > 255 then return nil end
      value = value + (n << (8 * (4 - i)))
    elseif n >= 1 << (8 * (5 - #parts)) then
      return nil
    else
      value = value + n
    end
  end
  return string.format("%d.%d.%d.%d", value >> 24, (value >> 16) & 255, (value >> 8) & 255, value & 255)
end

-- WHATWG: a host whose last label is a number is an IPv4 address or nothing.
local function ends_in_number(host)
  local last = host:gsub("%.$", ""):match("([^.]*)$")
  return last:match("^%d+$") ~= nil or last:match("^0[xX]%x*$") ~= nil
end

-- A DNS name in A-label form: labels of letters, digits, '-' and '_'.
local function plain_name(host)
  if #host > NAME_MAX then return false end
  for label in (host .. "."):gmatch("([^.]*)%.") do
    if #label < 1 or #label > 63 or label:find("[^a-z0-9_-]") then return false end
  end
  return true
end

-- The canonical form of an unbracketed host: name or dotted quad, with
-- ip_literal; or nil, why it cannot be dialled as it is written.
local function canonical_name(raw)
  local host = percent_decode(raw)
  if not host then return nil, "its host has a malformed percent escape" end
  if host:find("[\128-\255]") then
    local reason
    host, reason = core.idna(host)
    if not host then return nil, "its host is not a valid international name: " .. reason end
  end
  host = ascii_lower(host)
  if ends_in_number(host) then
    local dotted = ipv4_dotted(host)
    if not dotted then return nil, "its host ends in a number but is not an IPv4 address" end
    return dotted, true
  end
  host = host:gsub("%.$", "")
  if not plain_name(host) then return nil, "its host is not a plain DNS name" end
  return host, false
end

-- Scheme, authority and the rest of an absolute URL, or nil, reason.
local function split_url(url)
  -- explicit bytes, not %c: character classes follow the host program's locale
  if url:find("[\0-\31\127 ]") then return nil, "it contains a control character or a space" end
  -- the text rule's own verdict on the rest: C1 controls, bidi/invisible formatting, broken UTF-8
  if url:find("[\128-\255]") and core.clip(url, #url) ~= url then
    return nil, "it contains a C1 control, an invisible formatting character or bytes that are not UTF-8"
  end
  local scheme, authority, tail = url:match("^(%a[%w+.-]*)://([^/?#]*)(.*)$")
  if not scheme then return nil, "it is not an absolute URL" end
  scheme = ascii_lower(scheme)
  if scheme ~= "http" and scheme ~= "https" then
    return nil, string.format('its scheme "%s" is not http or https', scheme)
  end
  if authority:find("@", 1, true) then
    return nil, "it carries user information; give credentials with the auth option"
  end
  return scheme, authority, tail
end

--- Split an http(s) URL into scheme, canonical host (brackets removed), port.
-- A URL that is not usable at all (not http(s), user information, controls or
-- spaces, a bad port) gives nil, reason. A host that cannot be made canonical
-- gives a target with `refusal` set: the gate refuses it at the first
-- operation, like an address it does not allow.
-- @return { scheme, host, port, ip_literal, url (as handed to libcurl), refusal } or nil, reason
function hostgate.parse_url(url)
  local scheme, authority, tail = split_url(url)
  if not scheme then return nil, authority end
  local raw, port_text = authority:match("^%[([^%]]+)%](:?%d*)$")
  local bracketed = raw ~= nil
  if not bracketed then raw, port_text = authority:match("^([^:]+)(:?%d*)$") end
  if not raw or raw == "" then return nil, "it names no host" end
  local port = (port_text == "" or port_text == ":") and ((scheme == "https") and 443 or 80)
    or tonumber(port_text:sub(2))
  if port < 1 or port > 65535 then return nil, "its port is out of range" end
  local target = { scheme = scheme, host = ascii_lower(raw), port = port, url = url }
  if bracketed then
    local bytes = core.address_bytes(raw)
    if not bytes or #bytes ~= 16 then target.refusal = "its bracketed host is not a plain IPv6 address" end
    target.ip_literal = true
    return target
  end
  local host, literal = canonical_name(raw)
  if not host then
    target.refusal = literal
    return target
  end
  target.host, target.ip_literal = host, literal
  target.url = scheme .. "://" .. host .. (port_text ~= "" and port_text ~= ":" and (":" .. port) or "") .. tail
  return target
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

-- A list of networks, parsed on its first use: address parsing lives in the
-- network module (mcpclient.net), which a program that never dials never loads.
local function networks(list)
  return { cidrs = list }
end

local function parsed(set)
  if not set.parsed then
    local out = {}
    for _, cidr in ipairs(set.cidrs) do
      local address, bits = cidr:match("^(.+)/(%d+)$")
      out[#out + 1] = { assert(core.address_bytes(address)), tonumber(bits), cidr }
    end
    set.parsed = out
  end
  return set.parsed
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

-- The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:0.0.0.0/96).
local MAPPED_V4 = string.rep("\0", 10) .. "\255\255"

-- An IPv4-mapped IPv6 address is judged as the IPv4 address it carries.
local function unmap(bytes)
  if #bytes == 16 and bytes:sub(1, 12) == MAPPED_V4 then return bytes:sub(13) end
  return bytes
end

local function matches(bytes, set)
  for _, net in ipairs(parsed(set)) do
    if in_network(bytes, net[1], net[2]) then return true end
  end
  return false
end

-- Names that are never dialled through a proxy by default: the cloud metadata
-- services' own names (a proxy inside the cloud would resolve them).
local refused_names = {
  ["metadata.google.internal"] = true, ["metadata.goog"] = true, ["metadata"] = true,
  ["instance-data"] = true, ["instance-data.ec2.internal"] = true,
}

-- A name that means this machine, refused with refuse_private when a proxy
-- resolves it (it would reach the proxy's own loopback).
local function loopback_name(host)
  return host == "localhost" or host:sub(-10) == ".localhost"
end

--- The default predicate: (host, address, options) -> allowed. Through a
--- proxy a name is judged without an address (address nil, options.proxied
--- true): nothing is resolved on this machine for it.
function hostgate.default(host, address, options)
  if address == nil then
    if refused_names[host] then return false end
    return not (options.refuse_private and loopback_name(host))
  end
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

-- Does libcurl's own URL parser read the host the gate judged? If it ever
-- read another one, it would look that name up itself, unpinned.
local function libcurl_agrees(target)
  local seen = core.url_host(target.url)
  if not seen then return false end
  if target.ip_literal and target.host:find(":", 1, true) then
    local bytes = core.address_bytes(seen:match("^%[(.*)%]$") or "")
    return bytes ~= nil and bytes == core.address_bytes(target.host)
  end
  return ascii_lower(seen) == target.host
end

--- Resolve `host` on a helper thread, waiting in slices of 10 ms so the
--- operation's deadline and cancel hook bound it like any other wait. Each
--- slice is a wait on the engine for the lookup's descriptor, so the answer
--- is taken the moment it is in, and inside gather or a host's loop the
--- other work runs meanwhile. A lookup given up on is left to finish (and
--- free itself) on its thread.
-- @return { addresses } | nil, verdict ("resolve" | "timeout" | "cancelled"), reason — the
--   order hostgate.check returns its own refusals in
function hostgate.resolve(host, deadline, cancel)
  local budget = deadline:remaining()
  local started = core.monotonic_ns()
  local lookup <close>, why = core.lookup(host)
  if not lookup then return nil, "resolve", why end
  local fd = lookup:fd()
  while true do
    local done, addresses, reason = lookup:wait(fd and 0 or RESOLVE_SLICE_MS)
    if done then
      if addresses then return addresses end
      return nil, "resolve", reason
    end
    if cancel and cancel() then return nil, "cancelled", "the operation was cancelled" end
    if deadline:remaining() <= 0 or (core.monotonic_ns() - started) / 1e9 >= budget then
      return nil, "timeout", string.format("the host name did not resolve within the %s-second operation budget",
        errors.seconds(deadline.total))
    end
    if fd then engine.await(fd, "r", core.now() + RESOLVE_SLICE_MS / 1000) end
  end
end

--- Decide where `target` (from parse_url) may be dialled.
-- @param resolve function(host) -> { addresses } | nil, verdict ("resolve" | "timeout" | "cancelled"), reason
-- @param allow predicate(host, address, options) -> boolean, asked once per address
-- @return { addresses = the allowed ones in resolver order, url = the URL to hand libcurl,
--           pin = "host:port:address[,address...]" (nil for an IP literal, and for a name
--           when options.proxied: the proxy resolves it and nothing is pinned) }
--   | nil, "resolve" | "timeout" | "cancelled", reason
--   | nil, "refused" [, reason] (a host that cannot be dialled as judged, or no address allowed)
function hostgate.check(target, resolve, allow, options)
  if target.refusal then return nil, "refused", target.refusal end
  if not libcurl_agrees(target) then return nil, "refused", "libcurl reads the URL's host differently" end
  if target.ip_literal then
    if not allow(target.host, target.host, options) then return nil, "refused" end
    return { addresses = { target.host }, url = target.url }
  end
  if options and options.proxied then
    -- the proxy resolves the name: it is judged as written, and nothing is pinned
    if not allow(target.host, nil, options) then return nil, "refused", "the name is refused" end
    return { addresses = {}, url = target.url }
  end
  local resolved, verdict, reason = resolve(target.host)
  if not resolved or #resolved == 0 then
    return nil, verdict or "resolve", reason or "the host name did not resolve"
  end
  local allowed = {}
  for _, address in ipairs(resolved) do
    if allow(target.host, address, options) then allowed[#allowed + 1] = address end
  end
  if #allowed == 0 then return nil, "refused" end
  return { addresses = allowed, pin = pin_of(target, allowed), url = target.url }
end

--- The gate as one step of an operation: resolve (bounded by the operation's
--- budget and cancel hook), judge every address, pin the allowed ones.
-- Through a proxy (the `proxy` option, or the environment: mcpclient.proxy)
-- nothing is resolved here for the target: a name is judged as written, an
-- address literal by the address rules, and a refusal happens before
-- anything is sent to the proxy.
-- @param config { identifier, leg (its :resolve, if any, replaces the lookup), host_gate, refuse_private,
--   proxy (nil: the environment, false: direct, or a URL), getenv (default os.getenv) }
-- @param op { deadline, cancel }
-- @return the dial plan of hostgate.check, with `proxy` (the proxy URL handed to libcurl) and `via`
--   (the plan of mcpclient.proxy.choose) when a proxy dials | nil, message, err (refused_host,
--   transport, cancelled)
function hostgate.admit(target, op, config)
  local server = config.identifier
  local via, direct_why = proxy.choose(config.proxy, target, config.getenv)
  if via == nil then return errors.fail("transport", { server = server, detail = direct_why }) end
  local resolve = function(host)
    if config.leg.resolve then return config.leg:resolve(host) end
    return hostgate.resolve(host, op.deadline, op.cancel)
  end
  local dial, verdict, reason = hostgate.check(target, resolve, config.host_gate,
    { refuse_private = config.refuse_private, proxied = via and true or nil })
  if dial then
    dial.proxy = via and via.url or nil
    dial.via = via or nil
    return dial
  end
  if verdict == "cancelled" then return errors.fail("cancelled", { server = server, in_flight = false }) end
  if verdict == "resolve" or verdict == "timeout" then
    return errors.fail("transport", { server = server, detail = reason })
  end
  return errors.fail("refused_host", { server = server, host = target.host, detail = reason })
end

return hostgate
