--- Where the library's warnings go when the host gives no `log` option.
--
-- Lua 5.4's warn() is silent unless the interpreter runs with -W, so a
-- default that used it would swallow every warning; this one writes one line
-- to stderr, control characters stripped, so nothing a
-- server wrote reaches the terminal raw.
local core = require "mcpclient.core"

local log = {}

--- The default `log(level, message)`: "mcpclient &lt;level&gt;: &lt;message&gt;" on stderr.
function log.default(level, message)
  io.stderr:write("mcpclient ", tostring(level), ": ", core.clip(tostring(message), 8192), "\n")
end

return log
