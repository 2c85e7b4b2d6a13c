--- The one failure value of mcpclient: nil, message, err.
--
-- A failure is made where it happens (the HTTP leg, the host gate, the store,
-- the gate of a run) by errors.fail(kind, fields) and handed up unchanged:
-- channel, session, connection, tool and run pass the same `err` table on, so an
-- agent loop reads err.kind == "cancelled" on a tool result exactly as the
-- leg wrote it.
--
-- `err` is { kind = &lt;fixed string&gt;, message = &lt;one sentence&gt;, server = &lt;identifier or nil&gt;,
-- ... the kind's own fields }. `message` names the server in double quotes when
-- there is one. Far-side text (RPC messages, parser complaints, media types,
-- libcurl's reasons) is control-stripped and clipped before it enters a
-- message or `err.detail`; response bodies, credentials and session ids never
-- enter either.
local core = require "mcpclient.core"

local errors = {}

local function clip(text)
  return core.clip(tostring(text))
end

local function on(f)
  return f.server and string.format('MCP server "%s"', f.server) or "The MCP server"
end

--[[
Every kind: what causes it, what the caller should do, and the sentence it
reads as; `fields`, where given, the fields of `err` beyond kind and message
(each a field of one meaning: a JSON-RPC code is `rpc_code`, a run's fixed
number `run_code`, the store's SQL code `sql_code`). README "Errors" and
docs/ERRORS.md list the same kinds; a spec checks the lists and the fields
agree.
]]
errors.KINDS = {
  refused_host = {
    cause = "the host gate refused the server's address (or its name could not be made canonical)",
    action = "fix the URL, or allow the address with a host_gate / refuse_private option",
    message = function(f)
      return string.format('%s points at host "%s", which outbound requests are not allowed to reach.',
        on(f), clip(f.host))
    end,
  },
  transport = {
    cause = "the request never left (name resolution, connect, TLS), or only the handshake was lost",
    action = "safe to retry: the operation was not sent to the server",
    message = function(f) return string.format("%s could not be reached: %s", on(f), clip(f.detail)) end,
  },
  tls = {
    cause = "the TLS handshake failed: the server's certificate (unknown issuer, name mismatch, expired), "
      .. "the client certificate (missing, refused, its key unreadable or not its own), or the protocol",
    action = "fix the certificate, ca_file, client_cert or client_key; nothing reached the server's HTTP layer",
    fields = { "server", "host", "detail" },
    message = function(f)
      return string.format('%s: the TLS connection to host "%s" failed: %s', on(f), clip(f.host), clip(f.detail))
    end,
  },
  interrupted = {
    cause = "the exchange was lost after the request reached the server (sent, answered with 2xx, or streamed)",
    action = "do not retry blindly: the server may have acted on it",
    message = function(f)
      return string.format("The request reached %s, then the exchange was lost (%s); the server may have acted "
        .. "on it, so it was not sent again.", f.server and string.format('MCP server "%s"', f.server)
        or "the MCP server", clip(f.detail))
    end,
  },
  timeout = {
    cause = "the server did not answer within what was left of the operation budget",
    action = "raise the budget, or look at the server; a tools/call may still have run",
    message = function(f)
      return string.format("%s did not answer within the time left of the %s-second operation budget: %s",
        on(f), f.budget, clip(f.detail))
    end,
  },
  deadline = {
    cause = "the operation budget ran out before a request was sent",
    action = "raise the budget; the server was not asked",
    message = function(f)
      return string.format("The %s-second operation budget for %s ran out before this request was sent, so the "
        .. "server was not asked. This is the budget this installation sets, not a server that did not answer.",
        f.budget, f.server and string.format('MCP server "%s"', f.server) or "the MCP server")
    end,
  },
  cancelled = {
    cause = "the operation's cancel hook fired",
    action = "nothing to do; with in_flight = true the server may have acted on the call",
    message = function(f)
      if f.in_flight then
        return string.format("The call to %s was cancelled in flight; the server may already have acted on it.",
          f.server and string.format('MCP server "%s"', f.server) or "the MCP server")
      end
      return string.format("The operation on %s was cancelled before it completed.",
        f.server and string.format('MCP server "%s"', f.server) or "the MCP server")
    end,
  },
  closed = {
    cause = "the host closed the connection while this operation was still waiting on it",
    action = "nothing: the host ended it; with in_flight = true the server may have acted on the call",
    fields = { "server", "in_flight" },
    message = function(f)
      local server = f.server and string.format('MCP server "%s"', f.server) or "the MCP server"
      if f.in_flight then
        return string.format("The connection to %s was closed while the call was in flight; the server may "
          .. "already have acted on it.", server)
      end
      return string.format("The connection to %s was closed before the operation completed.", server)
    end,
  },
  http_status = {
    cause = "the server answered with a non-2xx HTTP status (err.status; err.rpc_code when the body was JSON-RPC)",
    action = "look at the server or the credential; 401/403 usually mean the credential",
    fields = { "server", "status", "rpc_code", "detail", "session_lost" },
    message = function(f)
      if math.type(f.rpc_code) == "integer" then
        return string.format("%s answered with HTTP status %d and JSON-RPC error %d: %s", on(f), f.status, f.rpc_code,
          clip(f.detail or "no message"))
      end
      if f.status == 404 and not f.session_lost then
        -- most often a URL without the endpoint's path
        return string.format("%s answered with HTTP status 404: nothing answers at that path; check the URL's path "
          .. "(an MCP endpoint is often …/mcp).", on(f))
      end
      return string.format("%s answered with HTTP status %d.", on(f), f.status)
    end,
  },
  content_type = {
    cause = "the answer was neither application/json nor text/event-stream",
    action = "check the URL points at an MCP endpoint",
    message = function(f)
      return string.format('%s answered with content type "%s"; this client reads a JSON response or an event '
        .. "stream, and nothing else.", on(f), clip(f.media_type))
    end,
  },
  malformed = {
    cause = "the answer is not a valid JSON-RPC response to the request (or broke a limit)",
    action = "report it to the server's operator",
    message = function(f)
      return string.format("%s sent a response that is not a JSON-RPC result: %s", on(f), clip(f.detail))
    end,
  },
  rpc_error = {
    cause = "the server answered with a JSON-RPC error (err.rpc_code, err.detail)",
    action = "read err.rpc_code; the request was understood and refused",
    fields = { "server", "rpc_code", "detail" },
    message = function(f)
      return string.format("%s refused the call with JSON-RPC error %d: %s", on(f), f.rpc_code,
        errors.own_words(f.detail, f.rpc_code))
    end,
  },
  protocol_version = {
    cause = "the server speaks no protocol revision this client speaks (err.offered: what it named, when it did)",
    action = "upgrade the client or the server, or pin the connection's protocol option",
    message = function(f)
      if f.requested then
        return string.format('%s does not speak protocol revision "%s"; it names %s, and this client speaks %s.',
          on(f), clip(f.requested), f.offered and f.offered ~= "" and clip(f.offered) or "no revision", f.supported)
      end
      return string.format('%s chose protocol revision "%s", which this client does not speak (it speaks %s).',
        on(f), clip(f.version), f.supported)
    end,
  },
  missing_capability = {
    cause = "the server refused the request because the client did not declare a capability it needs "
      .. "(JSON-RPC error -32021; err.capability names it)",
    action = "give the connection the handler behind that capability (on_elicitation for elicitation); "
      .. "the server did not act on the request",
    message = function(f)
      return string.format("%s refused the request because this client does not declare the %s capability it "
        .. "needs%s; the server did not act on it.", on(f),
        f.capability and ('"' .. clip(f.capability) .. '"') or "client",
        f.capabilities and f.capabilities ~= f.capability and (" (" .. clip(f.capabilities) .. ")") or "")
    end,
  },
  credential = {
    cause = "the server's credential reference (or proxy_auth's) could not be resolved",
    action = "set the environment variable or give a resolver; nothing was sent anonymously",
    message = function(f)
      return string.format("%s declares a credential that could not be resolved%s.", on(f),
        f.detail and (": " .. clip(f.detail)) or "")
    end,
  },
  store = {
    cause = "the database refused or failed a statement (err.operation, err.sql_code)",
    action = "look at the database; a run fails closed rather than lose its audit",
    fields = { "operation", "detail", "sql_code" },
    message = function(f)
      return string.format("The store could not %s: %s", clip(f.operation), clip(f.detail))
    end,
  },
  forbidden = {
    cause = "the actor of an operator action is not an administrator",
    action = "act as an administrator",
    message = function() return "This action requires administrator privileges." end,
  },
  unknown_server = {
    cause = "no configured server has that id or identifier",
    action = "list the servers (mcpclient servers) and use one of them",
    message = function(f)
      if math.type(f.uid) == "integer" then return string.format("Unknown MCP server (id %d).", f.uid) end
      return "Unknown MCP server."
    end,
  },
  invalid = {
    cause = "an operator input is not acceptable (err.field says which), or a decision on a run that does not "
      .. "wait for one",
    action = "fix the input as the message says",
    message = function(f) return clip(f.detail) end,
  },
  configuration = {
    cause = "a stored server row cannot be used as it is",
    action = "fix the server with mcpclient edit",
    message = function(f) return string.format("%s is not usable: %s", on(f), clip(f.detail)) end,
  },
  config = {
    cause = "a configuration file of servers (mcp.config.read) cannot be read, is not JSON, is none of the formats, "
      .. "or breaks a rule of its format (err.file, err.where, err.detail)",
    action = "fix the file at the place named, or answer its inputs; nothing of the file was used",
    fields = { "file", "where", "detail" },
    message = function(f)
      return string.format('The configuration file "%s" cannot be used%s: %s', clip(f.file),
        f.where and (" (at " .. clip(f.where) .. ")") or "", clip(f.detail))
    end,
  },
  template = {
    cause = "a URI template (a server's resource template, say) is not one RFC 6570 reads, or gives a prefix to a "
      .. "list or map value (err.position, err.detail, err.template)",
    action = "nothing was expanded; report the template to whoever wrote it (the server's operator)",
    fields = { "template", "position", "detail" },
    message = function(f)
      return string.format('The URI template "%s" cannot be expanded (at character %d): %s', clip(f.template),
        f.position, clip(f.detail))
    end,
  },
  write_without_durable_execution = {
    cause = "a run without a lease was asked to execute a remote write",
    action = "start the run on a store (persisted) before calling remote tools",
    run_code = 1786665601,
    fields = { "run_code", "detail" },
    message = function(f) return clip(f.detail) end,
  },
  audit_persistence_failed = {
    cause = "the audit record of an executed write could not be stored",
    action = "the run has failed closed; look at the store",
    run_code = 1785000001,
    fields = { "run_code", "detail" },
    message = function(f) return clip(f.detail) end,
  },
  run_lease_lost = {
    cause = "another worker took over the run's lease",
    action = "stop this worker's run; the other owner continues it",
    run_code = 0,
    fields = { "run_code", "detail" },
    message = function(f) return clip(f.detail) end,
  },
  authorization_required = {
    cause = "the server needs an OAuth authorization and there is no way to get one without a person "
      .. "(no authorize callback, no usable grant)",
    action = "log in once with `mcpclient login <server>` (the grant is kept in the store), or give an "
      .. "oauth.authorize callback (mcp.oauth.loopback_authorize is one), or configure a grant that needs no "
      .. "person (client credentials)",
    message = function(f)
      local login = f.server and string.format("`mcpclient login %s`", clip(f.server)) or "`mcpclient login <server>`"
      return string.format("%s requires authorization, and no authorization code could be obtained. Log in once "
        .. "with %s, or give the connection an oauth.authorize callback (mcp.oauth.loopback_authorize signs in "
        .. "through a browser).", on(f), login)
    end,
  },
  authorization_failed = {
    cause = "the OAuth flow for the server failed: its metadata, the authorization server or the token "
      .. "endpoint refused or broke a rule (err.detail)",
    action = "read err.detail; fix the oauth options or report it to the server's operator",
    message = function(f)
      local who = f.server and string.format('MCP server "%s"', f.server) or "the MCP server"
      return string.format("The authorization for %s failed: %s", who, clip(f.detail))
    end,
  },
  conflict = {
    cause = "the change would give two enabled servers one identifier (err.field, err.other)",
    action = "choose another identifier, or disable the other server first",
    message = function(f)
      return string.format('The identifier "%s" is also used by server "%s"; identifiers must be unique because '
        .. "they name the imported tools.", clip(f.identifier), clip(f.other))
    end,
  },
  unknown_tool = {
    cause = "no imported tool and no server group has that name",
    action = "list the tools (mcpclient tools) and use one of their names",
    message = function(f)
      local text = string.format('No imported tool or server group is named "%s".', clip(f.name or ""))
      if f.group then
        text = text .. string.format(' The server "%s" switches as its group, %s.', clip(f.name), clip(f.group))
      end
      return text
    end,
  },
  integrity = {
    cause = "a file read for a skill is not the one its listing names (size, SHA-256 digest or frontmatter)",
    action = "do not use the skill; report it to the server's operator (the content was not handed over)",
    message = function(f)
      return string.format('%s served "%s", which fails verification against its skills listing: %s.', on(f),
        clip(f.uri or "?"), clip(f.detail))
    end,
  },
  unknown_skill = {
    cause = "the server's skills listing names no skill of that name",
    action = "list the skills (conn:skills()) and use one of their names",
    message = function(f)
      return string.format('%s lists no skill named "%s".', on(f), clip(f.name or ""))
    end,
  },
  input_required = {
    cause = "the server asked for input mid-request (elicitation, sampling or roots: err.asked) and the client's "
      .. "sampling handler refused it (err.refused), or no handler "
      .. "for it was given, or it still asked after max_input_rounds answers (err.rounds)",
    action = "give the connection a handler for that input, or use a tool that needs none; nothing was sent again",
    message = function(f)
      if f.rounds then
        return string.format("%s still asked for input to complete %s after %d rounds of answers; it was not "
          .. "answered again.", on(f), clip(f.method or "the request"), f.rounds)
      end
      if f.refused then
        return string.format("%s asked for input to complete %s (%s) and the client refused it (%s); nothing was "
          .. "sent again.", on(f), clip(f.method or "the request"), clip(f.asked or "?"), clip(f.refused))
      end
      return string.format("%s needs input to complete %s%s, and this client has no handler for it.", on(f),
        clip(f.method or "the request"), f.asked and (" (it asked for " .. clip(f.asked) .. ")") or "")
    end,
  },
  task = {
    cause = "a task the call runs as ended without a result (failed, cancelled), or the server does not know it "
      .. "(unknown, or expired: its time to live is past)",
    action = "read err.reason; a failed task is the server's answer, an unknown or expired one cannot be followed "
      .. "any more: call again only if running the tool twice is harmless",
    fields = { "server", "task_id", "status", "reason", "detail", "rpc_code" },
    message = function(f)
      local what = { failed = "failed", cancelled = "was cancelled", unknown = "is not known to the server",
        expired = "has expired" }
      return string.format("The task %s of %s %s: %s", clip(f.task_id or "?"), (on(f):gsub("^The ", "the ")),
        what[f.reason] or "ended", clip(f.detail or "no detail given"))
    end,
  },
  invalid_output = {
    cause = "a tool's structuredContent does not match its outputSchema (the listing's, or the one the call "
      .. "handed), or is missing "
      .. "(err.path, err.detail); with err.unchecked the check could not be finished (depth, steps, schema)",
    action = "report it to the server's operator; connect with validate_output = false to take such results",
    fields = { "server", "tool", "path", "detail", "unchecked" },
    message = function(f)
      local tool_name = string.format('tool "%s" of %s', clip(f.tool or "?"), (on(f):gsub("^The ", "the ")))
      if f.unchecked then
        return string.format("The result of %s could not be checked against the tool's output schema (at %s: %s), "
          .. "so it was not used.", tool_name, clip(f.path or "$"), clip(f.detail))
      end
      return string.format("The result of %s does not match the tool's output schema at %s: %s. The result was "
        .. "not used.", tool_name, clip(f.path or "$"), clip(f.detail))
    end,
  },
  not_offered = {
    cause = "the server does not advertise what the operation needs (err.capability: resources, prompts, "
      .. "completions, resources.subscribe), or the era has no such request (err.detail)",
    action = "use what the server offers (conn:server().capabilities); nothing was sent",
    fields = { "server", "method", "capability", "detail" },
    message = function(f)
      return string.format("%s does not offer %s (capability %s)%s; nothing was sent.", on(f), clip(f.method or ""),
        clip(f.capability or ""), f.detail and (": " .. f.detail) or "")
    end,
  },
}

--- The fields that carry a code, each for one kind of code, and the kinds
--- that carry it (docs/ERRORS.md names the same; a spec holds the two together).
errors.CODES = {
  rpc_code = { meaning = "the JSON-RPC error code the server sent",
    kinds = { "rpc_error", "http_status", "protocol_version", "task", "missing_capability" } },
  run_code = { meaning = "the fixed number of a run's failure",
    kinds = { "write_without_durable_execution", "audit_persistence_failed", "run_lease_lost" } },
  sql_code = { meaning = "the database's own code for a statement that failed", kinds = { "store" } },
}

--- A JSON-RPC error's message without the code some SDKs write into it
--- again ("MCP error -32602: Resource not found" -> "Resource not found"),
--- clipped: the message names the code once.
function errors.own_words(detail, code)
  local text = clip(detail)
  local prefix = string.format("MCP error %s: ", tostring(code))
  if text:sub(1, #prefix) == prefix then text = text:sub(#prefix + 1) end
  return text
end

--- Make the failure value for `kind`.
-- @param kind one of errors.KINDS
-- @param fields the kind's own data (server, status, rpc_code, detail, ...); all land in `err`
-- @return nil, message, err
function errors.fail(kind, fields)
  local spec = errors.KINDS[kind]
  if not spec then error("unknown error kind " .. tostring(kind), 2) end
  local err = { kind = kind, run_code = spec.run_code }
  for k, v in pairs(fields or {}) do err[k] = v end
  if err.detail ~= nil then err.detail = clip(err.detail) end
  err.message = spec.message(err)
  return nil, err.message, err
end

--- The same failure value, from an `err` already made (to pass it up unchanged).
function errors.pass(err)
  return nil, err.message, err
end

--- The budget as people write it: 20, 0.5, 1.25 (never "20.0").
function errors.seconds(budget)
  return string.format("%g", budget)
end

return errors
