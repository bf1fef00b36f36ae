-- A turn's hash (begin.lua with KEYS[2], and turn.lua): its count of started actions (`n`,
-- live until `ne`), each tool's (`a` .. tool name, live until `e` .. tool name; no `e` field
-- is another's, as the turn's expiry is `ne`), the index of its records (`k` .. the 32 bytes of
-- a key: when the turn started that action, in ms), on a Cluster whose turn hash is in another
-- slot than the record each charge that counted an action (`c` .. the key's 32 bytes .. the
-- claim's token: '1' while counted, '' once given back; a charge or refund sent again finds
-- its own, whatever duplicates of the call charged meanwhile), and `x`, when the hash itself
-- expires: no sooner than the records it names (see `index`).

-- Whether a redis.pcall failed (the key holds another type).
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- The live count in `f[i]` whose expiry is in `f[i + 1]` (0 if absent or expired).
local function live(f, i)
  if (tonumber(f[i + 1]) or 0) <= now then
    return 0
  end
  return tonumber(f[i]) or 0
end

-- Charges a new action of tool `tool` (and its key, 32 bytes) to the turn's hash at k:
-- refused by the turn's cap (`max_calls`, a number or nil) replies 't' .. calls, by the tool's
-- (`max_tool`) 'a' .. actions; else counts it in each capped count (live `window` ms from now),
-- indexes the key, keeps the hash at least `keep` ms from now, and replies nil. With a `token`
-- (the claim's, when the charge is a request of its own), the charge is noted under it, and
-- one this token made and did not give back is not made again (replies nil): a charge given
-- back ('') is made again by the same call's second pass (after a gone process's claim).
-- Commands: HMGET, then HSET and PEXPIREAT.
local function charge_turn(k, tool, key, max_calls, max_tool, window, keep, token)
  local charged = 'c' .. key .. (token or '')
  local f = redis.pcall('HMGET', k, 'n', 'ne', 'a' .. tool, 'e' .. tool, 'x', charged)
  local wrong = failed(f)
  if wrong then
    f = {}
  end
  if token and f[6] == '1' then
    return nil
  end
  local calls, actions = live(f, 1), live(f, 3)
  if max_calls and calls >= max_calls then
    return 't' .. ms(calls)
  end
  if max_tool and actions >= max_tool then
    return 'a' .. ms(actions)
  end
  if wrong then
    redis.call('DEL', k)
  end
  local window_end = ms(now + window)
  local kept = math.max(tonumber(f[5]) or 0, now + keep)
  local fields = {'k' .. key, ms(now), 'x', ms(kept)}
  if token then
    table.insert(fields, charged); table.insert(fields, '1')
  end
  if max_calls then
    table.insert(fields, 'n'); table.insert(fields, ms(calls + 1))
    table.insert(fields, 'ne'); table.insert(fields, window_end)
  end
  if max_tool then
    table.insert(fields, 'a' .. tool); table.insert(fields, ms(actions + 1))
    table.insert(fields, 'e' .. tool); table.insert(fields, window_end)
  end
  redis.call('HSET', k, unpack(fields))
  redis.call('PEXPIREAT', k, ms(kept))
  return nil
end
