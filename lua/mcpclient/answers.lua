--- What the client answers when a server asks it for roots or for a sampled
--- message: the checks on what the host gives (the roots list, the sampling
--- handler's answer) and on what the server sends (a sampling request), and
--- the answers themselves, the same in both eras (a server request's result
--- or error in 2025-11-25; an inputRequests answer in 2026-07-28).
--
-- Roots are `file://` URIs with an optional name: anything else is refused
-- where the host gives it (connect, set_roots), so no server is ever told of
-- a root the protocol does not allow. A sampling request is a model call on
-- the server's behalf: the handler gets the request as the server wrote it
-- (its messages and prompt are the server's text, marked by `server`), and
-- what it returns is checked before it is sent. A refusal, a handler that
-- raises and an answer of the wrong shape each become an error to the
-- server whose wording is inert and short; the handler's own error text
-- stays here (it may name the host's internals).
local core = require "mcpclient.core"

local json = core.json

local answers = {}

answers.MAX_ROOTS = 256
answers.MAX_ROOT_URI = 4096
answers.MAX_ROOT_NAME = 256
answers.MAX_REASON = 200

-- JSON-RPC codes of the answers to a sampling request: a refusal (the code
-- the protocol names for a rejected sampling request), a request the
-- protocol does not allow, a handler that failed.
answers.REFUSED = -1
answers.INVALID_PARAMS = -32602
answers.INTERNAL_ERROR = -32603

---------------------------------------------------------------------------
-- Roots
---------------------------------------------------------------------------

-- A list as a host writes it (a sequence 1..n, or a decoded JSON array):
-- true; an empty table is one too when `empty_ok`.
local function is_list(t, empty_ok)
  if type(t) ~= "table" then return false end
  if json.is_array(t) then return empty_ok or #t > 0 end
  local n = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  return n == #t and (empty_ok or n > 0)
end

local ROOT_KEYS = { uri = true, name = true }

-- Why one root is not one the protocol allows, or nil.
local function root_fault(root)
  if type(root) ~= "table" then return "is a " .. type(root) .. ", not a table { uri, name }" end
  for key in pairs(root) do
    if not ROOT_KEYS[key] then return "has the key " .. core.clip(tostring(key), 40) .. " (a root has uri and name)" end
  end
  local uri = root.uri
  if type(uri) ~= "string" then return "has no uri string" end
  if not uri:find("^[Ff][Ii][Ll][Ee]://") then
    return 'has the uri "' .. core.clip(uri, 80) .. '", which is not a file:// URI (the only kind a root may be)'
  end
  if #uri > answers.MAX_ROOT_URI then return "has a uri longer than " .. answers.MAX_ROOT_URI .. " bytes" end
  if uri:find("[%z\1-\32\127]") then return "has a uri holding a space or control character (percent-encode it)" end
  if root.name ~= nil then
    if type(root.name) ~= "string" then return "has a name that is a " .. type(root.name) .. ", not a string" end
    if #root.name > answers.MAX_ROOT_NAME then return "has a name longer than " .. answers.MAX_ROOT_NAME .. " bytes" end
  end
  return nil
end

--- The roots the host gave (`list`: an array of { uri = "file://…", name =
--- optional string }), as the copy the client keeps and sends; raises a
--- clear error naming the first bad root (`level` as error's).
function answers.roots(list, what, level)
  level = (level or 1) + 1
  if not is_list(list, true) then
    error(what .. ": roots must be an array of { uri = \"file://…\", name = \"…\" }", level)
  end
  if #list > answers.MAX_ROOTS then error(what .. ": at most " .. answers.MAX_ROOTS .. " roots", level) end
  local kept = json.array {}
  for i, root in ipairs(list) do
    local fault = root_fault(root)
    if fault then error(string.format("%s: root %d %s", what, i, fault), level) end
    kept[i] = { uri = root.uri, name = root.name }
  end
  return kept
end

--- The result of roots/list: the roots as they are now.
function answers.roots_result(roots)
  return { roots = roots }
end

---------------------------------------------------------------------------
-- Sampling
---------------------------------------------------------------------------

local ROLES = { user = true, assistant = true }

-- Why the server's sampling request is not one the protocol allows, or nil.
local function request_fault(params)
  if type(params) ~= "table" or json.is_array(params) then return "the request has no params object" end
  local messages = params.messages
  if not is_list(messages) then
    return "messages must be a non-empty array"
  end
  for i, m in ipairs(messages) do
    if type(m) ~= "table" or not ROLES[m.role] or type(m.content) ~= "table" then
      return "message " .. i .. " needs a role (user or assistant) and a content"
    end
  end
  local max = params.maxTokens
  if math.type(max) ~= "integer" and not (math.type(max) == "float" and max == math.floor(max)) then
    return "maxTokens is required: a whole number of tokens"
  end
  if max <= 0 then return "maxTokens must be positive" end
  return nil
end

-- One block of content a sampled message may hold, or why not.
local function content_fault(c)
  if type(c) ~= "table" then return "content must be a table" end
  if c.type == "text" then
    if type(c.text) ~= "string" then return 'text content needs text (a string)' end
  elseif c.type == "image" or c.type == "audio" then
    if type(c.data) ~= "string" or type(c.mimeType) ~= "string" then
      return c.type .. " content needs data (base64) and mimeType (strings)"
    end
  else
    return 'content type must be "text", "image" or "audio"'
  end
  return nil
end

-- The handler's answer as the result to send, or nil and why it is not one.
local function result_of(answer)
  if type(answer) ~= "table" then return nil, "the answer is not a table" end
  if answer.role ~= "assistant" then return nil, 'role must be "assistant"' end
  if type(answer.model) ~= "string" or answer.model == "" then return nil, "model must be a non-empty string" end
  if answer.stopReason ~= nil and type(answer.stopReason) ~= "string" then
    return nil, "stopReason must be a string when given"
  end
  local content = answer.content
  if type(content) == "table" and content.type == nil and next(content) ~= nil then
    if not is_list(content) then return nil, "content must be one block or a list of blocks" end
    for _, block in ipairs(content) do
      local fault = content_fault(block)
      if fault then return nil, fault end
    end
  else
    local fault = content_fault(content)
    if fault then return nil, fault end
  end
  return { role = "assistant", model = answer.model, content = content, stopReason = answer.stopReason }
end

--[[
The answer to a sampling request `params` through the host's `handler`.
The handler is called with the request as the server sent it (a shallow
copy: messages, maxTokens, systemPrompt, temperature, stopSequences,
modelPreferences, includeContext, metadata; every string in it is the
server's text) and `server`, the connection's identifier. It returns the
sampled message { role = "assistant", model, content, stopReason }, or nil
and a reason to refuse.
@return result | nil, { code, message (inert, short: what the server is told),
  fault (the handler's error or the answer's fault, for the host's log; nil
  for a refusal or a bad request) }
]]
function answers.sampled(handler, params, server)
  local bad = request_fault(params)
  if bad then
    return nil, { code = answers.INVALID_PARAMS, message = "Invalid params: " .. bad }
  end
  local request = {}
  for k, v in pairs(params) do request[k] = v end
  request.server = server
  local ok, answer, reason = pcall(handler, request)
  if not ok then
    return nil, { code = answers.INTERNAL_ERROR, message = "the client's sampling handler failed",
      fault = "the on_sampling handler raised: " .. core.clip(tostring(answer), 500) }
  end
  if answer == nil then
    local why = reason ~= nil and core.clip(tostring(reason), answers.MAX_REASON) or nil
    return nil, { code = answers.REFUSED,
      message = "the client refused the sampling request" .. (why and why ~= "" and (": " .. why) or "") }
  end
  local result, fault = result_of(answer)
  if not result then
    return nil, { code = answers.INTERNAL_ERROR, message = "the client's sampling handler gave no valid answer",
      fault = "the on_sampling handler's answer was refused: " .. fault }
  end
  return result
end

return answers
