-- Loaded by busted before any spec (.busted `helper`): a fresh clone has no build/ yet, and
-- every spec needs the C core (and the store's specs its database drivers, a build from before
-- they were split off lacks). Say what to run instead of failing each spec on the require.
for _, module in ipairs { "mcpclient.core", "mcpclient.db" } do
  if not package.searchpath(module, package.cpath) then
    io.stderr:write(module, " is not built (build/", module:gsub("%.", "/"), ".so is missing): run `make` first, ",
      "or `make check` (installs what is missing, builds, then runs this suite).\n")
    os.exit(2)
  end
end
