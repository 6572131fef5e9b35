-- Reconcile: replace the counters, never add to them. spent := ARGV[2]; the
-- live holds become exactly the ARGV[5..] triples (id, amount, expiry ms),
-- minus expired ones and those of settled requests; the ids after the
-- triples are marked settled (their ledger row exists, so a late settle must
-- not count them again). ARGV[3], when not empty, is the version the caller
-- read: if anything changed since, nothing is written. A rebuild marks the day
-- `checked`: its counters are the ledger's (budget_reserve.lua).
-- Returns {1, new version} or {0, current version}.
local spent, expected, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local _, _, version = counters()
if expected ~= '' and expected ~= version then
  return {0, version}
end
local first_settled = 5 + 3 * n
for j = first_settled, #ARGV do
  redis.call('SADD', K_SETTLED, ARGV[j])
end
redis.call('DEL', K_HOLDS, K_EXPIRY)
redis.call('HSET', K_STATE, 'spent', spent, 'held', '0', 'checked', '1')
for i = 0, n - 1 do
  local id, amount, expires = ARGV[5 + 3 * i], ARGV[6 + 3 * i], ARGV[7 + 3 * i]
  if tonumber(expires) > now and redis.call('SISMEMBER', K_SETTLED, id) == 0 then
    local previous = redis.call('HGET', K_HOLDS, id)
    if previous then decr_held(previous) end
    redis.call('HSET', K_HOLDS, id, amount)
    redis.call('ZADD', K_EXPIRY, expires, id)
    redis.call('HINCRBY', K_STATE, 'held', amount)
  end
end
version = redis.call('HINCRBY', K_STATE, 'version', 1)
touch()
return {1, version}
