-- Loaded by busted before any spec (.busted `helper`): a fresh clone has no build/ yet, and
-- every spec needs the C core. Say what to run instead of failing each spec on the require.
local found = package.searchpath("mcpclient.core", package.cpath)
if not found then
  io.stderr:write("mcpclient.core is not built (build/mcpclient/core.so is missing): run `make` first, ",
    "or `make check` (installs what is missing, builds, then runs this suite).\n")
  os.exit(2)
end
