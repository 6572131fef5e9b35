-- Puts back the live leases a store lost, from the audit in Postgres, and
-- marks the store restored (every other script refuses until then). ARGV:
-- groups of six, one per lease the audit knows as granted and not ended:
-- id, worker, tenant, token, granted_ms, expires_ms. A lease whose expiry
-- has passed by Redis' clock is not put back but returned as expired (the
-- caller audits it); one whose id is present, or whose worker another live
-- lease holds, or whose token the worker has seen exceeded, is skipped.
-- Another router that restored first leaves nothing to do.
-- Payload: {leases put back}.
local now = now_ms()
NOW = now
if redis.call('EXISTS', K_RESTORED) == 1 then return {'ok', now, {'0'}, {}} end
-- A store restored before this mark existed may hold leases: those ended go first.
local expired = prune_expired(now)
local restored = 0
for i = 1, #ARGV, 6 do
  local id, worker = ARGV[i], ARGV[i + 1]
  local l = { worker = worker, tenant = ARGV[i + 2], token = ARGV[i + 3], granted = ARGV[i + 4], expires = ARGV[i + 5] }
  if tonumber(l.expires) <= now then
    expired[#expired + 1] = id .. '|' .. encode(l)
  elseif redis.call('HEXISTS', K_LEASES, id) == 0 then
    local current = redis.call('HGET', K_WORKERS, worker)
    local highest = redis.call('HGET', K_FENCE, worker)
    if not (current and live(current)) and not (highest and tonumber(highest) > tonumber(l.token)) then
      redis.call('HSET', K_LEASES, id, encode(l))
      redis.call('HSET', K_WORKERS, worker, id)
      redis.call('ZADD', K_EXPIRY, l.expires, id)
      fence(worker, l.token, l.expires)
      restored = restored + 1
    end
  end
end
redis.call('SET', K_RESTORED, tostring(now))
return {'ok', now, {tostring(restored)}, expired}
