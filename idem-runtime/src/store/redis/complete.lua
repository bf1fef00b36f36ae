-- complete: store the result if ARGV[1] is the live claim's token, and reset the key's attempt
-- count. The token is kept, so that a complete repeated by the same lease (its first reply
-- lost) succeeds without a change.
-- ARGV: [1] fencing token, [2] ttl in ms, [3] encoded result. Replies 1, or 0 if the lease is
-- lost (a key of another type fails).
-- Commands: TIME, HMGET, HSET, PEXPIREAT.
local h = redis.call('HMGET', KEYS[1], 'exp', 'state', 'tok')
if (tonumber(h[1]) or 0) <= now or h[3] ~= ARGV[1] then return 0 end
if h[2] == 'completed' then return 1 end
if h[2] ~= 'in_progress' then return 0 end
local expires = ms(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'state', 'completed', 'res', ARGV[3], 'exp', expires, 'att', '0',
  'aexp', '0')
redis.call('PEXPIREAT', KEYS[1], expires)
return 1
