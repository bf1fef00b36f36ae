-- release: delete the live claim if ARGV[1] is its token. Replies 1, or 0 if the lease is lost.
if live_kind(KEYS[1]) ~= 'hash' then return 0 end
local held = redis.call('HMGET', KEYS[1], 'state', 'tok')
if held[1] ~= 'in_progress' or held[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
