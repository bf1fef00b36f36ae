-- get: the live record at KEYS[1], if any.
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res} | {'wrongtype', type}.
local kind = live_kind(KEYS[1])
if kind == 'hash' then
  return record(KEYS[1])
elseif kind ~= 'none' then
  return {'wrongtype', kind}
end
return {'none'}
