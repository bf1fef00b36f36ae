-- release: end the live claim if ARGV[1] is its token, keeping the key's attempt count.
-- Replies 1, or 0 if the lease is lost.
if kind(KEYS[1]) ~= 'hash' or not live(KEYS[1]) then return 0 end
local held = redis.call('HMGET', KEYS[1], 'state', 'tok')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'exp', '0')
expire(KEYS[1])
return 1
