--- One HTTP exchange with an authorization party (metadata, registration,
--- token, the test authorization redirect).
--
-- Every URL a server or its metadata names is untrusted: it passes the same
-- host gate as the MCP server (resolved and pinned here), must be https unless
-- it is on loopback, and is read with the response cap and out of the
-- operation's budget. Redirects are never followed: libcurl's leg has
-- redirects off, and a 3xx is handed back as it is.
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local proxy = require "mcpclient.proxy"

local fail = errors.fail

local fetch = {}

fetch.MAX_BYTES = 2 * 1024 * 1024

local function is_loopback(target)
  local host = target.host
  if host == "localhost" then return true end
  local bytes = core.address_bytes(host)
  if not bytes then return false end
  if #bytes == 4 then return bytes:byte(1) == 127 end
  return bytes == core.address_bytes("::1")
end

--- Check that `url` may be asked at all; returns the parsed target.
-- @param ctx { identifier, leg, host_gate, refuse_private, proxy, tls }
function fetch.target(ctx, url)
  if type(url) ~= "string" then
    return fail("authorization_failed", { server = ctx.identifier, detail = "an authorization URL is missing" })
  end
  local target, why = hostgate.parse_url(url)
  if not target then
    return fail("authorization_failed",
      { server = ctx.identifier, detail = "an authorization URL is not usable: " .. why })
  end
  if target.scheme ~= "https" and not is_loopback(target) then
    return fail("authorization_failed", { server = ctx.identifier,
      detail = "an authorization URL is not https and not on loopback" })
  end
  if url:find("#", 1, true) then
    return fail("authorization_failed", { server = ctx.identifier, detail = "an authorization URL carries a fragment" })
  end
  return target
end

-- A leg for one exchange: the transport's own pool when it lends legs (so
-- two operations of a gather each get one), else the one leg it has.
local function take_leg(ctx)
  if ctx.take_leg then return ctx:take_leg(), function(leg) ctx:give_leg(leg) end end
  return ctx.leg, function() end
end

--[[
Send one request. `request` = { method, url, headers = {lines}, body, secret_header,
secret_body }. A body that carries a secret (a code, verifier, refresh token,
client secret or assertion) goes as `secret_body`: the leg sends it from a copy
in C memory that it wipes once the exchange ends, as it does the secret header.
The exchange is the operation's like any other: it waits in the engine (inside
a gather the other tasks run meanwhile), the cancel hook is polled while it is
in flight, and what is left of the budget bounds it.
Returns the leg's response { status, headers, body } (any status), or the
failure triple: cancelled, deadline, refused_host, transport, tls, timeout,
authorization_failed. The request goes through the connection's proxy when
one dials (the gate decides per URL: NO_PROXY may name the authorization
server), with the connection's TLS files.
]]
function fetch.send(ctx, op, request)
  local target, message, err = fetch.target(ctx, request.url)
  if not target then return nil, message, err end
  if op.cancel and op.cancel() then return fail("cancelled", { server = ctx.identifier, in_flight = false }) end
  if not op.deadline:leg(ctx.connect_timeout) then
    return fail("deadline", { server = ctx.identifier, budget = errors.seconds(op.deadline.total) })
  end
  local dial
  dial, message, err = hostgate.admit(target, op, ctx)
  if not dial then return nil, message, err end
  local timeout_ms, connect_timeout_ms = op.deadline:leg(ctx.connect_timeout)  -- what the lookup left
  if not timeout_ms then
    return fail("deadline", { server = ctx.identifier, budget = errors.seconds(op.deadline.total) })
  end
  local proxy_password
  proxy_password, message, err = proxy.password(ctx.proxy_auth, dial, ctx.resolver, ctx.identifier)
  if proxy_password == nil then return nil, message, err end
  local leg, give_back = take_leg(ctx)
  local ok, response, kind, detail = pcall(engine.send, leg, {
    method = request.method, url = dial.url, headers = request.headers or {},
    secret_header = request.secret_header, body = request.body, secret_body = request.secret_body,
    timeout_ms = timeout_ms, connect_timeout_ms = connect_timeout_ms, max_bytes = fetch.MAX_BYTES,
    pin = dial.pin, proxy = dial.proxy,
    proxy_user = proxy_password and ctx.proxy_auth.username or nil, proxy_password = proxy_password or nil,
    ca_file = ctx.tls.ca_file, client_cert = ctx.tls.client_cert, client_key = ctx.tls.client_key,
    cancel = op.cancel, idempotent = request.method == "GET",
  })
  give_back(leg)
  if not ok then error(response, 0) end  -- the cancel hook raised: the leg is free again, the raise goes on
  if response then return response end
  if kind == "cancelled" then return fail("cancelled", { server = ctx.identifier, in_flight = false }) end
  if kind == "tls" then return fail("tls", { server = ctx.identifier, host = target.host, detail = detail }) end
  if kind == "timeout" then
    return fail("timeout", { server = ctx.identifier, budget = errors.seconds(op.deadline.total), detail = detail })
  end
  return fail("transport", { server = ctx.identifier, detail = detail })
end

--- A JSON object from a 2xx answer, or nil, why (a short reason without body bytes).
function fetch.json_object(response)
  if response.status < 200 or response.status >= 300 then return nil, "status " .. response.status end
  if response.truncated then return nil, "the answer exceeded " .. fetch.MAX_BYTES .. " bytes" end
  local value = core.json.decode(response.body)
  if type(value) ~= "table" or core.json.is_array(value) then return nil, "the answer is not a JSON object" end
  return value
end

--- application/x-www-form-urlencoded, in the given order of { name, value } pairs.
function fetch.form(pairs_list)
  local parts = {}
  for _, pair in ipairs(pairs_list) do
    if pair[2] ~= nil then
      parts[#parts + 1] = fetch.escape(pair[1]) .. "=" .. fetch.escape(pair[2])
    end
  end
  return table.concat(parts, "&")
end

function fetch.escape(text)
  return (tostring(text):gsub("[^%w%-._~]", function(c) return string.format("%%%02X", c:byte()) end))
end

function fetch.unescape(text)
  return (text:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

--- The query parameters of a URL as { name = value } (first occurrence wins).
function fetch.query(url)
  local query = url:match("^[^?#]*%?([^#]*)") or ""
  local params = {}
  for part in query:gmatch("[^&]+") do
    local name, value = part:match("^([^=]*)=?(.*)$")
    name = fetch.unescape(name)
    if params[name] == nil then params[name] = fetch.unescape(value) end
  end
  return params
end

return fetch
