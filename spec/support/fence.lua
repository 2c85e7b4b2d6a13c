--- What a run's write fence (agent_run.fence) says, for specs: the
--- calls it names, and the digest a call's arguments get.
local core = require "mcpclient.core"

local json = core.json

local fence = {}

--- The SHA-256 (hex) of the arguments' JSON text, as the fence names it.
function fence.digest(arguments)
  return (core.crypto.sha256(json.encode(arguments or {})):gsub(".", function(c)
    return string.format("%02x", c:byte())
  end))
end

--- The entries of a fence text: { { tool, arguments_sha256, sequence }, ... } ({} when clear).
function fence.entries(text)
  if text == nil or text == "" then return {} end
  local list = json.decode(text)
  assert(type(list) == "table" and json.is_array(list), "the fence is not a JSON list: " .. tostring(text))
  local out = {}
  for i, e in ipairs(list) do
    out[i] = { tool = e.tool, arguments_sha256 = e.arguments_sha256, sequence = e.sequence }
  end
  return out
end

--- The fence entry for one call: its tool, its arguments' digest and the audit sequence its step is to take.
function fence.entry(tool, arguments, sequence)
  return { tool = tool, arguments_sha256 = fence.digest(arguments), sequence = sequence }
end

return fence
