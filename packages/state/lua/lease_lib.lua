-- Shared by every lease_*.lua script (the loader prepends it). All leases of
-- a fabric share one hash tag ({leases}, one Cluster slot), so a router lists
-- them with one call and every script is atomic over all six keys:
--   KEYS[1] leases  hash: lease id -> "worker|tenant|token|granted_ms|expires_ms"
--   KEYS[2] workers hash: worker id -> lease id of its (possibly expired) lease
--   KEYS[3] expiry  zset: lease id scored by expires_ms
--   KEYS[4] fence   hash: worker id -> highest fencing token granted on it
--   KEYS[5] restored string: set once the live leases are known complete
--   KEYS[6] fenced  zset: worker id -> expires_ms of the last lease granted
--           or extended on it (when its fence field may be pruned: lease_list.lua)
-- Times are Redis' clock (TIME), one for every router. A lease is live while
-- expires_ms > now. Every script first prunes expired leases and returns them
-- (the caller audits each expiry once). Replies: {status, now, payload, expired}.
redis.replicate_commands()
local K_LEASES, K_WORKERS, K_EXPIRY, K_FENCE, K_RESTORED, K_FENCED = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- "worker|tenant|token|granted|expires" -> fields
local function decode(rec)
  local worker, tenant, token, granted, expires = string.match(rec, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  return { worker = worker, tenant = tenant, token = token, granted = granted, expires = expires }
end

local function encode(l)
  return l.worker .. '|' .. l.tenant .. '|' .. l.token .. '|' .. l.granted .. '|' .. l.expires
end

-- Removes a lease everywhere; its worker is free unless it already moved on.
local function drop(id, l)
  redis.call('HDEL', K_LEASES, id)
  redis.call('ZREM', K_EXPIRY, id)
  if redis.call('HGET', K_WORKERS, l.worker) == id then redis.call('HDEL', K_WORKERS, l.worker) end
end

-- Expired leases leave the store; returns them as "id|record" strings.
local function prune_expired(now)
  local out = {}
  local gone = redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(gone) do
    local rec = redis.call('HGET', K_LEASES, id)
    if rec then
      drop(id, decode(rec))
      out[#out + 1] = id .. '|' .. rec
    else
      redis.call('ZREM', K_EXPIRY, id)
    end
  end
  return out
end

-- Every script but the restore starts here. A store without the restored
-- mark has lost its data (Redis restarted empty, failed over to a replica
-- without it, flushed): it would read every lease as ended and every worker
-- as free. So it answers nothing and changes nothing (UNRESTORED) until a
-- router has put back the live leases from the audit (lease_restore.lua).
-- Redis' clock as this script's prune read it: a prune takes at most 1000
-- expired leases (its reply lists each for the audit), so more may remain
-- after it, and liveness is still judged on expiry.
local NOW = 0

local function prune(now)
  if redis.call('EXISTS', K_RESTORED) == 0 then error({err = 'UNRESTORED the lease store lost its data: restore it from the audit'}) end
  NOW = now
  return prune_expired(now)
end

-- Whether a lease record is live at the prune's time.
local function alive(l)
  return tonumber(l.expires) > NOW
end

-- The live lease with this id.
local function live(id)
  local rec = redis.call('HGET', K_LEASES, id)
  if not rec then return nil end
  local l = decode(rec)
  if not alive(l) then return nil end
  return l
end

-- Token `token` is now the highest granted on `worker`, whose lease runs to
-- `expires` (ms): the fence field and when it was last in use, together.
local function fence(worker, token, expires)
  redis.call('HSET', K_FENCE, worker, token)
  redis.call('ZADD', K_FENCED, expires, worker)
end
