-- turn: a new action's charge to its turn's hash at KEYS[1], for a Redis Cluster whose turn
-- hash and record are in different slots.
-- ARGV: [1] 'charge' or 'refund', [2] tool name, [3] the key (32 bytes), [4] the turn's cap
-- ('' for none), [5] the tool's cap ('' for none), [6] budget window in ms, [7] how long to keep
-- the hash at least, in ms, [8] (charge) the claim's lease in ms, [9] the claim's token.
-- A Cluster client resends a script whose reply its dropped connection lost: a charge or a
-- refund made with this token already is not made again.
-- charge: see `charge_turn` (counts.lua); replies 'ok', or 't' .. calls / 'a' .. actions, led
-- by 'd' when this key was charged less than a lease ago (by this turn before, or by a
-- duplicate of this call that is claiming it).
-- refund: gives back an action counted by 'charge' with this token whose claim did not happen
-- (the counts keep their expiry; the key stays in the index, whose readers check each record's
-- turn). Replies 'ok'.
local max_calls, max_tool = tonumber(ARGV[4]), tonumber(ARGV[5])
if ARGV[1] == 'refund' then
  local charged = 'c' .. ARGV[3] .. ARGV[9]
  local f = redis.pcall('HMGET', KEYS[1], 'n', 'ne', 'a' .. ARGV[2], 'e' .. ARGV[2], charged)
  if failed(f) or f[5] ~= '1' then
    return 'ok'
  end
  local fields = {charged, ''}
  if max_calls and live(f, 1) > 0 then
    table.insert(fields, 'n'); table.insert(fields, ms(live(f, 1) - 1))
  end
  if max_tool and live(f, 3) > 0 then
    table.insert(fields, 'a' .. ARGV[2]); table.insert(fields, ms(live(f, 3) - 1))
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  return 'ok'
end
local refused = charge_turn(KEYS[1], ARGV[2], ARGV[3], max_calls, max_tool, tonumber(ARGV[6]),
  tonumber(ARGV[7]), ARGV[9])
if refused then
  local at = redis.pcall('HGET', KEYS[1], 'k' .. ARGV[3])
  at = not failed(at) and tonumber(at) or nil
  if at and at > now - (tonumber(ARGV[8]) or 0) then
    return 'd' .. refused
  end
  return refused
end
return 'ok'
