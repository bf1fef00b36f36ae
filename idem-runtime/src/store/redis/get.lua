-- get: the record at KEYS[1], if any (Redis already dropped it if it expired).
-- Replies: {'none'} | {'record', state, fp, tool, created, exp, res} | {'wrongtype', type}.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'tool', 'created', 'exp', 'res')
  return {'record', r[1], r[2], r[3], r[4], r[5], r[6]}
elseif kind ~= 'none' then
  return {'wrongtype', kind}
end
return {'none'}
