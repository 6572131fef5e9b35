-- Grant worker ARGV[2] to tenant ARGV[3] as lease ARGV[1] for ARGV[4] ms with
-- fencing token ARGV[5], only if no live lease holds the worker, the token
-- is larger than every token granted on it before, and the tenant holds
-- fewer than ARGV[6] live leases (0: no cap).
-- Payload: ok {id|record}; held {holder expires_ms}; stale_token {highest token};
-- tenant_limit {leases the tenant holds}.
local id, worker, tenant, duration, token = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local cap = tonumber(ARGV[6] or '0')
local now = now_ms()
local expired = prune(now)
local current = redis.call('HGET', K_WORKERS, worker)
if current then
  local l = live(current)
  -- This very grant, asked again (a client resends a command whose reply a
  -- dropped connection lost): answer it, or its lease would outlive its holder.
  if l and current == id and l.tenant == tenant and l.token == token then return {'ok', now, {id .. '|' .. encode(l)}, expired} end
  if l then return {'held', now, {l.expires}, expired} end
  redis.call('HDEL', K_WORKERS, worker)
end
local highest = redis.call('HGET', K_FENCE, worker)
if highest and tonumber(token) <= tonumber(highest) then return {'stale_token', now, {highest}, expired} end
if cap > 0 then
  local held = 0
  for _, rec in ipairs(redis.call('HVALS', K_LEASES)) do
    local l = decode(rec)
    if l.tenant == tenant and alive(l) then held = held + 1 end
  end
  if held >= cap then return {'tenant_limit', now, {held}, expired} end
end
if redis.call('HEXISTS', K_LEASES, id) == 1 then return redis.error_reply('lease id already in use') end
local rec = encode({ worker = worker, tenant = tenant, token = token, granted = tostring(now), expires = tostring(now + duration) })
redis.call('HSET', K_LEASES, id, rec)
redis.call('HSET', K_WORKERS, worker, id)
redis.call('ZADD', K_EXPIRY, now + duration, id)
fence(worker, token, now + duration)
return {'ok', now, {id .. '|' .. rec}, expired}
