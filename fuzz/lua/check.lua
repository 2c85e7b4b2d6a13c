--- The checkers' one assertion: raise with the formatted message, blamed on
--- the checker's line, when a property does not hold.
return function(cond, fmt, ...)
  if not cond then error(string.format(fmt, ...), 2) end
end
