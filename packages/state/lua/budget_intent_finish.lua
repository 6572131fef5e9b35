-- Finish a paid attempt exactly once: whoever deletes its intent appends its
-- ledger rows, in the same step. The owner at the normal end, or any
-- router finishing the orphan of a dead one — the first wins, the other
-- finds nothing and does nothing (no row, no settle).
-- KEYS[1] intents stream, KEYS[2] ledger stream, KEYS[3] the intent's
-- progress key, KEYS[4] its finished mark; ARGV[1] group, ARGV[2] intent id,
-- ARGV[3] 'owner' or 'orphan', ARGV[4] how long an orphan's finished mark
-- lives (ms), ARGV[5…] the ledger rows: the request's own, then those of
-- the attempts it failed over from (one entry, one "r" field each: never
-- one without the others).
-- Returns {the rows' ledger entry id, 1 if the intent was there else 0}
-- when this call wrote them, 0 when not.
--
-- An intent can also be gone because Redis lost it (restarted empty, failed
-- over before it replicated): its owner, still serving the request, must
-- then write the row all the same, or a charged attempt has none. So a
-- router finishing an orphan leaves a mark, and the owner that finds
-- neither the intent nor a mark writes its row.
local found = redis.call('XDEL', KEYS[1], ARGV[2])
if found == 0 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  if ARGV[3] ~= 'owner' or redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
else
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  if ARGV[3] ~= 'owner' then redis.call('SET', KEYS[4], '1', 'PX', ARGV[4]) end
end
local fields = {}
for i = 5, #ARGV do
  fields[#fields + 1] = 'r'
  fields[#fields + 1] = ARGV[i]
end
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('DEL', KEYS[3])
return {id, found}
