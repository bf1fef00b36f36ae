-- remove: delete the hash at KEYS[1] (record and attempt count), whatever it holds.
-- Replies 1 if it held a live record, else 0.
local was = 0
if kind(KEYS[1]) == 'hash' and live(KEYS[1]) then was = 1 end
redis.call('DEL', KEYS[1])
return was
