-- remove: delete the hash at KEYS[1] (record and attempt count), or whatever else is there.
-- Replies 1 if it held a live record or something that is no record of ours, else 0.
local t = kind(KEYS[1])
local was = 0
if t == 'hash' then
  if live(KEYS[1]) or redis.call('HEXISTS', KEYS[1], 'exp') == 0 then was = 1 end
elseif t ~= 'none' then
  was = 1
end
redis.call('DEL', KEYS[1])
return was
