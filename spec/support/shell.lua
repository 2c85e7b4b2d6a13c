--- Small shell helpers the specs share: quoting, reading a file whole, sleeping.
-- Only the Lua standard library with io.popen/os.execute: no luasocket here.
local shell = {}

--- One shell word, single-quoted.
function shell.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- A file's whole text, or "" when it cannot be read.
function shell.read_all(path)
  local f = io.open(path, "r")
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

function shell.sleep(seconds)
  os.execute("sleep " .. string.format("%.3f", seconds))
end

return shell
