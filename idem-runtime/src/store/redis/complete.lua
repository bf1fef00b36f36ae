-- complete: store the result if ARGV[1] is the current claim's token.
-- ARGV: [1] fencing token, [2] ttl in ms, [3] encoded result. Replies 1, or 0 if the lease is lost.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
local held = redis.call('HMGET', KEYS[1], 'state', 'tok')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = string.format('%.0f', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'state', 'completed', 'res', ARGV[3], 'exp', expires)
redis.call('HDEL', KEYS[1], 'tok')
redis.call('PEXPIREAT', KEYS[1], expires)
return 1
