-- complete: store the result if ARGV[1] is the live claim's token, and reset the key's attempt
-- count. The token is kept, so that a complete repeated by the same lease (its first reply
-- lost) succeeds without a change.
-- ARGV: [1] fencing token, [2] ttl in ms, [3] encoded result. Replies 1, or 0 if the lease is lost.
if kind(KEYS[1]) ~= 'hash' or not live(KEYS[1]) then return 0 end
local held = redis.call('HMGET', KEYS[1], 'state', 'tok')
if held[2] ~= ARGV[1] then return 0 end
if held[1] == 'completed' then return 1 end
if held[1] ~= 'in_progress' then return 0 end
local expires = ms(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'state', 'completed', 'res', ARGV[3], 'exp', expires, 'att', '0',
  'aexp', '0')
redis.call('PEXPIREAT', KEYS[1], expires)
return 1
