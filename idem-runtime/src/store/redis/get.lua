-- get: the live record at KEYS[1], if any.
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res, att} | {'wrongtype', type}.
local t = kind(KEYS[1])
if t == 'hash' then
  -- A hash without `exp` is no record of ours: shown as it is (a corrupt record).
  if live(KEYS[1]) or redis.call('HEXISTS', KEYS[1], 'exp') == 0 then
    return record(KEYS[1])
  end
  return {'none'}
elseif t ~= 'none' then
  return {'wrongtype', t}
end
return {'none'}
