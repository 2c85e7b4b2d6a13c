-- busted output: busted's plain terminal report, then the one closing line CI
-- reads — "N passed, N failed" (errors count as failed, pending as skipped).
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.plainTerminal"(options)

  busted.subscribe({ "suite", "end" }, function()
    local failed = handler.failuresCount + handler.errorsCount
    local line = string.format("%d passed, %d failed", handler.successesCount, failed)
    if handler.pendingsCount > 0 then line = line .. string.format(", %d skipped", handler.pendingsCount) end
    io.write(line, "\n")
    io.flush()
    return nil, true
  end)

  return handler
end
