--- The failure value every network-facing operation returns: nil, message, err.
--
-- `err` is a table { kind = <fixed string>, server = <identifier>, ... } and
-- `message` is one sentence that names the server in double quotes. Remote text
-- (RPC messages, parser complaints, media types, libcurl's reasons) is
-- control-stripped and clipped before it enters a message; response bodies,
-- credentials and session ids never do.
local core = require "mcpclient.core"

local errors = {}

local function clip(text)
  return core.clip(tostring(text))
end

-- Each kind: a function (server, fields) -> message. `fields` carries the
-- kind's own data (status, code, detail, ...), which also lands in `err`.
local templates = {
  refused_host = function(id, f)
    return string.format('MCP server "%s" points at host "%s", which outbound requests are not allowed to reach.',
      id, f.host)
  end,
  transport = function(id, f)
    return string.format('MCP server "%s" could not be reached: %s', id, clip(f.detail))
  end,
  timeout = function(id, f)
    return string.format('MCP server "%s" did not answer within the time left of the %s-second operation budget: %s',
      id, f.budget, clip(f.detail))
  end,
  http_status = function(id, f)
    return string.format('MCP server "%s" answered with HTTP status %d.', id, f.status)
  end,
  malformed = function(id, f)
    return string.format('MCP server "%s" sent a response that is not a JSON-RPC result: %s', id, clip(f.detail))
  end,
  rpc_error = function(id, f)
    return string.format('MCP server "%s" refused the call with JSON-RPC error %d: %s', id, f.code, clip(f.detail))
  end,
  content_type = function(id, f)
    return string.format('MCP server "%s" answered with content type "%s"; this client reads a JSON response '
      .. 'or an event stream, and nothing else.', id, clip(f.media_type))
  end,
  credential = function(id, f)
    return string.format('MCP server "%s" declares a credential that could not be resolved%s.', id,
      f.detail and (": " .. f.detail) or "")
  end,
  deadline = function(id, f)
    return string.format('The %s-second operation budget for MCP server "%s" ran out before this request was sent, '
      .. 'so the server was not asked. This is the budget this installation sets, not a server that did not answer.',
      f.budget, id)
  end,
  cancelled = function(id, f)
    if f.in_flight then
      return string.format('The call to MCP server "%s" was cancelled in flight; the server may already have acted '
        .. 'on it.', id)
    end
    return string.format('The operation on MCP server "%s" was cancelled before it completed.', id)
  end,
  protocol_version = function(id, f)
    return string.format('MCP server "%s" chose protocol revision "%s", which this client does not speak '
      .. '(it speaks %s).', id, clip(f.version), f.supported)
  end,
}

--- Build the failure triple for `kind` on server `id`.
-- @return nil, message, err
function errors.fail(kind, id, fields)
  fields = fields or {}
  local template = assert(templates[kind], "unknown error kind")
  local err = { kind = kind, server = id }
  for k, v in pairs(fields) do
    if k ~= "detail" then err[k] = v end
  end
  if fields.detail ~= nil then err.detail = clip(fields.detail) end
  local message = template(id, fields)
  err.message = message
  return nil, message, err
end

--- The budget as people write it: 20, 0.5, 1.25 (never "20.0").
function errors.seconds(budget)
  return string.format("%g", budget)
end

errors.kinds = {}
for kind in pairs(templates) do errors.kinds[kind] = true end

return errors
