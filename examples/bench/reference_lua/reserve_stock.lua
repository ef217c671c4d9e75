-- Hand-written reference of examples/operations/reserve_stock.toml: the same replies,
-- writes and errors as the generated op_reserve_stock.lua, written as a person would.
-- examples/bench/generated_vs_hand.py times one against the other.
-- @key stock the item's stock counter (a missing key means 0)
-- @arg qty units to reserve
-- @return {reserved (1 or 0), units left}
local qty = ARGV[1]
if qty == nil or not (qty == '0' or string.match(qty, '^%-?[1-9]%d*$')) then
  return redis.error_reply('ERR argument qty is not valid')
end
local n = tonumber(qty)
if n >= 9007199254740992 or n <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local available = 0
local s = redis.call('GET', KEYS[1])
if s then
  if not (s == '0' or string.match(s, '^%-?[1-9]%d*$')) then
    return redis.error_reply('NOTINT a value read is not an integer')
  end
  available = tonumber(s)
  if available >= 9007199254740992 or available <= -9007199254740992 then
    return redis.error_reply('OVERFLOW integer beyond 2^53-1')
  end
end
if available < n then
  return {0, available}
end
local left = available - n
if left >= 9007199254740992 or left <= -9007199254740992 then
  return redis.error_reply('OVERFLOW integer beyond 2^53-1')
end
local reply = redis.pcall('DECRBY', KEYS[1], qty)
if type(reply) == 'table' and reply.err then
  return reply
end
return {1, left}
