-- Check-and-decrement: take `amount` from a counter only if at least that much remains
-- (stock, quota, credits). A missing counter counts as 0.
-- @key counter  the remaining amount
-- @arg amount   how much to take (a positive integer)
-- @return the remaining amount after taking, or -1 if there was not enough (nothing taken)
local amount = tonumber(ARGV[1])
if not amount or amount <= 0 or amount % 1 ~= 0 then
  return redis.error_reply('ERR amount must be a positive integer')
end
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left < amount then
  return -1
end
return redis.call('DECRBY', KEYS[1], amount)
