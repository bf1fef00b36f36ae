-- get: the live record at KEYS[1], if any.
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res, att, turn}
-- | {'corrupt', what}; a key of another type fails.
local f = redis.call('HMGET', KEYS[1], 'exp', 'state', 'fp', 'tool', 'created', 'res', 'att',
  'aexp', 'tok', 'turn')
if not f[1] then
  if f[2] or f[3] or f[4] or f[5] or f[6] or f[9] then
    return {'corrupt', 'field `exp` is missing'}
  end
  return {'none'}
end
local exp = tonumber(f[1])
if not exp then
  return {'corrupt', 'field `exp` is not a number of ms'}
end
if exp <= now then
  return {'none'}
end
local att = 0
if (tonumber(f[8]) or 0) > now then
  att = tonumber(f[7]) or 0
end
-- A missing field is `false` (a nil reply), not a hole that would cut the reply short.
return {'record', f[2], f[3], f[4], f[5], f[1], f[6], ms(att), f[10]}
