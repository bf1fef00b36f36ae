-- renew: extend the live lease to ARGV[2] ms from now if ARGV[1] is the claim's token.
-- Replies 1, or 0 if the lease is lost (a key of another type fails).
-- Commands: TIME, HMGET, HSET, PEXPIREAT.
local h = redis.call('HMGET', KEYS[1], 'exp', 'state', 'tok', 'aexp')
if (tonumber(h[1]) or 0) <= now or h[2] ~= 'in_progress' or h[3] ~= ARGV[1] then
  return 0
end
local expires = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'exp', ms(expires))
redis.call('PEXPIREAT', KEYS[1], ms(math.max(expires, tonumber(h[4]) or 0)))
return 1
