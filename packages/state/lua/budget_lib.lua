-- Shared by every budget_*.lua script (the loader prepends it). One tenant's
-- day lives in four keys sharing the tenant's hash tag (one Cluster slot):
--   KEYS[1] state   hash: spent, held (micro-cents), version, checked (set
--                   by a rebuild from the ledger; gone with the counters)
--   KEYS[2] holds   hash: request id -> held micro-cents
--   KEYS[3] expiry  zset: request id scored by expiry (Redis ms)
--   KEYS[4] settled set:  request ids already turned into spend
-- ARGV[1] is always the keys' TTL in ms. Money only reaches Redis as integer
-- strings (HINCRBY is exact int64); Lua numbers (doubles) are used only to
-- compare, exact because every amount is below 2^53.
redis.replicate_commands()
local K_STATE, K_HOLDS, K_EXPIRY, K_SETTLED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- Redis' clock, one for every router, so hold expiry needs no clock sync.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decr_held(amount)
  if amount ~= '0' then redis.call('HINCRBY', K_STATE, 'held', '-' .. amount) end
end

-- Expired holds stop counting: drop them and take them off `held`.
local function prune(now)
  local gone = redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', now)
  for _, id in ipairs(gone) do
    local amount = redis.call('HGET', K_HOLDS, id)
    if amount then
      decr_held(amount)
      redis.call('HDEL', K_HOLDS, id)
    end
    redis.call('ZREM', K_EXPIRY, id)
  end
end

local function counters()
  local v = redis.call('HMGET', K_STATE, 'spent', 'held', 'version')
  return v[1] or '0', v[2] or '0', v[3] or '0'
end

-- A tenant's day is forgotten a while after its last write.
local function touch()
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
end
