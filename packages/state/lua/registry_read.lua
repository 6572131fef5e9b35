-- Reads worker records (and invites) for routers without ever sending an
-- oversized value over the wire: a worker may write anything into its own
-- key, so its length is looked at first. Ids whose record is gone leave the
-- index here, atomically with the read: a worker re-joining meanwhile has
-- its record back before its id could be dropped (publish writes both in one
-- transaction).
-- KEYS[1]: the index of heartbeating workers, KEYS[2]: the invited set (sets
-- of ids); KEYS[3..]: the keys to read, heartbeats first, then the invites in
-- the same order (one hash tag, {registry}: the sets' too). An id whose
-- heartbeat and invite are both gone leaves the invited set as well.
-- ARGV[1]: max bytes; ARGV[2]: how many of the keys after the sets are
-- heartbeats, which must expire (a worker could otherwise SET its record with
-- no TTL and never leave); ARGV[3]: the length in bytes of a heartbeat key's
-- name before the worker id.
-- Per key after the sets: false (missing), -1 (not a string), -2 (a
-- heartbeat without a TTL), its length (over the limit), or the value.
local max = tonumber(ARGV[1])
local expiring = tonumber(ARGV[2] or '0')
local idFrom = tonumber(ARGV[3] or '0') + 1
local out = {}
for i = 3, #KEYS do
  local key = KEYS[i]
  local n = i - 2
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    out[n] = false
    if n <= expiring then
      local id = string.sub(key, idFrom)
      redis.call('SREM', KEYS[1], id)
      if redis.call('EXISTS', KEYS[2 + expiring + n]) == 0 then redis.call('SREM', KEYS[2], id) end
    end
  elseif t ~= 'string' then
    out[n] = -1
  elseif n <= expiring and redis.call('PTTL', key) < 0 then
    out[n] = -2
  else
    local len = redis.call('STRLEN', key)
    if len > max then out[n] = len else out[n] = redis.call('GET', key) end
  end
end
return out
