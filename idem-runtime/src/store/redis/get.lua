-- get: the live record at KEYS[1], if any.
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res, att} | {'wrongtype', type}.
local t = kind(KEYS[1])
if t == 'hash' then
  if live(KEYS[1]) then
    return record(KEYS[1])
  end
  return {'none'}
elseif t ~= 'none' then
  return {'wrongtype', t}
end
return {'none'}
