-- begin: claim KEYS[1] if it is absent, else return the record it holds.
-- ARGV: [1] fencing token, [2] fingerprint (32 bytes), [3] tool name, [4] lease in ms.
-- Replies: {'claimed'} | {'record', state, fp, tool, created, exp, res} | {'wrongtype', type}.
-- An in-progress record whose lease ran out is already gone: its PEXPIREAT is the lease.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'tool', 'created', 'exp', 'res')
  return {'record', r[1], r[2], r[3], r[4], r[5], r[6]}
elseif kind ~= 'none' then
  return {'wrongtype', kind}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'state', 'in_progress', 'tok', ARGV[1], 'fp', ARGV[2],
  'tool', ARGV[3], 'created', string.format('%.0f', now), 'exp', expires)
redis.call('PEXPIREAT', KEYS[1], expires)
return {'claimed'}
