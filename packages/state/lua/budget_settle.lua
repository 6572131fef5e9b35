-- Turn request ARGV[2]'s hold into ARGV[3] micro-cents of spend, once. With
-- no live hold (unknown, expired or released) the spend is still recorded:
-- the provider has already charged. Returns {1 if counted now | 0 if it was
-- already settled, spent, held}.
local id, actual = ARGV[2], ARGV[3]
prune(now_ms())
if redis.call('SISMEMBER', K_SETTLED, id) == 1 then
  local spent, held = counters()
  return {0, spent, held}
end
local amount = redis.call('HGET', K_HOLDS, id)
if amount then
  decr_held(amount)
  redis.call('HDEL', K_HOLDS, id)
  redis.call('ZREM', K_EXPIRY, id)
end
redis.call('HINCRBY', K_STATE, 'spent', actual)
redis.call('SADD', K_SETTLED, id)
redis.call('HINCRBY', K_STATE, 'version', 1)
touch()
local spent, held = counters()
return {1, spent, held}
