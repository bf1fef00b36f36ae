-- renew: extend the live lease to ARGV[2] ms from now if ARGV[1] is the claim's token.
-- Replies 1, or 0 if the lease is lost.
if kind(KEYS[1]) ~= 'hash' or not live(KEYS[1]) then return 0 end
local held = redis.call('HMGET', KEYS[1], 'state', 'tok')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'exp', ms(now + tonumber(ARGV[2])))
expire(KEYS[1])
return 1
