-- Rate limits: a sliding-window log per scope (the tenant, or one of its
-- keys), requests and tokens per window. Every key of one tenant shares its
-- hash tag (one Cluster slot), so a request checks its tenant's and its key's
-- limits in this one script, one round trip. Per scope i (1 or 2 scopes):
--   KEYS[2i-1] log  zset: request id scored by the Redis ms it was admitted
--   KEYS[2i]   tok  hash: request id -> tokens counted; '~sum' -> their total
-- ARGV[1] op: 'take' or 'settle'; ARGV[2] request id; ARGV[3] window ms.
-- take:   ARGV[4] tokens to reserve (the prompt's upper bound), then per
--         scope its requests limit and tokens limit (-1: none).
--         Returns {1, now, states...} when admitted (counted in every scope),
--         or {0, now, retry ms (-1: never fits), 'requests'|'tokens', refused
--         scope index, states...}; states are per scope
--         {count, tokens, oldest admitted ms (-1: none)}.
-- settle: ARGV[4] the tokens the request really used: its entry is corrected
--         (nothing when it already left the window). Returns 1 | 0.
redis.replicate_commands()
local op, id, window = ARGV[1], ARGV[2], tonumber(ARGV[3])
local nscopes = #KEYS / 2
local SUM = '~sum'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Entries admitted at or before now - window no longer count.
local function prune(log, tok)
  local gone = redis.call('ZRANGEBYSCORE', log, '-inf', now - window)
  if #gone == 0 then return end
  local freed = 0
  for _, rid in ipairs(gone) do
    local n = redis.call('HGET', tok, rid)
    if n then freed = freed + tonumber(n) end
    redis.call('HDEL', tok, rid)
  end
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
  if freed ~= 0 then redis.call('HINCRBY', tok, SUM, -freed) end
end

local function oldest(log)
  local o = redis.call('ZRANGE', log, 0, 0, 'WITHSCORES')
  if #o == 0 then return -1 end
  return tonumber(o[2])
end

if op == 'settle' then
  local actual = tonumber(ARGV[4])
  local changed = 0
  for i = 1, nscopes do
    local tok = KEYS[2 * i]
    local n = redis.call('HGET', tok, id)
    if n then
      redis.call('HSET', tok, id, actual)
      redis.call('HINCRBY', tok, SUM, actual - tonumber(n))
      changed = 1
    end
  end
  return changed
end

local tokens = tonumber(ARGV[4])
local counts, sums = {}, {}
local retry, why, refused = -2, '', 0
for i = 1, nscopes do
  local log, tok = KEYS[2 * i - 1], KEYS[2 * i]
  prune(log, tok)
  local count = redis.call('ZCARD', log)
  local sum = tonumber(redis.call('HGET', tok, SUM) or '0')
  counts[i], sums[i] = count, sum
  local rpm, tpm = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  local already = redis.call('HEXISTS', tok, id) == 1
  if not already then
    local wait = -2
    local dim = ''
    if rpm >= 0 and count + 1 > rpm then
      -- The (count - rpm + 1)th oldest entry must leave before one more fits.
      if rpm == 0 then
        wait, dim = -1, 'requests'
      else
        local e = redis.call('ZRANGE', log, count - rpm, count - rpm, 'WITHSCORES')
        wait, dim = tonumber(e[2]) + window - now, 'requests'
      end
    end
    if tpm >= 0 and sum + tokens > tpm then
      local w = -1
      if tokens <= tpm then
        -- Walk the oldest entries until enough tokens have left.
        local freed, start = 0, 0
        while w < 0 do
          local batch = redis.call('ZRANGE', log, start, start + 63, 'WITHSCORES')
          if #batch == 0 then break end
          for j = 1, #batch, 2 do
            freed = freed + tonumber(redis.call('HGET', tok, batch[j]) or '0')
            if sum - freed + tokens <= tpm then
              w = tonumber(batch[j + 1]) + window - now
              break
            end
          end
          start = start + 64
        end
      end
      if wait ~= -1 and (w == -1 or w > wait) then wait, dim = w, 'tokens' end
    end
    if wait ~= -2 and retry ~= -1 and (wait == -1 or wait > retry) then
      retry, why, refused = wait, dim, i
    end
  end
end

local function states(out)
  for i = 1, nscopes do
    out[#out + 1] = counts[i]
    out[#out + 1] = sums[i]
    out[#out + 1] = oldest(KEYS[2 * i - 1])
  end
  return out
end

if retry ~= -2 then
  if retry ~= -1 and retry < 1 then retry = 1 end
  return states({0, now, retry, why, refused})
end

for i = 1, nscopes do
  local log, tok = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('HEXISTS', tok, id) == 0 then
    redis.call('ZADD', log, now, id)
    redis.call('HSET', tok, id, tokens)
    redis.call('HINCRBY', tok, SUM, tokens)
    counts[i] = counts[i] + 1
    sums[i] = sums[i] + tokens
  end
  redis.call('PEXPIRE', log, window * 2)
  redis.call('PEXPIRE', tok, window * 2)
end
return states({1, now})
