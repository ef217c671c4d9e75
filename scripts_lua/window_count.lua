#!lua flags=no-writes
-- Read-only peek at a sliding-window log: how many hits fall in the window now. Declared
-- no-writes, so it runs through EVALSHA_RO and on replicas.
-- @key log        sorted set written by rate_limit_sliding
-- @arg now_ms     the caller's clock in milliseconds
-- @arg window_ms  window length in milliseconds
-- @return hits in the window
return redis.call('ZCOUNT', KEYS[1], '(' .. (tonumber(ARGV[1]) - tonumber(ARGV[2])), '+inf')
