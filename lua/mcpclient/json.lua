--- mcpclient.json: the exact JSON codec the wire, the store and the Lua API share.
--
--   json.encode(value)         -> text (raises on what JSON cannot hold)
--   json.try_encode(value)     -> text | nil, reason
--   json.decode(text[, ordered]) -> value | nil, reason
--   json.null, json.array(t), json.is_array(t)
--   json.is_object(v)          -> a table that encodes as an object (not
--                                 array-marked, string keys only; {} is one)
--
-- Integers stay integers (64-bit), floats round-trip, [] and {} stay apart
-- (decoded arrays carry a marker; json.array{} makes an empty one), duplicate
-- keys and invalid UTF-8 are refused. Objects encode with sorted keys unless
-- their key order was recorded (decode with ordered = true records it).
local core = require "mcpclient.core"

local json = {}
for name, fn in pairs(core.json) do json[name] = fn end
return json
