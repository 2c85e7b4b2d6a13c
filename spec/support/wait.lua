--- Waiting in a spec for something another process does.
local core = require "mcpclient.core"

local wait = {}

--- Call `probe` every 10 ms until it returns a true value, and return that value; raise
--- "timed out waiting for <what>" (at the caller) once `seconds` have passed.
function wait.for_value(what, seconds, probe)
  local deadline = core.now() + seconds
  while true do
    local value = probe()
    if value then return value end
    if core.now() > deadline then error("timed out waiting for " .. what, 2) end
    core.sleep(0.01)
  end
end

return wait
