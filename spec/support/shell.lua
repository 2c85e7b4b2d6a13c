--- Small shell helpers the specs share: quoting, running quietly, a temporary directory,
--- reading a file whole, sleeping.
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

--- Run a command with its output discarded; true when it exited 0.
function shell.run(command)
  return os.execute(command .. " >/dev/null 2>&1") == true
end

--- A new empty directory of the caller's own under the system's temporary directory.
function shell.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(shell.run("mkdir -p " .. shell.quote(dir)), "could not make a temporary directory")
  return dir
end

function shell.sleep(seconds)
  os.execute("sleep " .. string.format("%.3f", seconds))
end

return shell
