-- Capped list push: LPUSH one or more values and trim the list to its newest `cap` items,
-- atomically, so readers never see an over-long list (recent activity, logs).
-- @key list     the list
-- @arg cap      how many items to keep (newest first)
-- @arg values... one or more values to push
-- @return the list length after trimming
local cap = tonumber(ARGV[1])
if not cap or cap < 1 then
  return redis.error_reply('ERR cap must be a positive integer')
end
redis.call('LPUSH', KEYS[1], unpack(ARGV, 2))
redis.call('LTRIM', KEYS[1], 0, cap - 1)
return redis.call('LLEN', KEYS[1])
