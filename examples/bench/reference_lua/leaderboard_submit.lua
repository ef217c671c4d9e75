-- Hand-written reference of examples/operations/leaderboard_submit.toml: the same replies,
-- writes and errors as the generated op_leaderboard_submit.lua, written as a person would.
-- examples/bench/generated_vs_hand.py times one against the other.
-- @key board sorted set player -> best score
-- @arg player the player
-- @arg score this game's score
-- @return {improved (1 or 0), best, rank}
local player = ARGV[1]
if player == nil then
  return redis.error_reply('ERR argument player is not valid')
end
local score = ARGV[2] and tonumber(ARGV[2])
if score == nil then
  return redis.error_reply('ERR argument score is not valid')
end
local best = redis.call('ZSCORE', KEYS[1], player)
best = best and tonumber(best) or nil
local above = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.17g', math.max(score, best or score)), '+inf')
local improved = best == nil or score > best
local top = improved and score or best
if improved then
  local reply = redis.pcall('ZADD', KEYS[1], string.format('%.17g', score), player)
  if type(reply) == 'table' and reply.err then
    return reply
  end
end
return {improved and 1 or 0, string.format('%.17g', top), above}
