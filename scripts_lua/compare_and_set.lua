-- Compare-and-set on a string key: write `new` only if the current value equals `expected`.
-- An empty `expected` means "only if the key does not exist".
-- @key target    the key to update
-- @arg expected  the value the caller last read ('' for "absent")
-- @arg new       the value to write
-- @return 1 if written, 0 if the current value differed (nothing written)
local current = redis.call('GET', KEYS[1])
if current == false then
  current = ''
  if ARGV[1] ~= '' then
    return 0
  end
elseif current ~= ARGV[1] or ARGV[1] == '' then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
